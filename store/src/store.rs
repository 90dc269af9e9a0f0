//! `Store`: the handle the rest of GPUnex uses. It picks the database from the URL, owns the
//! group-commit writer, and publishes the log head to subscribers in this process.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use gpunex_domain::{Account, StreamId};
use gpunex_projections::ledger::{AccountTotals, LedgerBatch, LedgerLine};
use gpunex_projections::{JournalPage, ProjectionBackend, RunReport};
use tokio::sync::{OnceCell, mpsc, oneshot, watch};

use crate::audit::{AuditProgress, AuditReport};
use crate::envelope::{ExpectedVersion, NewEvent, StreamAppend, validate};
use crate::postgres::PgBackend;
use crate::sqlite::SqliteBackend;
use crate::writer::{self, Pending};
use crate::{AppendError, Committed, RecordedEvent, StoreError};

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Most rows a catch-up carries from page to page by default (`PageFold::carry`): enough for
/// every rental a long catch-up meets to be looked up in the tables once rather than once a
/// page, and a bound on its memory (a row carried is a few hundred bytes).
pub(crate) const CARRIED_ROWS_MAX: usize = 100_000;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// PostgreSQL connections this process may hold (readers, the writer, the listener).
    pub postgres_connections_max: u32,
    /// What the store stamps `recorded_at_us` and checkpoint times with.
    pub clock: gpunex_domain::clock::SharedClock,
    /// Events per page that the earnings and rentals projections fold and commit at once (at
    /// most [`crate::READ_BATCH_EVENTS_MAX`]); tests make it small to cross many pages.
    pub fold_page_events: usize,
    /// Most rows a catch-up carries in memory from page to page (the rentals and cursors its
    /// pages wrote) before it starts again from the last page's; tests make it small.
    pub carried_rows_max: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            postgres_connections_max: 16,
            clock: std::sync::Arc::new(crate::SystemClock),
            fold_page_events: crate::READ_BATCH_EVENTS_MAX,
            carried_rows_max: CARRIED_ROWS_MAX,
        }
    }
}

pub(crate) enum Db {
    Sqlite(Arc<SqliteBackend>),
    Postgres(Arc<PgBackend>),
}

pub(crate) struct Inner {
    pub db: Db,
    /// This process's name as an owner of `Idempotency-Key` reservations.
    pub instance: String,
    writer: mpsc::Sender<Pending>,
    /// What the writer has done since the process started.
    stats: Arc<crate::stats::WriterStats>,
    pub head: watch::Sender<u64>,
    listener: OnceCell<()>,
    clock: gpunex_domain::clock::SharedClock,
    /// See [`StoreOptions::fold_page_events`].
    pub fold_page_events: usize,
    /// See [`StoreOptions::carried_rows_max`].
    pub carried_rows_max: usize,
    /// Held while this process folds the earnings projection, so its readers fold it once.
    pub earnings_fold: tokio::sync::Mutex<()>,
    /// Held while this process folds the rentals projection.
    pub rentals_fold: tokio::sync::Mutex<()>,
    /// Held while this process folds the payouts projection.
    pub payouts_fold: tokio::sync::Mutex<()>,
    /// Held while the presence projection folds (see `rentals_fold`).
    pub presence_fold: tokio::sync::Mutex<()>,
    /// Held while the price history folds (see `rentals_fold`).
    pub prices_fold: tokio::sync::Mutex<()>,
}

/// A cheap-to-clone handle on the event store.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

/// Where a stream ends: the log position of its last event and its version (both 0 for a
/// stream with no events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamTip {
    pub position: u64,
    pub version: u64,
}

/// Projection status: how far a read model is behind the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectionStatus {
    pub projection: &'static str,
    pub checkpoint: u64,
    pub head: u64,
}

impl ProjectionStatus {
    pub fn lag(&self) -> u64 {
        self.head.saturating_sub(self.checkpoint)
    }
}

