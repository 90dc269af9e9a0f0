//! The stored rentals projection (`rentals`): its runner, its rebuild, its reads and its part of
//! `audit verify`. The fold is `gpunex_projections::rentals`; this module moves its rows.
//!
//! Memory keeps only open rentals (`gpunex_projections::market::Market`); a rental that is over
//! is read here. A read first makes sure the projection has folded the log up to the position
//! the caller's in-memory models are at ([`Store::rentals_reached`]); a row may be further
//! ahead (a rental's own state, never older than the caller's).

use std::collections::{BTreeMap, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::events::USAGE_METERED;
use gpunex_domain::metered_line::MeteredLine;
use gpunex_domain::time::Timestamp;
use gpunex_projections::RunReport;
use gpunex_projections::market::RentalState;
use gpunex_projections::rentals::{
    RENTALS, RentalsEvent, RentalsEventKind, Replay, fold_batch, needs,
};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport, Findings};
use crate::off_task::off_task;
use crate::pages::{Folded, PageFold, fold_pages};
use crate::sql::{MOVE_CHECKPOINT, placeholders, values};
use crate::{EventRow, Rebuilt, Store, StoreError, to_i64};

/// Ids bound per `IN (...)` list, and rows per multi-row upsert (7 parameters a row).
const ROWS_PER_STATEMENT: usize = 500;
/// `until_us` of a rental that has not ended.
const OPEN_UNTIL_US: i64 = i64::MAX;
/// Rows per page when `audit verify` reads the whole table.
const VERIFY_PAGE_ROWS: i64 = 5_000;

fn corrupt(reason: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow {
        position: 0,
        reason: format!("rentals projection: {reason}"),
    }
}

fn decode(state: &str) -> Result<RentalState, StoreError> {
    serde_json::from_str(state).map_err(corrupt)
}

/// Whether a stored event is one the fold reads: the events of rental streams.
fn is_rental_event(event_type: &str) -> bool {
    event_type.starts_with("rental.")
}

/// What the rentals fold reads of a rental event: of a usage event only its line
/// ([`MeteredLine::decode_json`], which leaves the postings to the ledger), of any other the
/// whole event.
fn rentals_event(event: &EventRow<'_>) -> Result<RentalsEvent, StoreError> {
    let kind = if event.event_type == USAGE_METERED {
        MeteredLine::decode_json(event.schema_version, event.payload)
            .map(RentalsEventKind::Metered)
            .map_err(|e| StoreError::CorruptRow {
                position: event.position,
                reason: e.to_string(),
            })?
    } else {
        match event.to_projected()?.event {
            DomainEvent::Rental(rental) => RentalsEventKind::Rental(rental),
            _ => {
                return Err(StoreError::CorruptRow {
                    position: event.position,
                    reason: format!("a {} event that decodes as another", event.event_type),
                });
            }
        }
    };
    Ok(RentalsEvent {
        position: event.position,
        stream_version: event.stream_version,
        event: kind,
    })
}

/// The rentals projection's page steps ([`crate::pages`]): the rentals a page changed are handed
/// to the next page's fold as they are.
struct RentalsPages<'a>(&'a Store);

impl PageFold for RentalsPages<'_> {
    type Item = RentalsEvent;
    type Batch = BTreeMap<Uuid, RentalState>;
    type Carried = HashMap<Uuid, RentalState>;

    fn store(&self) -> &Store {
        self.0
    }

    /// The rental events: a usage event only as its line.
    fn decode(event: &EventRow<'_>) -> Option<Result<RentalsEvent, StoreError>> {
        is_rental_event(event.event_type).then(|| rentals_event(event))
    }

    async fn fold(
        &self,
        projected: Vec<RentalsEvent>,
        carried: &Self::Carried,
    ) -> Result<Self::Batch, StoreError> {
        let (carried_ids, ids): (Vec<Uuid>, Vec<Uuid>) = needs(&projected)
            .into_iter()
            .partition(|id| carried.contains_key(id));
        let mut before = self.0.stored_rentals(&ids).await?;
        before.extend(
            carried_ids
                .iter()
                .filter_map(|id| carried.get(id).map(|state| (*id, state.clone()))),
        );
        off_task(move || Ok(fold_batch(&projected, &before)?)).await
    }

    fn carry(carried: &mut Self::Carried, changed: &Self::Batch, limit: usize) {
        if carried.len() >= limit {
            carried.clear();
        }
        carried.extend(changed.iter().map(|(id, state)| (*id, state.clone())));
    }

    async fn commit(&self, changed: Self::Batch, from: u64, to: u64) -> Result<(), StoreError> {
        self.0.commit_rentals(&changed, from, to).await
    }
}

