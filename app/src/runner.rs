//! The server's background projection runner: folds new events as they commit.

use std::time::Duration;

use gpunex_store::Store;

/// Longest a runner sleeps without a head notification before looking again.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Wait after a failed run before retrying.
const RETRY_DELAY_MAX: Duration = Duration::from_secs(30);

/// Runs forever: catch up, then wait for the head to move (or a poll interval) and repeat.
pub async fn run_projections(store: Store) {
    let mut head = store.head_watch().await;
    let mut retry_delay = Duration::from_millis(100);
    loop {
        head.borrow_and_update();
        match store.run_projections().await {
            Ok(report) => {
                retry_delay = Duration::from_millis(100);
                if report.events > 0 {
                    tracing::debug!(
                        events = report.events,
                        checkpoint = report.checkpoint,
                        "projections caught up"
                    );
                }
                let _ = tokio::time::timeout(POLL_INTERVAL, head.changed()).await;
            }
            Err(error @ gpunex_store::StoreError::Fold(_)) => {
                // An event the fold cannot apply: an invariant broke; `audit verify` locates it.
                tracing::error!(%error, "projection stopped at an event it cannot fold");
                tokio::time::sleep(RETRY_DELAY_MAX).await;
            }
            Err(error) => {
                tracing::warn!(%error, retry_in_ms = retry_delay.as_millis() as u64, "projection run failed");
                tokio::time::sleep(retry_delay).await;
                retry_delay = (retry_delay * 2).min(RETRY_DELAY_MAX);
            }
        }
    }
}