impl Store {
    /// Connects without migrating. `url` is `sqlite://path` or `postgres://...`.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
        let (head, _) = watch::channel(0);
        let stats = Arc::new(crate::stats::WriterStats::default());
        let (db, writer) = match scheme {
            "sqlite" => {
                let backend = Arc::new(SqliteBackend::connect(url, options.clock.clone()).await?);
                let writer = writer::spawn(Arc::clone(&backend), head.clone(), Arc::clone(&stats));
                (Db::Sqlite(backend), writer)
            }
            "postgres" | "postgresql" => {
                let backend = Arc::new(
                    PgBackend::connect(
                        url,
                        options.postgres_connections_max,
                        options.clock.clone(),
                    )
                    .await?,
                );
                let writer = writer::spawn(Arc::clone(&backend), head.clone(), Arc::clone(&stats));
                (Db::Postgres(backend), writer)
            }
            other => {
                return Err(StoreError::UnsupportedUrl {
                    scheme: other.chars().take(32).collect(),
                });
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                db,
                instance: uuid::Uuid::new_v4().to_string(),
                writer,
                stats,
                head,
                listener: OnceCell::new(),
                clock: options.clock.clone(),
                fold_page_events: options
                    .fold_page_events
                    .clamp(1, crate::READ_BATCH_EVENTS_MAX),
                carried_rows_max: options.carried_rows_max,
                earnings_fold: tokio::sync::Mutex::new(()),
                rentals_fold: tokio::sync::Mutex::new(()),
                payouts_fold: tokio::sync::Mutex::new(()),
                presence_fold: tokio::sync::Mutex::new(()),
                prices_fold: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// Connects and applies migrations: what every binary does on start.
    pub async fn open(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
        let store = Store::connect(url, options).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// The clock this store stamps events with (the one its options gave).
    pub fn clock(&self) -> &gpunex_domain::clock::SharedClock {
        &self.inner.clock
    }

    /// The clock's instant in microseconds since the Unix epoch.
    pub(crate) fn now_us(&self) -> i64 {
        self.inner.clock.now().unix_micros()
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.migrate().await?,
            Db::Postgres(db) => db.migrate().await?,
        }
        let head = self.head_position().await?;
        writer::advance(&self.inner.head, head);
        Ok(())
    }

    /// The writer's counters: appends, group commits, events, group sizes, commit times.
    pub fn writer_stats(&self) -> &crate::stats::WriterStats {
        &self.inner.stats
    }

    /// Appends waiting for the writer right now.
    pub fn append_queue_len(&self) -> usize {
        self.inner
            .writer
            .max_capacity()
            .saturating_sub(self.inner.writer.capacity())
    }

    pub fn backend(&self) -> Backend {
        match &self.inner.db {
            Db::Sqlite(_) => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// Appends `events` to one stream atomically, if its version matches `expected`.
    pub async fn append(
        &self,
        stream_id: StreamId,
        expected: ExpectedVersion,
        events: Vec<NewEvent>,
    ) -> Result<Committed, AppendError> {
        self.append_streams(vec![StreamAppend {
            stream_id,
            expected,
            events,
        }])
        .await
    }

    /// Appends to several streams in one transaction, each with its own expectation: all or none.
    pub async fn append_streams(
        &self,
        streams: Vec<StreamAppend>,
    ) -> Result<Committed, AppendError> {
        let streams = validate(streams)?;
        let mark = crate::key_scope::current_mark();
        let (reply, receive) = oneshot::channel();
        self.inner
            .writer
            .send(Pending {
                streams,
                mark,
                reply,
            })
            .await
            .map_err(|_| StoreError::WriterStopped)?;
        receive.await.map_err(|_| StoreError::WriterStopped)?
    }

    /// Events with position > `after`, in position order, at most `limit` (capped).
    pub async fn read_all(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let limit = limit.clamp(1, crate::READ_BATCH_EVENTS_MAX);
        match &self.inner.db {
            Db::Sqlite(db) => db.read_all(after, limit).await,
            Db::Postgres(db) => db.read_all(after, limit).await,
        }
    }

    /// A stream's events with version > `after_version`, in version order.
    pub async fn read_stream(
        &self,
        stream_id: &StreamId,
        after_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let limit = limit.clamp(1, crate::READ_BATCH_EVENTS_MAX);
        match &self.inner.db {
            Db::Sqlite(db) => {
                db.read_stream(stream_id.as_str(), after_version, limit)
                    .await
            }
            Db::Postgres(db) => {
                db.read_stream(stream_id.as_str(), after_version, limit)
                    .await
            }
        }
    }

    /// The position of the last event of any of `streams` (0 when none has events): what a read
    /// model must have applied before a command that reads those streams decides on it. Unlike
    /// the log head, it does not move with other streams' writes.
    pub async fn streams_position(&self, streams: &[&StreamId]) -> Result<u64, StoreError> {
        let mut last = 0;
        for stream_id in streams {
            last = last.max(self.stream_tip(stream_id).await?.position);
        }
        Ok(last)
    }

    /// The last event of `stream_id`: its position and the stream's version (both 0 when the
    /// stream has no events). A command that folds a stream from read models waits for the
    /// position and appends at the version.
    pub async fn stream_tip(&self, stream_id: &StreamId) -> Result<StreamTip, StoreError> {
        let tip = match &self.inner.db {
            Db::Sqlite(db) => db.stream_tip(stream_id.as_str()).await?,
            Db::Postgres(db) => db.stream_tip(stream_id.as_str()).await?,
        };
        Ok(
            tip.map_or(StreamTip::default(), |(position, version)| StreamTip {
                position,
                version,
            }),
        )
    }

    /// The last committed position and the chain hash at it (hex).
    pub async fn head(&self) -> Result<(u64, String), StoreError> {
        let head = match &self.inner.db {
            Db::Sqlite(db) => db.head().await?,
            Db::Postgres(db) => db.head().await?,
        };
        Ok((head.position, hex::encode(head.hash)))
    }

    pub async fn head_position(&self) -> Result<u64, StoreError> {
        Ok(self.head().await?.0)
    }

    /// Changes of the log head: commits in this process and, on PostgreSQL, in every process.
    /// A wake-up hint, not a delivery guarantee: pair it with a poll (as subscriptions do).
    pub async fn head_watch(&self) -> watch::Receiver<u64> {
        if let Db::Postgres(db) = &self.inner.db {
            let weak = Arc::downgrade(&self.inner);
            let pool = db.pool.clone();
            self.inner
                .listener
                .get_or_init(|| async move {
                    tokio::spawn(listen(pool, weak));
                })
                .await;
        }
        self.inner.head.subscribe()
    }

    pub async fn projection_status(&self) -> Result<Vec<ProjectionStatus>, StoreError> {
        let head = self.head_position().await?;
        let mut statuses = Vec::new();
        for projection in gpunex_projections::PROJECTIONS {
            statuses.push(ProjectionStatus {
                projection,
                checkpoint: self.checkpoint_of(projection).await?,
                head,
            });
        }
        Ok(statuses)
    }

    /// The checkpoint of a log consumer (a projection, the notification outbox): the last
    /// position it has fully handled; 0 before it started.
    pub async fn consumer_checkpoint(&self, name: &str) -> Result<u64, StoreError> {
        self.checkpoint_of(name).await
    }

    /// Moves a consumer's checkpoint from `from` to `to` if no one moved it meanwhile
    /// (otherwise `CheckpointMoved`: another instance is running).
    pub async fn advance_consumer(&self, name: &str, from: u64, to: u64) -> Result<(), StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.advance_checkpoint(name, from, to).await,
            Db::Postgres(db) => db.advance_checkpoint(name, from, to).await,
        }
    }

    /// Empties a stored projection's `tables` and sets its checkpoint to 0, in one transaction:
    /// the first step of its rebuild.
    pub(crate) async fn empty_projection(
        &self,
        projection: &str,
        tables: &[&str],
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        in_transaction!(self, |tx| {
            for table in tables {
                sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table}")))
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query(
                "UPDATE projection_checkpoints SET position = 0, updated_at_us = $1 \
                 WHERE projection = $2",
            )
            .bind(now)
            .bind(projection)
            .execute(&mut *tx)
            .await?;
        });
        Ok(())
    }

    /// The next page of the log after `after` up to `through` (empty: none left): how `audit
    /// verify` walks the log up to a projection's checkpoint.
    pub(crate) async fn log_page_through(
        &self,
        after: u64,
        through: u64,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let mut events = self.read_all(after, crate::READ_BATCH_EVENTS_MAX).await?;
        events.retain(|e| e.position <= through);
        Ok(events)
    }

    async fn checkpoint_of(&self, projection: &str) -> Result<u64, StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.checkpoint(projection).await,
            Db::Postgres(db) => db.checkpoint(projection).await,
        }
    }