impl Store {
    /// How far the rentals projection has folded the log.
    pub async fn rentals_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(RENTALS).await
    }

    /// Folds every event after the rentals checkpoint, one transaction per batch, and returns
    /// when there is nothing left. Another process doing the same is harmless: a batch moves
    /// the checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub async fn catch_up_rentals(&self) -> Result<RunReport, StoreError> {
        Ok(self.fold_rentals().await?.report)
    }

    async fn fold_rentals(&self) -> Result<Folded, StoreError> {
        fold_pages(self.rentals_checkpoint().await?, &RentalsPages(self)).await
    }

    /// Whether the rentals projection has folded the log up to `position`; if not, folds what
    /// is missing here and now (a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub async fn rentals_reached(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, RENTALS, &self.inner.rentals_fold, position, || {
            self.catch_up_rentals()
        })
        .await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_rentals(&self) -> Result<RunReport, StoreError> {
        let _folding = self.inner.rentals_fold.lock().await;
        self.catch_up_rentals().await
    }

    async fn commit_rentals(
        &self,
        changed: &BTreeMap<Uuid, RentalState>,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        let rows: Vec<(&RentalState, String)> = changed
            .values()
            .map(|state| Ok((state, serde_json::to_string(state).map_err(corrupt)?)))
            .collect::<Result<_, StoreError>>()?;
        in_transaction!(self, |tx| {
            let moved = sqlx::query(MOVE_CHECKPOINT)
                .bind(to_i64(to))
                .bind(now)
                .bind(RENTALS)
                .bind(to_i64(from))
                .execute(&mut *tx)
                .await?;
            if moved.rows_affected() != 1 {
                return Err(StoreError::CheckpointMoved {
                    projection: RENTALS.to_owned(),
                    expected: from,
                });
            }
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "INSERT INTO rentals (rental_id, renter_id, model_id, started_at_us, \
                     until_us, stream_version, state) VALUES {} ON CONFLICT (rental_id) DO UPDATE \
                     SET until_us = excluded.until_us, stream_version = excluded.stream_version, \
                     state = excluded.state",
                    values(self.backend(), chunk.len(), 7)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (state, json) in chunk {
                    let started = &state.started;
                    query = query
                        .bind(started.rental_id.to_string())
                        .bind(started.renter_id.to_string())
                        .bind(started.model_id.clone())
                        .bind(started.started_at.unix_micros())
                        .bind(
                            state
                                .ended
                                .as_ref()
                                .map_or(OPEN_UNTIL_US, |e| e.ended_at.unix_micros()),
                        )
                        .bind(to_i64(state.stream_version))
                        .bind(json.as_str());
                }
                query.execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Empties the rentals projection and sets its checkpoint to 0 in one transaction, then
    /// folds the log again.
    pub async fn rebuild_rentals(&self) -> Result<Rebuilt, StoreError> {
        Rebuilt::timed(async {
            let folding = self.inner.rentals_fold.lock().await;
            self.empty_projection(RENTALS, &["rentals"]).await?;
            let folded = self.fold_rentals().await?;
            // The live runner may fold again while the tables are vacuumed.
            drop(folding);
            self.settle_tables(&["rentals"]).await?;
            Ok((folded.report.checkpoint, folded.times))
        })
        .await
    }

    /// The stored rentals with these ids (absent ids are not in the map).
    pub async fn stored_rentals(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, RentalState>, StoreError> {
        let mut found = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT state FROM rentals WHERE rental_id IN ({})",
                placeholders(self.backend(), chunk.len())
            );
            let rows: Vec<String> = on_reader!(self, |conn| {
                let mut query = sqlx::query_scalar(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.fetch_all(conn).await?
            });
            for row in rows {
                let state = decode(&row)?;
                found.insert(state.started.rental_id, state);
            }
        }
        Ok(found)
    }

    /// One rental, as folded by `as_of` at least.
    pub async fn stored_rental(
        &self,
        rental_id: Uuid,
        as_of: u64,
    ) -> Result<Option<RentalState>, StoreError> {
        self.rentals_reached(as_of).await?;
        Ok(self.stored_rentals(&[rental_id]).await?.remove(&rental_id))
    }

    /// A renter's rentals, newest first (rental ids are time-ordered), at most `limit`, those
    /// older than `before` when given (keyset paging), as folded by `as_of` at least.
    pub async fn renter_rentals(
        &self,
        renter_id: Uuid,
        before: Option<Uuid>,
        limit: u32,
        as_of: u64,
    ) -> Result<Vec<RentalState>, StoreError> {
        self.rentals_reached(as_of).await?;
        let before = before.map_or_else(|| "~".to_owned(), |id| id.to_string());
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM rentals WHERE renter_id = $1 AND rental_id < $2 \
                 ORDER BY rental_id DESC LIMIT $3",
            )
            .bind(renter_id.to_string())
            .bind(before)
            .bind(i64::from(limit))
            .fetch_all(conn)
            .await?
        });
        rows.iter().map(|row| decode(row)).collect()
    }

    /// The rentals of a model that had not ended before `from` (still running, or ended at or
    /// after it), in id order, as folded by `as_of` at least. One index range from `from`: the
    /// history before it is not read.
    pub async fn model_rentals_since(
        &self,
        model_id: &str,
        from: Timestamp,
        as_of: u64,
    ) -> Result<Vec<RentalState>, StoreError> {
        self.rentals_reached(as_of).await?;
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM rentals WHERE model_id = $1 AND until_us >= $2 \
                 ORDER BY rental_id",
            )
            .bind(model_id)
            .bind(from.unix_micros())
            .fetch_all(conn)
            .await?
        });
        rows.iter().map(|row| decode(row)).collect()
    }

    /// Every stored rental with an id after `after`, in id order, one page.
    async fn rentals_page(&self, after: &str) -> Result<Vec<(String, i64, String)>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT rental_id, until_us, state FROM rentals WHERE rental_id > $1 \
                 ORDER BY rental_id LIMIT $2",
            )
            .bind(after)
            .bind(VERIFY_PAGE_ROWS)
            .fetch_all(conn)
            .await?
        }))
    }

    /// The rentals projection's part of `audit verify`: folds the log up to the checkpoint in
    /// memory and compares every stored row with the replay's. Rows change while the
    /// projection moves, so the findings count only if the checkpoint did not move while the
    /// rows were read (otherwise `rentals_checked` is 0: run it again, or with the server stopped).
    pub(crate) async fn verify_rentals(&self, report: &mut AuditReport) -> Result<(), StoreError> {
        let checkpoint = self.rentals_checkpoint().await?;
        let mut findings = Findings {
            kept: std::mem::take(&mut report.findings),
            omitted: report.findings_omitted,
        };
        let mut replay = Replay::default();
        let mut after = 0;
        let mut failed = false;
        while after < checkpoint {
            let events = self.log_page_through(after, checkpoint).await?;
            let Some(last) = events.last().map(|e| e.position) else {
                break;
            };
            // An event that does not decode is reported by the log's part of the audit.
            let projected: Vec<_> = events
                .iter()
                .filter(|e| is_rental_event(&e.event_type))
                .filter_map(|e| e.to_projected().ok())
                .collect();
            if let Err(error) = replay.fold(&projected) {
                findings.push(AuditFinding::ProjectionFailed {
                    position: error.position(),
                    reason: format!("rentals: {error}"),
                });
                failed = true;
                break;
            }
            after = last;
        }
        let mut checked = 0;
        let mut row_findings = Vec::new();
        if !failed {
            let mut replayed: BTreeMap<String, &RentalState> = replay
                .rentals()
                .iter()
                .map(|(id, state)| (id.to_string(), state))
                .collect();
            let describe = |state: &RentalState| format!("{state:?}");
            let mut cursor = String::new();
            loop {
                let page = self.rentals_page(&cursor).await?;
                let Some(last) = page.last().map(|r| r.0.clone()) else {
                    break;
                };
                for (id, until_us, json) in page {
                    let expected = replayed.remove(&id);
                    let stored = decode(&json).ok();
                    let column_ok = stored.as_ref().is_some_and(|s| {
                        until_us
                            == s.ended
                                .as_ref()
                                .map_or(OPEN_UNTIL_US, |e| e.ended_at.unix_micros())
                    });
                    if expected != stored.as_ref() || !column_ok {
                        row_findings.push(AuditFinding::RentalMismatch {
                            rental_id: id,
                            stored: Some(stored.as_ref().map_or(json.clone(), describe)),
                            replayed: expected.map(&describe),
                        });
                    }
                    checked += 1;
                }
                cursor = last;
            }
            for (id, state) in replayed {
                row_findings.push(AuditFinding::RentalMismatch {
                    rental_id: id,
                    stored: None,
                    replayed: Some(describe(state)),
                });
            }
        }
        if self.rentals_checkpoint().await? == checkpoint {
            for finding in row_findings {
                findings.push(finding);
            }
        } else {
            // Another runner moved it meanwhile: the rows are ahead of the replay.
            checked = 0;
        }
        report.rentals_checkpoint = checkpoint;
        report.rentals_checked = checked;
        report.findings = findings.kept;
        report.findings_omitted = findings.omitted;
        Ok(())
    }
}
