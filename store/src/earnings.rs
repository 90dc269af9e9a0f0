//! The stored earnings projection (`earnings_lines`, `earnings_rentals`, `earnings_providers`):
//! its runner, its rebuild and its reads. The fold is `gpunex_projections::earnings_lines`; this
//! module moves its rows. The SQL uses `$N` placeholders on both databases.
//!
//! Every read takes the log position it is `as of` and returns exactly what the fold of the log
//! up to that position says, provided the projection's checkpoint has reached it
//! ([`Store::earnings_reached`]), so a reader can combine it with in-memory state folded to the
//! same position.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use gpunex_domain::events::{RENTAL_STARTED, USAGE_METERED};
use gpunex_domain::money::Usdc;
use gpunex_domain::time::Timestamp;
use gpunex_projections::RunReport;
use gpunex_projections::earnings::{Figures, Line, RentalRef, RentalShares, Split, Sums};
use gpunex_projections::earnings_lines::{
    Before, Cursor, EARNINGS, EarningsBatch, HOUR_US, HourKey, HourLine, HourSums, LineRow,
    add_line_hours, fold_batch, hour_of, needs,
};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport, Findings};
use crate::pages::{Folded, PageFold, fold_pages};
use crate::sql::{Binds, MOVE_CHECKPOINT, placeholders, values};
use crate::timing::{CatchUpTimes, timed};
use crate::{Backend, Rebuilt, RecordedEvent, Store, StoreError, to_i64, to_u64};

/// Ids bound per `IN (...)` list, and rows per multi-row `INSERT` (18 parameters a line row:
/// 4,500 per statement, under SQLite's 32,766).
const ROWS_PER_STATEMENT: usize = 250;

/// `($k+1, ..., $k+n)` for each of `rows` rows of `n` parameters.
fn corrupt(reason: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow {
        position: 0,
        reason: format!("earnings projection: {reason}"),
    }
}

fn uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::try_parse(text).map_err(corrupt)
}

/// Running sums as stored: gross, fee, net, GPU-seconds, lines.
type SumsRow = (i64, i64, i64, i64, i64);

fn sums(row: SumsRow) -> Result<Sums, StoreError> {
    Ok(Sums {
        gross: row.0,
        fee: row.1,
        net: row.2,
        gpu_seconds: to_u64(row.3, 0, "gpu_seconds")?,
        lines: to_u64(row.4, 0, "lines")?,
    })
}

const HOUR_KEY_COLUMNS: &str = "provider_id, hour_us, gpu_uuid, model_id";
const HOUR_SUM_COLUMNS: &str = "gross_micro_usdc, fee_micro_usdc, net_micro_usdc, gpu_seconds, \
     gpu_lines, model_net_micro_usdc, model_lines, through_position";
/// A batch's hours added to the stored ones (one row per key and batch, so no statement updates
/// a row twice, which PostgreSQL refuses).
const HOUR_ADD: &str = "gross_micro_usdc = earnings_gpu_hours.gross_micro_usdc + excluded.gross_micro_usdc, \
     fee_micro_usdc = earnings_gpu_hours.fee_micro_usdc + excluded.fee_micro_usdc, \
     net_micro_usdc = earnings_gpu_hours.net_micro_usdc + excluded.net_micro_usdc, \
     gpu_seconds = earnings_gpu_hours.gpu_seconds + excluded.gpu_seconds, \
     gpu_lines = earnings_gpu_hours.gpu_lines + excluded.gpu_lines, \
     model_net_micro_usdc = earnings_gpu_hours.model_net_micro_usdc + excluded.model_net_micro_usdc, \
     model_lines = earnings_gpu_hours.model_lines + excluded.model_lines, \
     through_position = excluded.through_position";
/// The tables of the earnings projection, emptied together by a rebuild.
const EARNINGS_TABLES: [&str; 4] = [
    "earnings_lines",
    "earnings_rentals",
    "earnings_providers",
    "earnings_gpu_hours",
];

const LINE_COLUMNS: &str = "position, provider_id, at_us, entry_id, report_id, rental_id, \
     from_gpu_seconds, to_gpu_seconds, price_micro_usdc, gross_micro_usdc, fee_micro_usdc, \
     net_micro_usdc, fee_bp";
const THROUGH_COLUMNS: &str =
    "through_gross, through_fee, through_net, through_gpu_seconds, through_lines";

type LineTuple = (
    i64,
    String,
    i64,
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
);

/// Which lines of a provider to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRange {
    /// Dated in `[from, until)`, folded by `as_of`.
    Dated {
        from: Timestamp,
        until: Timestamp,
        as_of: u64,
    },
    /// At log positions in `(after, through]` (what a payout settled).
    Positions { after: u64, through: u64 },
}

fn rental_row(
    row: (String, String, String, String, String, String),
) -> Result<RentalRef, StoreError> {
    Ok(RentalRef {
        rental_id: uuid(&row.0)?,
        renter_id: uuid(&row.1)?,
        provider_id: uuid(&row.2)?,
        machine_id: uuid(&row.3)?,
        model_id: row.4,
        gpu_uuids: serde_json::from_str(&row.5).map_err(corrupt)?,
    })
}

/// The secondary indexes of `earnings_lines` (migrations 0008 and 0013), by name and columns.
const LINE_INDEXES: [(&str, &str); 2] = [
    ("earnings_lines_by_date", "provider_id, at_us, position"),
    ("earnings_lines_by_position", "provider_id, position"),
];

/// The statements that write a page of the earnings projection, for `rows` rows, shared by the
/// store's writer and the rebuild's rusqlite connection (both read `?` and `$N` placeholders).
fn insert_rentals_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_rentals (rental_id, renter_id, provider_id, machine_id, model_id, \
         gpu_uuids) VALUES {} ON CONFLICT (rental_id) DO NOTHING",
        values(backend, rows, 6)
    )
}

fn insert_lines_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_lines ({LINE_COLUMNS}, {THROUGH_COLUMNS}) VALUES {}",
        values(backend, rows, 18)
    )
}

fn upsert_hours_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_gpu_hours ({HOUR_KEY_COLUMNS}, {HOUR_SUM_COLUMNS}) VALUES {} \
         ON CONFLICT (provider_id, hour_us, gpu_uuid, model_id) DO UPDATE SET {HOUR_ADD}",
        values(backend, rows, 12)
    )
}

const UPSERT_PROVIDER: &str = "INSERT INTO earnings_providers (provider_id, last_at_us, \
     through_gross, through_fee, through_net, through_gpu_seconds, through_lines) \
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (provider_id) DO UPDATE SET \
     last_at_us = excluded.last_at_us, through_gross = excluded.through_gross, \
     through_fee = excluded.through_fee, through_net = excluded.through_net, \
     through_gpu_seconds = excluded.through_gpu_seconds, through_lines = excluded.through_lines";

