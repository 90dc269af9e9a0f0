//! The projection runner: read a batch after the checkpoint, fold it, commit rows and the new
//! checkpoint together. A crash anywhere loses nothing and doubles nothing, because the backend
//! commits the rows and the checkpoint in one transaction and only if the checkpoint is still
//! where this batch started (compare-and-set).

use std::future::Future;

use crate::ProjectedEvent;
use crate::ledger::{self, LedgerBatch};

/// Events folded per transaction: large enough to amortize the commit, small enough that one
/// batch's rows stay a few megabytes.
pub const BATCH_EVENTS_MAX: usize = 2_000;

/// What the runner needs from storage. Implemented by `gpunex-store` on SQLite and PostgreSQL.
pub trait ProjectionBackend: Sync {
    type Error: std::error::Error + Send + Sync + 'static;

    fn checkpoint(
        &self,
        projection: &'static str,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// The next up to `limit` events with position > `after`, of which only those that post a
    /// journal entry (`gpunex_domain::events::posts_journal`) are decoded; `None` when the log
    /// has no event after `after`.
    fn read_journal_page(
        &self,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Option<JournalPage>, Self::Error>> + Send;

    /// Writes `batch` and moves the ledger checkpoint from `from` to `to` in one transaction.
    /// Fails without writing anything if the checkpoint is no longer `from`.
    fn commit_ledger(
        &self,
        batch: &LedgerBatch,
        from: u64,
        to: u64,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// A page of the log as the ledger reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPage {
    /// How many events the page read.
    pub read: u64,
    /// The position of its last event: where the checkpoint moves once it is folded.
    pub through: u64,
    /// Its events that post a journal entry, decoded, in increasing position.
    pub events: Vec<ProjectedEvent>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Backend(E),
    #[error(transparent)]
    Fold(#[from] crate::FoldError),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunReport {
    pub events: u64,
    pub batches: u64,
    pub checkpoint: u64,
}

/// Folds every event after the ledger checkpoint into the read model, one transaction per batch,
/// and returns when there is nothing left to read.
pub async fn catch_up<B: ProjectionBackend>(
    backend: &B,
    batch_events_max: usize,
) -> Result<RunReport, RunError<B::Error>> {
    let batch_events_max = batch_events_max.clamp(1, BATCH_EVENTS_MAX);
    let mut report = RunReport {
        checkpoint: backend
            .checkpoint(ledger::LEDGER)
            .await
            .map_err(RunError::Backend)?,
        ..RunReport::default()
    };
    loop {
        let Some(page) = backend
            .read_journal_page(report.checkpoint, batch_events_max)
            .await
            .map_err(RunError::Backend)?
        else {
            return Ok(report);
        };
        let batch = ledger::fold_batch(&page.events)?;
        backend
            .commit_ledger(&batch, report.checkpoint, page.through)
            .await
            .map_err(RunError::Backend)?;
        report.events += page.read;
        report.batches += 1;
        report.checkpoint = page.through;
    }
}