    /// Folds every event after the checkpoints into the read models.
    /// The report counts the events and batches of the projection that folded the most, and
    /// its checkpoint is the lower of the projections'.
    pub async fn run_projections(&self) -> Result<RunReport, StoreError> {
        let ledger =
            gpunex_projections::catch_up(self, gpunex_projections::runner::BATCH_EVENTS_MAX)
                .await
                .map_err(|error| match error {
                    gpunex_projections::runner::RunError::Backend(e) => e,
                    gpunex_projections::runner::RunError::Fold(e) => StoreError::Fold(e),
                })?;
        let earnings = {
            let _folding = self.inner.earnings_fold.lock().await;
            self.catch_up_earnings().await?
        };
        let rentals = self.run_rentals().await?;
        let payouts = self.run_payouts().await?;
        let presence = self.run_presence().await?;
        let prices = self.run_prices().await?;
        let reports = [earnings, rentals, payouts, presence, prices];
        Ok(RunReport {
            events: reports
                .iter()
                .map(|r| r.events)
                .fold(ledger.events, u64::max),
            batches: reports
                .iter()
                .map(|r| r.batches)
                .fold(ledger.batches, u64::max),
            checkpoint: reports
                .iter()
                .map(|r| r.checkpoint)
                .fold(ledger.checkpoint, u64::min),
        })
    }

