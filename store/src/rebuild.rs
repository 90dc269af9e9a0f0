//! The ledger read model's table generations and its one rebuild algorithm.
//!
//! A rebuild folds the whole log into fresh `*_rebuild` tables while appends and live runners
//! go on, then swaps them in: in one transaction it folds what arrived
//! meanwhile, replaces the live tables and sets the checkpoint (ADR 0003). The algorithm is
//! written once, here; each database supplies the small [`RebuildBackend`] interface (its
//! transactions, locks and DDL). A rebuild owns the `*_rebuild` tables through its run id in
//! `projection_rebuilds`: a newer rebuild takes them over and the older one fails with
//! `RebuildSuperseded` at its next step, writing nothing more.

use std::future::Future;

use gpunex_domain::events::{USAGE_METERED, posts_journal};
use gpunex_domain::metered_line::metered_entry;
use gpunex_projections::ProjectedEvent;
use gpunex_projections::ledger::JournalEvent;
use uuid::Uuid;

use tokio::sync::mpsc;

use crate::journal::LedgerRows;
use crate::off_task::off_task;
use crate::read_ahead::{DecodedPage, read_ahead};
use crate::read_decoded::{ReadRange, read_decoded};
use crate::timing::{CatchUpTimes, timed};
use crate::{EventRow, READ_BATCH_EVENTS_MAX, RecordedEvent, StoreError};

/// Table names of one generation of the ledger read model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerTables {
    /// One row per block of journal entries (`crate::journal`).
    pub journal: &'static str,
    /// Per account and written batch, the positions of its entries.
    pub postings: &'static str,
    pub balances: &'static str,
}

impl LedgerTables {
    pub const LIVE: LedgerTables = LedgerTables {
        journal: "ledger_journal_blocks",
        postings: "ledger_postings",
        balances: "ledger_balances",
    };
    pub const REBUILD: LedgerTables = LedgerTables {
        journal: "ledger_journal_blocks_rebuild",
        postings: "ledger_postings_rebuild",
        balances: "ledger_balances_rebuild",
    };

    pub fn all(self) -> [&'static str; 3] {
        [self.journal, self.postings, self.balances]
    }
}

/// The tables of the journal layouts before ADR 0016 (ADR 0012's one row per entry, and before
/// it one row per posting) and the tables beside them, dropped when a database is opened by
/// this version: the ledger is then refolded from position 0.
pub(crate) const OLD_LEDGER_TABLES: [&str; 8] = [
    "ledger_entries",
    "ledger_entries_rebuild",
    "ledger_journal",
    "ledger_journal_rebuild",
    "ledger_postings",
    "ledger_postings_rebuild",
    "ledger_balances",
    "ledger_balances_rebuild",
];

/// The events of `events` that post a journal entry, decoded: the ledger decodes no other
/// (`audit verify` replays it from every event decoded).
pub(crate) fn journal_events(events: &[RecordedEvent]) -> Result<Vec<ProjectedEvent>, StoreError> {
    events
        .iter()
        .filter(|event| posts_journal(&event.event_type))
        .map(RecordedEvent::to_projected)
        .collect()
}

/// Decodes the stored events that post a journal entry and folds them into ledger rows.
pub(crate) fn fold_ledger(events: &[RecordedEvent]) -> Result<LedgerRows, StoreError> {
    LedgerRows::fold(&journal_events(events)?)
}

/// The journal entry of an event that posts one, decoded from its row; `None` for any other. A
/// usage event (nearly all of them) is read for its entry alone
/// ([`gpunex_domain::metered_line::metered_entry`]), any other whole.
fn decode_journal(event: &EventRow<'_>) -> Option<Result<JournalEvent, StoreError>> {
    if !posts_journal(event.event_type) {
        return None;
    }
    let corrupt = |reason: String| StoreError::CorruptRow {
        position: event.position,
        reason,
    };
    let entry = if event.event_type == USAGE_METERED {
        metered_entry(event.schema_version, event.payload).map_err(|e| corrupt(e.to_string()))
    } else {
        event.to_projected().and_then(|projected| {
            projected
                .event
                .journal_entry()
                .map(|(id, entry)| (id, entry.clone()))
                .ok_or_else(|| corrupt(format!("a {} event without its entry", event.event_type)))
        })
    };
    Some(entry.map(|(entry_id, entry)| JournalEvent {
        position: event.position,
        event_id: event.event_id,
        recorded_at_us: event.recorded_at_us,
        entry_id,
        entry,
    }))
}

