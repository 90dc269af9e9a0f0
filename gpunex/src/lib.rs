//! The `gpunex` binary's library: the operator commands (`cli`), the seeded marketplace
//! simulation and the benchmarks. The server itself is `gpunex-api`; this crate only assembles
//! and drives it.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod bench;
pub mod bench_benchmarks;
pub mod bench_console;
pub mod bench_earnings;
pub mod bench_payouts;
pub mod bench_scale;
pub mod bench_search;
pub mod cli;
pub mod copy;
pub mod database;
pub mod simulate;
