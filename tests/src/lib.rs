//! Test harness: a fresh database per test, on SQLite and on PostgreSQL, and small builders for
//! events. The conformance suite runs every test body against both through [`conformance!`].
//!
//! PostgreSQL comes from `GPUNEX_TEST_POSTGRES_URL` (default: the local server, trust auth).
//! Each test creates its own database there and drops it when it passes. Under `CI=true` an
//! unreachable PostgreSQL fails the test; elsewhere the PostgreSQL half is skipped with a notice.

use gpunex_domain::events::AdjustmentPosted;
use gpunex_domain::{Account, DomainEvent, JournalEntry, Posting, StreamId, Usdc};
use gpunex_store::{Metadata, NewEvent, Store, StoreOptions};
use sqlx::Connection;
use uuid::Uuid;

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database that exists for one test.
pub struct TestDb {
    pub url: String,
    admin_url: Option<String>,
    name: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temporary directory");
        let url = format!("sqlite://{}", dir.path().join("gpunex.sqlite").display());
        TestDb {
            url,
            admin_url: None,
            name: None,
            _dir: Some(dir),
        }
    }

    /// A fresh PostgreSQL database, or `None` (with a notice) when PostgreSQL is unreachable
    /// outside CI. In CI it panics instead: the PostgreSQL run is mandatory there.
    pub async fn postgres() -> Option<TestDb> {
        let admin_url = std::env::var("GPUNEX_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned());
        let mut admin = match sqlx::PgConnection::connect(&admin_url).await {
            Ok(conn) => conn,
            Err(error) => {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("CI=true and PostgreSQL at {admin_url} is unreachable: {error}");
                }
                eprintln!("NOTICE: skipping the PostgreSQL half of this test: {error}");
                return None;
            }
        };
        let name = format!("gpunex_t_{}", Uuid::now_v7().simple());
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create test database");
        let url = match admin_url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("GPUNEX_TEST_POSTGRES_URL must end with a database name: {admin_url}"),
        };
        Some(TestDb {
            url,
            admin_url: Some(admin_url),
            name: Some(name),
            _dir: None,
        })
    }

    pub async fn open(&self) -> Store {
        Store::open(&self.url, &StoreOptions::default())
            .await
            .expect("open store")
    }

    /// A store on `clock`: tests that depend on elapsed time move it instead of sleeping.
    pub async fn open_with_clock(&self, clock: gpunex_domain::clock::SharedClock) -> Store {
        let options = StoreOptions {
            clock,
            ..StoreOptions::default()
        };
        Store::open(&self.url, &options).await.expect("open store")
    }

    /// Terminates every PostgreSQL connection to this database (a failover, an operator's
    /// `pg_terminate_backend`); returns how many. Nothing on SQLite.
    pub async fn terminate_connections(&self) -> u64 {
        let (Some(admin_url), Some(name)) = (&self.admin_url, &self.name) else {
            return 0;
        };
        let Ok(mut admin) = sqlx::PgConnection::connect(admin_url).await else {
            return 0;
        };
        let terminated: Result<(i64,), _> = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(name)
        .fetch_one(&mut admin)
        .await;
        terminated.map_or(0, |(n,)| u64::try_from(n).unwrap_or(0))
    }

    /// Drops the PostgreSQL database (SQLite files go with the temporary directory). Called at
    /// the end of a passing test; a failing test leaves its database for inspection.
    pub async fn cleanup(self) {
        if let (Some(admin_url), Some(name)) = (&self.admin_url, &self.name)
            && let Ok(mut admin) = sqlx::PgConnection::connect(admin_url).await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
        }
    }
}

