//! The agent's wall clock: the one place it reads the time of day. The agent is its own program
//! on a provider's host; what it dates (its reports, its outbox's settlements, job counters) is
//! dated here, and the platform checks every date it receives against its own clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as RFC 3339 in UTC with microseconds (how reports carry `occurred_at`).
pub fn now_text() -> String {
    now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Now.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// Milliseconds since the Unix epoch (0 before it, which a host clock can be set to).
pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