/// A page's lines, inserted the way each database takes many rows best.
trait InsertLines {
    fn insert_lines(
        &mut self,
        lines: &[LineRow],
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send;
}

impl InsertLines for sqlx::SqliteConnection {
    /// Multi-row `INSERT`s of [`ROWS_PER_STATEMENT`] rows.
    async fn insert_lines(&mut self, lines: &[LineRow]) -> Result<(), StoreError> {
        for chunk in lines.chunks(ROWS_PER_STATEMENT) {
            let sql = insert_lines_sql(Backend::Sqlite, chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for line in chunk {
                query = query
                    .bind(to_i64(line.position))
                    .bind(line.provider_id.to_string())
                    .bind(line.at_us)
                    .bind(line.entry_id.to_string())
                    .bind(line.report_id.to_string())
                    .bind(line.rental_id.to_string())
                    .bind(to_i64(line.from_gpu_seconds))
                    .bind(to_i64(line.to_gpu_seconds))
                    .bind(line.price_per_gpu_hour)
                    .bind(line.gross)
                    .bind(line.fee)
                    .bind(line.net)
                    .bind(i64::from(line.fee_bp))
                    .bind(line.through.gross)
                    .bind(line.through.fee)
                    .bind(line.through.net)
                    .bind(to_i64(line.through.gpu_seconds))
                    .bind(to_i64(line.through.lines));
            }
            query.execute(&mut *self).await?;
        }
        Ok(())
    }
}

impl InsertLines for sqlx::PgConnection {
    /// One `INSERT ... SELECT * FROM UNNEST(...)` of one array per column, as the ledger's
    /// journal lines are written: 18 parameters for the page rather than 18 a row.
    async fn insert_lines(&mut self, lines: &[LineRow]) -> Result<(), StoreError> {
        if lines.is_empty() {
            return Ok(());
        }
        let ints = |f: fn(&LineRow) -> i64| lines.iter().map(f).collect::<Vec<i64>>();
        let texts = |f: fn(&LineRow) -> Uuid| {
            lines
                .iter()
                .map(|l| f(l).to_string())
                .collect::<Vec<String>>()
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO earnings_lines ({LINE_COLUMNS}, {THROUGH_COLUMNS}) SELECT * FROM UNNEST(\
             $1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], \
             $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], \
             $12::bigint[], $13::bigint[], $14::bigint[], $15::bigint[], $16::bigint[], \
             $17::bigint[], $18::bigint[])"
        )))
        .bind(ints(|l| to_i64(l.position)))
        .bind(texts(|l| l.provider_id))
        .bind(ints(|l| l.at_us))
        .bind(texts(|l| l.entry_id))
        .bind(texts(|l| l.report_id))
        .bind(texts(|l| l.rental_id))
        .bind(ints(|l| to_i64(l.from_gpu_seconds)))
        .bind(ints(|l| to_i64(l.to_gpu_seconds)))
        .bind(ints(|l| l.price_per_gpu_hour))
        .bind(ints(|l| l.gross))
        .bind(ints(|l| l.fee))
        .bind(ints(|l| l.net))
        .bind(ints(|l| i64::from(l.fee_bp)))
        .bind(ints(|l| l.through.gross))
        .bind(ints(|l| l.through.fee))
        .bind(ints(|l| l.through.net))
        .bind(ints(|l| to_i64(l.through.gpu_seconds)))
        .bind(ints(|l| to_i64(l.through.lines)))
        .execute(&mut *self)
        .await?;
        Ok(())
    }
}

/// How a fold's pages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// Through the store's writer, as every live write: the live runner and a reader's
    /// catch-up.
    Live,
    /// A rebuild's pages: on SQLite through the rebuild's own rusqlite connection
    /// ([`crate::sqlite_bulk::RebuildWriter`]), one cached statement stepped per row, rather than
    /// every value bound through sqlx's worker; on PostgreSQL as [`Writes::Live`].
    Bulk,
}

/// What one page's batch wrote that the next page's fold reads: the rentals it started and its
/// providers' cursors.
#[derive(Debug, Default)]
struct Carried {
    rentals: HashMap<Uuid, RentalRef>,
    cursors: HashMap<Uuid, Cursor>,
}

impl Carried {
    fn of(batch: &EarningsBatch) -> Carried {
        Carried {
            rentals: batch
                .rentals
                .iter()
                .map(|r| (r.rental_id, r.clone()))
                .collect(),
            cursors: batch.cursors.iter().map(|(id, c)| (*id, *c)).collect(),
        }
    }
}

/// The earnings projection's page steps ([`crate::pages`]).
struct EarningsPages<'a> {
    store: &'a Store,
    writes: Writes,
}

impl PageFold for EarningsPages<'_> {
    type Batch = EarningsBatch;
    type Carried = Carried;

    async fn read(&self, after: u64) -> Result<Vec<RecordedEvent>, StoreError> {
        self.store
            .read_all(after, self.store.inner.fold_page_events)
            .await
    }

    async fn fold(
        &self,
        events: &[RecordedEvent],
        carried: &Carried,
    ) -> Result<EarningsBatch, StoreError> {
        self.store.fold_earnings(events, carried).await
    }

    fn carry(batch: &EarningsBatch) -> Carried {
        Carried::of(batch)
    }

    async fn commit(&self, batch: EarningsBatch, from: u64, to: u64) -> Result<(), StoreError> {
        self.store
            .commit_earnings(batch, from, to, self.writes)
            .await
    }
}

