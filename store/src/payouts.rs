//! The stored payouts projection (`payouts`, `payout_batches`): its runner, its rebuild, its
//! reads and its part of `audit verify`. The fold is `gpunex_projections::payout_history`; this
//! module moves its rows.
//!
//! Memory keeps only open payouts and batch heads (`gpunex_projections::payouts::PayoutBook`);
//! a payout that is over, a provider's history and a batch's payouts, balances rolled forward
//! and files are read here. A read first makes sure the projection has folded the log up to the
//! position the caller's in-memory models are at ([`Store::payouts_reached`]); a row may be
//! further ahead (its own state, never older than the caller's).

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use gpunex_projections::RunReport;
use gpunex_projections::payout_history::{
    Before, Changed, PAYOUTS, Replay, StoredBatch, StoredPayout, fold_batch, needs,
};
use gpunex_projections::payouts::{PayoutRecord, PayoutStatus};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport, Findings};
use crate::pages::Folded;
use crate::sql::{MOVE_CHECKPOINT, placeholders, values};
use crate::timing::{CatchUpTimes, timed};
use crate::{READ_BATCH_EVENTS_MAX, Rebuilt, RecordedEvent, Store, StoreError, to_i64, to_u64};

/// Ids bound per `IN (...)` list, and rows per multi-row upsert (8 parameters a row).
const ROWS_PER_STATEMENT: usize = 500;
/// Rows per page when `audit verify` reads a whole table.
const VERIFY_PAGE_ROWS: i64 = 5_000;

fn corrupt(reason: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow {
        position: 0,
        reason: format!("payouts projection: {reason}"),
    }
}

fn decode_payout(state: &str) -> Result<PayoutRecord, StoreError> {
    serde_json::from_str(state).map_err(corrupt)
}

fn decode_batch(state: &str) -> Result<StoredBatch, StoreError> {
    serde_json::from_str(state).map_err(corrupt)
}

/// The `status` column's words (the wire's).
pub fn status_text(status: PayoutStatus) -> &'static str {
    match status {
        PayoutStatus::Scheduled => "scheduled",
        PayoutStatus::Submitted => "submitted",
        PayoutStatus::Confirmed => "confirmed",
        PayoutStatus::Failed => "failed",
    }
}

fn status_of(text: &str) -> Result<PayoutStatus, StoreError> {
    Ok(match text {
        "scheduled" => PayoutStatus::Scheduled,
        "submitted" => PayoutStatus::Submitted,
        "confirmed" => PayoutStatus::Confirmed,
        "failed" => PayoutStatus::Failed,
        other => return Err(corrupt(format!("unknown payout status {other:?}"))),
    })
}

fn rail_text(record: &PayoutRecord) -> &'static str {
    match record.scheduled.method.rail() {
        gpunex_domain::payouts::Rail::Solana => "solana",
        gpunex_domain::payouts::Rail::Bank => "bank",
    }
}

/// Whether a recorded event is one the fold reads.
fn is_payout_event(event: &RecordedEvent) -> bool {
    event.event_type.starts_with("payout.")
}

/// How many payouts, and how much, stand at one status on one rail (every payout ever).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutTotal {
    pub rail: String,
    pub status: PayoutStatus,
    pub payouts: u64,
    pub micro_usdc: i64,
}

