//! The stored presence history (`presence_transitions`): its runner, its rebuild, its reads and
//! its part of `audit verify`. The fold is `gpunex_projections::presence_history`; this module
//! moves its rows.
//!
//! Memory keeps a month of transitions per machine (`gpunex_projections::fleet`); a window that
//! starts before that is read here. A read first makes sure the projection has folded the log up
//! to the position the caller's in-memory models are at ([`Store::presence_reached`]).

use gpunex_domain::time::Timestamp;
use gpunex_projections::presence_history::{EVENT_TYPES, PRESENCE, Transition, transition};
use gpunex_projections::{ProjectedEvent, RunReport};
use uuid::Uuid;

use crate::audit::{AuditFinding, AuditReport};
use crate::event_rows::{EventRows, expected_row};
use crate::row_audit::verify_rows;
use crate::sql::Bound;
use crate::{Store, StoreError, to_i64, to_u64};

/// A stored row: position, machine, online, instant.
type Row = (i64, String, bool, i64);

fn describe(online: bool, machine_id: &str, at_us: i64) -> String {
    let state = if online { "online" } else { "offline" };
    format!("machine {machine_id} {state} at {at_us} us")
}

/// The presence history as a projection of one row per event ([`crate::event_rows`]).
pub(crate) struct PresenceRows;

impl EventRows for PresenceRows {
    const NAME: &'static str = PRESENCE;
    const TABLE: &'static str = "presence_transitions";
    const COLUMNS: &'static [&'static str] = &["position", "machine_id", "online", "at_us"];
    const EVENT_TYPES: &'static [&'static str] = &EVENT_TYPES;
    type Row = Transition;

    fn row(event: &ProjectedEvent) -> Option<Transition> {
        transition(event.position, &event.event)
    }

    fn values(t: &Transition) -> Vec<Bound> {
        vec![
            Bound::Int(to_i64(t.position)),
            Bound::Text(t.machine_id.to_string()),
            Bound::Bool(t.online),
            Bound::Int(t.at.unix_micros()),
        ]
    }

    fn lock(store: &Store) -> &tokio::sync::Mutex<()> {
        &store.inner.presence_fold
    }
}

impl Store {
    /// How far the presence projection has folded the log.
    pub async fn presence_checkpoint(&self) -> Result<u64, StoreError> {
        self.consumer_checkpoint(PRESENCE).await
    }

    /// Folds every event after the presence checkpoint (see [`Store::catch_up_rows`]).
    pub async fn catch_up_presence(&self) -> Result<RunReport, StoreError> {
        self.catch_up_rows::<PresenceRows>().await
    }

    /// Whether the presence projection has folded the log up to `position`; if not, folds what
    /// is missing here and now (see [`Store::rows_reached`]).
    pub async fn presence_reached(&self, position: u64) -> Result<(), StoreError> {
        self.rows_reached::<PresenceRows>(position).await
    }

    /// Folds with the runner's lock held (the projection runner's entry point).
    pub(crate) async fn run_presence(&self) -> Result<RunReport, StoreError> {
        self.run_rows::<PresenceRows>().await
    }

    /// Empties the presence projection and folds the log again.
    pub async fn rebuild_presence(&self) -> Result<crate::Rebuilt, StoreError> {
        self.rebuild_rows::<PresenceRows>().await
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
                let t = expected_row::<PresenceRows>(event)?;
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
