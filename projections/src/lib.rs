//! Read models as pure folds over the event log, and the runner that keeps them current.
//!
//! A projection here is two things: a pure fold (`fold_batch`) from decoded events to a
//! changeset, and a backend (implemented by `gpunex-store`) that writes the changeset and the
//! projection's checkpoint in one transaction. The fold never sees a database; the backend never
//! sees a rule. `audit verify` runs the same folds in memory and compares.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accounts;
pub mod adjustments;
pub mod applications;
pub mod benchmarks;
pub mod credentials;
pub mod earnings;
pub mod earnings_lines;
pub mod fleet;
pub mod ledger;
pub mod market;
pub mod payout_history;
pub mod payouts;
pub mod presence_history;
pub mod price_history;
pub mod reconcile;
pub mod rentals;
pub mod runner;
pub mod serde_pairs;

use gpunex_domain::{DomainEvent, StreamId};
use uuid::Uuid;

pub use runner::{JournalPage, ProjectionBackend, RunReport, catch_up};

/// The name of every projection, in the order they are run and audited.
pub const PROJECTIONS: &[&str] = &[
    ledger::LEDGER,
    earnings_lines::EARNINGS,
    rentals::RENTALS,
    payout_history::PAYOUTS,
    presence_history::PRESENCE,
    price_history::PRICES,
];

/// An event as projections see it: decoded at its current schema version, with its place in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectedEvent {
    pub position: u64,
    pub event_id: Uuid,
    pub stream_id: StreamId,
    pub stream_version: u64,
    pub recorded_at_us: i64,
    pub event: DomainEvent,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    #[error("account {account} overflows at position {position}")]
    BalanceOverflow { account: String, position: u64 },
    #[error(
        "event at position {position} arrived after position {previous}: a fold needs increasing positions"
    )]
    OutOfOrder { position: u64, previous: u64 },
}

impl FoldError {
    /// The log position of the event that could not be folded.
    pub fn position(&self) -> u64 {
        match self {
            FoldError::BalanceOverflow { position, .. }
            | FoldError::OutOfOrder { position, .. } => *position,
        }
    }
}