/// The rebuild's load: folds each decoded page (off this task) while the page before it is
/// written; returns the position written up to.
async fn load<B: RebuildBackend>(
    backend: &B,
    run_id: Uuid,
    progress: &(dyn Fn(u64) + Sync),
    mut decoded: mpsc::Receiver<Result<DecodedPage<Vec<JournalEvent>>, StoreError>>,
) -> Result<(u64, CatchUpTimes), StoreError> {
    let mut times = CatchUpTimes::default();
    let mut position = 0;
    let mut pending: Option<(u64, LedgerRows)> = None;
    while let Some(page) = decoded.recv().await {
        let page = page?;
        let journal = page.decoded;
        // In this order: the write starts (on SQLite on its own thread) before the fold, which
        // runs on a blocking thread: on PostgreSQL the write is I/O this task drives.
        let ((written, write), (folded, fold)) = tokio::join!(
            timed(async {
                match pending.take() {
                    Some((last, batch)) => backend
                        .write(run_id, last, batch)
                        .await
                        .map(|()| Some(last)),
                    None => Ok(None),
                }
            }),
            timed(off_task(move || LedgerRows::fold(&journal)))
        );
        times.write += write;
        times.fold += fold;
        if let Some(last) = written? {
            position = last;
            progress(position);
        }
        pending = Some((page.last, folded?));
    }
    if let Some((last, batch)) = pending {
        let (written, write) = timed(backend.write(run_id, last, batch)).await;
        times.write += write;
        written?;
        position = last;
        progress(position);
    }
    Ok((position, times))
}

/// What one database does for a rebuild (beside its reads of the log, [`ReadRange`]). Every step
/// first checks that `run_id`
/// still owns the rebuild tables (and records how far it got).
pub(crate) trait RebuildBackend: ReadRange {
    /// The swap's transaction.
    type Swap: Send;

    /// Takes the `*_rebuild` tables for `run_id` (from any earlier run) and creates them empty.
    fn start(&self, run_id: Uuid) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes `page` (the events up to `through`) into the rebuild tables in one transaction.
    fn write(
        &self,
        run_id: Uuid,
        through: u64,
        page: LedgerRows,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Begins the swap's transaction with live runners held out, and says how far the swap folds:
    /// `Some(head)` when appends go on meanwhile (what arrives later is the live runner's), `None`
    /// when they wait for the swap (fold to the end).
    fn begin_swap(
        &self,
        run_id: Uuid,
        position: u64,
    ) -> impl Future<Output = Result<(Self::Swap, Option<u64>), StoreError>> + Send;

    /// Up to `limit` events after `after`, inside the swap.
    fn read_in_swap(
        swap: &mut Self::Swap,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RecordedEvent>, StoreError>> + Send;

    /// Writes `rows` into the rebuild tables inside the swap.
    fn write_in_swap(
        swap: &mut Self::Swap,
        rows: &LedgerRows,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Replaces the live tables with the rebuilt ones, sets the checkpoint to `position`,
    /// releases the rebuild tables and commits.
    fn finish_swap(
        &self,
        swap: Self::Swap,
        run_id: Uuid,
        position: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Rebuilds the ledger read model from position 0 and swaps it in; returns the checkpoint it
/// set and where the time went (`total` is left to the caller). `progress` hears each position
/// folded.
pub(crate) async fn rebuild_ledger<B: RebuildBackend>(
    backend: &B,
    run_id: Uuid,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(u64, CatchUpTimes), StoreError> {
    backend.start(run_id).await?;
    // Page n is written while page n + 1 is folded, and the pages after it are read and
    // decoded ahead (`crate::read_ahead`, `crate::read_decoded`).
    let (read, loaded) = read_ahead(
        0,
        |after| read_decoded(backend, after, READ_BATCH_EVENTS_MAX, decode_journal),
        |decoded| load(backend, run_id, progress, decoded),
    )
    .await;
    let (mut position, mut times) = loaded?;
    times.read += read;
    // No index is built after the load: the journal's key is its position and the postings
    // rows are few (one per account and page), so both keep their keys up row by row.
    let (mut swap, until) = backend.begin_swap(run_id, position).await?;
    while until.is_none_or(|head| position < head) {
        let limit = until.map_or(READ_BATCH_EVENTS_MAX, |head| {
            usize::try_from(head - position)
                .unwrap_or(usize::MAX)
                .min(READ_BATCH_EVENTS_MAX)
        });
        let events = B::read_in_swap(&mut swap, position, limit).await?;
        let Some(last) = events.last().map(|e| e.position) else {
            break;
        };
        B::write_in_swap(&mut swap, &fold_ledger(&events)?).await?;
        position = last;
    }
    backend.finish_swap(swap, run_id, position).await?;
    progress(position);
    Ok((position, times))
}
