//! The stored earnings projection (`earnings_line_runs`, `earnings_rentals`,
//! `earnings_providers`, `earnings_hours`): its runner, its rebuild and its reads. The fold is
//! `gpunex_projections::earnings_lines`; the lines' stored form is [`crate::earnings_runs`]
//! (ADR 0013), the hours' [`crate::earnings_hours`] (ADR 0017); this module moves the rows. The SQL uses `$N` placeholders on both databases.
//!
//! Every read takes the log position it is `as of` and returns exactly what the fold of the log
//! up to that position says, provided the projection's checkpoint has reached it
//! ([`Store::earnings_reached`]), so a reader can combine it with in-memory state folded to the
//! same position.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use gpunex_domain::DomainEvent;
use gpunex_domain::events::{RENTAL_STARTED, USAGE_METERED};
use gpunex_domain::metered_line::MeteredLine;
use gpunex_domain::money::Usdc;
use gpunex_domain::rental::RentalEvent;
use gpunex_domain::time::Timestamp;
use gpunex_projections::RunReport;
use gpunex_projections::earnings::{Figures, Line, RentalRef, RentalShares, Split, Sums};
use gpunex_projections::earnings_lines::{
    Before, Cursor, EARNINGS, EarningsBatch, EarningsEvent, EarningsEventKind, HOUR_US, HourKey,
    HourLine, HourSums, LineRow, add_line_hours, fold_batch, hour_of, hour_rows, keep_open_hours,
    needs, open_hour,
};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport, Findings};
use crate::earnings_hours::{HOUR_COLUMNS, HourRow, HourTuple, decode_hour, hour_keys, hours_of};
use crate::earnings_runs::{RUN_COLUMNS, RunRow, RunTuple, decode_run, runs_of};
use crate::off_task::off_task;
use crate::pages::{Folded, PageFold, fold_pages};
use crate::sql::{Binds, MOVE_CHECKPOINT, placeholders, values};
use crate::timing::CatchUpTimes;
use crate::{Backend, EventRow, Rebuilt, Store, StoreError, to_i64, to_u64};

/// Ids bound per `IN (...)` list, and rows per multi-row `INSERT` (12 parameters an hour row:
/// 3,000 per statement, under SQLite's 32,766).
const ROWS_PER_STATEMENT: usize = 250;

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

/// A page's hours written whole over the stored ones (a page's fold starts each hour it adds
/// to from the stored rows; a page's keys are distinct, so no statement writes a row twice,
/// which PostgreSQL refuses).
const HOUR_REPLACE: &str = "ON CONFLICT (provider_id, hour_us) DO UPDATE SET through_position = excluded.through_position, \
     gpus = excluded.gpus";
/// The tables of the earnings projection, emptied together by a rebuild.
const EARNINGS_TABLES: [&str; 4] = [
    "earnings_line_runs",
    "earnings_rentals",
    "earnings_providers",
    "earnings_hours",
];

const THROUGH_COLUMNS: &str =
    "through_gross, through_fee, through_net, through_gpu_seconds, through_lines";

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

/// The statements that write a page of the earnings projection, for `rows` rows, shared by the
/// store's writer and the rebuild's rusqlite connection (both read `?` and `$N` placeholders).
fn insert_rentals_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_rentals (rental_id, renter_id, provider_id, machine_id, model_id, \
         gpu_uuids) VALUES {} ON CONFLICT (rental_id) DO NOTHING",
        values(backend, rows, 6)
    )
}

fn insert_runs_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_line_runs ({RUN_COLUMNS}) VALUES {}",
        values(backend, rows, 11)
    )
}

fn replace_hours_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_hours ({HOUR_COLUMNS}) VALUES {} {HOUR_REPLACE}",
        values(backend, rows, 4)
    )
}

/// An upsert of `rows` providers' cursors (a page's keys are distinct, so no row is updated
/// twice by one statement).
fn upsert_providers_sql(backend: Backend, rows: usize) -> String {
    format!(
        "INSERT INTO earnings_providers (provider_id, last_at_us, through_gross, through_fee, \
         through_net, through_gpu_seconds, through_lines) VALUES {} \
         ON CONFLICT (provider_id) DO UPDATE SET \
         last_at_us = excluded.last_at_us, through_gross = excluded.through_gross, \
         through_fee = excluded.through_fee, through_net = excluded.through_net, \
         through_gpu_seconds = excluded.through_gpu_seconds, through_lines = excluded.through_lines",
        values(backend, rows, 7)
    )
}

