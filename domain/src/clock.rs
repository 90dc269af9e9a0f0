//! Where "now" comes from. Nothing in the platform reads the wall clock except the one real
//! implementation (`gpunex_store::SystemClock`) that the binary's entry point hands in; every
//! other piece of code is given a [`Clock`], so tests and the simulation move time instead of
//! waiting for it. (Checked by `tests/tests/tidy.rs`.)

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::time::Timestamp;

/// A source of the current instant.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> Timestamp;
}

/// A clock shared by every part of a process.
pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told to: tests, and the simulation's simulated time. It never
/// goes backwards unless `set` is given an earlier instant.
#[derive(Debug)]
pub struct ManualClock {
    micros: AtomicI64,
}

impl ManualClock {
    pub fn starting_at(at: Timestamp) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            micros: AtomicI64::new(at.unix_micros()),
        })
    }

    pub fn set(&self, at: Timestamp) {
        self.micros.store(at.unix_micros(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `micros` (saturating) and returns the new instant.
    pub fn advance_micros(&self, micros: i64) -> Timestamp {
        let micros = micros.max(0);
        let previous = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                Some(m.saturating_add(micros))
            })
            .unwrap_or_else(|m| m);
        Timestamp::from_unix_micros(previous.saturating_add(micros))
    }

    /// Moves the clock forward by whole seconds.
    pub fn advance_seconds(&self, seconds: i64) -> Timestamp {
        self.advance_micros(seconds.saturating_mul(crate::time::MICROS_PER_SECOND))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(self.micros.load(Ordering::SeqCst))
    }
}

/// Another clock moved ahead by an offset that only grows: time flows as the inner clock's,
/// and `advance_seconds` jumps it forward. Debug builds of `gpunex serve` use it for the browser
/// suite (`GPUNEX_TEST_CLOCK_STEP_DAYS`), which must reach a payout date after usage it made.
#[derive(Debug)]
pub struct OffsetClock {
    inner: SharedClock,
    offset_micros: AtomicI64,
}

impl OffsetClock {
    pub fn over(inner: SharedClock) -> Arc<OffsetClock> {
        Arc::new(OffsetClock {
            inner,
            offset_micros: AtomicI64::new(0),
        })
    }

    /// Moves the clock forward by whole seconds (never back); answers the new instant.
    pub fn advance_seconds(&self, seconds: i64) -> Timestamp {
        let step = seconds
            .max(0)
            .saturating_mul(crate::time::MICROS_PER_SECOND);
        self.offset_micros.fetch_add(step, Ordering::SeqCst);
        self.now()
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(
            self.inner
                .now()
                .unix_micros()
                .saturating_add(self.offset_micros.load(Ordering::SeqCst)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_clock_flows_with_its_inner_clock_and_jumps_ahead() {
        let inner = ManualClock::starting_at(Timestamp::from_unix_micros(1_000));
        let clock = OffsetClock::over(inner.clone());
        assert_eq!(clock.now().unix_micros(), 1_000);
        inner.advance_micros(5);
        assert_eq!(clock.now().unix_micros(), 1_005);
        assert_eq!(clock.advance_seconds(2).unix_micros(), 2_001_005);
        clock.advance_seconds(-9);
        assert_eq!(clock.now().unix_micros(), 2_001_005, "never back");
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::starting_at(Timestamp::from_unix_micros(1_000));
        assert_eq!(clock.now().unix_micros(), 1_000);
        assert_eq!(clock.advance_seconds(2).unix_micros(), 2_001_000);
        assert_eq!(clock.now().unix_micros(), 2_001_000);
        clock.advance_micros(-5);
        assert_eq!(
            clock.now().unix_micros(),
            2_001_000,
            "never backwards by advancing"
        );
        clock.set(Timestamp::from_unix_micros(7));
        assert_eq!(clock.now().unix_micros(), 7);
        let shared: SharedClock = clock;
        assert_eq!(shared.now().unix_micros(), 7);
    }
}
