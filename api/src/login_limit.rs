//! Failed sign-ins per address, counted in this process, and the lockout they cause.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failed sign-ins allowed per address within [`LOGIN_WINDOW`] before further tries are refused.
pub const LOGIN_FAILURES_MAX: usize = 5;
pub const LOGIN_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Addresses the limiter remembers at most; the oldest are forgotten first.
const LIMITER_ADDRESSES_MAX: usize = 100_000;

/// Failed sign-ins per address, in this process.
#[derive(Clone, Default)]
pub struct LoginLimiter {
    failures: Arc<Mutex<HashMap<String, VecDeque<Instant>>>>,
}

impl LoginLimiter {
    /// Counts a sign-in attempt for `address` before the password is checked, so concurrent
    /// attempts count too; refuses it (with the seconds to wait) when the address is locked out.
    /// A successful sign-in clears the count.
    pub(crate) fn begin_attempt(&self, address: &str, now: Instant) -> Result<(), u64> {
        let Ok(mut attempts) = self.failures.lock() else {
            return Ok(());
        };
        if !attempts.contains_key(address) && attempts.len() >= LIMITER_ADDRESSES_MAX {
            attempts.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < LOGIN_WINDOW)
            });
            if attempts.len() >= LIMITER_ADDRESSES_MAX {
                // Full of recent attempts: forget the address whose last attempt is oldest,
                // rather than stop limiting new ones.
                let oldest = attempts
                    .iter()
                    .min_by_key(|(_, times)| times.back().copied())
                    .map(|(address, _)| address.clone());
                if let Some(oldest) = oldest {
                    attempts.remove(&oldest);
                }
            }
        }
        let recent = attempts.entry(address.to_owned()).or_default();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= LOGIN_WINDOW)
        {
            recent.pop_front();
        }
        if recent.len() >= LOGIN_FAILURES_MAX {
            let wait = recent.front().map_or(1, |first| {
                (LOGIN_WINDOW - now.duration_since(*first)).as_secs().max(1)
            });
            return Err(wait);
        }
        recent.push_back(now);
        Ok(())
    }

    pub(crate) fn clear(&self, address: &str) {
        if let Ok(mut failures) = self.failures.lock() {
            failures.remove(address);
        }
    }
}
