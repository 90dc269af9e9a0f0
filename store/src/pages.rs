//! The one catch-up loop of the earnings, rentals, presence and price projections: while one
//! page is committed, the next is folded, and the pages after it are read and decoded ahead
//! ([`crate::read_ahead`], which the ledger's rebuild uses too), so the reads, the decoding, the fold
//! and the writes run side by side. And [`reach`]: how a reader of any stored projection makes it fold
//! up to the reader's position first.
//!
//! A page's fold needs the projection's rows as of the end of the page before it. The rows that
//! page and the pages before it changed are handed over in memory (`carry`, bounded); every
//! other row is read from the tables, where the commit running meanwhile does not touch it. A
//! fold is used only after the commit before it succeeded, and a fold that read state another
//! process has since moved on from is refused at its own commit (the checkpoint moves only from
//! where it started), so no page is written from a stale fold.

use std::future::Future;
use std::time::Instant;

use tokio::sync::mpsc;

use gpunex_projections::RunReport;

use crate::read_ahead::{DecodedPage, read_ahead};
use crate::read_decoded::read_decoded;
use crate::timing::{CatchUpTimes, timed};

use crate::{EventRow, Store, StoreError};

/// One projection's page steps, for [`fold_pages`].
pub(crate) trait PageFold: Sync {
    /// What the fold takes of an event.
    type Item: Send + 'static;
    /// The rows a page's fold makes.
    type Batch: Send;
    /// What the batches hand the next page's fold ([`PageFold::carry`]).
    type Carried: Default + Send + Sync;

    /// The store the projection is kept in.
    fn store(&self) -> &Store;

    /// What the fold takes of an event (`None`: nothing), decoded from its row as the page is
    /// read ([`crate::read_decoded`]): it needs nothing from the events before it, so it runs
    /// ahead of their folds.
    fn decode(event: &EventRow<'_>) -> Option<Result<Self::Item, StoreError>>;

    /// Folds a decoded page, with what the page before it handed over.
    fn fold(
        &self,
        decoded: Vec<Self::Item>,
        carried: &Self::Carried,
    ) -> impl Future<Output = Result<Self::Batch, StoreError>> + Send;

    /// Adds what `batch` hands the next page's fold to what the pages before it handed over
    /// (a row of a later page replaces the same row of an earlier one). What is carried is
    /// bounded: past `limit` rows ([`crate::StoreOptions::carried_rows_max`]) it is emptied
    /// first, and only `batch`'s rows, which the tables may not hold yet, are kept; any other
    /// row the next fold needs it reads from the tables, which hold it.
    fn carry(carried: &mut Self::Carried, batch: &Self::Batch, limit: usize);

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
/// while page `n + 1` is folded, and the pages after it are read and decoded ahead
/// ([`crate::read_ahead`], [`crate::read_decoded`]).
pub(crate) async fn fold_pages<P: PageFold>(
    checkpoint: u64,
    pages: &P,
) -> Result<Folded, StoreError> {
    let started = Instant::now();
    let store = pages.store();
    let (read, folded) = read_ahead(
        checkpoint,
        |after| read_decoded(store, after, store.inner.fold_page_events, P::decode),
        |decoded| fold_decoded(checkpoint, pages, decoded),
    )
    .await;
    let (report, mut times) = folded?;
    times.read += read;
    times.total = started.elapsed();
    Ok(Folded { report, times })
}

/// [`fold_pages`]' last two steps: the fold of each decoded page beside the commit of the one
/// before it.
async fn fold_decoded<P: PageFold>(
    checkpoint: u64,
    pages: &P,
    mut decoded: mpsc::Receiver<Result<DecodedPage<Vec<P::Item>>, StoreError>>,
) -> Result<(RunReport, CatchUpTimes), StoreError> {
    let mut times = CatchUpTimes::default();
    let mut report = RunReport {
        checkpoint,
        ..RunReport::default()
    };
    let mut pending: Option<Pending<P::Batch>> = None;
    let mut carried = P::Carried::default();
    while let Some(page) = decoded.recv().await {
        let page = page?;
        if let Some(pending) = &pending {
            P::carry(
                &mut carried,
                &pending.batch,
                pages.store().inner.carried_rows_max,
            );
        }
        let from = report.checkpoint;
        // In this order: the commit starts (on SQLite on its own thread) before the fold, which
        // runs its CPU work off this task (`crate::off_task`) where it has much.
        let ((committed, write), (folded, fold)) = tokio::join!(
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
            timed(pages.fold(page.decoded, &carried))
        );
        times.write += write;
        times.fold += fold;
        if let Some((count, to)) = committed? {
            committed_page(&mut report, count, to);
        }
        pending = Some(Pending {
            events: page.events,
            to: page.last,
            batch: folded?,
        });
    }
    if let Some(page) = pending {
        let (committed, write) = timed(pages.commit(page.batch, report.checkpoint, page.to)).await;
        times.write += write;
        committed?;
        committed_page(&mut report, page.events, page.to);
    }
    Ok((report, times))
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
