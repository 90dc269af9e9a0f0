//! The one catch-up loop of the stored projections that fold with state from before a page
//! (earnings, rentals): each page is read and folded while the page before it is committed.
//!
//! A page's fold needs the projection's rows as of the end of the page before it. The rows that
//! page changed are handed over in memory (`carry`); every other row is read from the tables,
//! where the commit running meanwhile does not touch it. A fold is used only after the commit
//! before it succeeded, and a fold that read state another process has since moved on from is
//! refused at its own commit (the checkpoint moves only from where it started), so no page is
//! written from a stale fold.

use std::future::Future;

use gpunex_projections::RunReport;

use crate::StoreError;

/// A page of events folded: how many events it held, the position of its last one, and the
/// rows the fold made.
pub(crate) struct Folded<B> {
    pub events: u64,
    pub to: u64,
    pub batch: B,
}

/// One projection's page steps, for [`fold_pages`].
pub(crate) trait PageFold: Sync {
    /// The rows a page's fold makes.
    type Batch: Send;
    /// What a batch hands the next page's fold.
    type Carried: Default + Send + Sync;

    /// Reads and folds the page after `after` (`None`: nothing left).
    fn fold(
        &self,
        after: u64,
        carried: &Self::Carried,
    ) -> impl Future<Output = Result<Option<Folded<Self::Batch>>, StoreError>> + Send;

    /// What `batch` hands the next page's fold.
    fn carry(batch: &Self::Batch) -> Self::Carried;

    /// Writes `batch` and moves the checkpoint from `from` to `to`, in one transaction.
    fn commit(
        &self,
        batch: Self::Batch,
        from: u64,
        to: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Folds and commits pages after `checkpoint` until the log has no more.
pub(crate) async fn fold_pages<P: PageFold>(
    checkpoint: u64,
    pages: &P,
) -> Result<RunReport, StoreError> {
    let mut report = RunReport {
        checkpoint,
        ..RunReport::default()
    };
    let mut page = pages.fold(checkpoint, &P::Carried::default()).await?;
    while let Some(Folded { events, to, batch }) = page {
        let carried = P::carry(&batch);
        let (committed, next) = tokio::join!(
            pages.commit(batch, report.checkpoint, to),
            pages.fold(to, &carried)
        );
        committed?;
        report.events += events;
        report.batches += 1;
        report.checkpoint = to;
        page = next?;
    }
    Ok(report)
}
