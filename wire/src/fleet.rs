//! The agent protocol (events, heartbeats) and the fleet views of providers and operators.
//!
//! What an agent reports about hardware travels in the domain's own report types, which are the
//! contract (`deny_unknown_fields`, `null` for "unknown").

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::fleet::{
    DetectedGpu, Discrepancy, GpuCondition, GpuSample, HostInfo, ModelCount, ModelMatch, PcieLink,
};

/// One event from an agent's durable queue. `event_id` is a UUIDv7 the agent chose when it
/// queued the event: re-sending it is harmless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentEvent {
    pub event_id: Uuid,
    /// RFC 3339, the agent's clock.
    pub occurred_at: String,
    #[serde(flatten)]
    pub body: AgentEventBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum AgentEventBody {
    /// The machine and every GPU detected on it (first start, or hardware changed).
    Registration(Registration),
    /// A GPU condition started or ended.
    GpuCondition(GpuConditionReport),
    /// A rental's cumulative GPU-seconds so far (all its GPUs together).
    Usage(UsageReport),
    /// The agent started a rental's workload.
    JobStarted(JobStartedReport),
    /// A rental's workload stopped: completed, or interrupted with a cause and its evidence.
    JobEnded(JobEndedReport),
    /// One run of the benchmark suite on one GPU (the event id is the run id).
    BenchmarkRun(crate::benchmarks::BenchmarkRunReport),
    /// The agent cannot run the suite on one GPU, and says why.
    BenchmarkSkipped(crate::benchmarks::BenchmarkSkippedReport),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStartedReport {
    pub machine_id: Uuid,
    pub rental_id: Uuid,
    /// `docker` or `process`.
    pub runtime: String,
    /// The container id or process id.
    pub handle: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobEndedReport {
    pub machine_id: Uuid,
    pub rental_id: Uuid,
    /// `completed` when the workload exited by itself; otherwise who or what stopped it:
    /// `hardware_fault`, `network_loss`, `host_shutdown` (the provider's side),
    /// `renter_cancelled` or `platform` (the rental was ended).
    pub cause: gpunex_domain::rental::EndCause,
    pub evidence: gpunex_domain::rental::JobEvidence,
    /// The final cumulative GPU-seconds (metered like a usage report).
    pub gpu_seconds: u64,
}

/// `GET /v1/agent/assignments?since=&wait_seconds=`: the rentals this machine must run or stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Assignments {
    pub assignments: Vec<Assignment>,
    /// Benchmark re-tests the provider or an admin asked for on this machine's GPUs, not yet
    /// answered by a run: the agent runs the suite on each when the GPU is free.
    #[serde(default)]
    pub retests: Vec<RetestAssignment>,
    /// Identifies this answer: pass it as `since` to wait for a different one.
    pub version: String,
}

/// A waiting re-test of one GPU; `requested_at` identifies the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetestAssignment {
    pub gpu_uuid: String,
    pub requested_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Assignment {
    pub rental_id: Uuid,
    pub gpu_uuids: Vec<String>,
    pub workload: Option<gpunex_domain::rental::Workload>,
    pub started_at: String,
    /// `active`: run it; `ended`: stop it and report the job ended with `end_cause`.
    pub status: String,
    pub end_cause: Option<gpunex_domain::rental::EndCause>,
    /// Whether the platform has recorded the job started.
    pub job_started: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    pub machine_id: Uuid,
    pub rental_id: Uuid,
    /// Cumulative since the rental started: duplicates and late reports change nothing.
    pub gpu_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub machine_id: Uuid,
    pub agent_version: String,
    /// GPUs from `--simulate`, not real hardware.
    pub simulated: bool,
    pub host: HostInfo,
    pub gpus: Vec<DetectedGpu>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuConditionReport {
    pub machine_id: Uuid,
    pub gpu_uuid: String,
    pub condition: GpuCondition,
    pub active: bool,
    pub evidence: Option<GpuSample>,
}

/// `POST /v1/agent/events`: up to [`AGENT_EVENTS_PER_REQUEST_MAX`] events, handled in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"events": [{
    "event_id": "01939f0e-7b6a-7c2e-9a51-3f0c2d8e4b18",
    "occurred_at": "2026-12-01T09:00:00Z",
    "kind": "registration",
    "body": {
        "machine_id": "01939f0e-7b6a-7c2e-9a51-3f0c2d8e4b19",
        "agent_version": "0.1.0",
        "simulated": false,
        "host": {"hostname": "gpu-07", "cpu_model": "AMD EPYC 9654", "cpu_cores": 192,
                 "ram_mib": 2097152, "disk_total_gib": 7000, "disk_free_gib": 6500,
                 "os": "Ubuntu 22.04.4 LTS", "kernel": "6.5.0-41-generic"},
        "gpus": [{"gpu_uuid": "GPU-3b5c1a2e-6f0d-4c1e-9a77-1f2e3d4c5b6a", "index": 0,
                  "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 9008,
                  "pci_bus_id": "00000000:18:00.0", "vram_mib": 81559,
                  "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                  "pcie_current": {"generation": 5, "width": 16},
                  "pcie_max": {"generation": 5, "width": 16},
                  "power_limit_w": 700, "default_power_limit_w": 700,
                  "ecc_enabled": true, "mig_enabled": false}]
    }
}]})))]
pub struct AgentEventsRequest {
    pub events: Vec<AgentEvent>,
}

