//! The database's own ceiling for the rows the event store writes and reads, measured without
//! any of the store's logic: what `gpunex bench store` compares the store against. Lives here
//! because it is SQL, and SQL lives only in this crate.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, PgPool, QueryBuilder, SqlitePool};
use uuid::Uuid;

use crate::StoreError;

/// The content of each benchmark row: the same text the store writes for a typical event.
#[derive(Debug, Clone)]
pub struct SampleRow {
    pub event_type: String,
    pub payload: String,
    pub metadata: String,
}

enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A connection pool for reference measurements against the same database as the store.
pub struct Ceiling {
    pool: Pool,
    sample: SampleRow,
    next_position: AtomicU64,
}

const BENCH_TABLE_SQLITE: &str = "CREATE TABLE IF NOT EXISTS bench_events (
    position INTEGER PRIMARY KEY, event_id BLOB NOT NULL UNIQUE, stream_id TEXT NOT NULL,
    stream_version INTEGER NOT NULL, event_type TEXT NOT NULL, schema_version INTEGER NOT NULL,
    recorded_at_us INTEGER NOT NULL, payload TEXT NOT NULL, metadata TEXT NOT NULL, hash BLOB NOT NULL,
    UNIQUE (stream_id, stream_version))";
// Same columns, constraints and indexes as `events`; `LIKE` copies no triggers.
const BENCH_TABLE_POSTGRES: &str =
    "CREATE TABLE IF NOT EXISTS bench_events (LIKE events INCLUDING ALL)";

