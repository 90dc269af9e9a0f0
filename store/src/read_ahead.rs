//! A catch-up's first stage: reading the log's pages in order, each decoded as it is read
//! ([`crate::read_decoded`]), ahead of whoever folds them (ADR 0014, 0015). A leaf module,
//! shared by the page runner (`pages.rs`) and the ledger's rebuild (`rebuild.rs`) without
//! importing one another.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::StoreError;
use crate::timing::timed;

/// A page of the log, decoded.
pub(crate) struct DecodedPage<D> {
    /// How many events the page holds.
    pub events: u64,
    /// The position of its last event.
    pub last: u64,
    pub decoded: D,
}

/// Reads and decodes the log's pages after `after` (`read` gives the page after a position,
/// `None` at the end of the log) ahead of `consume`, which takes them in order from its
/// receiver: pages `n + 1` and `n + 2` are read while `consume` folds page `n` and commits
/// page `n - 1`. The stages meet only through a channel of one page, so neither waits for a
/// step of the other that it does not need (a lockstep pipeline waits at each page for its
/// slowest step). A failed read is the last item `consume` receives; when `consume` returns,
/// its receiver is dropped and the reads stop. Returns how long the reads took, beside what
/// `consume` returned.
pub(crate) async fn read_ahead<D, Read, ReadFut, Consume, ConsumeFut, T>(
    after: u64,
    read: Read,
    consume: Consume,
) -> (Duration, T)
where
    Read: Fn(u64) -> ReadFut,
    ReadFut: Future<Output = Result<Option<DecodedPage<D>>, StoreError>>,
    Consume: FnOnce(mpsc::Receiver<Result<DecodedPage<D>, StoreError>>) -> ConsumeFut,
    ConsumeFut: Future<Output = T>,
{
    let (read_tx, read_rx) = mpsc::channel(1);
    let reader = async move {
        let (mut after, mut spent) = (after, Duration::ZERO);
        loop {
            let (page, took) = timed(read(after)).await;
            spent += took;
            let page = match page {
                Ok(Some(page)) => {
                    after = page.last;
                    Ok(page)
                }
                Ok(None) => return spent,
                Err(error) => Err(error),
            };
            let failed = page.is_err();
            if read_tx.send(page).await.is_err() || failed {
                return spent;
            }
        }
    };
    let (read, consumed) = tokio::join!(reader, consume(read_rx));
    (read, consumed)
}
