//! The GPUnex HTTP API (the `gpunex` binary in the `gpunex` crate serves it).
//!
//! Only this crate knows HTTP. Handlers parse input at the edge, call the store, and convert
//! results into `gpunex-wire` types; errors become RFC 9457 problem documents with stable codes.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accounts;
pub mod adjustments;
pub mod agent;
pub mod applications;
pub mod auth;
pub mod benchmarks;
pub mod catalog;
pub mod console;
pub mod convert;
pub mod docs;
pub mod earnings;
pub mod error;
pub mod fleet;
pub mod http_server;
pub mod idempotency;
pub mod installer;
pub mod json;
pub mod login_limit;
pub mod market;
pub mod metrics;
pub mod params;
pub mod payout_run;
pub mod payouts;
pub mod presented;
pub mod pricing;
pub mod reconcile;
pub mod rentals;
pub mod routes;
pub mod server;
pub mod state;
pub mod tokens;

pub use server::router;
pub use state::AppState;
