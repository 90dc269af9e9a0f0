//! The benchmark events (issue 18) and the pure decisions that make them: a run its machine's
//! agent reports (accepted with the references it was scored against, or refused as
//! implausible), re-tests asked for by the provider or an admin, admin overrides, and the
//! automatic listing actions with the fleet's safety rules.
//!
//! Streams: a GPU's runs, re-test requests and overrides are in `gpu_benchmarks-{gpu_uuid}`;
//! the automatic delistings and relistings, and the pauses of automatic delisting, are in one
//! fleet stream, [`ACTIONS_STREAM`], appended at its expected version, so two processes cannot
//! both spend the same hour's delisting budget.
//!
//! The score and the verdict are not stored: they are [`assess`] of the stored run and the
//! references it carries, a pure function of the log, so any past verdict replays.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::benchmark::{
    self, Implausible, ListingAction, METHOD_VERSION, Metric, Outcome, Reference, Run, Score,
    Verdict,
};
use crate::codes::ErrorCode;
use crate::gpu::{GPU_CATALOG, GpuModel, GpuVariant};
use crate::time::Timestamp;

/// The fleet stream of automatic listing actions.
pub const ACTIONS_STREAM: &str = "benchmark_actions-fleet";
/// A provider may ask for a re-test of one GPU once an hour.
pub const PROVIDER_RETEST_EVERY_MICROS: i64 = 3_600 * 1_000_000;
/// The window of the delisting rate limit and of the anomaly rule.
pub const ACTION_WINDOW_MICROS: i64 = 3_600 * 1_000_000;
/// At most `max(DELIST_PER_HOUR_MIN, DELIST_PER_HOUR_FLEET_BP of the model's fleet)` automatic
/// delistings of one model in any hour.
pub const DELIST_PER_HOUR_MIN: usize = 3;
pub const DELIST_PER_HOUR_FLEET_BP: usize = 1_000;
/// A group of GPUs of one model on one driver with at least this many GPUs, of which at least
/// [`ANOMALY_FAILING_BP`] fail at once, is an anomaly: automatic delisting pauses.
pub const ANOMALY_MIN_GPUS: usize = 5;
pub const ANOMALY_FAILING_BP: usize = 5_000;
/// Longest suite the platform accepts (start to finish).
pub const RUN_DURATION_MAX_MICROS: i64 = 3_600 * 1_000_000;
/// An agent's clock may run this far ahead of the platform's.
pub const CLOCK_SKEW_MAX_MICROS: i64 = 300 * 1_000_000;
/// Longest driver or CUDA version text.
pub const VERSION_TEXT_MAX: usize = 64;
/// Most XIDs one run may carry.
pub const XIDS_MAX: usize = 64;
/// Longest reason text of an override, a re-test or a resume.
pub const REASON_MAX: usize = 500;

/// The GPU's benchmark stream.
pub fn gpu_stream_name(gpu_uuid: &str) -> String {
    format!("gpu_benchmarks-{gpu_uuid}")
}

/// What the suite ran under, as the agent read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub driver_version: String,
    pub cuda_version: String,
    /// SM and memory clocks under load, MHz (medians of the sustained phase).
    pub sm_clock_mhz: u32,
    pub memory_clock_mhz: u32,
    /// Temperature before the load, C.
    pub idle_temperature_c: i32,
    pub mig_enabled: bool,
    /// How long the sustained phase ran, seconds.
    pub sustained_seconds: u32,
}

impl Environment {
    /// What a simulated suite reports it ran under: typical H100-class clocks under load and an
    /// idle temperature, with the host's driver and CUDA versions.
    pub fn simulated(driver: &str, cuda: &str, mig_enabled: bool, sustained_seconds: u32) -> Self {
        Environment {
            driver_version: driver.to_owned(),
            cuda_version: cuda.to_owned(),
            sm_clock_mhz: 1_755,
            memory_clock_mhz: 2_619,
            idle_temperature_c: 34,
            mig_enabled,
            sustained_seconds,
        }
    }
}

/// `benchmark.run_recorded`: an accepted run and the reference of each scored figure at the
/// time it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecorded {
    pub run_id: Uuid,
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: String,
    pub form_factor: String,
    /// The simulated profile that produced the run; `None` for a real GPU.
    pub simulated_profile: Option<String>,
    pub environment: Environment,
    pub run: Run,
    pub references: Vec<MetricReference>,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub recorded_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct MetricReference {
    pub metric: Metric,
    pub reference: Reference,
}

