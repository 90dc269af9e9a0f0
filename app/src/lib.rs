//! The application layer, between HTTP (`gpunex-api`) and storage and rules (`gpunex-store`,
//! `gpunex-projections`, `gpunex-domain`): the command executor, the commands built on it, the
//! read models a process hosts and how a command waits for them. It knows nothing of HTTP.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accounts;
pub mod adjustments;
pub mod applications;
pub mod benchmarks;
pub mod catalog;
pub mod command;
pub mod credentials;
pub mod error;
pub mod fleet;
pub mod listings;
pub mod market;
pub mod outbox;
pub mod payout_run;
pub mod payout_send;
pub mod payouts;
pub mod presence;
pub mod read_models;
pub mod rentals;
pub mod runner;
pub mod snapshot;

pub use error::AppError;
pub use read_models::ReadModels;
