//! The snapshot of the read models a process keeps in memory (ADR 0007): every model at one log
//! position, as JSON, in the store's `read_model_snapshots`. A process starts from the newest
//! snapshot its binary can read and folds only the events after it, so start-up does not grow
//! with the log. A snapshot is derived data: one that is missing, of another format, or does not
//! match the log at its position is ignored (the process folds from position 0 and writes a new
//! one), and `audit verify` proves a stored one equals the fold of the log.

use gpunex_domain::gpu::ModelAdded;
use gpunex_projections::accounts::Users;
use gpunex_projections::adjustments::Adjustments;
use gpunex_projections::applications::Applications;
use gpunex_projections::credentials::Credentials;
use gpunex_projections::earnings::Earnings;
use gpunex_projections::fleet::Fleet;
use gpunex_projections::market::Market;
use serde::{Deserialize, Serialize};

/// The snapshot's name in `read_model_snapshots`.
pub const SNAPSHOT_NAME: &str = "read_models";

/// The snapshot's format. Bump it whenever a model's fields change: a binary reads only its own
/// format and folds the log from position 0 otherwise.
/// 2: the market keeps only open rentals (the others are in the stored rentals projection).
/// 3: the market keeps each provider's market stream version (for the market commands).
/// 4: the payout book keeps only open payouts and batch heads (the rest is in the stored payouts
///    projection).
/// 5: the market keeps the benchmark model (runs, scores, verdicts, automatic listing state).
/// 6: the benchmark model keeps why an agent skips a GPU's suite.
/// 7: the fleet keeps a month of presence transitions per machine, and from when (the rest is
///    in the stored presence history); the credentials forget a token a day after it expires.
/// 8: the market keeps only the prices that can still be in force and those set in the last day,
///    with their positions (the rest is in the stored price history), and forgets maintenance
///    over for more than a day when more is announced.
pub const SNAPSHOT_FORMAT: u32 = 8;

/// Events applied after which the follower writes a new snapshot; also the most a start folds
/// after the newest snapshot (while this process or another keeps following the log).
pub const SNAPSHOT_EVERY_EVENTS: u64 = 50_000;

/// The models' names, in the order the snapshot holds them (for reports).
pub const MODELS: [&str; 8] = [
    "credentials",
    "users",
    "applications",
    "models",
    "fleet",
    "market",
    "earnings",
    "adjustments",
];

/// A snapshot as written: borrowed from the live models.
#[derive(Serialize)]
pub(crate) struct BodyRef<'a> {
    /// The hash of the event at `position` (hex): a snapshot is used only on the log it was
    /// folded from.
    pub position_hash: &'a str,
    pub credentials: &'a Credentials,
    pub users: &'a Users,
    pub applications: &'a Applications,
    pub models: &'a [ModelAdded],
    pub fleet: &'a Fleet,
    pub market: &'a Market,
    pub earnings: &'a Earnings,
    pub adjustments: &'a Adjustments,
}

/// A snapshot as read.
#[derive(Deserialize)]
pub(crate) struct Body {
    pub position_hash: String,
    pub credentials: Credentials,
    pub users: Users,
    pub applications: Applications,
    pub models: Vec<ModelAdded>,
    pub fleet: Fleet,
    pub market: Market,
    pub earnings: Earnings,
    pub adjustments: Adjustments,
}

/// What `audit verify` found of the stored snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotCheck {
    /// No snapshot is stored.
    Missing,
    /// Written by a binary of another format: this one ignores it.
    OtherFormat { position: u64, format: u32 },
    /// Equal to the fold of the log up to its position.
    Matches { position: u64 },
    /// These models differ from the fold of the log up to `position`, or the snapshot cannot be
    /// read or belongs to another log (`reason`).
    Differs {
        position: u64,
        models: Vec<&'static str>,
        reason: Option<String>,
    },
}

impl SnapshotCheck {
    /// Whether the check found a problem.
    pub fn is_problem(&self) -> bool {
        matches!(self, SnapshotCheck::Differs { .. })
    }
}

/// The models of a serialized snapshot that differ from another's, compared as JSON values (so
/// map order does not matter).
pub(crate) fn differing_models(a: &serde_json::Value, b: &serde_json::Value) -> Vec<&'static str> {
    MODELS
        .iter()
        .copied()
        .filter(|model| a.get(model) != b.get(model))
        .collect()
}