impl Ceiling {
    /// Same durability settings as the store (SQLite: WAL, synchronous FULL).
    pub async fn connect(
        url: &str,
        connections: u32,
        sample: SampleRow,
    ) -> Result<Ceiling, StoreError> {
        let pool = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(60))
                .disable_statement_logging();
            let pool = SqlitePoolOptions::new()
                .max_connections(connections)
                .connect_with(options)
                .await?;
            sqlx::query(BENCH_TABLE_SQLITE).execute(&pool).await?;
            Pool::Sqlite(pool)
        } else {
            let options = PgConnectOptions::from_str(url)?;
            let pool = PgPoolOptions::new()
                .max_connections(connections)
                .connect_with(options)
                .await?;
            sqlx::query(BENCH_TABLE_POSTGRES).execute(&pool).await?;
            Pool::Postgres(pool)
        };
        Ok(Ceiling {
            pool,
            sample,
            next_position: AtomicU64::new(1),
        })
    }

    fn positions(&self, n: u64) -> u64 {
        self.next_position.fetch_add(n, Ordering::Relaxed)
    }

    /// `rows` journal-line rows written the way a rebuild wrote them before ADR 0012 (one row per
    /// posting, the shape of the old `ledger_entries`, no indexes), `batch` rows per
    /// transaction, but with every row ready beforehand: a database's ceiling for row-per-line
    /// writes, the shape the earnings lines still have.
    pub async fn journal_insert(&self, rows: usize, batch: usize) -> Result<Duration, StoreError> {
        let account = format!("provider_payable:{}", Uuid::now_v7());
        match &self.pool {
            Pool::Sqlite(pool) => {
                sqlx::query(
                    "CREATE TABLE IF NOT EXISTS bench_lines (position INTEGER NOT NULL, line_index INTEGER NOT NULL, \
                     event_id BLOB NOT NULL, entry_id BLOB NOT NULL, account TEXT NOT NULL, side TEXT NOT NULL, \
                     amount_micro_usdc INTEGER NOT NULL, recorded_at_us INTEGER NOT NULL)",
                )
                .execute(pool)
                .await?;
            }
            Pool::Postgres(pool) => {
                sqlx::query(
                    "CREATE TABLE IF NOT EXISTS bench_lines (position BIGINT NOT NULL, line_index INTEGER NOT NULL, \
                     event_id UUID NOT NULL, entry_id UUID NOT NULL, account TEXT NOT NULL, side TEXT NOT NULL, \
                     amount_micro_usdc BIGINT NOT NULL, recorded_at_us BIGINT NOT NULL)",
                )
                .execute(pool)
                .await?;
            }
        }
        let ids: Vec<Uuid> = (0..batch).map(|_| Uuid::now_v7()).collect();
        let started = Instant::now();
        let mut written = 0;
        while written < rows {
            let n = batch.min(rows - written);
            let first = crate::to_i64(self.positions(n as u64));
            match &self.pool {
                Pool::Sqlite(pool) => {
                    let mut tx = pool.begin().await?;
                    for chunk_start in (0..n).step_by(500) {
                        let mut query = QueryBuilder::new(
                            "INSERT INTO bench_lines (position, line_index, event_id, entry_id, account, side, \
                             amount_micro_usdc, recorded_at_us) ",
                        );
                        query.push_values(
                            chunk_start..n.min(chunk_start + 500),
                            |mut values, i| {
                                values
                                    .push_bind(first + i as i64)
                                    .push_bind(0i64)
                                    .push_bind(ids[i])
                                    .push_bind(ids[i])
                                    .push_bind(account.as_str())
                                    .push_bind("credit")
                                    .push_bind(1_000i64)
                                    .push_bind(0i64);
                            },
                        );
                        query.build().execute(&mut *tx).await?;
                    }
                    tx.commit().await?;
                }
                Pool::Postgres(pool) => {
                    sqlx::query(
                        "INSERT INTO bench_lines (position, line_index, event_id, entry_id, account, side, \
                         amount_micro_usdc, recorded_at_us) SELECT * FROM UNNEST($1::bigint[], $2::int[], \
                         $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])",
                    )
                    .bind((0..n).map(|i| first + i as i64).collect::<Vec<_>>())
                    .bind(vec![0i32; n])
                    .bind(&ids[..n])
                    .bind(&ids[..n])
                    .bind(vec![account.as_str(); n])
                    .bind(vec!["credit"; n])
                    .bind(vec![1_000i64; n])
                    .bind(vec![0i64; n])
                    .execute(pool)
                    .await?;
                }
            }
            written += n;
        }
        Ok(started.elapsed())
    }

    /// `rows` rows in multi-row INSERT statements of `batch` rows, one transaction each.
    pub async fn multi_row_insert(
        &self,
        rows: usize,
        batch: usize,
    ) -> Result<Duration, StoreError> {
        let started = Instant::now();
        let mut written = 0;
        while written < rows {
            let n = batch.min(rows - written);
            let first = self.positions(n as u64);
            let stream = format!("bench-{}", Uuid::now_v7());
            match &self.pool {
                Pool::Sqlite(pool) => {
                    let mut tx = pool.begin().await?;
                    // SQLite binds at most 32,766 parameters per statement.
                    for chunk_start in (0..n).step_by(250) {
                        let chunk = chunk_start..n.min(chunk_start + 250);
                        let mut query = QueryBuilder::new(
                            "INSERT INTO bench_events (position, event_id, stream_id, stream_version, event_type, \
                             schema_version, recorded_at_us, payload, metadata, hash) ",
                        );
                        query.push_values(chunk, |mut values, i| {
                            values
                                .push_bind(crate::to_i64(first + i as u64))
                                .push_bind(Uuid::now_v7())
                                .push_bind(stream.clone())
                                .push_bind(i as i64 + 1)
                                .push_bind(self.sample.event_type.clone())
                                .push_bind(2i64)
                                .push_bind(0i64)
                                .push_bind(self.sample.payload.clone())
                                .push_bind(self.sample.metadata.clone())
                                .push_bind(vec![7u8; 32]);
                        });
                        query.build().execute(&mut *tx).await?;
                    }
                    tx.commit().await?;
                }
                Pool::Postgres(pool) => {
                    let mut query = QueryBuilder::new(
                        "INSERT INTO bench_events (position, event_id, stream_id, stream_version, event_type, \
                         schema_version, recorded_at_us, payload, metadata, hash) ",
                    );
                    query.push_values(0..n, |mut values, i| {
                        values
                            .push_bind(crate::to_i64(first + i as u64))
                            .push_bind(Uuid::now_v7())
                            .push_bind(stream.clone())
                            .push_bind(i as i64 + 1)
                            .push_bind(self.sample.event_type.clone())
                            .push_bind(2i32)
                            .push_bind(0i64)
                            .push_bind(self.sample.payload.clone())
                            .push_bind(self.sample.metadata.clone())
                            .push_bind(vec![7u8; 32]);
                    });
                    query.build().execute(pool).await?;
                }
            }
            written += n;
        }
        Ok(started.elapsed())
    }

    /// PostgreSQL only: `rows` rows through `COPY ... FROM STDIN` in chunks of `batch`.
    pub async fn copy(&self, rows: usize, batch: usize) -> Result<Option<Duration>, StoreError> {
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(None);
        };
        let started = Instant::now();
        let mut written = 0;
        while written < rows {
            let n = batch.min(rows - written);
            let first = self.positions(n as u64);
            let stream = format!("bench-{}", Uuid::now_v7());
            let mut text = String::with_capacity(n * (self.sample.payload.len() + 200));
            for i in 0..n {
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t2\t0\t{}\t{}\t\\\\x{}\n",
                    first + i as u64,
                    Uuid::now_v7(),
                    stream,
                    i + 1,
                    self.sample.event_type,
                    copy_escape(&self.sample.payload),
                    copy_escape(&self.sample.metadata),
                    "07".repeat(32)
                ));
            }
            let mut conn = pool.acquire().await?;
            let mut copy = conn
                .copy_in_raw(
                    "COPY bench_events (position, event_id, stream_id, stream_version, event_type, schema_version, \
                     recorded_at_us, payload, metadata, hash) FROM STDIN",
                )
                .await?;
            copy.send(text.into_bytes()).await?;
            copy.finish().await?;
            written += n;
        }
        Ok(Some(started.elapsed()))
    }

    /// Single-row INSERT commits from `clients` concurrent connections for `duration`.
    pub async fn single_inserts(
        self: &Arc<Self>,
        clients: usize,
        duration: Duration,
    ) -> Result<u64, StoreError> {
        let deadline = Instant::now() + duration;
        let mut tasks = Vec::with_capacity(clients);
        for _ in 0..clients {
            let ceiling = Arc::clone(self);
            tasks.push(tokio::spawn(async move {
                let stream = format!("bench-{}", Uuid::now_v7());
                let mut count = 0u64;
                while Instant::now() < deadline {
                    ceiling.insert_one(&stream, count as i64 + 1).await?;
                    count += 1;
                }
                Ok::<u64, StoreError>(count)
            }));
        }
        let mut total = 0;
        for task in tasks {
            total += task.await.map_err(|e| StoreError::CorruptRow {
                position: 0,
                reason: e.to_string(),
            })??;
        }
        Ok(total)
    }

    async fn insert_one(&self, stream: &str, version: i64) -> Result<(), StoreError> {
        let position = crate::to_i64(self.positions(1));
        match &self.pool {
            Pool::Sqlite(pool) => {
                sqlx::query(
                    "INSERT INTO bench_events (position, event_id, stream_id, stream_version, event_type, schema_version, \
                     recorded_at_us, payload, metadata, hash) VALUES (?, ?, ?, ?, ?, 2, 0, ?, ?, ?)",
                )
                .bind(position)
                .bind(Uuid::now_v7())
                .bind(stream)
                .bind(version)
                .bind(&self.sample.event_type)
                .bind(&self.sample.payload)
                .bind(&self.sample.metadata)
                .bind(vec![7u8; 32])
                .execute(pool)
                .await?;
            }
            Pool::Postgres(pool) => {
                sqlx::query(
                    "INSERT INTO bench_events (position, event_id, stream_id, stream_version, event_type, schema_version, \
                     recorded_at_us, payload, metadata, hash) VALUES ($1, $2, $3, $4, $5, 2, 0, $6, $7, $8)",
                )
                .bind(position)
                .bind(Uuid::now_v7())
                .bind(stream)
                .bind(version)
                .bind(&self.sample.event_type)
                .bind(&self.sample.payload)
                .bind(&self.sample.metadata)
                .bind(vec![7u8; 32])
                .execute(pool)
                .await?;
            }
        }
        Ok(())
    }

    /// Reads every row of `events` in position order to the client: the ceiling for replay and
    /// verify, which must read the same rows.
    pub async fn ordered_read(&self) -> Result<(u64, Duration), StoreError> {
        let started = Instant::now();
        let sql = format!(
            "SELECT {} FROM events ORDER BY position",
            crate::rows::EVENT_COLUMNS
        );
        let rows = match &self.pool {
            Pool::Sqlite(pool) => {
                let mut stream = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(pool);
                let mut n = 0u64;
                while stream.try_next().await?.is_some() {
                    n += 1;
                }
                n
            }
            Pool::Postgres(pool) => {
                let mut stream = sqlx::query(sqlx::AssertSqlSafe(sql)).fetch(pool);
                let mut n = 0u64;
                while stream.try_next().await?.is_some() {
                    n += 1;
                }
                n
            }
        };
        Ok((rows, started.elapsed()))
    }

    /// SQLite only: the same ordered read through `rusqlite` on a blocking thread, the driver
    /// `audit verify` scans with.
    pub async fn ordered_read_direct(
        path: std::path::PathBuf,
    ) -> Result<Option<(u64, Duration)>, StoreError> {
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let conn = rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .map_err(|e| StoreError::Direct(e.to_string()))?;
            let sql = format!(
                "SELECT {} FROM events ORDER BY position",
                crate::rows::EVENT_COLUMNS
            );
            let mut statement = conn
                .prepare(&sql)
                .map_err(|e| StoreError::Direct(e.to_string()))?;
            let mut rows = statement
                .query([])
                .map_err(|e| StoreError::Direct(e.to_string()))?;
            let mut n = 0u64;
            while let Some(row) = rows.next().map_err(|e| StoreError::Direct(e.to_string()))? {
                // Materialize the columns, as a real reader must.
                let payload: String = row.get(7).map_err(|e| StoreError::Direct(e.to_string()))?;
                std::hint::black_box(payload);
                n += 1;
            }
            Ok(Some((n, started.elapsed())))
        })
        .await
        .map_err(|e| StoreError::Direct(e.to_string()))?
    }

    pub async fn close(self) {
        match self.pool {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }
}

/// Escapes text for PostgreSQL's COPY text format.
fn copy_escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

/// A PostgreSQL database that exists for one benchmark run: created on `admin_url`'s server,
/// dropped by [`PgScratch::drop_database`].
pub struct PgScratch {
    admin_url: String,
    name: String,
    pub url: String,
}

impl PgScratch {
    pub async fn create(admin_url: &str) -> Result<PgScratch, StoreError> {
        use sqlx::Connection;
        let name = format!("gpunex_bench_{}", Uuid::now_v7().simple());
        let mut admin = sqlx::PgConnection::connect(admin_url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url, |(base, _)| base);
        Ok(PgScratch {
            admin_url: admin_url.to_owned(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    pub async fn drop_database(self) {
        use sqlx::Connection;
        if let Ok(mut admin) = sqlx::PgConnection::connect(&self.admin_url).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut admin)
            .await;
        }
    }
}