/// `benchmark.run_refused`: a run whose figures cannot be true, kept with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRefused {
    pub run_id: Uuid,
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: String,
    pub reason: Implausible,
    pub run: Run,
    pub recorded_at: Timestamp,
}

/// `benchmark.retest_requested`: the provider or an admin asks for the suite to run again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetestRequested {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub by: String,
    pub by_admin: bool,
    pub reason: String,
    pub at: Timestamp,
}

/// `benchmark.suite_skipped`: the machine's agent cannot run the suite on this GPU (no CUDA
/// driver library or cuBLAS on the host, the GPU in MIG mode, the suite failing on it), in its
/// own words; shown to the provider until a run is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSkipped {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub reason: String,
    pub at: Timestamp,
}

/// `benchmark.override_set`: an admin keeps the GPU listed whatever the verdict on its latest
/// run (`run_id`); the override ends when an admin clears it or when a newer run is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSet {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub run_id: Uuid,
    pub reason: String,
    pub by: String,
    pub at: Timestamp,
}

/// `benchmark.override_cleared`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideCleared {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub by: String,
    pub at: Timestamp,
}

/// `benchmark.gpu_delisted` / `benchmark.gpu_relisted`: the automatic action on a run's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListingActed {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub model_id: String,
    pub run_id: Uuid,
    pub score_bp: u64,
    pub verdict: Verdict,
    pub at: Timestamp,
}

/// `benchmark.delisting_paused`: a fleet-wide anomaly; automatic delisting waits for an
/// operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelistingPaused {
    pub model_id: String,
    pub driver_version: String,
    /// GPUs of the group failing, and GPUs in the group.
    pub failing: u32,
    pub gpus: u32,
    pub evidence: String,
    pub at: Timestamp,
}

/// `benchmark.delisting_resumed`: an operator resumes automatic delisting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelistingResumed {
    pub by: String,
    pub reason: String,
    pub at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchmarkEvent {
    RunRecorded(Box<RunRecorded>),
    RunRefused(Box<RunRefused>),
    RetestRequested(RetestRequested),
    SuiteSkipped(SuiteSkipped),
    OverrideSet(OverrideSet),
    OverrideCleared(OverrideCleared),
    GpuDelisted(ListingActed),
    GpuRelisted(ListingActed),
    DelistingPaused(DelistingPaused),
    DelistingResumed(DelistingResumed),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BenchmarkRejection {
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("method version {0} is not supported; this platform reads version {METHOD_VERSION}")]
    UnsupportedMethod(u32),
    #[error("the GPU is not a catalog model with datasheet figures; it cannot be scored")]
    NotBenchmarkable,
    #[error("a simulated profile was sent for a real machine, or none for a simulated one")]
    SimulationMismatch,
    #[error("a re-test of this GPU is already waiting for the agent")]
    RetestPending,
    #[error("a re-test of this GPU was asked for less than an hour ago; next from {next}")]
    RetestTooSoon { next: String },
    #[error("the GPU has no recorded run to override")]
    NothingToOverride,
    #[error("the GPU has no override")]
    NoOverride,
    #[error("automatic delisting is not paused")]
    NotPaused,
}

impl BenchmarkRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            BenchmarkRejection::Invalid { .. } => ErrorCode::InvalidBenchmark,
            BenchmarkRejection::UnsupportedMethod(_) => ErrorCode::UnsupportedBenchmarkMethod,
            BenchmarkRejection::NotBenchmarkable => ErrorCode::NotBenchmarkable,
            BenchmarkRejection::SimulationMismatch => ErrorCode::SimulationMismatch,
            BenchmarkRejection::RetestPending => ErrorCode::RetestPending,
            BenchmarkRejection::RetestTooSoon { .. } => ErrorCode::RetestTooSoon,
            BenchmarkRejection::NothingToOverride => ErrorCode::NothingToOverride,
            BenchmarkRejection::NoOverride => ErrorCode::NoOverride,
            BenchmarkRejection::NotPaused => ErrorCode::NotPaused,
        }
    }
}