/// A page's hours written over the stored ones, the way each database takes many rows best.
trait WriteHours {
    fn write_hours(
        &mut self,
        hours: &[HourRow],
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send;
}

impl WriteHours for sqlx::SqliteConnection {
    /// Multi-row upserts of [`ROWS_PER_STATEMENT`] rows.
    async fn write_hours(&mut self, hours: &[HourRow]) -> Result<(), StoreError> {
        for chunk in hours.chunks(ROWS_PER_STATEMENT) {
            let sql = replace_hours_sql(Backend::Sqlite, chunk.len());
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for hour in chunk {
                query = query
                    .bind(hour.provider_id.to_string())
                    .bind(hour.hour_us)
                    .bind(to_i64(hour.through_position))
                    .bind(hour.gpus.as_slice());
            }
            query.execute(&mut *self).await?;
        }
        Ok(())
    }
}

impl WriteHours for sqlx::PgConnection {
    /// One `INSERT ... SELECT * FROM UNNEST(...)` of one array per column: 4 parameters for the
    /// page rather than 4 a row.
    async fn write_hours(&mut self, hours: &[HourRow]) -> Result<(), StoreError> {
        if hours.is_empty() {
            return Ok(());
        }
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO earnings_hours ({HOUR_COLUMNS}) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bytea[]) \
             {HOUR_REPLACE}"
        )))
        .bind(
            hours
                .iter()
                .map(|h| h.provider_id.to_string())
                .collect::<Vec<String>>(),
        )
        .bind(hours.iter().map(|h| h.hour_us).collect::<Vec<i64>>())
        .bind(
            hours
                .iter()
                .map(|h| to_i64(h.through_position))
                .collect::<Vec<i64>>(),
        )
        .bind(
            hours
                .iter()
                .map(|h| h.gpus.as_slice())
                .collect::<Vec<&[u8]>>(),
        )
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

/// A folded page as written: the fold's rentals and cursors, its lines encoded as runs
/// ([`crate::earnings_runs`]) and its hours as rows ([`crate::earnings_hours`]), encoded in the
/// fold's stage of the pipeline, not the writer's. The batch keeps its hours for the next
/// page's fold ([`Carried`]).
#[derive(Debug)]
struct Page {
    batch: EarningsBatch,
    runs: Vec<RunRow>,
    hours: Vec<HourRow>,
}

impl Page {
    fn of(mut batch: EarningsBatch) -> Result<Page, StoreError> {
        let runs = runs_of(&batch.lines)?;
        let hours = hours_of(&batch.hours)?;
        batch.lines = Vec::new();
        Ok(Page { batch, runs, hours })
    }
}

/// What the pages' batches wrote that the next page's fold reads: the rentals they started, and
/// their providers' cursors and open hours, the latest of each ([`PageFold::carry`]).
#[derive(Debug, Default)]
struct Carried {
    rentals: HashMap<Uuid, RentalRef>,
    cursors: HashMap<Uuid, Cursor>,
    /// The GPU rows of each carried provider's open hour.
    hours: BTreeMap<HourKey, HourSums>,
}

impl Carried {
    fn add(&mut self, page: &Page, limit: usize) {
        if self.rentals.len() + self.cursors.len() + self.hours.len() >= limit {
            *self = Carried::default();
        }
        let batch = &page.batch;
        self.rentals
            .extend(batch.rentals.iter().map(|r| (r.rental_id, r.clone())));
        self.cursors
            .extend(batch.cursors.iter().map(|(id, c)| (*id, *c)));
        keep_open_hours(&mut self.hours, batch);
    }
}

/// What the earnings fold reads of a stored event, if it reads any: of a usage event only its
/// line ([`MeteredLine::decode_json`], which leaves the postings to the ledger), of a rental's
/// start the whole event.
fn earnings_event(event: &EventRow<'_>) -> Option<Result<EarningsEvent, StoreError>> {
    let read = |kind: Result<EarningsEventKind, StoreError>| {
        kind.map(|kind| EarningsEvent {
            position: event.position,
            recorded_at_us: event.recorded_at_us,
            event: kind,
        })
    };
    match event.event_type {
        USAGE_METERED => Some(read(
            MeteredLine::decode_json(event.schema_version, event.payload)
                .map(EarningsEventKind::Metered)
                .map_err(|e| StoreError::CorruptRow {
                    position: event.position,
                    reason: e.to_string(),
                }),
        )),
        RENTAL_STARTED => Some(read(event.to_projected().and_then(
            |projected| match projected.event {
                DomainEvent::Rental(RentalEvent::Started(started)) => {
                    Ok(EarningsEventKind::Started(Box::new(started)))
                }
                _ => Err(StoreError::CorruptRow {
                    position: event.position,
                    reason: "a rental.started event that decodes as another".to_owned(),
                }),
            },
        ))),
        _ => None,
    }
}