    /// Rebuilds every read model from position 0 into fresh tables and swaps them in. Returns
    /// the position the rebuilt models are at. `progress` receives positions as it goes.
    pub async fn rebuild_projections(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<u64, StoreError> {
        let rebuilt = self.rebuild_projections_timed(progress).await?;
        Ok(rebuilt
            .iter()
            .map(|(_, rebuilt)| rebuilt.checkpoint)
            .min()
            .unwrap_or(0))
    }

    /// [`Store::rebuild_projections`], saying for each stored model (by name, in
    /// [`gpunex_projections::PROJECTIONS`] order) where it got to and where its time went.
    pub async fn rebuild_projections_timed(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Vec<(&'static str, Rebuilt)>, StoreError> {
        let mut rebuilt = Vec::new();
        for &projection in gpunex_projections::PROJECTIONS {
            rebuilt.push((projection, self.rebuild(projection, progress).await?));
        }
        Ok(rebuilt)
    }

    /// Rebuilds the stored model `projection` (one of [`gpunex_projections::PROJECTIONS`])
    /// alone; `progress` hears the ledger's positions.
    pub async fn rebuild(
        &self,
        projection: &str,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Rebuilt, StoreError> {
        use gpunex_projections::{
            earnings_lines::EARNINGS, ledger::LEDGER, payout_history::PAYOUTS,
            presence_history::PRESENCE, price_history::PRICES, rentals::RENTALS,
        };
        match projection {
            LEDGER => self.rebuild_ledger(progress).await,
            EARNINGS => self.rebuild_earnings().await,
            RENTALS => self.rebuild_rentals().await,
            PAYOUTS => self.rebuild_payouts().await,
            PRESENCE => self.rebuild_presence().await,
            PRICES => self.rebuild_prices().await,
            other => Err(StoreError::Direct(format!(
                "no stored projection is called {other}"
            ))),
        }
    }

    /// Rebuilds the ledger projection alone (see `rebuild_projections`).
    pub async fn rebuild_ledger(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Rebuilt, StoreError> {
        Rebuilt::timed(async {
            let run_id = uuid::Uuid::now_v7();
            let rebuilt = match &self.inner.db {
                Db::Sqlite(db) => crate::rebuild::rebuild_ledger(&**db, run_id, progress).await?,
                Db::Postgres(db) => crate::rebuild::rebuild_ledger(&**db, run_id, progress).await?,
            };
            self.settle_tables(&crate::rebuild::LedgerTables::LIVE.all())
                .await?;
            Ok(rebuilt)
        })
        .await
    }

    /// After a bulk write of `tables` (a rebuild, a copy): on PostgreSQL, `VACUUM (ANALYZE)`
    /// them, so that the planner has their statistics and index-only scans skip the heap at
    /// once, instead of whenever autovacuum gets to them (it may be off, or minutes behind).
    /// Measured on a 4.98M-event log: the 31-day dashboard's grouped read of 27,916 lines took
    /// 640 ms with a heap fetch per line before, 28 ms after. SQLite needs neither: its planner
    /// uses no statistics here and its covering indexes never visit the table.
    pub async fn settle_tables(&self, tables: &[&str]) -> Result<(), StoreError> {
        if let Db::Postgres(db) = &self.inner.db {
            for table in tables {
                // VACUUM cannot run in a transaction: sent alone, by the simple query protocol.
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("VACUUM (ANALYZE) {table}")))
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Every account's totals from the ledger read model.
    pub async fn balances(&self) -> Result<BTreeMap<Account, AccountTotals>, StoreError> {
        Ok(self.balances_as_of().await?.1)
    }

    /// The ledger checkpoint and every account's totals as of exactly that position.
    pub async fn balances_as_of(
        &self,
    ) -> Result<(u64, BTreeMap<Account, AccountTotals>), StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.balances().await,
            Db::Postgres(db) => db.balances().await,
        }
    }

    /// Journal lines (optionally of one account) after `after`, in position order.
    pub async fn journal_lines(
        &self,
        account: Option<Account>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LedgerLine>, StoreError> {
        let limit = limit.clamp(1, crate::READ_BATCH_EVENTS_MAX);
        match &self.inner.db {
            Db::Sqlite(db) => db.entries(account, after, limit).await,
            Db::Postgres(db) => db.entries(account, after, limit).await,
        }
    }

    /// Verifies the hash chain and replays the log through every projection, comparing with the
    /// stored read models and balances. See [`crate::audit`].
    pub async fn audit(
        &self,
        progress: &(dyn Fn(AuditProgress) + Sync),
    ) -> Result<AuditReport, StoreError> {
        let mut report = match &self.inner.db {
            Db::Sqlite(db) => {
                let snapshot = crate::sqlite_scan::SqliteSnapshot::begin(db.path.clone()).await?;
                crate::audit::run(snapshot, progress).await?
            }
            Db::Postgres(db) => {
                let snapshot = crate::postgres_snapshot::PgSnapshot::begin(&db.pool).await?;
                crate::audit::run(snapshot, progress).await?
            }
        };
        self.verify_earnings(&mut report).await?;
        self.verify_rentals(&mut report).await?;
        self.verify_payouts(&mut report).await?;
        self.verify_presence(&mut report).await?;
        self.verify_prices(&mut report).await?;
        Ok(report)
    }

    /// Cheap liveness check of the database, for `/readyz`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.head_position().await.map(|_| ())
    }
}

impl crate::read_decoded::ReadRange for Store {
    async fn read_range<T: Send + 'static>(
        &self,
        after: u64,
        reach: crate::read_decoded::Reach,
        decode: crate::read_decoded::Decode<T>,
    ) -> Result<crate::read_decoded::RangeRead<T>, StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.read_range(after, reach, decode).await,
            Db::Postgres(db) => db.read_range(after, reach, decode).await,
        }
    }
}

