//! The stored presence history (`presence_transitions`): its runner, its rebuild, its reads and
//! its part of `audit verify`. The fold is `gpunex_projections::presence_history`; this module
//! moves its rows.
//!
//! Memory keeps a month of transitions per machine (`gpunex_projections::fleet`); a window that
//! starts before that is read here. A read first makes sure the projection has folded the log up
//! to the position the caller's in-memory models are at ([`Store::presence_reached`]).

use gpunex_domain::time::Timestamp;
use gpunex_projections::RunReport;
use gpunex_projections::presence_history::{EVENT_TYPES, PRESENCE, Transition, fold_batch};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport};
use crate::pages::{PageFold, fold_pages};
use crate::row_audit::verify_rows;
use crate::sql::{MOVE_CHECKPOINT, values};
use crate::{RecordedEvent, Store, StoreError, to_i64, to_u64};

/// Rows per multi-row insert (4 parameters a row).
const ROWS_PER_STATEMENT: usize = 500;

/// Whether a recorded event is one the fold reads (the others are not decoded).
fn is_transition(event: &RecordedEvent) -> bool {
    EVENT_TYPES.contains(&event.event_type.as_str())
}

/// The transitions of a page of the log, in log order.
fn transitions_of(events: &[RecordedEvent]) -> Result<Vec<Transition>, StoreError> {
    let projected = events
        .iter()
        .filter(|e| is_transition(e))
        .map(RecordedEvent::to_projected)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(fold_batch(&projected))
}

/// A stored row: position, machine, online, instant.
type Row = (i64, String, bool, i64);

fn describe(online: bool, machine_id: &str, at_us: i64) -> String {
    let state = if online { "online" } else { "offline" };
    format!("machine {machine_id} {state} at {at_us} us")
}

/// The presence projection's page steps ([`crate::pages`]): a transition is one event, so a
/// page's fold needs nothing from the page before it.
struct PresencePages<'a>(&'a Store);

impl PageFold for PresencePages<'_> {
    type Batch = Vec<Transition>;
    type Carried = ();

    async fn read(&self, after: u64) -> Result<Vec<RecordedEvent>, StoreError> {
        self.0.read_all(after, self.0.inner.fold_page_events).await
    }

    async fn fold(&self, events: &[RecordedEvent], (): &()) -> Result<Self::Batch, StoreError> {
        transitions_of(events)
    }

    fn carry(_: &Self::Batch) {}

    async fn commit(&self, batch: Self::Batch, from: u64, to: u64) -> Result<(), StoreError> {
        self.0.commit_presence(&batch, from, to).await
    }
}