pub const AGENT_EVENTS_PER_REQUEST_MAX: usize = 100;

/// What became of one delivered event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentEventResult {
    pub event_id: Uuid,
    /// `recorded`, `duplicate` (delivered before: nothing new was written), `absorbed` (taken,
    /// but it changes nothing: a usage counter at or below one already metered) or `rejected`
    /// (never accepted; do not resend).
    pub status: String,
    /// Log position of the event (recorded or duplicate).
    pub position: Option<u64>,
    pub error: Option<crate::FieldError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentEventsResponse {
    pub results: Vec<AgentEventResult>,
}

/// `POST /v1/agent/heartbeat`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"machine_id": "01939f0e-7b6a-7c2e-9a51-3f0c2d8e4b19", "gpus": [{
    "gpu_uuid": "GPU-3b5c1a2e-6f0d-4c1e-9a77-1f2e3d4c5b6a", "utilization_pct": 97,
    "memory_used_mib": 70000, "temperature_c": 64, "power_draw_mw": 640000,
    "sm_clock_mhz": 1980, "clock_event_reasons": 4, "ecc_corrected": 0, "ecc_uncorrected": 0
}]})))]
pub struct Heartbeat {
    pub machine_id: Uuid,
    pub gpus: Vec<GpuSample>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HeartbeatAck {
    /// `online` once the platform has recorded the machine online.
    pub status: String,
    pub received_at: String,
    /// How often the platform expects heartbeats, and how long a silence it tolerates.
    pub heartbeat_interval_seconds: u32,
    pub offline_after_seconds: u32,
}

/// One GPU's latest telemetry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Telemetry {
    pub at: String,
    pub utilization_pct: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub temperature_c: Option<i32>,
    pub power_draw_mw: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    /// Names of the clock-event (throttle) reasons set, e.g. `sw_power_cap`.
    pub clock_event_reasons: Option<Vec<String>>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GpuView {
    pub gpu_uuid: String,
    pub index: u32,
    pub name: String,
    /// The catalog model, when the GPU is one.
    pub model_id: Option<String>,
    pub model_match: ModelMatch,
    pub vram_mib: u64,
    pub vram_below_model: bool,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub pcie_current: PcieLink,
    pub pcie_max: PcieLink,
    pub power_limit_w: Option<u32>,
    pub default_power_limit_w: Option<u32>,
    pub power_limit_lowered: Option<bool>,
    pub ecc_enabled: Option<bool>,
    pub mig_enabled: Option<bool>,
    /// `online` or `offline`, as its machine; `lost` while its machine is online but NVML no
    /// longer answers for it.
    pub status: String,
    /// Conditions active now (`hw_slowdown`, `thermal`, ...).
    pub conditions: Vec<GpuCondition>,
    pub telemetry: Option<Telemetry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MachineView {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    /// `online` or `offline` (also before the first heartbeat).
    pub status: String,
    /// When the current status began (online: the first heartbeat; offline: the last one).
    pub since: Option<String>,
    /// The last heartbeat received.
    pub last_seen: Option<String>,
    pub registered_at: String,
    pub simulated: bool,
    pub agent_version: String,
    pub host: HostInfo,
    pub gpus: Vec<GpuView>,
    /// Provider downtime over the last 24 hours and 30 days, in whole seconds (platform outages
    /// excluded).
    pub downtime_seconds_24h: i64,
    pub downtime_seconds_30d: i64,
}

/// The registered GPUs against the approved application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeclarationView {
    pub application_id: Uuid,
    pub declared: Vec<ModelCount>,
    pub detected: Vec<ModelCount>,
    pub discrepancies: Vec<Discrepancy>,
}

/// `GET /v1/providers/{id}/machines`: the provider dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderFleet {
    pub provider_id: Uuid,
    pub machines: Vec<MachineView>,
    pub declaration: Option<DeclarationView>,
}

/// `GET /v1/fleet`: the operators' view, filtered and paged by machine id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FleetPage {
    pub machines: Vec<MachineView>,
    /// Machines matching the filters, on every page.
    pub matching_machines: u64,
    pub matching_gpus: u64,
    pub next_after: Option<Uuid>,
}

/// `GET /v1/machines/{id}/gpus/{uuid}/telemetry`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TelemetrySeries {
    pub gpu_uuid: String,
    pub samples: Vec<Telemetry>,
    /// Pass as `from` for the next page, when there may be more.
    pub next_from: Option<String>,
}

/// `GET /v1/agent/identity`: what an agent token is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AgentIdentity {
    pub token_id: Uuid,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
}

/// `POST /v1/agent/rentals/{id}/logs`: a chunk of a job's output. `offset` is where it starts
/// in the job's whole output (what the agent read before it); sending the same chunk again
/// changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"offset": 0, "data_base64": "aGVsbG8gZnJvbSB0aGUgam9iCg=="})))]
pub struct JobLogChunk {
    pub offset: u64,
    /// The bytes, base64 (standard alphabet, with padding); at most 1 MiB once decoded.
    pub data_base64: String,
}

/// The most bytes one [`JobLogChunk`] carries once decoded (its base64 fits the API's 1 MiB
/// request bodies).
pub const JOB_LOG_CHUNK_MAX_BYTES: usize = 512 * 1024;