/// [`Store::commit_earnings`] on a rusqlite connection: the same rows, statements and checkpoint
/// move as the sqlx path, in one `BEGIN IMMEDIATE` transaction.
fn write_page_sqlite(
    conn: &mut rusqlite::Connection,
    batch: &EarningsBatch,
    from: u64,
    to: u64,
    now: i64,
) -> Result<(), StoreError> {
    use crate::sqlite_bulk::bulk_error;
    use rusqlite::params;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(bulk_error)?;
    let moved = tx
        .prepare_cached(MOVE_CHECKPOINT)
        .and_then(|mut moved| moved.execute(params![to_i64(to), now, EARNINGS, to_i64(from)]))
        .map_err(bulk_error)?;
    if moved != 1 {
        return Err(StoreError::CheckpointMoved {
            projection: EARNINGS.to_owned(),
            expected: from,
        });
    }
    {
        let mut insert = tx
            .prepare_cached(&insert_rentals_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
        for rental in &batch.rentals {
            insert
                .execute(params![
                    rental.rental_id.to_string(),
                    rental.renter_id.to_string(),
                    rental.provider_id.to_string(),
                    rental.machine_id.to_string(),
                    rental.model_id,
                    serde_json::to_string(&rental.gpu_uuids).map_err(corrupt)?,
                ])
                .map_err(bulk_error)?;
        }
        let mut insert = tx
            .prepare_cached(&insert_lines_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
        // The ids' text in one buffer each, not one allocation per row and column.
        let mut ids = [uuid::fmt::Hyphenated::LENGTH; 4].map(|n| vec![0_u8; n]);
        for line in &batch.lines {
            let [provider, entry, report, rental] = &mut ids;
            insert
                .execute(params![
                    to_i64(line.position),
                    &*line.provider_id.hyphenated().encode_lower(provider),
                    line.at_us,
                    &*line.entry_id.hyphenated().encode_lower(entry),
                    &*line.report_id.hyphenated().encode_lower(report),
                    &*line.rental_id.hyphenated().encode_lower(rental),
                    to_i64(line.from_gpu_seconds),
                    to_i64(line.to_gpu_seconds),
                    line.price_per_gpu_hour,
                    line.gross,
                    line.fee,
                    line.net,
                    i64::from(line.fee_bp),
                    line.through.gross,
                    line.through.fee,
                    line.through.net,
                    to_i64(line.through.gpu_seconds),
                    to_i64(line.through.lines),
                ])
                .map_err(bulk_error)?;
        }
        let mut upsert = tx
            .prepare_cached(&upsert_hours_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
        for ((provider, hour, gpu, model), sums) in &batch.hours {
            upsert
                .execute(params![
                    provider.to_string(),
                    hour,
                    gpu,
                    model,
                    sums.gpu.gross,
                    sums.gpu.fee,
                    sums.gpu.net,
                    to_i64(sums.gpu.gpu_seconds),
                    to_i64(sums.gpu.lines),
                    sums.model_net,
                    to_i64(sums.model_lines),
                    to_i64(sums.through_position),
                ])
                .map_err(bulk_error)?;
        }
        let mut upsert = tx.prepare_cached(UPSERT_PROVIDER).map_err(bulk_error)?;
        for (provider, cursor) in &batch.cursors {
            upsert
                .execute(params![
                    provider.to_string(),
                    cursor.last_at_us,
                    cursor.through.gross,
                    cursor.through.fee,
                    cursor.through.net,
                    to_i64(cursor.through.gpu_seconds),
                    to_i64(cursor.through.lines),
                ])
                .map_err(bulk_error)?;
        }
    }
    tx.commit().map_err(bulk_error)
}

impl Store {
    /// How far the earnings projection has folded the log.
    pub async fn earnings_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(EARNINGS).await
    }

    /// Folds every event after the earnings checkpoint, one transaction per batch, and returns
    /// when there is nothing left. Another process doing the same is harmless: each batch moves
    /// the checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub async fn catch_up_earnings(&self) -> Result<RunReport, StoreError> {
        Ok(self.fold_earnings_pages(Writes::Live).await?.report)
    }

    /// [`Store::catch_up_earnings`]: while one page is committed, the next is folded and the
    /// one after it read ([`crate::pages`]).
    async fn fold_earnings_pages(&self, writes: Writes) -> Result<Folded, StoreError> {
        let pages = EarningsPages {
            store: self,
            writes,
        };
        fold_pages(self.earnings_checkpoint().await?, &pages).await
    }

    /// Whether the earnings projection has folded the log up to `position`; if not, folds what
    /// is missing here and now (so a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub async fn earnings_reached(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, EARNINGS, &self.inner.earnings_fold, position, || {
            self.catch_up_earnings()
        })
        .await
    }

    /// Decodes the events the fold reads and folds them with what it needs from before: from
    /// `carried` (the page before, maybe not committed yet), else from the tables.
    async fn fold_earnings(
        &self,
        events: &[RecordedEvent],
        carried: &Carried,
    ) -> Result<EarningsBatch, StoreError> {
        let projected = events
            .iter()
            .filter(|e| e.event_type == USAGE_METERED || e.event_type == RENTAL_STARTED)
            .map(RecordedEvent::to_projected)
            .collect::<Result<Vec<_>, _>>()?;
        let (mut rentals, mut providers) = needs(&projected);
        rentals.retain(|id| !carried.rentals.contains_key(id));
        providers.retain(|id| !carried.cursors.contains_key(id));
        let mut before = Before {
            rentals: self
                .earnings_rentals(&rentals)
                .await?
                .into_iter()
                .map(|r| (r.rental_id, r))
                .collect(),
            cursors: self.earnings_cursors(&providers).await?,
        };
        before.rentals.extend(
            carried
                .rentals
                .iter()
                .map(|(id, rental)| (*id, rental.clone())),
        );
        before
            .cursors
            .extend(carried.cursors.iter().map(|(id, c)| (*id, *c)));
        Ok(fold_batch(&projected, &before)?)
    }

    /// Writes `batch` and moves the checkpoint from `from` to `to`, in one transaction.
    async fn commit_earnings(
        &self,
        batch: EarningsBatch,
        from: u64,
        to: u64,
        writes: Writes,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        if let (Writes::Bulk, crate::store::Db::Sqlite(db)) = (writes, &self.inner.db) {
            return db
                .rebuild_writer
                .run(move |conn| write_page_sqlite(conn, &batch, from, to, now))
                .await;
        }
        in_transaction!(self, |tx| {
            let moved = sqlx::query(MOVE_CHECKPOINT)
                .bind(to_i64(to))
                .bind(now)
                .bind(EARNINGS)
                .bind(to_i64(from))
                .execute(&mut *tx)
                .await?;
            if moved.rows_affected() != 1 {
                return Err(StoreError::CheckpointMoved {
                    projection: EARNINGS.to_owned(),
                    expected: from,
                });
            }
            for chunk in batch.rentals.chunks(ROWS_PER_STATEMENT) {
                let sql = insert_rentals_sql(self.backend(), chunk.len());
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for rental in chunk {
                    query = query
                        .bind(rental.rental_id.to_string())
                        .bind(rental.renter_id.to_string())
                        .bind(rental.provider_id.to_string())
                        .bind(rental.machine_id.to_string())
                        .bind(rental.model_id.clone())
                        .bind(serde_json::to_string(&rental.gpu_uuids).map_err(corrupt)?);
                }
                query.execute(&mut *tx).await?;
            }
            InsertLines::insert_lines(&mut *tx, &batch.lines).await?;
            let hours: Vec<(&HourKey, &HourSums)> = batch.hours.iter().collect();
            for chunk in hours.chunks(ROWS_PER_STATEMENT) {
                let sql = upsert_hours_sql(self.backend(), chunk.len());
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for ((provider, hour, gpu, model), sums) in chunk {
                    query = query
                        .bind(provider.to_string())
                        .bind(*hour)
                        .bind(gpu.clone())
                        .bind(model.clone())
                        .bind(sums.gpu.gross)
                        .bind(sums.gpu.fee)
                        .bind(sums.gpu.net)
                        .bind(to_i64(sums.gpu.gpu_seconds))
                        .bind(to_i64(sums.gpu.lines))
                        .bind(sums.model_net)
                        .bind(to_i64(sums.model_lines))
                        .bind(to_i64(sums.through_position));
                }
                query.execute(&mut *tx).await?;
            }
            for (provider, cursor) in &batch.cursors {
                sqlx::query(UPSERT_PROVIDER)
                    .bind(provider.to_string())
                    .bind(cursor.last_at_us)
                    .bind(cursor.through.gross)
                    .bind(cursor.through.fee)
                    .bind(cursor.through.net)
                    .bind(to_i64(cursor.through.gpu_seconds))
                    .bind(to_i64(cursor.through.lines))
                    .execute(&mut *tx)
                    .await?;
            }
        });
        Ok(())
    }

    /// Empties the earnings projection and sets its checkpoint to 0 in one transaction, then
    /// folds the log again.
    pub async fn rebuild_earnings(&self) -> Result<Rebuilt, StoreError> {
        Rebuilt::timed(self.refold_earnings()).await
    }

    async fn refold_earnings(&self) -> Result<(u64, CatchUpTimes), StoreError> {
        self.empty_projection(EARNINGS, &EARNINGS_TABLES).await?;
        // The lines' secondary indexes are built once after the refold rather than kept up
        // row by row: the same indexes as the migration, under the same names.
        in_transaction!(self, |tx| {
            for (name, _) in LINE_INDEXES {
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP INDEX IF EXISTS {name}")))
                    .execute(&mut *tx)
                    .await?;
            }
        });
        let _folding = self.inner.earnings_fold.lock().await;
        let folded = self.fold_earnings_pages(Writes::Bulk).await;
        let (indexed, index) = timed(async {
            in_transaction!(self, |tx| {
                for (name, columns) in LINE_INDEXES {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "CREATE INDEX IF NOT EXISTS {name} ON earnings_lines ({columns})"
                    )))
                    .execute(&mut *tx)
                    .await?;
                }
            });
            Ok::<_, StoreError>(())
        })
        .await;
        indexed?;
        let Folded { report, mut times } = folded?;
        times.index = index;
        // The live runner may fold again while the tables are vacuumed.
        drop(_folding);
        self.settle_tables(&EARNINGS_TABLES).await?;
        Ok((report.checkpoint, times))
    }

    /// The rentals with these ids that the projection holds.
    pub async fn earnings_rentals(&self, ids: &[Uuid]) -> Result<Vec<RentalRef>, StoreError> {
        let mut found = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT rental_id, renter_id, provider_id, machine_id, model_id, gpu_uuids \
                 FROM earnings_rentals WHERE rental_id IN ({})",
                placeholders(self.backend(), chunk.len())
            );
            let rows: Vec<(String, String, String, String, String, String)> =
                on_reader!(self, |conn| {
                    let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                    for id in chunk {
                        query = query.bind(id.to_string());
                    }
                    query.fetch_all(conn).await?
                });
            for row in rows {
                found.push(rental_row(row)?);
            }
        }
        Ok(found)
    }

    /// The rentals with these ids, by id, shared by the lines that name them.
    async fn earnings_rentals_by_id(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, Arc<RentalRef>>, StoreError> {
        Ok(self
            .earnings_rentals(ids)
            .await?
            .into_iter()
            .map(|r| (r.rental_id, Arc::new(r)))
            .collect())
    }

    /// These providers' cursors (providers with no line yet are absent).
    pub async fn earnings_cursors(
        &self,
        providers: &[Uuid],
    ) -> Result<HashMap<Uuid, Cursor>, StoreError> {
        let mut found = HashMap::with_capacity(providers.len());
        for chunk in providers.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT provider_id, last_at_us, {THROUGH_COLUMNS} FROM earnings_providers \
                 WHERE provider_id IN ({})",
                placeholders(self.backend(), chunk.len())
            );
            let rows: Vec<(String, i64, i64, i64, i64, i64, i64)> = on_reader!(self, |conn| {
                let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.fetch_all(conn).await?
            });
            for row in rows {
                found.insert(
                    uuid(&row.0)?,
                    Cursor {
                        last_at_us: row.1,
                        through: sums((row.2, row.3, row.4, row.5, row.6))?,
                    },
                );
            }
        }
        Ok(found)
    }

    /// Every provider's cursor, for `audit verify`.
    pub async fn earnings_all_cursors(&self) -> Result<HashMap<Uuid, Cursor>, StoreError> {
        let ids: Vec<String> = on_reader!(self, |conn| sqlx::query_scalar(
            "SELECT provider_id FROM earnings_providers ORDER BY provider_id"
        )
        .fetch_all(conn)
        .await?);
        let ids = ids
            .iter()
            .map(|id| uuid(id))
            .collect::<Result<Vec<_>, _>>()?;
        self.earnings_cursors(&ids).await
    }

    /// A provider's per-GPU and per-model figures ([`Figures`]) for each period between
    /// consecutive `bounds` (instants in order: `n + 1` of them for `n` periods, at most
    /// [`SHARE_DAYS_MAX`]), among the lines folded by `as_of`; a line on a bound counts in the
    /// later period. Exactly the line-by-line split ([`Figures::of_lines`]), read as:
    /// - each whole UTC hour of the range from the stored hours (`earnings_gpu_hours`), grouped
    ///   per period, GPU and model in SQL: a month of 8 GPUs is at most 5,952 rows;
    /// - from the lines, the hours that cannot be read whole: those a bound cuts (zones whose day
    ///   starts on a half or quarter hour), and those holding lines folded after `as_of` (a
    ///   row's `through_position` is past it; only the newest hours, while usage is metered).
    ///
    /// Both reads are race-free without a shared snapshot: rows only ever add later positions,
    /// and one statement says which rows it summed and which it left to the lines.
    pub async fn earnings_figures(
        &self,
        provider_id: Uuid,
        bounds: &[Timestamp],
        as_of: u64,
    ) -> Result<Vec<Figures>, StoreError> {
        let periods = bounds.len().saturating_sub(1);
        if periods == 0 {
            return Ok(Vec::new());
        }
        if periods > SHARE_DAYS_MAX || bounds.windows(2).any(|w| w[0] >= w[1]) {
            return Err(StoreError::CorruptRow {
                position: 0,
                reason: format!(
                    "{periods} periods asked for at once (at most {SHARE_DAYS_MAX}), or bounds out of order"
                ),
            });
        }
        let edges: Vec<i64> = bounds.iter().map(|b| b.unix_micros()).collect();
        let (first, last) = (edges[0], edges[periods]);
        let whole = |at: i64| at.rem_euclid(HOUR_US) == 0;
        // The whole hours in the range: [lo, hi).
        let lo = if whole(first) {
            first
        } else {
            hour_of(first).saturating_add(HOUR_US)
        };
        let hi = hour_of(last);
        // The hours an inner bound cuts: inside [lo, hi), read from the lines.
        let cut: BTreeSet<i64> = edges[1..periods]
            .iter()
            .filter(|at| !whole(**at))
            .map(|at| hour_of(*at))
            .collect();
        let mut figures = vec![Figures::default(); periods];
        let mut from_lines: BTreeSet<i64> = cut.clone();
        if lo < hi {
            let (rows, newer) = self
                .earnings_hour_figures(provider_id, &edges, (lo, hi), &cut, as_of)
                .await?;
            from_lines.extend(newer);
            for (period, gpu, model, sums) in rows {
                let Some(figures) = figures.get_mut(period) else {
                    return Err(corrupt(format!("an hour summed in period {period}")));
                };
                if !gpu.is_empty() {
                    figures
                        .per_gpu
                        .entry((gpu, model.clone()))
                        .or_default()
                        .add_sums(sums.gpu);
                }
                figures.per_model.entry(model).or_default().add_sums(Sums {
                    net: sums.model_net,
                    lines: sums.model_lines,
                    ..sums.gpu
                });
            }
        }
        // What the hours do not say: the range's ends outside its whole hours, the cut hours and
        // the hours with newer lines, as disjoint intervals in order.
        let mut intervals: Vec<(i64, i64)> = Vec::new();
        let ends = [(first, lo.min(last)), (hi.max(first), last)];
        let hours = from_lines.iter().map(|h| (*h, h.saturating_add(HOUR_US)));
        for (from, until) in ends.into_iter().chain(hours) {
            let (from, until) = (from.max(first), until.min(last));
            if from < until {
                intervals.push((from, until));
            }
        }
        intervals.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::with_capacity(intervals.len());
        for (from, until) in intervals {
            match merged.last_mut() {
                Some(previous) if from <= previous.1 => previous.1 = previous.1.max(until),
                _ => merged.push((from, until)),
            }
        }
        if !merged.is_empty() {
            let shares = self
                .earnings_line_shares(provider_id, &edges, &merged, as_of)
                .await?;
            for (figures, shares) in figures.iter_mut().zip(shares) {
                figures.add(&Figures::of_shares(&shares));
            }
        }
        Ok(figures)
    }

    /// The stored hours of a provider in `[lo, hi)` but the `cut` ones, as of `as_of`: the rows
    /// of the hours whose lines were all folded by `as_of`, summed per period (of `edges`), GPU
    /// and model, and the other hours, in one statement (one snapshot).
    async fn earnings_hour_figures(
        &self,
        provider_id: Uuid,
        edges: &[i64],
        (lo, hi): (i64, i64),
        cut: &BTreeSet<i64>,
        as_of: u64,
    ) -> Result<(Vec<(usize, String, String, HourSums)>, BTreeSet<i64>), StoreError> {
        let periods = edges.len() - 1;
        let provider = provider_id.to_string();
        // Placeholders are made in the order they appear in the text (SQLite's are positional).
        let mut binds = Binds::new(self.backend());
        // The hours holding lines folded after `as_of`: read from the lines, none of their rows
        // summed (another GPU's row of the same hour may be older, and the lines give the
        // whole hour).
        let newer = format!(
            "SELECT DISTINCT hour_us FROM earnings_gpu_hours WHERE provider_id = {} \
             AND hour_us >= {} AND hour_us < {} AND through_position > {}",
            binds.text(provider.clone()),
            binds.int(lo),
            binds.int(hi),
            binds.int(to_i64(as_of)),
        );
        // A whole hour lies in one period: the first whose end is after it.
        let case: String = edges[1..periods]
            .iter()
            .enumerate()
            .map(|(period, end)| format!("WHEN hour_us < {} THEN {period} ", binds.int(*end)))
            .collect();
        let period = if periods == 1 {
            "0".to_owned()
        } else {
            format!("CASE {case}ELSE {} END", periods - 1)
        };
        let mut summed = format!(
            "provider_id = {} AND hour_us >= {} AND hour_us < {}",
            binds.text(provider),
            binds.int(lo),
            binds.int(hi),
        );
        if !cut.is_empty() {
            let list: Vec<String> = cut.iter().map(|h| binds.int(*h)).collect();
            summed.push_str(&format!(" AND hour_us NOT IN ({})", list.join(", ")));
        }
        let sum = |column: &str| format!("CAST(SUM({column}) AS BIGINT)");
        let zero = "CAST(0 AS BIGINT)";
        let sql = format!(
            "WITH newer AS ({newer}) \
             SELECT CAST(0 AS BIGINT), CAST({period} AS BIGINT), gpu_uuid, model_id, {}, {}, {}, \
             {}, {}, {}, {} FROM earnings_gpu_hours \
             WHERE {summed} AND hour_us NOT IN (SELECT hour_us FROM newer) GROUP BY 2, 3, 4 \
             UNION ALL \
             SELECT CAST(1 AS BIGINT), hour_us, '', '', {zero}, {zero}, {zero}, {zero}, {zero}, \
             {zero}, {zero} FROM newer",
            sum("gross_micro_usdc"),
            sum("fee_micro_usdc"),
            sum("net_micro_usdc"),
            sum("gpu_seconds"),
            sum("gpu_lines"),
            sum("model_net_micro_usdc"),
            sum("model_lines"),
        );
        type HourFigureRow = (i64, i64, String, String, i64, i64, i64, i64, i64, i64, i64);
        let rows: Vec<HourFigureRow> = on_reader!(self, |conn| {
            // Only placeholders and column names are formatted in: every value is bound.
            bind_all!(sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())), binds)
                .fetch_all(conn)
                .await?
        });
        let mut summed_rows = Vec::new();
        let mut newer_hours = BTreeSet::new();
        for (kind, at, gpu, model, gross, fee, net, seconds, gpu_lines, model_net, lines) in rows {
            if kind == 1 {
                newer_hours.insert(at);
                continue;
            }
            let period = usize::try_from(at)
                .ok()
                .filter(|p| *p < periods)
                .ok_or_else(|| corrupt(format!("an hour summed in period {at}")))?;
            summed_rows.push((
                period,
                gpu,
                model,
                HourSums {
                    gpu: Sums {
                        gross,
                        fee,
                        net,
                        gpu_seconds: to_u64(seconds, 0, "gpu_seconds")?,
                        lines: to_u64(gpu_lines, 0, "gpu_lines")?,
                    },
                    model_net,
                    model_lines: to_u64(lines, 0, "model_lines")?,
                    through_position: 0,
                },
            ));
        }
        Ok((summed_rows, newer_hours))
    }

    /// A provider's lines folded by `as_of` and dated in the `intervals` (disjoint, in order,
    /// inside the range of `edges`), reduced per period of `edges` and per rental: SQL groups
    /// each period's lines by rental and amounts (gross, fee, net, GPU-seconds), which repeat,
    /// and each group's division among the rental's GPUs is computed once and counted as many
    /// times as the group has lines, which is exactly the line-by-line split. Each interval is
    /// its own index range scan.
    async fn earnings_line_shares(
        &self,
        provider_id: Uuid,
        edges: &[i64],
        intervals: &[(i64, i64)],
        as_of: u64,
    ) -> Result<Vec<Vec<RentalShares>>, StoreError> {
        let periods = edges.len() - 1;
        let mut rows: Vec<(i64, String, i64, i64, i64, i64, i64)> = Vec::new();
        // A bounded number of scans per statement (SQLite refuses compounds of over 500): a
        // reader far behind the projection can have many disjoint hours to read.
        for intervals in intervals.chunks(SCANS_PER_STATEMENT) {
            let mut binds = Binds::new(self.backend());
            let case: String = edges[1..periods]
                .iter()
                .enumerate()
                .map(|(period, end)| format!("WHEN at_us < {} THEN {period} ", binds.int(*end)))
                .collect();
            let period = if periods == 1 {
                "0".to_owned()
            } else {
                format!("CASE {case}ELSE {} END", periods - 1)
            };
            let scans: Vec<String> = intervals
                .iter()
                .map(|(from, until)| {
                    format!(
                        "SELECT at_us, rental_id, gross_micro_usdc, fee_micro_usdc, \
                         net_micro_usdc, to_gpu_seconds - from_gpu_seconds AS gpu_seconds \
                         FROM earnings_lines WHERE provider_id = {} AND at_us >= {} \
                         AND at_us < {} AND position <= {}",
                        binds.text(provider_id.to_string()),
                        binds.int(*from),
                        binds.int(*until),
                        binds.int(to_i64(as_of)),
                    )
                })
                .collect();
            let sql = format!(
                "SELECT CAST({period} AS BIGINT) AS period, rental_id, gross_micro_usdc, \
                 fee_micro_usdc, net_micro_usdc, gpu_seconds, COUNT(*) FROM ({}) AS lines \
                 GROUP BY 1, rental_id, gross_micro_usdc, fee_micro_usdc, net_micro_usdc, \
                 gpu_seconds",
                scans.join(" UNION ALL ")
            );
            let chunk: Vec<(i64, String, i64, i64, i64, i64, i64)> = on_reader!(self, |conn| {
                // Only placeholders and column names are formatted in: every value is bound.
                bind_all!(sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())), binds)
                    .fetch_all(conn)
                    .await?
            });
            rows.extend(chunk);
        }
        // Each period's groups by rental, as `shares_of` takes them.
        rows.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let ids = rental_ids(rows.iter().map(|r| r.1.as_str()))?;
        let rentals = self.earnings_rentals_by_id(&ids).await?;
        let mut per_period: Vec<Vec<Group>> = vec![Vec::new(); periods];
        for (period, rental_id, gross, fee, net, seconds, count) in rows {
            let period = usize::try_from(period)
                .ok()
                .filter(|p| *p < periods)
                .ok_or_else(|| corrupt(format!("a line bucketed in period {period}")))?;
            per_period[period].push((rental_id, gross, fee, net, seconds, count));
        }
        per_period
            .into_iter()
            .map(|groups| shares_of(groups, &rentals))
            .collect()
    }

    /// A provider's sums through its last line dated before `before`, among the lines folded by
    /// `as_of`, and that line's position (`None`: no such line).
    pub async fn earnings_before(
        &self,
        provider_id: Uuid,
        before: Timestamp,
        as_of: u64,
    ) -> Result<(Sums, Option<u64>), StoreError> {
        let sql = format!(
            "SELECT {THROUGH_COLUMNS}, position FROM earnings_lines \
             WHERE provider_id = $1 AND at_us < $2 AND position <= $3 \
             ORDER BY at_us DESC, position DESC LIMIT 1"
        );
        let row: Option<(i64, i64, i64, i64, i64, i64)> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(provider_id.to_string())
                .bind(before.unix_micros())
                .bind(to_i64(as_of))
                .fetch_optional(conn)
                .await?
        });
        match row {
            None => Ok((Sums::default(), None)),
            Some(r) => Ok((
                sums((r.0, r.1, r.2, r.3, r.4))?,
                Some(to_u64(r.5, 0, "position")?),
            )),
        }
    }

    /// A provider's sums over its lines dated in `[from, until)` folded by `as_of`.
    pub async fn earnings_sums(
        &self,
        provider_id: Uuid,
        from: Timestamp,
        until: Timestamp,
        as_of: u64,
    ) -> Result<Sums, StoreError> {
        if until <= from {
            return Ok(Sums::default());
        }
        let (end, _) = self.earnings_before(provider_id, until, as_of).await?;
        let (start, _) = self.earnings_before(provider_id, from, as_of).await?;
        Ok(end.minus(start))
    }

    /// [`Store::earnings_sums`] of several providers over one range, in one statement instead of
    /// two per provider: each provider's sums through its last line before each end, an index
    /// lookup each. SQLite reads them as one `UNION ALL` per [`PROVIDERS_PER_STATEMENT`]
    /// providers; PostgreSQL as one `LATERAL` lookup over the providers bound as arrays, a plan
    /// of constant size (a `UNION ALL` of 120 lookups costs more to plan than to run, on each
    /// connection's first executions). Sums in the order of `providers`.
    pub async fn earnings_sums_of(
        &self,
        providers: &[Uuid],
        from: Timestamp,
        until: Timestamp,
        as_of: u64,
    ) -> Result<Vec<Sums>, StoreError> {
        if until <= from {
            return Ok(vec![Sums::default(); providers.len()]);
        }
        if let crate::store::Db::Postgres(db) = &self.inner.db {
            return earnings_sums_of_postgres(&db.pool, providers, from, until, as_of).await;
        }
        let mut found = Vec::with_capacity(providers.len());
        for chunk in providers.chunks(PROVIDERS_PER_STATEMENT) {
            let mut binds = Binds::new(self.backend());
            let mut lookups = Vec::with_capacity(chunk.len() * 2);
            for (i, provider) in chunk.iter().enumerate() {
                for (end, before) in [(0, until), (1, from)] {
                    lookups.push(format!(
                        "SELECT CAST({} AS BIGINT) AS k, t.* FROM (SELECT {THROUGH_COLUMNS} \
                         FROM earnings_lines WHERE provider_id = {} AND at_us < {} \
                         AND position <= {} ORDER BY at_us DESC, position DESC LIMIT 1) AS t",
                        i * 2 + end,
                        binds.text(provider.to_string()),
                        binds.int(before.unix_micros()),
                        binds.int(to_i64(as_of)),
                    ));
                }
            }
            let sql = lookups.join(" UNION ALL ");
            let rows: Vec<(i64, i64, i64, i64, i64, i64)> = on_reader!(self, |conn| {
                // Only placeholders, column names and indexes are formatted in.
                bind_all!(sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())), binds)
                    .fetch_all(conn)
                    .await?
            });
            let mut ends = vec![Sums::default(); chunk.len() * 2];
            for (k, gross, fee, net, seconds, lines) in rows {
                let slot = usize::try_from(k)
                    .ok()
                    .and_then(|k| ends.get_mut(k))
                    .ok_or_else(|| corrupt(format!("a lookup numbered {k}")))?;
                *slot = sums((gross, fee, net, seconds, lines))?;
            }
            found.extend(ends.chunks(2).map(|pair| pair[0].minus(pair[1])));
        }
        Ok(found)
    }

    /// A provider's sums over its lines at positions up to `position`.
    pub async fn earnings_through(
        &self,
        provider_id: Uuid,
        position: u64,
    ) -> Result<Sums, StoreError> {
        let sql = format!(
            "SELECT {THROUGH_COLUMNS} FROM earnings_lines \
             WHERE provider_id = $1 AND position <= $2 ORDER BY position DESC LIMIT 1"
        );
        let row: Option<SumsRow> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(provider_id.to_string())
                .bind(to_i64(position))
                .fetch_optional(conn)
                .await?
        });
        row.map_or(Ok(Sums::default()), sums)
    }

    /// Up to `limit` of a provider's lines in `range` after log position `after` (a keyset
    /// page), oldest first.
    pub async fn earnings_lines(
        &self,
        provider_id: Uuid,
        range: LineRange,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Line>, StoreError> {
        let limit = to_i64(limit as u64);
        let rows: Vec<LineTuple> = match range {
            LineRange::Dated { from, until, as_of } => {
                let sql = format!(
                    "SELECT {LINE_COLUMNS} FROM earnings_lines WHERE provider_id = $1 \
                     AND at_us >= $2 AND at_us < $3 AND position <= $4 AND position > $5 \
                     ORDER BY at_us, position LIMIT $6"
                );
                on_reader!(self, |conn| {
                    sqlx::query_as(sqlx::AssertSqlSafe(sql))
                        .bind(provider_id.to_string())
                        .bind(from.unix_micros())
                        .bind(until.unix_micros())
                        .bind(to_i64(as_of))
                        .bind(to_i64(after))
                        .bind(limit)
                        .fetch_all(conn)
                        .await?
                })
            }
            LineRange::Positions {
                after: range_after,
                through,
            } => {
                let sql = format!(
                    "SELECT {LINE_COLUMNS} FROM earnings_lines WHERE provider_id = $1 \
                     AND position > $2 AND position <= $3 ORDER BY position LIMIT $4"
                );
                on_reader!(self, |conn| {
                    sqlx::query_as(sqlx::AssertSqlSafe(sql))
                        .bind(provider_id.to_string())
                        .bind(to_i64(range_after.max(after)))
                        .bind(to_i64(through))
                        .bind(limit)
                        .fetch_all(conn)
                        .await?
                })
            }
        };
        let wanted: BTreeSet<&str> = rows.iter().map(|r| r.5.as_str()).collect();
        let ids = wanted
            .into_iter()
            .map(uuid)
            .collect::<Result<Vec<_>, _>>()?;
        let rentals = self.earnings_rentals_by_id(&ids).await?;
        rows.into_iter()
            .map(|r| {
                let rental_id = uuid(&r.5)?;
                Ok(Line {
                    position: to_u64(r.0, 0, "position")?,
                    at: Timestamp::from_unix_micros(r.2),
                    entry_id: uuid(&r.3)?,
                    report_id: uuid(&r.4)?,
                    rental: rentals
                        .get(&rental_id)
                        .cloned()
                        .ok_or_else(|| corrupt(format!("line of unknown rental {rental_id}")))?,
                    from_gpu_seconds: to_u64(r.6, 0, "from_gpu_seconds")?,
                    to_gpu_seconds: to_u64(r.7, 0, "to_gpu_seconds")?,
                    price_per_gpu_hour: Usdc::from_micros(r.8),
                    gross: Usdc::from_micros(r.9),
                    fee: Usdc::from_micros(r.10),
                    net: Usdc::from_micros(r.11),
                    fee_bp: u32::try_from(r.12).map_err(corrupt)?,
                })
            })
            .collect()
    }

    /// Every stored line at positions in `(after, through]`, in position order, as stored (with
    /// running sums): what `audit verify` compares with the replay.
    pub async fn earnings_rows(
        &self,
        after: u64,
        through: u64,
    ) -> Result<Vec<LineRow>, StoreError> {
        let sql = format!(
            "SELECT {LINE_COLUMNS}, {THROUGH_COLUMNS} FROM earnings_lines \
             WHERE position > $1 AND position <= $2 ORDER BY position"
        );
        let rows: Vec<(LineTuple, SumsRow)> = on_reader!(self, |conn| {
            use sqlx::Row;
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(to_i64(after))
                .bind(to_i64(through))
                .fetch_all(conn)
                .await?;
            let mut found = Vec::with_capacity(rows.len());
            for row in &rows {
                found.push((
                    (
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                        row.try_get(5)?,
                        row.try_get(6)?,
                        row.try_get(7)?,
                        row.try_get(8)?,
                        row.try_get(9)?,
                        row.try_get(10)?,
                        row.try_get(11)?,
                        row.try_get(12)?,
                    ),
                    (
                        row.try_get(13)?,
                        row.try_get(14)?,
                        row.try_get(15)?,
                        row.try_get(16)?,
                        row.try_get(17)?,
                    ),
                ));
            }
            found
        });
        rows.into_iter()
            .map(|(r, t)| {
                Ok(LineRow {
                    position: to_u64(r.0, 0, "position")?,
                    provider_id: uuid(&r.1)?,
                    at_us: r.2,
                    entry_id: uuid(&r.3)?,
                    report_id: uuid(&r.4)?,
                    rental_id: uuid(&r.5)?,
                    from_gpu_seconds: to_u64(r.6, 0, "from_gpu_seconds")?,
                    to_gpu_seconds: to_u64(r.7, 0, "to_gpu_seconds")?,
                    price_per_gpu_hour: r.8,
                    gross: r.9,
                    fee: r.10,
                    net: r.11,
                    fee_bp: u32::try_from(r.12).map_err(corrupt)?,
                    through: sums(t)?,
                })
            })
            .collect()
    }

    /// The earnings projection's part of `audit verify`: folds the log up to the projection's
    /// checkpoint in memory, page by page, and compares every stored line (and, if the checkpoint
    /// did not move meanwhile, every provider's place in the fold) with the replay's. Stored lines
    /// up to a checkpoint never change, so this needs no snapshot shared with the ledger's part.
    pub(crate) async fn verify_earnings(&self, report: &mut AuditReport) -> Result<(), StoreError> {
        let store = self;
        use gpunex_domain::events::{RENTAL_STARTED, USAGE_METERED};
        use gpunex_projections::earnings_lines::{LineRow, Replay as EarningsReplay};

        let checkpoint = store.earnings_checkpoint().await?;
        let mut findings = Findings {
            kept: std::mem::take(&mut report.findings),
            omitted: report.findings_omitted,
        };
        let describe = |row: &LineRow| format!("{row:?}");
        let mut replay = EarningsReplay::default();
        let mut checked = 0;
        let mut after = 0;
        while after < checkpoint {
            let events = store.log_page_through(after, checkpoint).await?;
            let Some(last) = events.last().map(|e| e.position) else {
                break;
            };
            let mut projected = Vec::new();
            for event in &events {
                // An event that does not decode is reported by the log's part of the audit.
                if (event.event_type == USAGE_METERED || event.event_type == RENTAL_STARTED)
                    && let Ok(p) = event.to_projected()
                {
                    projected.push(p);
                }
            }
            let replayed = match replay.fold(&projected) {
                Ok(batch) => batch.lines,
                Err(error) => {
                    findings.push(AuditFinding::ProjectionFailed {
                        position: error.position(),
                        reason: format!("earnings: {error}"),
                    });
                    break;
                }
            };
            let stored = store.earnings_rows(after, last).await?;
            let mut stored_by: BTreeMap<u64, &LineRow> =
                stored.iter().map(|r| (r.position, r)).collect();
            for row in &replayed {
                match stored_by.remove(&row.position) {
                    Some(found) if found == row => {}
                    found => findings.push(AuditFinding::EarningsLineMismatch {
                        position: row.position,
                        stored: found.map(describe),
                        replayed: Some(describe(row)),
                    }),
                }
            }
            for (position, found) in stored_by {
                findings.push(AuditFinding::EarningsLineMismatch {
                    position,
                    stored: Some(describe(found)),
                    replayed: None,
                });
            }
            checked += replayed.len() as u64;
            after = last;
        }
        // Rows past the checkpoint would be rows without a committed checkpoint.
        let now = store.earnings_checkpoint().await?;
        for stray in store.earnings_rows(now, u64::MAX >> 1).await? {
            findings.push(AuditFinding::EarningsLineMismatch {
                position: stray.position,
                stored: Some(describe(&stray)),
                replayed: None,
            });
        }
        if now == checkpoint {
            let stored = store.earnings_all_cursors().await?;
            let replayed = replay.cursors();
            let mut providers: Vec<&uuid::Uuid> = stored.keys().chain(replayed.keys()).collect();
            providers.sort();
            providers.dedup();
            for provider in providers {
                let (a, b) = (stored.get(provider), replayed.get(provider));
                if a != b {
                    findings.push(AuditFinding::EarningsCursorMismatch {
                        provider_id: provider.to_string(),
                        stored: a.map(|c| format!("{c:?}")),
                        replayed: b.map(|c| format!("{c:?}")),
                    });
                }
            }
        }
        report.earnings_hours_checked = store
            .verify_earnings_hours(checkpoint, &mut findings)
            .await?;
        report.earnings_checkpoint = checkpoint;
        report.earnings_lines_checked = checked;
        report.findings = findings.kept;
        report.findings_omitted = findings.omitted;
        Ok(())
    }
}