impl ProjectionBackend for Store {
    type Error = StoreError;

    async fn checkpoint(&self, projection: &'static str) -> Result<u64, StoreError> {
        self.checkpoint_of(projection).await
    }

    async fn read_journal_page(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Option<JournalPage>, StoreError> {
        let events = self.read_all(after, limit).await?;
        let Some(last) = events.last() else {
            return Ok(None);
        };
        Ok(Some(JournalPage {
            read: events.len() as u64,
            through: last.position,
            events: crate::rebuild::journal_events(&events)?,
        }))
    }

    async fn commit_ledger(
        &self,
        batch: &LedgerBatch,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        match &self.inner.db {
            Db::Sqlite(db) => db.commit_ledger(batch, from, to).await,
            Db::Postgres(db) => db.commit_ledger(batch, from, to).await,
        }
    }
}

/// Forwards `pg_notify` heads from other processes to this process's subscribers. Notifications
/// are a hint: subscribers also poll, so a dropped connection delays delivery but loses nothing.
async fn listen(pool: sqlx::PgPool, store: Weak<Inner>) {
    const RETRY: Duration = Duration::from_secs(1);
    const LIVENESS_CHECK: Duration = Duration::from_secs(5);
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for event notifications; retrying");
                tokio::time::sleep(RETRY).await;
                if store.upgrade().is_none() {
                    return;
                }
                continue;
            }
        };
        if let Err(error) = listener.listen(crate::postgres::NOTIFY_CHANNEL).await {
            tracing::warn!(%error, "LISTEN failed; retrying");
            tokio::time::sleep(RETRY).await;
            continue;
        }
        loop {
            let Some(inner) = store.upgrade() else { return };
            match tokio::time::timeout(LIVENESS_CHECK, listener.recv()).await {
                Err(_) => {}
                Ok(Ok(notification)) => {
                    if let Ok(position) = notification.payload().parse::<u64>() {
                        writer::advance(&inner.head, position);
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "event notification listener lost its connection");
                    break;
                }
            }
        }
    }
}

/// A stored model rebuilt from position 0: the checkpoint it reached, and where the time went
/// (`times.total` is the whole rebuild, swap and vacuum included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilt {
    pub checkpoint: u64,
    pub times: crate::CatchUpTimes,
}

impl Rebuilt {
    /// Runs a rebuild that says its checkpoint and phases, and times the whole of it.
    pub(crate) async fn timed(
        rebuild: impl std::future::Future<Output = Result<(u64, crate::CatchUpTimes), StoreError>>,
    ) -> Result<Rebuilt, StoreError> {
        let ((checkpoint, mut times), total) = match crate::timing::timed(rebuild).await {
            (Ok(rebuilt), total) => (rebuilt, total),
            (Err(error), _) => return Err(error),
        };
        times.total = total;
        Ok(Rebuilt { checkpoint, times })
    }
}