fn invalid(field: &str, reason: impl Into<String>) -> BenchmarkRejection {
    BenchmarkRejection::Invalid {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

/// A run as the agent submits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub run_id: Uuid,
    pub simulated_profile: Option<String>,
    pub environment: Environment,
    pub run: Run,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
}

/// The registered GPU a run is for, as the fleet knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchedGpu {
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: Option<String>,
    pub pci_device_id: Option<u16>,
    pub simulated: bool,
}

/// The catalog model and form factor a GPU is scored as: the variant its PCI device id names,
/// else the one whose default power limit is nearest the run's (an H100 PCIe draws 350 W, an
/// SXM 700 W).
pub fn model_of(
    model_id: &str,
    pci_device_id: Option<u16>,
    default_power_w: u32,
) -> Option<(&'static GpuModel, &'static GpuVariant)> {
    let model = GPU_CATALOG.iter().find(|m| m.id == model_id)?;
    let variant = pci_device_id
        .and_then(|id| model.variants.iter().find(|v| v.pci_device_id == Some(id)))
        .or_else(|| {
            model
                .variants
                .iter()
                .min_by_key(|v| v.power_w.abs_diff(default_power_w))
        })?;
    Some((model, variant))
}

/// The variant a recorded run names.
pub fn variant_of(
    model_id: &str,
    form_factor: &str,
) -> Option<(&'static GpuModel, &'static GpuVariant)> {
    let model = GPU_CATALOG.iter().find(|m| m.id == model_id)?;
    let variant = model
        .variants
        .iter()
        .find(|v| v.form_factor == form_factor)?;
    Some((model, variant))
}

fn check_text(field: &str, text: &str) -> Result<(), BenchmarkRejection> {
    if text.is_empty() || text.len() > VERSION_TEXT_MAX || text.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("1 to {VERSION_TEXT_MAX} printable characters"),
        ));
    }
    Ok(())
}

/// Decides a submitted run of `gpu` at `now`: recorded with its references
/// (`fleet(model_id, metric)`: how many of the model's GPUs have an accepted figure, and their
/// median), refused as implausible (also an event), or rejected as malformed (nothing is
/// written).
pub fn decide_record(
    gpu: &BenchedGpu,
    submitted: Submitted,
    fleet: impl Fn(&str, Metric) -> (usize, Option<u64>),
    now: Timestamp,
) -> Result<BenchmarkEvent, BenchmarkRejection> {
    let run = &submitted.run;
    if run.method_version != METHOD_VERSION {
        return Err(BenchmarkRejection::UnsupportedMethod(run.method_version));
    }
    if run.gpu_uuid != gpu.gpu_uuid {
        return Err(invalid(
            "run/gpu_uuid",
            "not the GPU the run is reported for",
        ));
    }
    if submitted.simulated_profile.is_some() != gpu.simulated {
        return Err(BenchmarkRejection::SimulationMismatch);
    }
    if let Some(profile) = &submitted.simulated_profile
        && benchmark::simulated::Profile::parse(profile).is_none()
    {
        return Err(invalid("simulated_profile", "not a simulated profile"));
    }
    check_text(
        "environment/driver_version",
        &submitted.environment.driver_version,
    )?;
    check_text(
        "environment/cuda_version",
        &submitted.environment.cuda_version,
    )?;
    if run.figures.is_empty() || run.figures.len() > Metric::ALL.len() {
        return Err(invalid(
            "run/figures",
            format!("1 to {} figures", Metric::ALL.len()),
        ));
    }
    if run.health.xids.len() > XIDS_MAX {
        return Err(invalid("run/health/xids", format!("at most {XIDS_MAX}")));
    }
    let (started, finished) = (submitted.started_at, submitted.finished_at);
    if finished < started
        || finished.unix_micros() - started.unix_micros() > RUN_DURATION_MAX_MICROS
    {
        return Err(invalid(
            "finished_at",
            "after started_at, at most an hour later",
        ));
    }
    if finished.unix_micros() > now.unix_micros() + CLOCK_SKEW_MAX_MICROS {
        return Err(invalid(
            "finished_at",
            "more than 5 minutes ahead of the platform's clock; fix the host's time (NTP)",
        ));
    }
    let model_id = gpu
        .model_id
        .as_deref()
        .ok_or(BenchmarkRejection::NotBenchmarkable)?;
    let (model, variant) = model_of(
        model_id,
        gpu.pci_device_id,
        run.health.default_power_limit_w,
    )
    .ok_or(BenchmarkRejection::NotBenchmarkable)?;
    if let Err(reason) = benchmark::check_plausible(variant, run) {
        return Ok(BenchmarkEvent::RunRefused(Box::new(RunRefused {
            run_id: submitted.run_id,
            gpu_uuid: gpu.gpu_uuid.clone(),
            machine_id: gpu.machine_id,
            provider_id: gpu.provider_id,
            model_id: model.id.to_owned(),
            reason,
            run: submitted.run,
            recorded_at: now,
        })));
    }
    let references = run
        .figures
        .iter()
        .filter(|f| benchmark::weight_bp(f.metric) > 0)
        .filter_map(|f| {
            let (gpus, median) = fleet(model.id, f.metric);
            benchmark::reference_of_median(
                model,
                variant,
                f.metric,
                run.health.pcie.as_ref(),
                gpus,
                median,
            )
            .map(|reference| MetricReference {
                metric: f.metric,
                reference,
            })
        })
        .collect();
    Ok(BenchmarkEvent::RunRecorded(Box::new(RunRecorded {
        run_id: submitted.run_id,
        gpu_uuid: gpu.gpu_uuid.clone(),
        machine_id: gpu.machine_id,
        provider_id: gpu.provider_id,
        model_id: model.id.to_owned(),
        form_factor: variant.form_factor.to_owned(),
        simulated_profile: submitted.simulated_profile,
        environment: submitted.environment,
        run: submitted.run,
        references,
        started_at: submitted.started_at,
        finished_at: submitted.finished_at,
        recorded_at: now,
    })))
}

