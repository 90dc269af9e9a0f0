//! What the writer has done since the process started, for `GET /metrics`: counters and
//! histograms of lock-free atomics, read without stopping the writer.
//!
//! Every figure is an integer (counts, microseconds); the exposition turns microseconds into
//! seconds when it prints them.

use std::sync::atomic::{AtomicU64, Ordering};

/// A histogram over fixed upper bounds (inclusive, ascending, integer units), with the sum and
/// count of what it observed, as Prometheus histograms are.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// One counter per bound plus the overflow (`+Inf`), not cumulative.
    buckets: Box<[AtomicU64]>,
    sum: AtomicU64,
    count: AtomicU64,
}

/// A histogram as read at one moment: cumulative counts per bound, as exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [u64],
    /// `cumulative[i]`: observations at most `bounds[i]`; one more entry for all of them.
    pub cumulative: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [u64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        if let Some(counter) = self.buckets.get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        // Saturating: a sum that would wrap stays at the maximum rather than going back to 0.
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| {
                Some(sum.saturating_add(value))
            });
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far. Taken while others observe, a bucket may count an observation the
    /// total does not yet, by one; the exposition's `+Inf` bucket is the cumulative sum, so it
    /// never disagrees with the buckets.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0_u64;
        let cumulative = self
            .buckets
            .iter()
            .map(|bucket| {
                running = running.saturating_add(bucket.load(Ordering::Relaxed));
                running
            })
            .collect::<Vec<_>>();
        HistogramSnapshot {
            bounds: self.bounds,
            count: cumulative.last().copied().unwrap_or(0),
            cumulative,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// Appends per group commit: 1 (idle) up to the queue's 4,096.
pub const GROUP_SIZE_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1_024, 4_096];

/// Microseconds one group transaction takes, from 100 µs to 10 s.
pub const COMMIT_MICROS_BOUNDS: &[u64] = &[
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// The writer's figures.
#[derive(Debug)]
pub struct WriterStats {
    /// Appends whose events were written.
    pub appends_committed: AtomicU64,
    /// Appends whose event ids were all already stored with the same content (nothing written).
    pub appends_replayed: AtomicU64,
    /// Appends refused by the store's rules (expected version, idempotency conflict, a
    /// reservation taken over).
    pub appends_refused: AtomicU64,
    /// Appends that failed because the database did (nothing written).
    pub appends_failed: AtomicU64,
    /// Group transactions committed.
    pub commits: AtomicU64,
    /// Group transactions that failed (their appends were retried alone or failed).
    pub commit_failures: AtomicU64,
    /// Events written.
    pub events: AtomicU64,
    /// Appends per committed group.
    pub group_size: Histogram,
    /// How long each committed group's transaction took, in microseconds.
    pub commit_micros: Histogram,
}

impl Default for WriterStats {
    fn default() -> Self {
        WriterStats {
            appends_committed: AtomicU64::new(0),
            appends_replayed: AtomicU64::new(0),
            appends_refused: AtomicU64::new(0),
            appends_failed: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            commit_failures: AtomicU64::new(0),
            events: AtomicU64::new(0),
            group_size: Histogram::new(GROUP_SIZE_BOUNDS),
            commit_micros: Histogram::new(COMMIT_MICROS_BOUNDS),
        }
    }
}

impl WriterStats {
    /// Counts one append's outcome.
    pub(crate) fn outcome(&self, outcome: &Result<crate::Committed, crate::AppendError>) {
        let counter = match outcome {
            Ok(committed) if committed.replayed => &self.appends_replayed,
            Ok(committed) => {
                self.events
                    .fetch_add(committed.events.len() as u64, Ordering::Relaxed);
                &self.appends_committed
            }
            Err(crate::AppendError::Store(_)) => &self.appends_failed,
            Err(_) => &self.appends_refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_value_in_the_first_bucket_that_holds_it() {
        let histogram = Histogram::new(&[1, 4, 16]);
        for value in [0, 1, 2, 4, 5, 16, 17, 1_000] {
            histogram.observe(value);
        }
        let snapshot = histogram.snapshot();
        // <=1: 0, 1; <=4: +2, 4; <=16: +5, 16; +Inf: +17, 1000.
        assert_eq!(snapshot.cumulative, vec![2, 4, 6, 8]);
        assert_eq!(snapshot.count, 8);
        assert_eq!(snapshot.sum, 1_045);
    }

    #[test]
    fn a_histogram_sum_saturates_instead_of_wrapping() {
        let histogram = Histogram::new(&[1]);
        histogram.observe(u64::MAX);
        histogram.observe(5);
        assert_eq!(histogram.snapshot().sum, u64::MAX);
        assert_eq!(histogram.snapshot().count, 2);
    }
}
