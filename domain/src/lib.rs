//! The pure core of GPUnex: money, double-entry postings, stream ids and the event catalog.
//!
//! Nothing here performs IO, reads a clock or draws randomness: time and ids are arguments, so
//! the same input always gives the same output. That is what makes replay and audit possible.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accounts;
pub mod adjustments;
pub mod benchmark;
pub mod benchmark_log;
pub mod calendar;
pub mod clock;
pub mod codes;
pub mod credentials;
pub mod events;
pub mod fleet;
pub mod gpu;
pub mod ledger;
pub mod market;
pub mod metered_line;
pub mod metering;
pub mod money;
pub mod onboarding;
pub mod payouts;
pub mod pricing;
pub mod rental;
pub mod sepa_calendar;
pub mod splitmix;
pub mod stream;
pub mod time;

pub use events::{DecodeError, DomainEvent, EVENT_CATALOG, EventSpec};
pub use ledger::{Account, JournalEntry, JournalError, Posting, Side};
pub use money::{MoneyError, Rounding, Usdc};
pub use stream::{StreamId, StreamIdError};
pub use time::{Timestamp, Weekday};