/// The verdict reason of a run whose model and form factor this catalog does not know.
const UNKNOWN_VARIANT: &str = "unknown_variant";

/// The score and verdict of a recorded run: a pure function of what the event stores.
pub fn assess(recorded: &RunRecorded) -> (Score, Verdict) {
    let score = benchmark::score(&recorded.run, |metric| {
        recorded
            .references
            .iter()
            .find(|r| r.metric == metric)
            .map(|r| r.reference)
    });
    let verdict = match variant_of(&recorded.model_id, &recorded.form_factor) {
        Some((_, variant)) => benchmark::verdict(variant, &recorded.run, &score),
        None => Verdict {
            outcome: Outcome::Warn,
            reasons: vec![benchmark::Reason {
                code: UNKNOWN_VARIANT.to_owned(),
                outcome: Outcome::Warn,
                evidence: format!(
                    "{} {} is not in this catalog",
                    recorded.model_id, recorded.form_factor
                ),
                guidance: "Nothing to do: the platform scores it again when its catalog knows it."
                    .to_owned(),
            }],
            version: benchmark::VERDICT_VERSION,
        },
    };
    (score, verdict)
}

/// What a re-test decision needs of one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetestState {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    /// A request no run has answered yet.
    pub pending: bool,
    /// The provider's last request.
    pub last_provider_request: Option<Timestamp>,
}

/// A re-test request: an admin any time nothing is pending; the provider once an hour.
pub fn decide_retest(
    state: &RetestState,
    by: &str,
    by_admin: bool,
    reason: &str,
    now: Timestamp,
) -> Result<RetestRequested, BenchmarkRejection> {
    let reason = clean_reason(reason)?;
    if state.pending {
        return Err(BenchmarkRejection::RetestPending);
    }
    if !by_admin
        && let Some(last) = state.last_provider_request
        && now.unix_micros() < last.unix_micros() + PROVIDER_RETEST_EVERY_MICROS
    {
        return Err(BenchmarkRejection::RetestTooSoon {
            next: Timestamp::from_unix_micros(last.unix_micros() + PROVIDER_RETEST_EVERY_MICROS)
                .rfc3339(),
        });
    }
    Ok(RetestRequested {
        gpu_uuid: state.gpu_uuid.clone(),
        provider_id: state.provider_id,
        by: by.to_owned(),
        by_admin,
        reason,
        at: now,
    })
}

/// A reason as a person wrote it: trimmed, 1 to [`REASON_MAX`] characters, no control
/// characters but newlines.
pub fn clean_reason(reason: &str) -> Result<String, BenchmarkRejection> {
    let reason = reason.trim();
    if reason.is_empty()
        || reason.chars().count() > REASON_MAX
        || reason.chars().any(|c| c.is_control() && c != '\n')
    {
        return Err(invalid(
            "reason",
            format!("1 to {REASON_MAX} characters, no control characters"),
        ));
    }
    Ok(reason.to_owned())
}