impl Store {
    /// How far the payouts projection has folded the log.
    pub async fn payouts_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(PAYOUTS).await
    }

    /// Folds every event after the payouts checkpoint, one transaction per batch, and returns
    /// when there is nothing left. Another process doing the same is harmless: a batch moves
    /// the checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub async fn catch_up_payouts(&self) -> Result<RunReport, StoreError> {
        Ok(self.fold_payouts().await?.report)
    }

    /// [`Store::catch_up_payouts`], page after page (payout events are few: nothing is
    /// pipelined), saying where the time went.
    async fn fold_payouts(&self) -> Result<Folded, StoreError> {
        let started = std::time::Instant::now();
        let mut times = CatchUpTimes::default();
        let mut report = RunReport {
            checkpoint: self.payouts_checkpoint().await?,
            ..RunReport::default()
        };
        loop {
            let (events, read) =
                timed(self.read_all(report.checkpoint, READ_BATCH_EVENTS_MAX)).await;
            times.read += read;
            let events = events?;
            let Some(to) = events.last().map(|e| e.position) else {
                times.total = started.elapsed();
                return Ok(Folded { report, times });
            };
            let (changed, fold) = timed(async {
                let projected = events
                    .iter()
                    .filter(|e| is_payout_event(e))
                    .map(RecordedEvent::to_projected)
                    .collect::<Result<Vec<_>, _>>()?;
                if projected.is_empty() {
                    return Ok(Changed::default());
                }
                let needed = needs(&projected);
                let before = Before {
                    payouts: self.payout_rows(&needed.payouts).await?,
                    batches: self.batch_rows(&needed.batches, &needed.dates).await?,
                };
                Ok::<_, StoreError>(fold_batch(&projected, &before)?)
            })
            .await;
            times.fold += fold;
            let (committed, write) =
                timed(self.commit_payouts(&changed?, report.checkpoint, to)).await;
            times.write += write;
            committed?;
            report.events += events.len() as u64;
            report.batches += 1;
            report.checkpoint = to;
        }
    }

    /// Whether the payouts projection has folded the log up to `position`; if not, folds what
    /// is missing here and now (a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub async fn payouts_reached(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, PAYOUTS, &self.inner.payouts_fold, position, || {
            self.catch_up_payouts()
        })
        .await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_payouts(&self) -> Result<RunReport, StoreError> {
        let _folding = self.inner.payouts_fold.lock().await;
        self.catch_up_payouts().await
    }

    async fn commit_payouts(
        &self,
        changed: &Changed,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        let payouts: Vec<(&StoredPayout, String)> = changed
            .payouts
            .values()
            .map(|p| Ok((p, serde_json::to_string(&p.record).map_err(corrupt)?)))
            .collect::<Result<_, StoreError>>()?;
        let batches: Vec<(&StoredBatch, String)> = changed
            .batches
            .values()
            .map(|b| Ok((b, serde_json::to_string(b).map_err(corrupt)?)))
            .collect::<Result<_, StoreError>>()?;
        in_transaction!(self, |tx| {
            let moved = sqlx::query(MOVE_CHECKPOINT)
                .bind(to_i64(to))
                .bind(now)
                .bind(PAYOUTS)
                .bind(to_i64(from))
                .execute(&mut *tx)
                .await?;
            if moved.rows_affected() != 1 {
                return Err(StoreError::CheckpointMoved {
                    projection: PAYOUTS.to_owned(),
                    expected: from,
                });
            }
            for chunk in payouts.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "INSERT INTO payouts (payout_id, provider_id, batch_id, scheduled_position, \
                     rail, status, amount_micro_usdc, state) VALUES {} ON CONFLICT (payout_id) \
                     DO UPDATE SET status = excluded.status, state = excluded.state",
                    values(self.backend(), chunk.len(), 8)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (stored, json) in chunk {
                    let scheduled = &stored.record.scheduled;
                    query = query
                        .bind(scheduled.payout_id.to_string())
                        .bind(scheduled.provider_id.to_string())
                        .bind(scheduled.batch_id.to_string())
                        .bind(to_i64(stored.scheduled_position))
                        .bind(rail_text(&stored.record))
                        .bind(status_text(stored.record.status()))
                        .bind(scheduled.amount.micros())
                        .bind(json.as_str());
                }
                query.execute(&mut *tx).await?;
            }
            for chunk in batches.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "INSERT INTO payout_batches (batch_id, payout_date, created_position, state) \
                     VALUES {} ON CONFLICT (batch_id) DO UPDATE SET \
                     created_position = excluded.created_position, state = excluded.state",
                    values(self.backend(), chunk.len(), 4)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (batch, json) in chunk {
                    query = query
                        .bind(batch.batch_id.to_string())
                        .bind(batch.payout_date.to_string())
                        .bind(to_i64(batch.created_position))
                        .bind(json.as_str());
                }
                query.execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Empties the payouts projection and sets its checkpoint to 0 in one transaction, then
    /// folds the log again.
    pub async fn rebuild_payouts(&self) -> Result<Rebuilt, StoreError> {
        Rebuilt::timed(async {
            let folding = self.inner.payouts_fold.lock().await;
            self.empty_projection(PAYOUTS, &["payouts", "payout_batches"])
                .await?;
            let folded = self.fold_payouts().await?;
            // The live runner may fold again while the tables are vacuumed.
            drop(folding);
            self.settle_tables(&["payouts", "payout_batches"]).await?;
            Ok((folded.report.checkpoint, folded.times))
        })
        .await
    }

    /// The stored payouts with these ids, with their scheduling positions.
    async fn payout_rows(&self, ids: &[Uuid]) -> Result<HashMap<Uuid, StoredPayout>, StoreError> {
        let mut found = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT scheduled_position, state FROM payouts WHERE payout_id IN ({})",
                placeholders(self.backend(), chunk.len())
            );
            let rows: Vec<(i64, String)> = on_reader!(self, |conn| {
                let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql));
                for id in chunk {
                    query = query.bind(id.to_string());
                }
                query.fetch_all(conn).await?
            });
            for (position, state) in rows {
                let record = decode_payout(&state)?;
                found.insert(
                    record.scheduled.payout_id,
                    StoredPayout {
                        scheduled_position: to_u64(position, 0, "scheduled_position")?,
                        record,
                    },
                );
            }
        }
        Ok(found)
    }

    /// The stored batches with these ids, and the created batches of these dates.
    async fn batch_rows(
        &self,
        ids: &[Uuid],
        dates: &[NaiveDate],
    ) -> Result<HashMap<Uuid, StoredBatch>, StoreError> {
        let mut found = HashMap::new();
        for chunk in ids.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "SELECT state FROM payout_batches WHERE batch_id IN ({})",
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
                let batch = decode_batch(&row)?;
                found.insert(batch.batch_id, batch);
            }
        }
        for date in dates {
            for batch in self.created_batches_on(*date).await? {
                found.insert(batch.batch_id, batch);
            }
        }
        Ok(found)
    }

    async fn created_batches_on(&self, date: NaiveDate) -> Result<Vec<StoredBatch>, StoreError> {
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM payout_batches WHERE payout_date = $1 AND created_position > 0 \
                 ORDER BY created_position",
            )
            .bind(date.to_string())
            .fetch_all(conn)
            .await?
        });
        rows.iter().map(|row| decode_batch(row)).collect()
    }

    /// The payouts with these ids (absent ids are not in the map), as folded by `as_of` at least.
    pub async fn payouts_by_id(
        &self,
        ids: &[Uuid],
        as_of: u64,
    ) -> Result<HashMap<Uuid, PayoutRecord>, StoreError> {
        self.payouts_reached(as_of).await?;
        Ok(self
            .payout_rows(ids)
            .await?
            .into_iter()
            .map(|(id, stored)| (id, stored.record))
            .collect())
    }

    /// One payout, as folded by `as_of` at least.
    pub async fn stored_payout(
        &self,
        payout_id: Uuid,
        as_of: u64,
    ) -> Result<Option<PayoutRecord>, StoreError> {
        Ok(self
            .payouts_by_id(&[payout_id], as_of)
            .await?
            .remove(&payout_id))
    }

    /// A provider's payouts in the order they were scheduled, as folded by `as_of` at least.
    pub async fn provider_payouts(
        &self,
        provider_id: Uuid,
        as_of: u64,
    ) -> Result<Vec<PayoutRecord>, StoreError> {
        self.payouts_reached(as_of).await?;
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM payouts WHERE provider_id = $1 ORDER BY scheduled_position",
            )
            .bind(provider_id.to_string())
            .fetch_all(conn)
            .await?
        });
        rows.iter().map(|row| decode_payout(row)).collect()
    }

    /// The batch created for `date`, as folded by `as_of` at least.
    pub async fn stored_batch_on(
        &self,
        date: NaiveDate,
        as_of: u64,
    ) -> Result<Option<StoredBatch>, StoreError> {
        self.payouts_reached(as_of).await?;
        Ok(self.created_batches_on(date).await?.into_iter().next())
    }

    /// Every created batch, oldest date first, as folded by `as_of` at least.
    pub async fn stored_batches(&self, as_of: u64) -> Result<Vec<StoredBatch>, StoreError> {
        self.payouts_reached(as_of).await?;
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM payout_batches WHERE created_position > 0 \
                 ORDER BY payout_date, created_position",
            )
            .fetch_all(conn)
            .await?
        });
        let mut batches: Vec<StoredBatch> = Vec::with_capacity(rows.len());
        for row in rows {
            let batch = decode_batch(&row)?;
            // A date keeps its first batch, as memory does.
            if batches.last().map(|b| b.payout_date) != Some(batch.payout_date) {
                batches.push(batch);
            }
        }
        Ok(batches)
    }

    /// A page of a created batch's payouts in the order they were scheduled: at most `limit`,
    /// after the payout `after` when given (`Ok(None)` when `after` is not one of the batch's).
    /// Read after [`Store::stored_batch_on`] or [`Store::stored_batches`] at the same `as_of`.
    pub async fn batch_payouts(
        &self,
        batch: &StoredBatch,
        after: Option<Uuid>,
        limit: usize,
    ) -> Result<Option<Vec<PayoutRecord>>, StoreError> {
        let created = to_i64(batch.created_position);
        let from = match after {
            None => -1,
            Some(after) => {
                let position: Option<i64> = on_reader!(self, |conn| {
                    sqlx::query_scalar(
                        "SELECT scheduled_position FROM payouts WHERE payout_id = $1 \
                         AND batch_id = $2 AND scheduled_position < $3",
                    )
                    .bind(after.to_string())
                    .bind(batch.batch_id.to_string())
                    .bind(created)
                    .fetch_optional(conn)
                    .await?
                });
                match position {
                    Some(position) => position,
                    None => return Ok(None),
                }
            }
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows: Vec<String> = on_reader!(self, |conn| {
            sqlx::query_scalar(
                "SELECT state FROM payouts WHERE batch_id = $1 AND scheduled_position > $2 \
                 AND scheduled_position < $3 ORDER BY scheduled_position LIMIT $4",
            )
            .bind(batch.batch_id.to_string())
            .bind(from)
            .bind(created)
            .bind(limit)
            .fetch_all(conn)
            .await?
        });
        rows.iter()
            .map(|row| decode_payout(row))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// How many of a created batch's payouts stand at each status.
    pub async fn batch_statuses(
        &self,
        batch: &StoredBatch,
    ) -> Result<BTreeMap<PayoutStatus, u64>, StoreError> {
        let rows: Vec<(String, i64)> = on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT status, COUNT(*) FROM payouts WHERE batch_id = $1 \
                 AND scheduled_position < $2 GROUP BY status",
            )
            .bind(batch.batch_id.to_string())
            .bind(to_i64(batch.created_position))
            .fetch_all(conn)
            .await?
        });
        rows.iter()
            .map(|(status, count)| Ok((status_of(status)?, to_u64(*count, 0, "count")?)))
            .collect()
    }

    /// How many payouts, and how much, stand at each status on each rail, over every payout the
    /// projection has folded (the payout queues and what settled).
    pub async fn payout_totals(&self) -> Result<Vec<PayoutTotal>, StoreError> {
        let rows: Vec<(String, String, i64, i64)> = on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT status, rail, COUNT(*), CAST(COALESCE(SUM(amount_micro_usdc), 0) AS BIGINT) \
                 FROM payouts GROUP BY status, rail ORDER BY status, rail",
            )
            .fetch_all(conn)
            .await?
        });
        rows.into_iter()
            .map(|(status, rail, count, sum)| {
                Ok(PayoutTotal {
                    rail,
                    status: status_of(&status)?,
                    payouts: to_u64(count, 0, "count")?,
                    micro_usdc: sum,
                })
            })
            .collect()
    }

    /// Every stored payout with an id after `after`, in id order, one page.
    async fn payouts_page(&self, after: &str) -> Result<Vec<PayoutRow>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT payout_id, provider_id, batch_id, scheduled_position, rail, status, \
                 amount_micro_usdc, state FROM payouts WHERE payout_id > $1 \
                 ORDER BY payout_id LIMIT $2",
            )
            .bind(after)
            .bind(VERIFY_PAGE_ROWS)
            .fetch_all(conn)
            .await?
        }))
    }

    /// Every stored batch with an id after `after`, in id order, one page.
    async fn batches_page(
        &self,
        after: &str,
    ) -> Result<Vec<(String, String, i64, String)>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT batch_id, payout_date, created_position, state FROM payout_batches \
                 WHERE batch_id > $1 ORDER BY batch_id LIMIT $2",
            )
            .bind(after)
            .bind(VERIFY_PAGE_ROWS)
            .fetch_all(conn)
            .await?
        }))
    }

    /// The payouts projection's part of `audit verify`: folds the log up to the checkpoint in
    /// memory and compares every stored payout and batch, columns included, with the replay's.
    /// Rows change while the projection moves, so the findings count only if the checkpoint did
    /// not move while the rows were read (otherwise `payouts_checked` is 0: run it again, or
    /// with the server stopped).
    pub(crate) async fn verify_payouts(&self, report: &mut AuditReport) -> Result<(), StoreError> {
        let checkpoint = self.payouts_checkpoint().await?;
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
                .filter(|e| is_payout_event(e))
                .filter_map(|e| e.to_projected().ok())
                .collect();
            if let Err(error) = replay.fold(&projected) {
                findings.push(AuditFinding::ProjectionFailed {
                    position: error.position(),
                    reason: format!("payouts: {error}"),
                });
                failed = true;
                break;
            }
            after = last;
        }
        let mut checked = 0;
        let mut row_findings = Vec::new();
        if !failed {
            let mismatch =
                |kind: &str, id: String, stored: Option<String>, replayed: Option<String>| {
                    AuditFinding::PayoutMismatch {
                        row: format!("{kind} {id}"),
                        stored,
                        replayed,
                    }
                };
            let mut replayed: BTreeMap<String, &StoredPayout> = replay
                .payouts()
                .iter()
                .map(|(id, stored)| (id.to_string(), stored))
                .collect();
            let mut cursor = String::new();
            loop {
                let page = self.payouts_page(&cursor).await?;
                let Some(last) = page.last().map(|r| r.0.clone()) else {
                    break;
                };
                for row in page {
                    let expected = replayed.remove(&row.0);
                    let stored = decode_payout(&row.7).ok();
                    let same = match (&expected, &stored) {
                        (Some(expected), Some(stored)) => {
                            let s = &expected.record.scheduled;
                            expected.record == *stored
                                && row.1 == s.provider_id.to_string()
                                && row.2 == s.batch_id.to_string()
                                && u64::try_from(row.3).ok() == Some(expected.scheduled_position)
                                && row.4 == rail_text(stored)
                                && row.5 == status_text(stored.status())
                                && row.6 == s.amount.micros()
                        }
                        _ => false,
                    };
                    if !same {
                        row_findings.push(mismatch(
                            "payout",
                            row.0.clone(),
                            Some(stored.as_ref().map_or(row.7.clone(), |s| format!("{s:?}"))),
                            expected.map(|e| format!("{:?}", e.record)),
                        ));
                    }
                    checked += 1;
                }
                cursor = last;
            }
            for (id, stored) in replayed {
                row_findings.push(mismatch(
                    "payout",
                    id,
                    None,
                    Some(format!("{:?}", stored.record)),
                ));
            }
            let mut replayed: BTreeMap<String, &StoredBatch> = replay
                .batches()
                .iter()
                .map(|(id, batch)| (id.to_string(), batch))
                .collect();
            let mut cursor = String::new();
            loop {
                let page = self.batches_page(&cursor).await?;
                let Some(last) = page.last().map(|r| r.0.clone()) else {
                    break;
                };
                for (id, date, created_position, json) in page {
                    let expected = replayed.remove(&id);
                    let stored = decode_batch(&json).ok();
                    let same = match (&expected, &stored) {
                        (Some(expected), Some(stored)) => {
                            *expected == stored
                                && date == expected.payout_date.to_string()
                                && u64::try_from(created_position).ok()
                                    == Some(expected.created_position)
                        }
                        _ => false,
                    };
                    if !same {
                        row_findings.push(mismatch(
                            "batch",
                            id,
                            Some(stored.as_ref().map_or(json.clone(), |s| format!("{s:?}"))),
                            expected.map(|e| format!("{e:?}")),
                        ));
                    }
                    checked += 1;
                }
                cursor = last;
            }
            for (id, batch) in replayed {
                row_findings.push(mismatch("batch", id, None, Some(format!("{batch:?}"))));
            }
        }
        if self.payouts_checkpoint().await? == checkpoint {
            for finding in row_findings {
                findings.push(finding);
            }
        } else {
            // Another runner moved it meanwhile: the rows are ahead of the replay.
            checked = 0;
        }
        report.payouts_checkpoint = checkpoint;
        report.payouts_checked = checked;
        report.findings = findings.kept;
        report.findings_omitted = findings.omitted;
        Ok(())
    }
}

/// A stored payout row as `audit verify` reads it: id, provider, batch, scheduling position,
/// rail, status, amount and state.
type PayoutRow = (String, String, String, i64, String, String, i64, String);