/// Runs each listed `async fn(TestDb)` as two tests: `sqlite::name` and `postgres::name`.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::TestDb::sqlite();
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = $crate::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// A manual clock starting at the wall clock's present (so instants the tests write by hand,
/// such as agents' `occurred_at`, stay plausible), moved only by the test.
pub fn manual_clock() -> std::sync::Arc<gpunex_domain::clock::ManualClock> {
    use gpunex_domain::clock::Clock;
    gpunex_domain::clock::ManualClock::starting_at(gpunex_store::SystemClock.now())
}

pub fn provider(n: u128) -> Uuid {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 | n)
}

pub fn stream(name: &str) -> StreamId {
    StreamId::parse(name).expect("valid stream id")
}

pub fn actor() -> Metadata {
    Metadata {
        content_sha256: None,
        actor: "user:finance-test".to_owned(),
        correlation_id: None,
        causation_id: None,
    }
}

/// An adjustment crediting `amount_micros` to a provider's payable from platform adjustments.
pub fn credit(provider_id: Uuid, amount_micros: i64) -> DomainEvent {
    let amount = Usdc::from_micros(amount_micros);
    DomainEvent::AdjustmentPosted(AdjustmentPosted {
        entry_id: Uuid::now_v7(),
        reason: "goodwill credit".to_owned(),
        postings: JournalEntry::new(vec![
            Posting::debit(Account::PlatformAdjustments, amount),
            Posting::credit(Account::ProviderPayable(provider_id), amount),
        ])
        .expect("balanced"),
    })
}

pub fn new_event(event: &DomainEvent) -> NewEvent {
    NewEvent::from_domain(Uuid::now_v7(), event, actor())
}

pub fn credits(provider_id: Uuid, count: usize) -> Vec<NewEvent> {
    (0..count)
        .map(|i| new_event(&credit(provider_id, 1_000 + i64::try_from(i).unwrap_or(0))))
        .collect()
}

impl TestDb {
    pub fn is_postgres(&self) -> bool {
        self.name.is_some()
    }

    /// Runs raw SQL as a database administrator would, bypassing the store: how tests tamper
    /// with rows or inject failures. `sqlite` or `postgres` is chosen by this database's kind.
    pub async fn execute_raw(&self, sqlite: &[&str], postgres: &[&str]) {
        let statements = if self.is_postgres() { postgres } else { sqlite };
        for statement in statements {
            if let Err(error) = self.try_execute_raw(statement).await {
                panic!("{statement}: {error}");
            }
        }
    }

    /// Runs one raw statement on this database and returns its error, if any.
    pub async fn try_execute_raw(&self, statement: &str) -> Result<(), String> {
        let statement = sqlx::AssertSqlSafe(statement.to_string());
        if self.is_postgres() {
            let mut conn = sqlx::PgConnection::connect(&self.url)
                .await
                .map_err(|e| e.to_string())?;
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            let mut conn = sqlx::SqliteConnection::connect(&self.url)
                .await
                .map_err(|e| e.to_string())?;
            sqlx::raw_sql(statement)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    }
}

/// Appends `count` credits in batches of up to 1,000, spread over `providers` providers, and
/// returns each provider's expected payable total in micro-USDC.
pub async fn seed_credits(
    store: &Store,
    count: usize,
    providers: u128,
) -> std::collections::BTreeMap<Uuid, i64> {
    use gpunex_store::ExpectedVersion;
    let mut totals = std::collections::BTreeMap::new();
    let mut remaining = count;
    let mut batch_number = 0u128;
    while remaining > 0 {
        let size = remaining.min(1_000);
        let events: Vec<NewEvent> = (0..size)
            .map(|i| {
                let who = provider((batch_number + i as u128) % providers);
                let amount = 1_000_000 + i64::try_from(i).unwrap_or(0);
                *totals.entry(who).or_insert(0) += amount;
                new_event(&credit(who, amount))
            })
            .collect();
        store
            .append(
                stream(&format!("ledger-seed{batch_number}")),
                ExpectedVersion::NoStream,
                events,
            )
            .await
            .expect("seed append");
        remaining -= size;
        batch_number += 1;
    }
    totals
}