/// Records that the agent of `gpu`'s machine cannot run the suite on it, and why (at most
/// [`REASON_MAX`] characters, as the agent wrote it).
pub fn decide_skipped(
    gpu: &BenchedGpu,
    reason: &str,
    now: Timestamp,
) -> Result<SuiteSkipped, BenchmarkRejection> {
    Ok(SuiteSkipped {
        gpu_uuid: gpu.gpu_uuid.clone(),
        provider_id: gpu.provider_id,
        machine_id: gpu.machine_id,
        reason: clean_reason(reason)?,
        at: now,
    })
}

/// One GPU whose latest verdict asks for a listing action the fleet has not taken yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub model_id: String,
    pub driver_version: String,
    pub run_id: Uuid,
    pub action: ListingAction,
    pub score_bp: u64,
    pub verdict: Verdict,
    /// When the run was recorded: older runs act first.
    pub recorded_at: Timestamp,
}

/// What the automatic-action pass needs of the fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetActions {
    /// Whether automatic delisting is paused.
    pub paused: bool,
    /// Per model: GPUs with an accepted run.
    pub fleet_sizes: std::collections::BTreeMap<String, usize>,
    /// Per model and driver version: GPUs with an accepted run, and of them how many the
    /// verdict fails now (delisted or waiting to be).
    pub groups: std::collections::BTreeMap<(String, String), (usize, usize)>,
    /// Automatic delistings, per model, with when.
    pub recent_delistings: Vec<(String, Timestamp)>,
}

/// What one pass does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub events: Vec<BenchmarkEvent>,
    /// Failing GPUs left listed for now by the rate limit or a pause.
    pub deferred: usize,
}

/// The automatic actions at `now`: every relisting; delistings unless paused, at most the
/// hour's budget per model, oldest runs first; a pause (and no delisting) when a model's GPUs on
/// one driver fail together.
pub fn plan_actions(fleet: &FleetActions, pending: &[Pending], now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    let mut pending: Vec<&Pending> = pending.iter().collect();
    pending.sort_by_key(|p| (p.recorded_at, p.gpu_uuid.clone()));
    for p in pending.iter().filter(|p| p.action == ListingAction::Relist) {
        plan.events.push(BenchmarkEvent::GpuRelisted(acted(p, now)));
    }
    let delist: Vec<&&Pending> = pending
        .iter()
        .filter(|p| p.action == ListingAction::Delist)
        .collect();
    if delist.is_empty() {
        return plan;
    }
    if fleet.paused {
        plan.deferred = delist.len();
        return plan;
    }
    let anomaly = fleet.groups.iter().find(|(_, (gpus, failing))| {
        *gpus >= ANOMALY_MIN_GPUS && failing * 10_000 >= gpus * ANOMALY_FAILING_BP
    });
    if let Some(((model_id, driver), &(gpus, failing))) = anomaly {
        plan.events.push(BenchmarkEvent::DelistingPaused(DelistingPaused {
            model_id: model_id.clone(),
            driver_version: driver.clone(),
            failing: u32::try_from(failing).unwrap_or(u32::MAX),
            gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
            evidence: format!(
                "{failing} of {gpus} {model_id} GPUs on driver {driver} fail their benchmark at once: a driver or platform problem is likelier than {failing} broken GPUs"
            ),
            at: now,
        }));
        plan.deferred = delist.len();
        return plan;
    }
    let since = now.unix_micros() - ACTION_WINDOW_MICROS;
    let mut spent: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (model, at) in &fleet.recent_delistings {
        if at.unix_micros() > since {
            *spent.entry(model.as_str()).or_default() += 1;
        }
    }
    for p in delist {
        let size = fleet.fleet_sizes.get(&p.model_id).copied().unwrap_or(0);
        let budget = DELIST_PER_HOUR_MIN.max(size * DELIST_PER_HOUR_FLEET_BP / 10_000);
        let used = spent.entry(p.model_id.as_str()).or_default();
        if *used >= budget {
            plan.deferred += 1;
            continue;
        }
        *used += 1;
        plan.events.push(BenchmarkEvent::GpuDelisted(acted(p, now)));
    }
    plan
}

fn acted(p: &Pending, now: Timestamp) -> ListingActed {
    ListingActed {
        gpu_uuid: p.gpu_uuid.clone(),
        provider_id: p.provider_id,
        model_id: p.model_id.clone(),
        run_id: p.run_id,
        score_bp: p.score_bp,
        verdict: p.verdict.clone(),
        at: now,
    }
}

