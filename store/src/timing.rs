//! Where a catch-up's time goes: a leaf module, so that the rebuild, the page runner and the
//! store's rebuild entry points share it without importing one another.

use std::future::Future;
use std::time::{Duration, Instant};

/// Where a catch-up's time went, for the operator who rebuilds and for `bench scale`. Where pages
/// are pipelined (one is written while the next is folded and the one after it read: every
/// model but the payouts), `read`, `fold` and `write` overlap and may add up to more than
/// `total`; each alone is part of it. A step driven from the catch-up's own task (a commit
/// through sqlx sends each statement from it, a read takes its rows through it) also counts the
/// time it waited there while a page was decoded. Every model keeps its indexes up as it
/// writes: none is built after the load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUpTimes {
    /// The whole catch-up; for a rebuild, from emptying the tables to the swap and the vacuum.
    pub total: Duration,
    /// Reading pages of the log and decoding their events as they are read
    /// (`crate::read_decoded`).
    pub read: Duration,
    /// Folding the decoded events into rows (and encoding them).
    pub fold: Duration,
    /// Writing the rows and moving the checkpoint.
    pub write: Duration,
}

/// How long `step` takes, beside what it gives.
pub(crate) async fn timed<T>(step: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let value = step.await;
    (value, started.elapsed())
}