/// The earnings projection's page steps ([`crate::pages`]).
struct EarningsPages<'a> {
    store: &'a Store,
    writes: Writes,
}

impl PageFold for EarningsPages<'_> {
    type Item = EarningsEvent;
    type Batch = Page;
    type Carried = Carried;

    fn store(&self) -> &Store {
        self.store
    }

    /// What the fold reads of the rental starts and usage events.
    fn decode(event: &EventRow<'_>) -> Option<Result<EarningsEvent, StoreError>> {
        earnings_event(event)
    }

    async fn fold(
        &self,
        projected: Vec<EarningsEvent>,
        carried: &Carried,
    ) -> Result<Page, StoreError> {
        self.store.fold_earnings(projected, carried).await
    }

    fn carry(carried: &mut Carried, page: &Page, limit: usize) {
        carried.add(page, limit);
    }

    async fn commit(&self, page: Page, from: u64, to: u64) -> Result<(), StoreError> {
        self.store
            .commit_earnings(page, from, to, self.writes)
            .await
    }
}

/// [`Store::commit_earnings`] on a rusqlite connection: the same rows, statements and checkpoint
/// move as the sqlx path, in one `BEGIN IMMEDIATE` transaction.
fn write_page_sqlite(
    conn: &mut rusqlite::Connection,
    page: &Page,
    from: u64,
    to: u64,
    now: i64,
) -> Result<(), StoreError> {
    let batch = &page.batch;
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
            .prepare_cached(&insert_runs_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
        for run in &page.runs {
            insert
                .execute(params![
                    run.provider_id.to_string(),
                    to_i64(run.first_position),
                    to_i64(run.last_position),
                    run.first_at_us,
                    run.last_at_us,
                    run.before.gross,
                    run.before.fee,
                    run.before.net,
                    to_i64(run.before.gpu_seconds),
                    to_i64(run.before.lines),
                    run.lines,
                ])
                .map_err(bulk_error)?;
        }
        let mut replace = tx
            .prepare_cached(&replace_hours_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
        for hour in &page.hours {
            replace
                .execute(params![
                    hour.provider_id.to_string(),
                    hour.hour_us,
                    to_i64(hour.through_position),
                    hour.gpus,
                ])
                .map_err(bulk_error)?;
        }
        let mut upsert = tx
            .prepare_cached(&upsert_providers_sql(Backend::Sqlite, 1))
            .map_err(bulk_error)?;
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

    /// Folds a page's decoded events with what it needs from before: from `carried` (the page
    /// before, maybe not committed yet), else from the tables. The fold and the encoding run
    /// off the catch-up's task ([`crate::off_task::off_task`]).
    async fn fold_earnings(
        &self,
        projected: Vec<EarningsEvent>,
        carried: &Carried,
    ) -> Result<Page, StoreError> {
        let (rentals, providers) = needs(&projected);
        let (carried_rentals, rentals): (Vec<Uuid>, Vec<Uuid>) = rentals
            .into_iter()
            .partition(|id| carried.rentals.contains_key(id));
        let (carried_providers, providers): (Vec<Uuid>, Vec<Uuid>) = providers
            .into_iter()
            .partition(|id| carried.cursors.contains_key(id));
        let (cursors, hours) = self.earnings_open_cursors(&providers).await?;
        let mut before = Before {
            rentals: self
                .earnings_rentals(&rentals)
                .await?
                .into_iter()
                .map(|r| (r.rental_id, r))
                .collect(),
            cursors,
            hours,
        };
        before.rentals.extend(
            carried_rentals
                .iter()
                .filter_map(|id| carried.rentals.get(id).map(|r| (*id, r.clone()))),
        );
        for id in &carried_providers {
            if let Some(cursor) = carried.cursors.get(id) {
                before.cursors.insert(*id, *cursor);
                let open = hour_rows(&carried.hours, *id, open_hour(cursor));
                before
                    .hours
                    .extend(open.map(|(key, sums)| (key.clone(), *sums)));
            }
        }
        off_task(move || Page::of(fold_batch(&projected, &before)?)).await
    }

    /// Writes `page` and moves the checkpoint from `from` to `to`, in one transaction.
    async fn commit_earnings(
        &self,
        page: Page,
        from: u64,
        to: u64,
        writes: Writes,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        if let (Writes::Bulk, crate::store::Db::Sqlite(db)) = (writes, &self.inner.db) {
            return db
                .rebuild_writer
                .run(move |conn| write_page_sqlite(conn, &page, from, to, now))
                .await;
        }
        let batch = &page.batch;
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
            for chunk in page.runs.chunks(ROWS_PER_STATEMENT) {
                let sql = insert_runs_sql(self.backend(), chunk.len());
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for run in chunk {
                    query = query
                        .bind(run.provider_id.to_string())
                        .bind(to_i64(run.first_position))
                        .bind(to_i64(run.last_position))
                        .bind(run.first_at_us)
                        .bind(run.last_at_us)
                        .bind(run.before.gross)
                        .bind(run.before.fee)
                        .bind(run.before.net)
                        .bind(to_i64(run.before.gpu_seconds))
                        .bind(to_i64(run.before.lines))
                        .bind(run.lines.as_slice());
                }
                query.execute(&mut *tx).await?;
            }
            WriteHours::write_hours(&mut *tx, &page.hours).await?;
            // Multi-row upserts: one round trip for a page's providers, not one each.
            let cursors: Vec<(&Uuid, &Cursor)> = batch.cursors.iter().collect();
            for chunk in cursors.chunks(ROWS_PER_STATEMENT) {
                let sql = upsert_providers_sql(self.backend(), chunk.len());
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (provider, cursor) in chunk {
                    query = query
                        .bind(provider.to_string())
                        .bind(cursor.last_at_us)
                        .bind(cursor.through.gross)
                        .bind(cursor.through.fee)
                        .bind(cursor.through.net)
                        .bind(to_i64(cursor.through.gpu_seconds))
                        .bind(to_i64(cursor.through.lines));
                }
                query.execute(&mut *tx).await?;
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
        let _folding = self.inner.earnings_fold.lock().await;
        let Folded { report, times } = self.fold_earnings_pages(Writes::Bulk).await?;
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

    /// These providers' cursors, with the stored GPU rows of each one's open hour (the hour of
    /// its last line, the only one its later lines can add to), in one statement (one
    /// snapshot): what a page's fold needs of the providers the pages before it did not touch.
    async fn earnings_open_cursors(
        &self,
        providers: &[Uuid],
    ) -> Result<(HashMap<Uuid, Cursor>, BTreeMap<HourKey, HourSums>), StoreError> {
        let mut cursors = HashMap::with_capacity(providers.len());
        let mut hours = BTreeMap::new();
        for chunk in providers.chunks(ROWS_PER_STATEMENT) {
            // The open hour: `last_at_us` rounded down to its hour, for either sign (`%` keeps
            // the dividend's sign on both databases).
            let sql = format!(
                "SELECT p.provider_id, p.last_at_us, p.through_gross, p.through_fee, \
                 p.through_net, p.through_gpu_seconds, p.through_lines, \
                 h.hour_us, h.through_position, h.gpus \
                 FROM earnings_providers p LEFT JOIN earnings_hours h \
                 ON h.provider_id = p.provider_id \
                 AND h.hour_us = p.last_at_us - ((p.last_at_us % {HOUR_US}) + {HOUR_US}) % {HOUR_US} \
                 WHERE p.provider_id IN ({})",
                placeholders(self.backend(), chunk.len())
            );
            type OpenRow = (
                String,
                i64,
                i64,
                i64,
                i64,
                i64,
                i64,
                Option<i64>,
                Option<i64>,
                Option<Vec<u8>>,
            );
            let rows: Vec<OpenRow> = on_reader!(self, |conn| {
                let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.fetch_all(conn).await?
            });
            for row in rows {
                let provider_id = uuid(&row.0)?;
                let cursor = Cursor {
                    last_at_us: row.1,
                    through: sums((row.2, row.3, row.4, row.5, row.6))?,
                };
                if let (Some(hour_us), Some(through), Some(gpus)) = (row.7, row.8, row.9) {
                    let hour = HourRow::of((row.0, hour_us, through, gpus))?;
                    if hour.hour_us != open_hour(&cursor) {
                        return Err(corrupt(format!(
                            "the open hour of provider {provider_id} read as {hour_us}"
                        )));
                    }
                    hours.extend(hour_keys(&hour)?);
                }
                cursors.insert(provider_id, cursor);
            }
        }
        Ok((cursors, hours))
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
    /// - each whole UTC hour of the range from the stored hours (`earnings_hours`, one row per
    ///   hour holding its GPU rows), summed per period, GPU and model: a month is at most 744
    ///   rows;
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

    /// The stored hours of a provider in `[lo, hi)` but the `cut` ones, as of `as_of`: the GPU
    /// rows of the hours whose lines were all folded by `as_of`, summed per period (of `edges`),
    /// GPU and model, and the other hours, from one statement (one snapshot).
    async fn earnings_hour_figures(
        &self,
        provider_id: Uuid,
        edges: &[i64],
        (lo, hi): (i64, i64),
        cut: &BTreeSet<i64>,
        as_of: u64,
    ) -> Result<(Vec<(usize, String, String, HourSums)>, BTreeSet<i64>), StoreError> {
        let periods = edges.len() - 1;
        let sql = format!(
            "SELECT {HOUR_COLUMNS} FROM earnings_hours \
             WHERE provider_id = $1 AND hour_us >= $2 AND hour_us < $3 ORDER BY hour_us"
        );
        let provider = provider_id.to_string();
        let rows: Vec<HourTuple> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                .bind(&provider)
                .bind(lo)
                .bind(hi)
                .fetch_all(conn)
                .await?
        });
        let rows = rows
            .into_iter()
            .map(HourRow::of)
            .collect::<Result<Vec<HourRow>, StoreError>>()?;
        // The hours holding lines folded after `as_of` are read from the lines, none of their
        // GPU rows summed (the lines give the whole hour).
        let mut newer_hours = BTreeSet::new();
        let mut summed: HashMap<(usize, &str, &str), HourSums> = HashMap::new();
        // A whole hour lies in one period: the first whose end is after it.
        let mut period = 0;
        for row in &rows {
            if cut.contains(&row.hour_us) {
                continue;
            }
            if row.through_position > as_of {
                newer_hours.insert(row.hour_us);
                continue;
            }
            while period + 1 < periods && row.hour_us >= edges[period + 1] {
                period += 1;
            }
            for gpu in decode_hour(row)? {
                let entry = summed
                    .entry((period, gpu.gpu_uuid, gpu.model_id))
                    .or_default();
                *entry = entry
                    .checked_add(&gpu.sums)
                    .ok_or_else(|| corrupt("an hour's sums out of range"))?;
            }
        }
        let mut summed_rows: Vec<(usize, String, String, HourSums)> = summed
            .into_iter()
            .map(|((period, gpu, model), sums)| {
                let sums = HourSums {
                    through_position: 0,
                    ..sums
                };
                (period, gpu.to_owned(), model.to_owned(), sums)
            })
            .collect();
        summed_rows.sort_unstable_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
        Ok((summed_rows, newer_hours))
    }

    /// A provider's lines folded by `as_of` and dated in the `intervals` (disjoint, in order,
    /// inside the range of `edges`), reduced per period of `edges` and per rental: the lines are
    /// grouped by rental and amounts (gross, fee, net, GPU-seconds), which repeat, and each
    /// group's division among the rental's GPUs is computed once and counted as many times as
    /// the group has lines, which is exactly the line-by-line split. Each interval is its own
    /// walk of the provider's runs.
    async fn earnings_line_shares(
        &self,
        provider_id: Uuid,
        edges: &[i64],
        intervals: &[(i64, i64)],
        as_of: u64,
    ) -> Result<Vec<Vec<RentalShares>>, StoreError> {
        let periods = edges.len() - 1;
        // (period, rental, gross, fee, net, GPU-seconds) -> how many lines.
        let mut groups: BTreeMap<(usize, Uuid, i64, i64, i64, i64), i64> = BTreeMap::new();
        for (from, until) in intervals {
            let span = LineSpan {
                after: 0,
                through: as_of,
                from: *from,
                until: *until,
            };
            for line in self.provider_lines(provider_id, span, usize::MAX).await? {
                // A line lies in the first period whose end is after it.
                let period = edges[1..periods]
                    .iter()
                    .position(|end| line.at_us < *end)
                    .unwrap_or(periods - 1);
                let seconds = to_i64(line.to_gpu_seconds) - to_i64(line.from_gpu_seconds);
                let key = (
                    period,
                    line.rental_id,
                    line.gross,
                    line.fee,
                    line.net,
                    seconds,
                );
                *groups.entry(key).or_default() += 1;
            }
        }
        let ids = rental_ids(groups.keys().map(|key| key.1));
        let rentals = self.earnings_rentals_by_id(&ids).await?;
        let mut per_period: Vec<Vec<Group>> = vec![Vec::new(); periods];
        for ((period, rental_id, gross, fee, net, seconds), count) in groups {
            per_period[period].push((rental_id, gross, fee, net, seconds, count));
        }
        per_period
            .into_iter()
            .map(|groups| shares_of(groups, &rentals))
            .collect()
    }

    /// Up to `limit` of a provider's lines in `span`, in position (and so date) order: from the
    /// run holding the first of them, the provider's runs read a few at a time (more each
    /// time), until a line past the span or `limit` lines. Runs only ever add later positions,
    /// so the reads need no shared snapshot.
    async fn provider_lines(
        &self,
        provider_id: Uuid,
        span: LineSpan,
        limit: usize,
    ) -> Result<Vec<LineRow>, StoreError> {
        let mut found = Vec::new();
        if limit == 0 || span.from >= span.until || span.after >= span.through {
            return Ok(found);
        }
        let provider = provider_id.to_string();
        // The first line after `after` is in the last run starting at or before it or a later
        // one; the first line dated at or after `from`, in the last run starting before it or a
        // later one. The walk starts at the later of those two runs.
        let start: Option<i64> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT MAX(first_position) FROM (\
                 SELECT first_position FROM (SELECT first_position FROM earnings_line_runs \
                 WHERE provider_id = $1 AND first_position <= $2 \
                 ORDER BY first_position DESC LIMIT 1) AS by_position \
                 UNION ALL \
                 SELECT first_position FROM (SELECT first_position FROM earnings_line_runs \
                 WHERE provider_id = $3 AND first_at_us < $4 \
                 ORDER BY first_at_us DESC, first_position DESC LIMIT 1) AS by_date) AS starts",
            )
            .bind(provider.as_str())
            .bind(to_i64(span.after))
            .bind(provider.as_str())
            .bind(span.from)
            .fetch_one(conn)
            .await?
        });
        let mut next = match start {
            Some(position) => to_u64(position, 0, "first_position")?,
            None => 0,
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM earnings_line_runs WHERE provider_id = $1 \
             AND first_position >= $2 ORDER BY first_position LIMIT $3"
        );
        let mut runs = RUNS_FIRST_READ;
        loop {
            let rows: Vec<RunTuple> = on_reader!(self, |conn| {
                sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(provider.as_str())
                    .bind(to_i64(next))
                    .bind(runs)
                    .fetch_all(conn)
                    .await?
            });
            let read = rows.len();
            for row in rows {
                let run = RunRow::of(row)?;
                next = run.first_position.saturating_add(1);
                for line in decode_run(&run)? {
                    if line.position > span.through || line.at_us >= span.until {
                        return Ok(found);
                    }
                    if line.position > span.after && line.at_us >= span.from {
                        found.push(line);
                        if found.len() == limit {
                            return Ok(found);
                        }
                    }
                }
            }
            if (read as i64) < runs {
                return Ok(found);
            }
            runs = (runs * 4).min(RUNS_PER_READ_MAX);
        }
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
            "SELECT {RUN_COLUMNS} FROM earnings_line_runs \
             WHERE provider_id = $1 AND first_at_us < $2 AND first_position <= $3 \
             ORDER BY first_at_us DESC, first_position DESC LIMIT 1"
        );
        let row: Option<RunTuple> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(provider_id.to_string())
                .bind(before.unix_micros())
                .bind(to_i64(as_of))
                .fetch_optional(conn)
                .await?
        });
        match row {
            None => Ok((Sums::default(), None)),
            Some(row) => {
                let (sums, position) = last_line(row, before.unix_micros(), as_of)?;
                Ok((sums, Some(position)))
            }
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
    /// two per provider: for each provider and end, the run holding its last line before the
    /// end, an index lookup each. SQLite reads them as one `UNION ALL` per
    /// [`PROVIDERS_PER_STATEMENT`] providers; PostgreSQL as one `LATERAL` lookup over the
    /// providers bound as arrays, a plan of constant size (a `UNION ALL` of 120 lookups costs
    /// more to plan than to run, on each connection's first executions). Sums in the order of
    /// `providers`.
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
            let mut befores = Vec::with_capacity(chunk.len() * 2);
            for (i, provider) in chunk.iter().enumerate() {
                for (end, before) in [(0, until), (1, from)] {
                    befores.push(before.unix_micros());
                    lookups.push(format!(
                        "SELECT CAST({} AS BIGINT) AS k, t.* FROM (SELECT {RUN_COLUMNS} \
                         FROM earnings_line_runs WHERE provider_id = {} AND first_at_us < {} \
                         AND first_position <= {} \
                         ORDER BY first_at_us DESC, first_position DESC LIMIT 1) AS t",
                        i * 2 + end,
                        binds.text(provider.to_string()),
                        binds.int(before.unix_micros()),
                        binds.int(to_i64(as_of)),
                    ));
                }
            }
            let sql = lookups.join(" UNION ALL ");
            let rows: Vec<LookupRow> = on_reader!(self, |conn| {
                // Only placeholders, column names and indexes are formatted in.
                bind_all!(sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())), binds)
                    .fetch_all(conn)
                    .await?
            });
            found.extend(sums_of_lookups(rows, &befores, as_of)?);
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
            "SELECT {RUN_COLUMNS} FROM earnings_line_runs \
             WHERE provider_id = $1 AND first_position <= $2 \
             ORDER BY first_position DESC LIMIT 1"
        );
        let row: Option<RunTuple> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(provider_id.to_string())
                .bind(to_i64(position))
                .fetch_optional(conn)
                .await?
        });
        match row {
            None => Ok(Sums::default()),
            Some(row) => Ok(last_line(row, i64::MAX, position)?.0),
        }
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
        let span = match range {
            LineRange::Dated { from, until, as_of } => LineSpan {
                after,
                through: as_of,
                from: from.unix_micros(),
                until: until.unix_micros(),
            },
            LineRange::Positions {
                after: range_after,
                through,
            } => LineSpan {
                after: range_after.max(after),
                through,
                from: i64::MIN,
                until: i64::MAX,
            },
        };
        let rows = self.provider_lines(provider_id, span, limit).await?;
        let ids = rental_ids(rows.iter().map(|r| r.rental_id));
        let rentals = self.earnings_rentals_by_id(&ids).await?;
        rows.into_iter()
            .map(|r| {
                Ok(Line {
                    position: r.position,
                    at: Timestamp::from_unix_micros(r.at_us),
                    entry_id: r.entry_id,
                    report_id: r.report_id,
                    rental: rentals.get(&r.rental_id).cloned().ok_or_else(|| {
                        corrupt(format!("line of unknown rental {}", r.rental_id))
                    })?,
                    from_gpu_seconds: r.from_gpu_seconds,
                    to_gpu_seconds: r.to_gpu_seconds,
                    price_per_gpu_hour: Usdc::from_micros(r.price_per_gpu_hour),
                    gross: Usdc::from_micros(r.gross),
                    fee: Usdc::from_micros(r.fee),
                    net: Usdc::from_micros(r.net),
                    fee_bp: r.fee_bp,
                })
            })
            .collect()
    }

    /// Every stored run whose first line is at a position in `(after, through]`, in position
    /// order: what `audit verify` compares with the replay.
    async fn earnings_runs_between(
        &self,
        after: u64,
        through: u64,
    ) -> Result<Vec<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM earnings_line_runs \
             WHERE first_position > $1 AND first_position <= $2 ORDER BY first_position"
        );
        let rows: Vec<RunTuple> = on_reader!(self, |conn| {
            sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(to_i64(after))
                .bind(to_i64(through))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(RunRow::of).collect()
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
        // A stored line is keyed by its position; a second line at the same position (runs that
        // overlap) is a finding.
        let stored_line =
            |findings: &mut Findings, pending: &mut BTreeMap<u64, LineRow>, line: LineRow| {
                if let Some(twice) = pending.insert(line.position, line) {
                    findings.push(AuditFinding::EarningsLineMismatch {
                        position: twice.position,
                        stored: Some(format!("a second line: {twice:?}")),
                        replayed: None,
                    });
                }
            };
        let mut pending: BTreeMap<u64, LineRow> = BTreeMap::new();
        // Runs starting at or before this position have been read.
        let mut read_to = 0;
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
            for run in store.earnings_runs_between(read_to, last).await? {
                for line in decode_run(&run)? {
                    stored_line(&mut findings, &mut pending, line);
                }
            }
            read_to = last;
            for row in &replayed {
                match pending.remove(&row.position) {
                    Some(found) if found == *row => {}
                    found => findings.push(AuditFinding::EarningsLineMismatch {
                        position: row.position,
                        stored: found.as_ref().map(describe),
                        replayed: Some(describe(row)),
                    }),
                }
            }
            // Stored lines of this page that the replay does not have; later ones (of a run
            // that goes on past the page) wait for their page.
            let later = pending.split_off(&last.saturating_add(1));
            for (position, found) in std::mem::replace(&mut pending, later) {
                findings.push(AuditFinding::EarningsLineMismatch {
                    position,
                    stored: Some(describe(&found)),
                    replayed: None,
                });
            }
            checked += replayed.len() as u64;
            after = last;
        }
        // Lines up to the checkpoint that no event made, and lines past where the checkpoint is
        // now, which would be lines without a committed checkpoint (the live runner may have
        // folded the ones in between since the audit started).
        let now = store.earnings_checkpoint().await?;
        for run in store.earnings_runs_between(read_to, u64::MAX >> 1).await? {
            for line in decode_run(&run)? {
                stored_line(&mut findings, &mut pending, line);
            }
        }
        for (position, stray) in pending {
            if position <= checkpoint || position > now {
                findings.push(AuditFinding::EarningsLineMismatch {
                    position,
                    stored: Some(describe(&stray)),
                    replayed: None,
                });
            }
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
             SELECT DISTINCT provider_id FROM earnings_hours ORDER BY 1"
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
                "SELECT {HOUR_COLUMNS} FROM earnings_hours WHERE provider_id = $1 ORDER BY hour_us"
            );
            let rows: Vec<HourTuple> = on_reader!(self, |conn| {
                sqlx::query_as(sqlx::AssertSqlSafe(sql))
                    .bind(&provider)
                    .fetch_all(conn)
                    .await?
            });
            let mut stored: BTreeMap<HourKey, HourSums> = BTreeMap::new();
            for row in rows {
                stored.extend(hour_keys(&HourRow::of(row)?)?);
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
    let rows: Vec<LookupRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT p.k, t.* FROM UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS p(provider_id, k, \
         before_us) CROSS JOIN LATERAL (SELECT {RUN_COLUMNS} FROM earnings_line_runs e \
         WHERE e.provider_id = p.provider_id AND e.first_at_us < p.before_us \
         AND e.first_position <= $4 ORDER BY e.first_at_us DESC, e.first_position DESC LIMIT 1) \
         AS t"
    )))
    .bind(&ids)
    .bind(&slots)
    .bind(&befores)
    .bind(to_i64(as_of))
    .fetch_all(pool)
    .await?;
    sums_of_lookups(rows, &befores, as_of)
}