/// Resuming automatic delisting: only while it is paused.
pub fn decide_resume(
    paused: bool,
    by: &str,
    reason: &str,
    now: Timestamp,
) -> Result<DelistingResumed, BenchmarkRejection> {
    if !paused {
        return Err(BenchmarkRejection::NotPaused);
    }
    Ok(DelistingResumed {
        by: by.to_owned(),
        reason: clean_reason(reason)?,
        at: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::benchmark::simulated::{self, Profile};

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_micros(1_780_000_000_000_000 + seconds * 1_000_000)
    }

    fn h100() -> (&'static GpuModel, &'static GpuVariant) {
        let model = GPU_CATALOG.iter().find(|m| m.id == "h100-80gb").unwrap();
        (model, &model.variants[0])
    }

    fn gpu(uuid: &str) -> BenchedGpu {
        BenchedGpu {
            gpu_uuid: uuid.to_owned(),
            machine_id: Uuid::nil(),
            provider_id: Uuid::nil(),
            model_id: Some("h100-80gb".to_owned()),
            pci_device_id: h100().1.pci_device_id,
            simulated: true,
        }
    }

    fn submitted(uuid: &str, profile: Profile, seed: u64) -> Submitted {
        let (model, variant) = h100();
        Submitted {
            run_id: Uuid::from_u128(7),
            simulated_profile: Some(profile.name().to_owned()),
            environment: Environment {
                driver_version: "550.54.15".to_owned(),
                cuda_version: "12.4".to_owned(),
                sm_clock_mhz: 1_980,
                memory_clock_mhz: 2_619,
                idle_temperature_c: 35,
                mig_enabled: false,
                sustained_seconds: 60,
            },
            run: simulated::run(model, variant, uuid, profile, seed),
            started_at: at(0),
            finished_at: at(150),
        }
    }

    #[test]
    fn a_healthy_run_is_recorded_with_datasheet_references_and_passes() {
        let event = decide_record(
            &gpu("GPU-1"),
            submitted("GPU-1", Profile::Healthy, 7),
            |_, _| (0, None),
            at(200),
        )
        .unwrap();
        let BenchmarkEvent::RunRecorded(recorded) = event else {
            panic!("{event:?}")
        };
        assert!(
            recorded
                .references
                .iter()
                .all(|r| r.reference.source == benchmark::ReferenceSource::Datasheet)
        );
        let (score, verdict) = assess(&recorded);
        assert_ne!(verdict.outcome, Outcome::Fail, "{verdict:?}");
        assert!(score.score_bp > 9_000, "{}", score.score_bp);
    }

    #[test]
    fn an_impossible_run_is_refused_and_recorded_as_such() {
        let mut run = submitted("GPU-1", Profile::Healthy, 7);
        for figure in &mut run.run.figures {
            figure.median_milli *= 3;
            figure.p90_milli *= 3;
        }
        let event = decide_record(&gpu("GPU-1"), run, |_, _| (0, None), at(200)).unwrap();
        assert!(matches!(event, BenchmarkEvent::RunRefused(_)), "{event:?}");
    }

    #[test]
    fn malformed_runs_are_rejected_before_anything_is_written() {
        let mut wrong_gpu = submitted("GPU-2", Profile::Healthy, 7);
        wrong_gpu.run.gpu_uuid = "GPU-2".to_owned();
        assert!(matches!(
            decide_record(&gpu("GPU-1"), wrong_gpu, |_, _| (0, None), at(200)),
            Err(BenchmarkRejection::Invalid { .. })
        ));
        let mut real = gpu("GPU-1");
        real.simulated = false;
        assert_eq!(
            decide_record(
                &real,
                submitted("GPU-1", Profile::Healthy, 7),
                |_, _| (0, None),
                at(200)
            ),
            Err(BenchmarkRejection::SimulationMismatch)
        );
        let mut future = submitted("GPU-1", Profile::Healthy, 7);
        future.finished_at = at(1_000);
        assert!(decide_record(&gpu("GPU-1"), future, |_, _| (0, None), at(200)).is_err());
        let mut old = submitted("GPU-1", Profile::Healthy, 7);
        old.run.method_version = 99;
        assert_eq!(
            decide_record(&gpu("GPU-1"), old, |_, _| (0, None), at(200)),
            Err(BenchmarkRejection::UnsupportedMethod(99))
        );
    }

    #[test]
    fn provider_retests_are_rate_limited_and_admins_are_not() {
        let state = RetestState {
            gpu_uuid: "GPU-1".to_owned(),
            provider_id: Uuid::nil(),
            pending: false,
            last_provider_request: Some(at(0)),
        };
        assert!(matches!(
            decide_retest(&state, "p", false, "fixed the fan", at(1_800)),
            Err(BenchmarkRejection::RetestTooSoon { .. })
        ));
        assert!(decide_retest(&state, "p", false, "fixed the fan", at(3_600)).is_ok());
        assert!(decide_retest(&state, "a", true, "check", at(10)).is_ok());
        let pending = RetestState {
            pending: true,
            ..state
        };
        assert_eq!(
            decide_retest(&pending, "a", true, "check", at(10)),
            Err(BenchmarkRejection::RetestPending)
        );
    }

    fn failing(gpu: &str, model: &str, seconds: i64) -> Pending {
        Pending {
            gpu_uuid: gpu.to_owned(),
            provider_id: Uuid::nil(),
            model_id: model.to_owned(),
            driver_version: "550".to_owned(),
            run_id: Uuid::nil(),
            action: ListingAction::Delist,
            score_bp: 6_000,
            verdict: Verdict {
                outcome: Outcome::Fail,
                reasons: Vec::new(),
                version: 1,
            },
            recorded_at: at(seconds),
        }
    }

    #[test]
    fn delisting_is_rate_limited_per_model_and_hour() {
        let mut fleet = FleetActions::default();
        fleet.fleet_sizes.insert("h100-80gb".to_owned(), 100);
        fleet
            .groups
            .insert(("h100-80gb".to_owned(), "550".to_owned()), (100, 12));
        let pending: Vec<Pending> = (0..12)
            .map(|i| failing(&format!("GPU-{i:02}"), "h100-80gb", i))
            .collect();
        let plan = plan_actions(&fleet, &pending, at(100));
        // 10 % of 100 GPUs an hour: 10 now, 2 later; the oldest runs first.
        assert_eq!(plan.events.len(), 10);
        assert_eq!(plan.deferred, 2);
        let BenchmarkEvent::GpuDelisted(first) = &plan.events[0] else {
            panic!()
        };
        assert_eq!(first.gpu_uuid, "GPU-00");
        // A small fleet still delists 3 an hour; the hour's earlier delistings count.
        let mut small = FleetActions::default();
        small.fleet_sizes.insert("l4".to_owned(), 12);
        small
            .groups
            .insert(("l4".to_owned(), "550".to_owned()), (12, 4));
        small.recent_delistings =
            vec![("l4".to_owned(), at(-1_000)), ("l4".to_owned(), at(-4_000))];
        let pending: Vec<Pending> = (0..4)
            .map(|i| failing(&format!("L-{i}"), "l4", i))
            .collect();
        let plan = plan_actions(&small, &pending, at(100));
        assert_eq!((plan.events.len(), plan.deferred), (2, 2));
    }

    #[test]
    fn a_driver_wide_failure_pauses_delisting_instead_of_emptying_the_market() {
        let mut fleet = FleetActions::default();
        fleet.fleet_sizes.insert("h100-80gb".to_owned(), 8);
        fleet
            .groups
            .insert(("h100-80gb".to_owned(), "555".to_owned()), (8, 8));
        let pending: Vec<Pending> = (0..8)
            .map(|i| failing(&format!("GPU-{i}"), "h100-80gb", i))
            .collect();
        let plan = plan_actions(&fleet, &pending, at(100));
        assert!(
            matches!(plan.events.as_slice(), [BenchmarkEvent::DelistingPaused(p)] if p.failing == 8)
        );
        assert_eq!(plan.deferred, 8);
        // While paused: no delisting, relisting goes on.
        fleet.paused = true;
        let mut relist = failing("GPU-9", "h100-80gb", 0);
        relist.action = ListingAction::Relist;
        let mut all = pending.clone();
        all.push(relist);
        let plan = plan_actions(&fleet, &all, at(100));
        assert!(matches!(
            plan.events.as_slice(),
            [BenchmarkEvent::GpuRelisted(_)]
        ));
        assert_eq!(plan.deferred, 8);
    }
}
