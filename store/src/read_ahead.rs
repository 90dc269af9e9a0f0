//! A catch-up's first two stages: reading the log's pages in order and decoding each, ahead of
//! whoever folds them (ADR 0014). A leaf module, shared by the page runner (`pages.rs`) and the
//! ledger's rebuild (`rebuild.rs`) without importing one another.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::timing::timed;
use crate::{RecordedEvent, StoreError};

/// A page of the log, decoded.
pub(crate) struct DecodedPage<D> {
    /// How many events the page holds.
    pub events: u64,
    /// The position of its last event.
    pub last: u64,
    pub decoded: D,
}

/// How long the pages ahead took to read and to decode.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AheadTimes {
    pub read: Duration,
    pub decode: Duration,
}

/// Reads the log's pages after `after` and decodes each, ahead of `consume`, which takes them in
/// order from its receiver: page `n + 2` is read and page `n + 1` decoded while `consume` folds
/// page `n` and commits page `n - 1`. The stages meet only through channels of one page, so none
/// waits for a step of another that it does not need (a lockstep pipeline waits at each page
/// for its slowest step). A failed read or decode is the last item `consume` receives; when
/// `consume` returns, its receiver is dropped and the stages ahead stop.
pub(crate) async fn read_ahead<D, Read, ReadFut, Decode, DecodeFut, Consume, ConsumeFut, T>(
    after: u64,
    read: Read,
    decode: Decode,
    consume: Consume,
) -> (AheadTimes, T)
where
    Read: Fn(u64) -> ReadFut,
    ReadFut: Future<Output = Result<Vec<RecordedEvent>, StoreError>>,
    Decode: Fn(Vec<RecordedEvent>) -> DecodeFut,
    DecodeFut: Future<Output = Result<D, StoreError>>,
    Consume: FnOnce(mpsc::Receiver<Result<DecodedPage<D>, StoreError>>) -> ConsumeFut,
    ConsumeFut: Future<Output = T>,
{
    let (read_tx, mut read_rx) = mpsc::channel::<Result<Vec<RecordedEvent>, StoreError>>(1);
    let (decoded_tx, decoded_rx) = mpsc::channel(1);
    let reader = async move {
        let (mut after, mut spent) = (after, Duration::ZERO);
        loop {
            let (events, took) = timed(read(after)).await;
            spent += took;
            let last = match &events {
                Ok(page) => page.last().map(|e| e.position),
                Err(_) => None,
            };
            let failed = events.is_err();
            if (last.is_none() && !failed) || read_tx.send(events).await.is_err() {
                return spent;
            }
            match last {
                Some(last) => after = last,
                None => return spent,
            }
        }
    };
    let decoder = async move {
        let mut spent = Duration::ZERO;
        while let Some(events) = read_rx.recv().await {
            let page = match events {
                Ok(events) => {
                    let (count, last) = (events.len() as u64, events.last().map(|e| e.position));
                    let (decoded, took) = timed(decode(events)).await;
                    spent += took;
                    decoded.map(|decoded| DecodedPage {
                        events: count,
                        last: last.unwrap_or(after),
                        decoded,
                    })
                }
                Err(error) => Err(error),
            };
            let failed = page.is_err();
            if decoded_tx.send(page).await.is_err() || failed {
                break;
            }
        }
        spent
    };
    let (read, decode, consumed) = tokio::join!(reader, decoder, consume(decoded_rx));
    (AheadTimes { read, decode }, consumed)
}