/// A lookup's number (`2 i` for provider `i`'s end of range, `2 i + 1` for its start) and the
/// run it found.
type LookupRow = (
    i64,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Vec<u8>,
);

/// Each provider's sums between its two ends, from the runs the lookups found (a lookup that
/// found none: no line before that end). `befores`: each lookup's end, by number.
fn sums_of_lookups(
    rows: Vec<LookupRow>,
    befores: &[i64],
    as_of: u64,
) -> Result<Vec<Sums>, StoreError> {
    let mut ends = vec![Sums::default(); befores.len()];
    for (k, provider, p1, p2, a1, a2, g, f, n, s, l, lines) in rows {
        let slot = usize::try_from(k)
            .ok()
            .filter(|k| *k < befores.len())
            .ok_or_else(|| corrupt(format!("a lookup numbered {k}")))?;
        let run = (provider, p1, p2, a1, a2, g, f, n, s, l, lines);
        ends[slot] = last_line(run, befores[slot], as_of)?.0;
    }
    Ok(ends.chunks(2).map(|pair| pair[0].minus(pair[1])).collect())
}

/// The running sums through the last line of a run dated before `before` at a position up to
/// `through`, and that line's position. The run was read as the last one whose first line is
/// such a line, so it has one.
fn last_line(row: RunTuple, before: i64, through: u64) -> Result<(Sums, u64), StoreError> {
    let run = RunRow::of(row)?;
    decode_run(&run)?
        .into_iter()
        .take_while(|line| line.at_us < before && line.position <= through)
        .last()
        .map(|line| (line.through, line.position))
        .ok_or_else(|| {
            corrupt(format!(
                "the run at {} holds no line it was read for",
                run.first_position
            ))
        })
}

/// Which of a provider's lines a walk returns: at positions in `(after, through]` and dated in
/// `[from, until)`.
#[derive(Debug, Clone, Copy)]
struct LineSpan {
    after: u64,
    through: u64,
    from: i64,
    until: i64,
}

/// Runs a walk of a provider's lines reads first, and at most at a time: a live batch's run
/// may hold one line, a rebuild's hundreds.
const RUNS_FIRST_READ: i64 = 16;
const RUNS_PER_READ_MAX: i64 = 1_024;

/// Providers per statement of [`Store::earnings_sums_of`] on SQLite: two lookups and three
/// values each.
const PROVIDERS_PER_STATEMENT: usize = 100;

/// The most periods [`Store::earnings_figures`] reads at once (a quarter of days).
pub const SHARE_DAYS_MAX: usize = 92;

/// A group of identical lines of one rental: rental id, gross, fee, net, GPU-seconds, count.
type Group = (Uuid, i64, i64, i64, i64, i64);

/// The distinct rental ids, in the order first seen.
fn rental_ids(ids: impl Iterator<Item = Uuid>) -> Vec<Uuid> {
    let mut seen = std::collections::HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
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
