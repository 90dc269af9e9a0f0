//! CPU work of a catch-up moved off its async task: a leaf module, shared by the page runner
//! and the ledger's rebuild without importing one another.

use crate::StoreError;

/// Runs a fold's CPU work (decoding a page's events, folding them, encoding rows) on a blocking
/// thread. The catch-up's task joins the commit of one page, the read of the next and the fold
/// of this one; on PostgreSQL the commit and the read are I/O that task drives, so a fold
/// computed on it would hold both up until it ends.
pub(crate) async fn off_task<T, F>(work: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Direct(format!("a fold's thread failed: {e}")))?
}

/// Pages shorter than this (a live catch-up's few new events) are decoded on one thread: two
/// would cost more than they save.
const HALVES_FROM_EVENTS: usize = 512;

/// Decodes a page's events on two blocking threads at once, each half in order, and returns
/// what `decode` kept in the page's order. A catch-up's read and commit leave a core idle for
/// part of each page; this is where it goes.
pub(crate) async fn decode_in_halves<T, F>(
    mut events: Vec<crate::RecordedEvent>,
    decode: F,
) -> Result<Vec<T>, StoreError>
where
    T: Send + 'static,
    F: Fn(&crate::RecordedEvent) -> Option<Result<T, StoreError>> + Send + Sync + Copy + 'static,
{
    let second = match events.len() {
        short if short < HALVES_FROM_EVENTS => Vec::new(),
        long => events.split_off(long / 2),
    };
    let half = |events: Vec<crate::RecordedEvent>| {
        off_task(move || {
            events
                .iter()
                .filter_map(decode)
                .collect::<Result<Vec<T>, _>>()
        })
    };
    if second.is_empty() {
        return half(events).await;
    }
    let (first, second) = tokio::try_join!(half(events), half(second))?;
    let mut decoded = first;
    decoded.extend(second);
    Ok(decoded)
}
