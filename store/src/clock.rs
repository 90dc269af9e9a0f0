//! The platform's one real clock: the only place outside the binaries' entry points that reads
//! the wall clock (checked by `tests/tests/tidy.rs`). Everything else is handed a
//! [`gpunex_domain::clock::Clock`].

use gpunex_domain::clock::Clock;
use gpunex_domain::time::Timestamp;

/// The system's wall clock, in microseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_micros(chrono::Utc::now().timestamp_micros())
    }
}
