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

#[cfg(test)]
mod tests {
    use super::*;

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