impl Store {
    /// The hours' part of the earnings audit, provider by provider: every stored hour equals the
    /// hours the provider's stored lines folded by `checkpoint` make (the lines themselves are
    /// compared with the log by [`Store::verify_earnings`]); an hour holding lines folded after
    /// `checkpoint` (the live runner moved on) is left out. Holds one provider's hours at a time.
    /// Returns how many hours were compared.
    async fn verify_earnings_hours(
        &self,
        checkpoint: u64,
        findings: &mut Findings,
    ) -> Result<u64, StoreError> {
        const PAGE: usize = 10_000;
        let providers: Vec<String> = on_reader!(self, |conn| sqlx::query_scalar(
            "SELECT provider_id FROM earnings_providers UNION \
             SELECT DISTINCT provider_id FROM earnings_gpu_hours ORDER BY 1"
        )
        .fetch_all(conn)
        .await?);
        let mut checked = 0;
        for provider in providers {
            let provider_id = uuid(&provider)?;
            let mut made: BTreeMap<HourKey, HourSums> = BTreeMap::new();
            let range = LineRange::Positions {
                after: 0,
                through: checkpoint,
            };
            let mut after = 0;
            loop {
                let page = self.earnings_lines(provider_id, range, after, PAGE).await?;
                for line in &page {
                    let hour = HourLine {
                        provider_id,
                        at_us: line.at.unix_micros(),
                        position: line.position,
                        gross: line.gross.micros(),
                        fee: line.fee.micros(),
                        net: line.net.micros(),
                        gpu_seconds: line.to_gpu_seconds.saturating_sub(line.from_gpu_seconds),
                    };
                    if add_line_hours(&mut made, hour, &line.rental).is_none() {
                        findings.push(AuditFinding::ProjectionFailed {
                            position: line.position,
                            reason: "earnings hours: sums out of range".to_owned(),
                        });
                    }
                }
                match page.last() {
                    Some(last) if page.len() == PAGE => after = last.position,
                    _ => break,
                }
            }
            let sql = format!(
                "SELECT {HOUR_KEY_COLUMNS}, {HOUR_SUM_COLUMNS} FROM earnings_gpu_hours \
                 WHERE provider_id = $1 ORDER BY hour_us, gpu_uuid, model_id"
            );
            type HourRow = (
                String,
                i64,
                String,
                String,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
            );
            let rows: Vec<HourRow> = on_reader!(self, |conn| {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(&provider)
                    .fetch_all(conn)
                    .await?
            });
            let mut stored: BTreeMap<HourKey, HourSums> = BTreeMap::new();
            for r in rows {
                stored.insert(
                    (provider_id, r.1, r.2, r.3),
                    HourSums {
                        gpu: Sums {
                            gross: r.4,
                            fee: r.5,
                            net: r.6,
                            gpu_seconds: to_u64(r.7, 0, "gpu_seconds")?,
                            lines: to_u64(r.8, 0, "gpu_lines")?,
                        },
                        model_net: r.9,
                        model_lines: to_u64(r.10, 0, "model_lines")?,
                        through_position: to_u64(r.11, 0, "through_position")?,
                    },
                );
            }
            let mut keys: Vec<&HourKey> = stored.keys().chain(made.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (a, b) = (stored.get(key), made.get(key));
                if a.is_some_and(|row| row.through_position > checkpoint) {
                    continue;
                }
                checked += 1;
                if a != b {
                    findings.push(AuditFinding::EarningsHourMismatch {
                        provider_id: provider.clone(),
                        hour: Timestamp::from_unix_micros(key.1).rfc3339(),
                        gpu_uuid: key.2.clone(),
                        model_id: key.3.clone(),
                        stored: a.map(|row| format!("{row:?}")),
                        replayed: b.map(|row| format!("{row:?}")),
                    });
                }
            }
        }
        Ok(checked)
    }
}

