//! Benchmark runs (issue 18): what an agent reports, and a GPU's runs, score and verdict as the
//! API and the console show them. Figures are integers in thousandths of their unit, ratios and
//! scores in basis points (10,000 is the model's reference), as `docs/benchmarks.md` says.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::benchmark::{
    Figure, HealthSignals, Implausible, Metric, Outcome, Part, PcieUnderLoad, Reason, Reference,
    ReferenceSource, Run, Verdict,
};
pub use gpunex_domain::benchmark_log::Environment;

/// An agent event: one run of the suite on one GPU of the machine. The event's id is the run's
/// id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkRunReport {
    pub machine_id: Uuid,
    pub gpu_uuid: String,
    /// The simulated profile that produced the run (simulated machines only); `null` on a real
    /// GPU.
    pub simulated_profile: Option<String>,
    pub environment: Environment,
    pub run: Run,
    /// RFC 3339, the agent's clock.
    pub started_at: String,
    pub finished_at: String,
}

/// An agent event: the agent cannot run the suite on one GPU of the machine (no CUDA driver
/// library or cuBLAS on the host, the GPU in MIG mode, the suite failing on it). Sent once per GPU
/// and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkSkippedReport {
    pub machine_id: Uuid,
    pub gpu_uuid: String,
    /// One or more sentences, at most 500 characters.
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// Why the agent of the GPU's machine cannot run the suite on it, until a run is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SuiteSkippedView {
    pub reason: String,
    pub at: String,
}

/// One run as the tab lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BenchmarkRunView {
    pub run_id: Uuid,
    pub recorded_at: String,
    pub started_at: String,
    pub finished_at: String,
    pub driver_version: String,
    pub simulated_profile: Option<String>,
    pub score_bp: u64,
    /// The score as a percentage of the reference, two decimals.
    pub score_pct: String,
    pub outcome: Outcome,
}

/// A run refused as implausible.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RefusedRunView {
    pub run_id: Uuid,
    pub recorded_at: String,
    pub reason: Implausible,
}

/// The latest accepted run in full: what it ran under, its health signals, its score's parts
/// (each figure against its reference) and its verdict with reasons and guidance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LatestBenchmarkView {
    pub run: BenchmarkRunView,
    /// Every figure of the run (host figures included), median and spread.
    pub figures: Vec<Figure>,
    pub environment: Environment,
    pub health: HealthSignals,
    pub parts: Vec<Part>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BenchmarkConsistencyView {
    pub runs: u64,
    /// Highest minus lowest score of the runs shown.
    pub spread_bp: Option<u64>,
    /// The last runs' median score against the first runs' median, basis points.
    pub last_vs_first_bp: Option<u64>,
}

/// An automatic delisting or relisting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BenchmarkActionView {
    pub delisted: bool,
    pub run_id: Uuid,
    pub score_bp: u64,
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BenchmarkOverrideView {
    pub run_id: Uuid,
    pub reason: String,
    pub by: String,
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetestView {
    pub by_admin: bool,
    pub reason: String,
    pub at: String,
}

/// `GET /v1/gpus/{gpu_uuid}/benchmarks`: the GPU's "Pruebas de rendimiento".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GpuBenchmarksView {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub model_id: String,
    /// `not_benchmarked`, `listed`, `delisted` (by its verdict) or `overridden` (an admin keeps
    /// it listed despite its verdict).
    pub benchmark_listing: String,
    pub score_bp: Option<u64>,
    pub score_pct: Option<String>,
    pub latest: Option<LatestBenchmarkView>,
    /// Oldest first: the first runs, then the latest ones (at most 15 in all).
    pub runs: Vec<BenchmarkRunView>,
    pub runs_total: u64,
    pub refused: Vec<RefusedRunView>,
    pub refused_total: u64,
    pub consistency: BenchmarkConsistencyView,
    pub last_action: Option<BenchmarkActionView>,
    #[serde(rename = "override")]
    pub override_set: Option<BenchmarkOverrideView>,
    /// A re-test waiting for the agent.
    pub retest: Option<RetestView>,
    /// Set while automatic delisting is paused fleet-wide.
    pub delisting_paused: Option<String>,
    /// Why the agent skips this GPU's suite, if it does (cleared by the next run).
    pub suite_skipped: Option<SuiteSkippedView>,
}

/// `POST /v1/gpus/{gpu_uuid}/benchmarks/retest`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "replaced the fan; please test again"})))]
pub struct RetestRequest {
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// `POST /v1/gpus/{gpu_uuid}/benchmarks/override`: `keep_listed: true` keeps the GPU listed
/// whatever the verdict on its latest run (until a newer run or `keep_listed: false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"keep_listed": true, "reason": "the failing figure is a known driver issue on this host; checked by hand"})))]
pub struct BenchmarkOverrideRequest {
    pub keep_listed: bool,
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// `POST /v1/admin/benchmarks/resume`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "driver 555.42 rolled back on the affected hosts"})))]
pub struct ResumeDelistingRequest {
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// The fleet's automatic-delisting state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DelistingState {
    pub paused: bool,
    pub evidence: Option<String>,
}