impl Store {
    /// How far the presence projection has folded the log.
    pub async fn presence_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(PRESENCE).await
    }

    /// Folds every event after the presence checkpoint, one transaction per page, and returns
    /// when there is nothing left. Another process doing the same is harmless: a page moves the
    /// checkpoint only from where it started (`CheckpointMoved` for the loser).
    pub async fn catch_up_presence(&self) -> Result<RunReport, StoreError> {
        fold_pages(self.presence_checkpoint().await?, &PresencePages(self)).await
    }

    /// Whether the presence projection has folded the log up to `position`; if not, folds what
    /// is missing here and now (a read never waits for a background runner that may not be
    /// there). Fails with `CheckpointMoved` only if another process keeps moving it.
    pub async fn presence_reached(&self, position: u64) -> Result<(), StoreError> {
        crate::pages::reach(self, PRESENCE, &self.inner.presence_fold, position, || {
            self.catch_up_presence()
        })
        .await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_presence(&self) -> Result<RunReport, StoreError> {
        let _folding = self.inner.presence_fold.lock().await;
        self.catch_up_presence().await
    }

    async fn commit_presence(
        &self,
        transitions: &[Transition],
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let now = self.now_us();
        in_transaction!(self, |tx| {
            let moved = sqlx::query(MOVE_CHECKPOINT)
                .bind(to_i64(to))
                .bind(now)
                .bind(PRESENCE)
                .bind(to_i64(from))
                .execute(&mut *tx)
                .await?;
            if moved.rows_affected() != 1 {
                return Err(StoreError::CheckpointMoved {
                    projection: PRESENCE.to_owned(),
                    expected: from,
                });
            }
            for chunk in transitions.chunks(ROWS_PER_STATEMENT) {
                let sql = format!(
                    "INSERT INTO presence_transitions (position, machine_id, online, at_us) \
                     VALUES {}",
                    values(self.backend(), chunk.len(), 4)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for t in chunk {
                    query = query
                        .bind(to_i64(t.position))
                        .bind(t.machine_id.to_string())
                        .bind(t.online)
                        .bind(t.at.unix_micros());
                }
                query.execute(&mut *tx).await?;
            }
        });
        Ok(())
    }

    /// Empties the presence projection and sets its checkpoint to 0 in one transaction, then
    /// folds the log again. Returns the checkpoint reached.
    pub async fn rebuild_presence(&self) -> Result<u64, StoreError> {
        let now = self.now_us();
        let _folding = self.inner.presence_fold.lock().await;
        in_transaction!(self, |tx| {
            sqlx::query("DELETE FROM presence_transitions")
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE projection_checkpoints SET position = 0, updated_at_us = $1 \
                 WHERE projection = $2",
            )
            .bind(now)
            .bind(PRESENCE)
            .execute(&mut *tx)
            .await?;
        });
        let checkpoint = self.catch_up_presence().await?.checkpoint;
        drop(_folding);
        self.settle_tables(&["presence_transitions"]).await?;
        Ok(checkpoint)
    }

    /// A machine's `(online, at)` transitions in log order for a window that starts at `from`:
    /// the last one dated before `from` (the state the window starts in) and every one from
    /// `from` on, as folded by `as_of` at least. Two index ranges: the history before the
    /// window is not read.
    pub async fn machine_transitions(
        &self,
        machine_id: Uuid,
        from: Timestamp,
        as_of: u64,
    ) -> Result<Vec<(bool, Timestamp)>, StoreError> {
        self.presence_reached(as_of).await?;
        let machine = machine_id.to_string();
        let before: Option<(bool, i64)> = on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT online, at_us FROM presence_transitions WHERE machine_id = $1 \
                 AND at_us < $2 ORDER BY at_us DESC, position DESC LIMIT 1",
            )
            .bind(&machine)
            .bind(from.unix_micros())
            .fetch_optional(conn)
            .await?
        });
        let since: Vec<(bool, i64)> = on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT online, at_us FROM presence_transitions WHERE machine_id = $1 \
                 AND at_us >= $2 ORDER BY position",
            )
            .bind(&machine)
            .bind(from.unix_micros())
            .fetch_all(conn)
            .await?
        });
        Ok(before
            .into_iter()
            .chain(since)
            .map(|(online, at)| (online, Timestamp::from_unix_micros(at)))
            .collect())
    }

    /// The stored rows with positions in `(after, through]`, in position order.
    async fn transition_rows(&self, after: u64, through: u64) -> Result<Vec<Row>, StoreError> {
        Ok(on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT position, machine_id, online, at_us FROM presence_transitions \
                 WHERE position > $1 AND position <= $2 ORDER BY position",
            )
            .bind(to_i64(after))
            .bind(to_i64(through))
            .fetch_all(conn)
            .await?
        }))
    }

    /// The presence projection's part of `audit verify` ([`crate::row_audit`]): each page's
    /// transitions compared with the rows stored for the same positions.
    pub(crate) async fn verify_presence(&self, report: &mut AuditReport) -> Result<(), StoreError> {
        let checked = verify_rows(
            self,
            PRESENCE,
            |event| {
                if !is_transition(event) {
                    return None;
                }
                let projected = event.to_projected().ok()?;
                let t = gpunex_projections::presence_history::transition(
                    projected.position,
                    &projected.event,
                )?;
                Some((
                    t.position,
                    describe(t.online, &t.machine_id.to_string(), t.at.unix_micros()),
                ))
            },
            |after, through| async move {
                Ok(self
                    .transition_rows(after, through)
                    .await?
                    .into_iter()
                    .map(|(position, machine, online, at_us)| {
                        (
                            to_u64(position, 0, "position").unwrap_or(0),
                            describe(online, &machine, at_us),
                        )
                    })
                    .collect())
            },
            |position, stored, replayed| AuditFinding::PresenceMismatch {
                position,
                stored,
                replayed,
            },
            report,
        )
        .await?;
        report.presence_checkpoint = checked.checkpoint;
        report.presence_checked = checked.checked;
        Ok(())
    }
}