/// [`Store::earnings_sums_of`] on PostgreSQL.
async fn earnings_sums_of_postgres(
    pool: &sqlx::PgPool,
    providers: &[Uuid],
    from: Timestamp,
    until: Timestamp,
    as_of: u64,
) -> Result<Vec<Sums>, StoreError> {
    let mut ids = Vec::with_capacity(providers.len() * 2);
    let mut slots = Vec::with_capacity(providers.len() * 2);
    let mut befores = Vec::with_capacity(providers.len() * 2);
    for (i, provider) in providers.iter().enumerate() {
        for (end, before) in [(0, until), (1, from)] {
            ids.push(provider.to_string());
            slots.push(to_i64((i * 2 + end) as u64));
            befores.push(before.unix_micros());
        }
    }
    let rows: Vec<(i64, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT p.k, t.through_gross, t.through_fee, t.through_net, t.through_gpu_seconds, \
         t.through_lines FROM UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS p(provider_id, k, \
         before_us) CROSS JOIN LATERAL (SELECT through_gross, through_fee, through_net, \
         through_gpu_seconds, through_lines FROM earnings_lines e \
         WHERE e.provider_id = p.provider_id AND e.at_us < p.before_us AND e.position <= $4 \
         ORDER BY e.at_us DESC, e.position DESC LIMIT 1) AS t",
    )
    .bind(&ids)
    .bind(&slots)
    .bind(&befores)
    .bind(to_i64(as_of))
    .fetch_all(pool)
    .await?;
    let mut ends = vec![Sums::default(); providers.len() * 2];
    for (k, gross, fee, net, seconds, lines) in rows {
        let slot = usize::try_from(k)
            .ok()
            .and_then(|k| ends.get_mut(k))
            .ok_or_else(|| corrupt(format!("a lookup numbered {k}")))?;
        *slot = sums((gross, fee, net, seconds, lines))?;
    }
    Ok(ends.chunks(2).map(|pair| pair[0].minus(pair[1])).collect())
}

