//! The one catch-up loop of the earnings, rentals and presence projections: while one page is
//! committed, the next is folded and the one after it read, so the reads, the fold and the
//! writes run side by side. And [`reach`]: how a reader of any stored projection makes it fold
//! up to the reader's position first.
//!
//! A page's fold needs the projection's rows as of the end of the page before it. The rows that
//! page changed are handed over in memory (`carry`); every other row is read from the tables,
//! where the commit running meanwhile does not touch it. A fold is used only after the commit
//! before it succeeded, and a fold that read state another process has since moved on from is
//! refused at its own commit (the checkpoint moves only from where it started), so no page is
//! written from a stale fold.

use std::future::Future;
use std::time::Instant;

use gpunex_projections::RunReport;

use crate::timing::{CatchUpTimes, timed};

use crate::{RecordedEvent, Store, StoreError};

/// One projection's page steps, for [`fold_pages`].
pub(crate) trait PageFold: Sync {
    /// The rows a page's fold makes.
    type Batch: Send;
    /// What a batch hands the next page's fold.
    type Carried: Default + Send + Sync;

    /// The page of events after `after` (empty: nothing left).
    fn read(
        &self,
        after: u64,
    ) -> impl Future<Output = Result<Vec<RecordedEvent>, StoreError>> + Send;

    /// Folds a page, with what the page before it handed over.
    fn fold(
        &self,
        events: Vec<RecordedEvent>,
        carried: &Self::Carried,
    ) -> impl Future<Output = Result<Self::Batch, StoreError>> + Send;

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

/// What a catch-up folded, and where its time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Folded {
    pub report: RunReport,
    pub times: CatchUpTimes,
}

/// A page folded and not committed yet.
struct Pending<B> {
    events: u64,
    to: u64,
    batch: B,
}

/// Folds and commits pages after `checkpoint` until the log has no more: page `n` is committed
/// while page `n + 1` is folded and page `n + 2` is read.
pub(crate) async fn fold_pages<P: PageFold>(
    checkpoint: u64,
    pages: &P,
) -> Result<Folded, StoreError> {
    let started = Instant::now();
    let mut times = CatchUpTimes::default();
    let mut report = RunReport {
        checkpoint,
        ..RunReport::default()
    };
    let mut pending: Option<Pending<P::Batch>> = None;
    let (events, read) = timed(pages.read(checkpoint)).await;
    times.read += read;
    let mut events = events?;
    while let Some(last) = events.last().map(|e| e.position) {
        let carried = pending
            .as_ref()
            .map_or_else(P::Carried::default, |page| P::carry(&page.batch));
        let from = report.checkpoint;
        let count = events.len() as u64;
        let page = std::mem::take(&mut events);
        // In this order: the commit and the read start (on SQLite on their own threads) before
        // the fold, which runs its CPU work off this task (`crate::off_task`) where it has much.
        let ((committed, write), (next, read), (folded, fold)) = tokio::join!(
            timed(async {
                match pending.take() {
                    Some(page) => {
                        let done = (page.events, page.to);
                        pages
                            .commit(page.batch, from, page.to)
                            .await
                            .map(|()| Some(done))
                    }
                    None => Ok(None),
                }
            }),
            timed(pages.read(last)),
            timed(pages.fold(page, &carried))
        );
        times.write += write;
        times.read += read;
        times.fold += fold;
        if let Some((count, to)) = committed? {
            committed_page(&mut report, count, to);
        }
        pending = Some(Pending {
            events: count,
            to: last,
            batch: folded?,
        });
        events = next?;
    }
    if let Some(page) = pending {
        let (committed, write) = timed(pages.commit(page.batch, report.checkpoint, page.to)).await;
        times.write += write;
        committed?;
        committed_page(&mut report, page.events, page.to);
    }
    times.total = started.elapsed();
    Ok(Folded { report, times })
}

fn committed_page(report: &mut RunReport, events: u64, to: u64) {
    report.events += events;
    report.batches += 1;
    report.checkpoint = to;
}

/// Makes sure the stored projection `name` has folded the log up to `position`: if its
/// checkpoint is short of it, folds what is missing here and now with the projection's `lock`
/// held (a read never waits for a background runner that may not be there). Fails with
/// `CheckpointMoved` only if another process keeps moving the checkpoint.
pub(crate) async fn reach<F, Fut>(
    store: &Store,
    name: &str,
    lock: &tokio::sync::Mutex<()>,
    position: u64,
    catch_up: F,
) -> Result<(), StoreError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<RunReport, StoreError>>,
{
    const ATTEMPTS: usize = 5;
    let mut last = None;
    for _ in 0..ATTEMPTS {
        if store.consumer_checkpoint(name).await? >= position {
            return Ok(());
        }
        let _folding = lock.lock().await;
        match catch_up().await {
            Ok(_) => {}
            Err(error @ StoreError::CheckpointMoved { .. }) => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    match last {
        Some(error) if store.consumer_checkpoint(name).await? < position => Err(error),
        _ => Ok(()),
    }
}
