//! Rentals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::rental::{EndCause, JobEvidence, Workload};

/// `POST /v1/rentals`: either `gpu_uuids` (GPUs of one machine, as listed by `GET /v1/listings`)
/// or `gpus` and a `filter` (the search parameters of `GET /v1/listings`: the best-ranked machine
/// with that many matching GPUs listed is taken), and the workload to run on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(
    json!({"gpus": 1, "filter": {"model": "H100"}, "workload": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["nvidia-smi"]}}),
    json!({"gpu_uuids": ["GPU-3b5c1a2e-6f0d-4c1e-9a77-1f2e3d4c5b6a"], "workload": {"image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "command": ["python", "-c", "import torch; print(torch.cuda.device_count())"], "env": {"HF_HOME": "/tmp/hf"}}})
))]
pub struct RentRequest {
    #[serde(default)]
    pub gpu_uuids: Vec<String>,
    #[serde(default)]
    pub gpus: Option<u32>,
    #[serde(default)]
    pub filter: Option<BTreeMap<String, String>>,
    pub workload: Workload,
}

/// `POST /v1/rentals/{id}/end`
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"evidence": "the job finished; results downloaded"})))]
pub struct EndRequest {
    #[serde(default)]
    #[schema(max_length = 500)]
    pub evidence: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RentalView {
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_uuids: Vec<String>,
    pub model_id: String,
    /// Locked when the rental started.
    pub price_per_gpu_hour_micro_usdc: i64,
    pub price_per_gpu_hour_usdc: String,
    pub started_at: String,
    /// `active` or `ended`.
    pub status: String,
    pub ended_at: Option<String>,
    pub cause: Option<EndCause>,
    pub evidence: Option<String>,
    pub workload: Option<Workload>,
    /// `pending` (the agent has not started it), `running`, or `ended`.
    pub job_status: String,
    /// How the job ended, as the agent reported it.
    pub job_cause: Option<EndCause>,
    pub job_evidence: Option<JobEvidence>,
    /// Usage metered so far, and what it was charged.
    pub gpu_seconds: u64,
    pub charged_micro_usdc: i64,
}

/// `GET /v1/rentals/{id}/logs`: the job's output from `from`, as text. The platform keeps the
/// newest 16 MiB of each job's output and the agent ships the newest part it keeps (4 MiB by
/// default), so a page may start after the offset asked for (`truncated`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobLog {
    pub rental_id: Uuid,
    /// Where `text` starts in the job's whole output, in bytes.
    pub from: u64,
    /// Pass as `after` for the next page: the byte after `text`.
    pub next: u64,
    /// The output from `from` to `next`, UTF-8 (bytes that are not valid UTF-8 are replaced by
    /// U+FFFD; a page never ends inside a character).
    pub text: String,
    /// Whether output before `from` that was asked for is no longer kept.
    pub truncated: bool,
    /// The earliest byte kept and the end of what the agent shipped so far.
    pub first_kept: u64,
    pub end: u64,
    /// Whether the job has ended: then no more output will come once `next` reaches `end`.
    pub job_ended: bool,
}