/// Disjoint ranges of lines read per statement of [`Store::earnings_figures`].
const SCANS_PER_STATEMENT: usize = 200;

/// Providers per statement of [`Store::earnings_sums_of`] on SQLite: two lookups and three
/// values each.
const PROVIDERS_PER_STATEMENT: usize = 100;

/// The most periods [`Store::earnings_figures`] reads at once (a quarter of days).
pub const SHARE_DAYS_MAX: usize = 92;

/// A group of identical lines of one rental: rental id, gross, fee, net, GPU-seconds, count.
type Group = (String, i64, i64, i64, i64, i64);

/// The distinct rental ids of groups, in the order first seen.
fn rental_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Result<Vec<Uuid>, StoreError> {
    let mut seen = std::collections::HashSet::new();
    let mut distinct: Vec<Uuid> = Vec::new();
    for id in ids {
        let id = uuid(id)?;
        if seen.insert(id) {
            distinct.push(id);
        }
    }
    Ok(distinct)
}

/// Groups of lines (ordered by rental) reduced per rental: each group's division among the
/// rental's GPUs computed once and counted as many times as the group has lines, which is
/// exactly the line-by-line split.
fn shares_of(
    groups: Vec<Group>,
    rentals: &HashMap<Uuid, Arc<RentalRef>>,
) -> Result<Vec<RentalShares>, StoreError> {
    let mut shares: Vec<RentalShares> = Vec::new();
    for (rental_id, gross, fee, net, seconds, count) in groups {
        let rental_id = uuid(&rental_id)?;
        let count = to_u64(count, 0, "count")?;
        let seconds = u64::try_from(seconds)
            .map_err(|_| corrupt(format!("rental {rental_id}: negative GPU-seconds")))?;
        if shares
            .last()
            .is_none_or(|s| s.rental.rental_id != rental_id)
        {
            let rental = rentals
                .get(&rental_id)
                .cloned()
                .ok_or_else(|| corrupt(format!("line of unknown rental {rental_id}")))?;
            let n = rental.gpu_uuids.len();
            shares.push(RentalShares {
                rental,
                totals: Sums::default(),
                gross: Split::of([], n),
                fee: Split::of([], n),
                gpu_seconds: Split::of([], n),
            });
        }
        let share = shares
            .last_mut()
            .ok_or_else(|| corrupt("no rental for a group"))?;
        let times = |amount: i64| {
            i64::try_from(count)
                .ok()
                .and_then(|c| amount.checked_mul(c))
                .ok_or_else(|| corrupt(format!("rental {rental_id}: sums out of range")))
        };
        share.totals.add_sums(Sums {
            gross: times(gross)?,
            fee: times(fee)?,
            net: times(net)?,
            gpu_seconds: seconds.saturating_mul(count),
            lines: count,
        });
        share.gross.add(gross, count);
        share.fee.add(fee, count);
        share
            .gpu_seconds
            .add(i64::try_from(seconds).map_err(corrupt)?, count);
    }
    Ok(shares)
}
