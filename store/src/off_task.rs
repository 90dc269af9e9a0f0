//! CPU work of a catch-up moved off its async task: a leaf module, shared by the page runner,
//! the page reads and the ledger's rebuild without importing one another.

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
