//! Rentals: a renter takes one or more listed GPUs of one machine at the price in force when the
//! rental starts, and keeps that price until it ends.
//!
//! Each GPU has a lease stream (`gpu_lease-<gpu uuid>`). Starting a rental appends one
//! `rental.gpu_leased` to each of its GPUs' streams at the version that showed the GPU free, in
//! the same append as `rental.started`: of two renters racing for a GPU, one append fails on the
//! expected version, so both can never get it. Ending appends `rental.gpu_released` the same way.

use crate::codes::ErrorCode;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::fleet::GpuCondition;
use crate::ledger::JournalEntry;
use crate::money::Usdc;
use crate::time::Timestamp;

/// Most GPUs in one rental (one machine).
pub const RENTAL_GPUS_MAX: usize = 64;

/// `rental.started`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RentalStarted {
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub gpu_uuids: Vec<String>,
    pub model_id: String,
    /// The provider's price per GPU per hour in force at `started_at`, kept for the whole rental.
    pub price_per_gpu_hour: Usdc,
    pub started_at: Timestamp,
    /// What the agent runs on the rented GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
}

/// Longest container image reference, command argument, environment value (characters).
pub const WORKLOAD_TEXT_MAX: usize = 4_096;
/// Most command arguments and environment variables.
pub const WORKLOAD_ITEMS_MAX: usize = 64;

/// Longest image reference (the Docker reference grammar's own limit on a name is 255).
pub const IMAGE_REFERENCE_CHARS_MAX: usize = 512;

/// Whether `text` is a container image reference in the grammar of the Docker distribution
/// project (`[domain[:port]/]path[:tag][@algorithm:hex]`): path components of lowercase letters
/// and digits joined by `.`, `_`, `__` or hyphens, a tag of at most 128 word characters, dots
/// and hyphens, a `sha256` digest of 64 hex digits. A path (`../etc/passwd`), a URL
/// (`file:///etc/passwd`) or anything with spaces is not one.
pub fn is_image_reference(text: &str) -> bool {
    if text.is_empty() || text.len() > IMAGE_REFERENCE_CHARS_MAX || !text.is_ascii() {
        return false;
    }
    let (rest, digest) = match text.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (text, None),
    };
    if let Some(digest) = digest {
        let Some(hex) = digest.strip_prefix("sha256:") else {
            return false;
        };
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return false;
        }
    }
    // A tag is after the last colon that follows the last slash.
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let mut bytes = tag.bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        if tag.len() > 128
            || !bytes.next().is_some_and(word)
            || !bytes.all(|b| word(b) || b == b'.' || b == b'-')
        {
            return false;
        }
    }
    let mut components: Vec<&str> = name.split('/').collect();
    // A first component with a dot, a colon (port) or `localhost` is a registry domain.
    if components.len() > 1
        && (components[0].contains('.')
            || components[0].contains(':')
            || components[0] == "localhost")
    {
        let domain = components.remove(0);
        let (host, port) = match domain.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (domain, None),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if !host.split('.').all(label_ok)
            || port.is_some_and(|p| {
                p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit())
            })
        {
            return false;
        }
    }
    !components.is_empty() && components.iter().all(|c| is_path_component(c))
}

/// `[a-z0-9]+` joined by `.`, `_`, `__` or one or more hyphens.
fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = matches!(separator, "." | "_" | "__") || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// What a rental runs. The Docker runtime runs `command` in `image` (or the image's own command
/// when `command` is empty); the process runtime (tests, development) runs `command` directly.
/// Either way only the rented GPUs are visible and no host directory is mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Workload {
    pub image: String,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Variables the runtime sets itself: a workload may not override which GPUs it sees.
pub const RESERVED_ENV: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "GPUNEX_RENTAL_ID",
    "GPUNEX_GPU_UUIDS",
];

/// Checks a workload: an image reference (`[registry/]name[:tag][@digest]`, at most 4,096
/// characters of `[a-z0-9._/:@-]`), at most 64 arguments, at most 64 environment variables named
/// `[A-Z_][A-Z0-9_]*` (not one the runtime sets), texts without NUL.
pub fn validate_workload(workload: &Workload) -> Result<(), RentalRejection> {
    let bad = |detail: &str| Err(RentalRejection::InvalidWorkload(detail.to_owned()));
    if !is_image_reference(&workload.image) {
        return bad(
            "image must be a container image reference such as nvidia/cuda:12.4.1-base-ubuntu22.04 or registry.example.com:5000/team/model@sha256:<64 hex>",
        );
    }
    if workload.command.len() > WORKLOAD_ITEMS_MAX || workload.env.len() > WORKLOAD_ITEMS_MAX {
        return bad("at most 64 command arguments and 64 environment variables");
    }
    let text_ok = |t: &str| t.chars().count() <= WORKLOAD_TEXT_MAX && !t.contains('\0');
    if !workload.command.iter().all(|a| text_ok(a)) {
        return bad("command arguments must be at most 4,096 characters, without NUL");
    }
    if workload.command.first().is_some_and(|c| c.is_empty()) {
        return bad("the command's program must not be empty");
    }
    for (name, value) in &workload.env {
        let mut bytes = name.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_');
        if !first_ok
            || !bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            || name.len() > 128
        {
            return bad("environment variable names must match [A-Z_][A-Z0-9_]*");
        }
        if RESERVED_ENV.contains(&name.as_str()) {
            return bad(
                "the runtime sets CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and GPUNEX_*",
            );
        }
        if !text_ok(value) {
            return bad("environment values must be at most 4,096 characters, without NUL");
        }
    }
    Ok(())
}

/// `rental.job_started`: the agent started the rental's workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobStarted {
    pub rental_id: Uuid,
    pub machine_id: Uuid,
    /// `docker` or `process`.
    pub runtime: String,
    /// The runtime's handle (container id, process id).
    pub handle: String,
    /// The agent's clock.
    pub started_at: Timestamp,
}

/// What the agent saw when a job stopped: the evidence a cause is judged on later.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct JobEvidence {
    /// The workload's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// A GPU whose condition stopped the job, and the condition.
    pub gpu_uuid: Option<String>,
    pub condition: Option<GpuCondition>,
    /// What happened, in words (at most 500 characters).
    pub detail: String,
}

impl JobEvidence {
    /// One line for the rental's `evidence`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(code) = self.exit_code {
            parts.push(format!("exit code {code}"));
        }
        if let Some(signal) = self.signal {
            parts.push(format!("signal {signal}"));
        }
        if let (Some(gpu), Some(condition)) = (&self.gpu_uuid, self.condition) {
            parts.push(format!("{gpu}: {condition:?}"));
        }
        if !self.detail.is_empty() {
            parts.push(self.detail.clone());
        }
        let text = parts.join("; ");
        text.chars().take(500).collect()
    }
}

/// `rental.job_ended`: the workload stopped, completed or interrupted, with the cause the agent
/// assigns and its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEnded {
    pub rental_id: Uuid,
    pub machine_id: Uuid,
    pub cause: EndCause,
    pub evidence: JobEvidence,
    /// The agent's final cumulative GPU-seconds for the rental.
    pub gpu_seconds: u64,
    /// The agent's clock.
    pub ended_at: Timestamp,
}

/// Checks an agent's job end: the cause must be one an agent can know (not the renter's
/// cancellation unless the rental already ended that way), the evidence bounded.
pub fn check_job_end(ended: &JobEnded) -> Result<(), RentalRejection> {
    let detail = &ended.evidence.detail;
    if detail.chars().count() > 500 || detail.chars().any(|c| c.is_control() && c != '\n') {
        return Err(RentalRejection::InvalidEvidence);
    }
    if ended
        .evidence
        .gpu_uuid
        .as_deref()
        .is_some_and(|g| !crate::fleet::valid_gpu_uuid(g))
    {
        return Err(RentalRejection::InvalidEvidence);
    }
    Ok(())
}

/// Why a rental ended: the evidence decides later whose fault an interruption was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum EndCause {
    /// The renter ended it.
    RenterCancelled,
    /// The workload finished.
    Completed,
    /// Provider side: a GPU fault.
    HardwareFault,
    /// Provider side: the host lost the network or went offline past the grace period.
    NetworkLoss,
    /// Provider side: the host shut down.
    HostShutdown,
    /// The platform ended it.
    Platform,
}

impl EndCause {
    /// Whether the provider is answerable for this end (reliability counts these).
    pub fn is_provider_fault(self) -> bool {
        matches!(
            self,
            EndCause::HardwareFault | EndCause::NetworkLoss | EndCause::HostShutdown
        )
    }
}

/// `rental.ended`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RentalEnded {
    pub rental_id: Uuid,
    pub cause: EndCause,
    pub ended_at: Timestamp,
    /// Who or what ended it: `token:<id>`, `agent:<machine>`, `system:<component>`.
    pub ended_by: String,
    /// What shows the cause (free text, at most 500 characters).
    pub evidence: String,
}

/// `rental.gpu_leased` / `rental.gpu_released`: one GPU taken by or given back from a rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuLease {
    pub gpu_uuid: String,
    pub rental_id: Uuid,
    pub at: Timestamp,
}

/// `rental.usage_metered`: a usage report moved the rental's cumulative GPU-seconds counter from
/// `from_gpu_seconds` to `to_gpu_seconds`; the charge is the difference of the rounded cumulative
/// totals (`domain::metering`), split into the platform fee and the provider's net, and posted.
/// Appended to the rental's stream at its expected version, so two reports never charge the same
/// seconds twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageMetered {
    pub entry_id: Uuid,
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    pub provider_id: Uuid,
    /// The agent's report (its queued event id), for the audit trail.
    pub report_id: Uuid,
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub price_per_gpu_hour: Usdc,
    pub gross: Usdc,
    pub fee: Usdc,
    pub net: Usdc,
    pub fee_bp: u32,
    pub postings: JournalEntry,
    /// The agent's counter when it was above what the machine was online for (`to_gpu_seconds`
    /// is then the online limit: no heartbeat, no meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_gpu_seconds: Option<u64>,
    /// When the platform metered it: the instant earnings are dated at (events written before
    /// this field existed are dated when recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metered_at: Option<Timestamp>,
}

/// What metering one usage report needs.
#[derive(Debug, Clone)]
pub struct UsageInput<'a> {
    pub rental: &'a RentalStarted,
    /// The rental's meter so far.
    pub meter: crate::metering::Meter,
    pub tier: crate::onboarding::Tier,
    pub fees: crate::metering::FeeSchedule,
    /// The agent's cumulative counter, and the most the rental can be billed now (its GPUs x the
    /// machine's online seconds during the rental).
    pub reported_gpu_seconds: u64,
    pub online_gpu_seconds: u64,
    pub report_id: Uuid,
    pub at: Timestamp,
}

/// Why a usage report cannot be metered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeteringError {
    #[error(transparent)]
    Money(#[from] crate::money::MoneyError),
    #[error(transparent)]
    Journal(#[from] crate::ledger::JournalError),
}

/// Meters one usage report: the counter capped at the online limit, the charge beyond what was
/// charged (`metering::Meter`), the tier's fee and the net, and the double entry. `None` when it
/// adds nothing (at or below the highest counter, or less than a micro-USDC). The one rule both
/// the API and the simulation use.
pub fn meter_usage(input: &UsageInput<'_>) -> Result<Option<UsageMetered>, MeteringError> {
    let billable = input.reported_gpu_seconds.min(input.online_gpu_seconds);
    let mut meter = input.meter;
    let Some(charge) = meter
        .report(input.rental.price_per_gpu_hour, billable)?
        .filter(|c| c.amount.is_positive())
    else {
        return Ok(None);
    };
    let (fee, net) = input.fees.split(charge.amount, input.tier)?;
    let postings = crate::metering::charge_entry(
        input.rental.renter_id,
        input.rental.provider_id,
        charge.amount,
        fee,
    )?;
    Ok(Some(UsageMetered {
        entry_id: input.report_id,
        rental_id: input.rental.rental_id,
        renter_id: input.rental.renter_id,
        provider_id: input.rental.provider_id,
        report_id: input.report_id,
        from_gpu_seconds: charge.from_gpu_seconds,
        to_gpu_seconds: charge.to_gpu_seconds,
        price_per_gpu_hour: input.rental.price_per_gpu_hour,
        gross: charge.amount,
        fee,
        net,
        fee_bp: input.fees.rate_bp(input.tier),
        postings,
        reported_gpu_seconds: (input.reported_gpu_seconds > billable)
            .then_some(input.reported_gpu_seconds),
        metered_at: Some(input.at),
    }))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RentalEvent {
    Started(RentalStarted),
    Ended(RentalEnded),
    GpuLeased(GpuLease),
    GpuReleased(GpuLease),
    UsageMetered(UsageMetered),
    JobStarted(JobStarted),
    JobEnded(JobEnded),
}

/// Why a rental cannot start or end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RentalRejection {
    #[error("name 1 to {RENTAL_GPUS_MAX} distinct GPUs")]
    InvalidGpus,
    #[error("GPU {0} is not listed now (rented, offline, outside its schedule, or unknown)")]
    NotAvailable(String),
    #[error("a rental's GPUs must all be on one machine, of one model")]
    MixedMachines,
    #[error("the rental already ended")]
    AlreadyEnded,
    #[error("the evidence must be at most 500 characters")]
    InvalidEvidence,
    #[error("invalid workload: {0}")]
    InvalidWorkload(String),
}

impl RentalRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            RentalRejection::InvalidGpus => ErrorCode::InvalidGpus,
            RentalRejection::NotAvailable(_) => ErrorCode::GpuNotAvailable,
            RentalRejection::MixedMachines => ErrorCode::MixedMachines,
            RentalRejection::AlreadyEnded => ErrorCode::AlreadyEnded,
            RentalRejection::InvalidEvidence => ErrorCode::InvalidEvidence,
            RentalRejection::InvalidWorkload(_) => ErrorCode::InvalidWorkload,
        }
    }
}

/// Checks the GPUs a renter asks for: 1 to 64, distinct.
pub fn check_gpus(gpu_uuids: &[String]) -> Result<(), RentalRejection> {
    if gpu_uuids.is_empty() || gpu_uuids.len() > RENTAL_GPUS_MAX {
        return Err(RentalRejection::InvalidGpus);
    }
    for (i, uuid) in gpu_uuids.iter().enumerate() {
        if !crate::fleet::valid_gpu_uuid(uuid) || gpu_uuids[..i].contains(uuid) {
            return Err(RentalRejection::InvalidGpus);
        }
    }
    Ok(())
}

/// Builds the end of a rental, refusing a second end.
pub fn end(
    rental_id: Uuid,
    already_ended: bool,
    cause: EndCause,
    at: Timestamp,
    by: &str,
    evidence: &str,
) -> Result<RentalEnded, RentalRejection> {
    if already_ended {
        return Err(RentalRejection::AlreadyEnded);
    }
    let evidence = evidence.trim();
    if evidence.chars().count() > 500 || evidence.chars().any(|c| c.is_control() && c != '\n') {
        return Err(RentalRejection::InvalidEvidence);
    }
    Ok(RentalEnded {
        rental_id,
        cause,
        ended_at: at,
        ended_by: by.to_owned(),
        evidence: evidence.to_owned(),
    })
}

impl RentalEvent {
    /// The stream the event belongs to: a GPU's lease stream for leases and releases, the
    /// rental's own stream for the rest.
    pub fn stream(&self) -> crate::StreamId {
        let name = match self {
            RentalEvent::GpuLeased(lease) | RentalEvent::GpuReleased(lease) => {
                format!("gpu_lease-{}", lease.gpu_uuid)
            }
            RentalEvent::Started(e) => format!("rental-{}", e.rental_id),
            RentalEvent::Ended(e) => format!("rental-{}", e.rental_id),
            RentalEvent::UsageMetered(e) => format!("rental-{}", e.rental_id),
            RentalEvent::JobStarted(e) => format!("rental-{}", e.rental_id),
            RentalEvent::JobEnded(e) => format!("rental-{}", e.rental_id),
        };
        crate::StreamId::parse(name)
            .unwrap_or_else(|_| unreachable!("uuids and checked GPU uuids make valid stream ids"))
    }
}

/// A GPU a renter asks for, as the listings and the leases show it when the rental is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedGpu {
    pub gpu_uuid: String,
    /// Where it is listed now; `None` when it is not (rented, offline, outside its schedule,
    /// delisted, or unknown).
    pub listed: Option<ListedGpu>,
    /// Whether a rental holds its lease now (the leases are authoritative; a listing may be a
    /// moment old).
    pub leased: bool,
}

/// A listed GPU's machine and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGpu {
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub model_id: String,
}

/// What starting a rental decides on.
#[derive(Debug, Clone, Copy)]
pub struct StartInput<'a> {
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    /// In the order asked.
    pub gpus: &'a [AskedGpu],
    /// The price in force at `at` for the first GPU's provider and model, if any.
    pub price_per_gpu_hour: Option<Usdc>,
    pub workload: &'a Workload,
    pub at: Timestamp,
}

/// Decides a rental's start: the workload and the GPUs checked (1 to 64 distinct, each listed,
/// all on one machine and of one model, priced, none leased), then `rental.started` and one
/// `rental.gpu_leased` per GPU. Refusals name the first GPU at fault.
pub fn decide_start(input: &StartInput<'_>) -> Result<Vec<RentalEvent>, RentalRejection> {
    validate_workload(input.workload)?;
    let uuids: Vec<String> = input.gpus.iter().map(|g| g.gpu_uuid.clone()).collect();
    check_gpus(&uuids)?;
    let mut listed = Vec::with_capacity(input.gpus.len());
    for gpu in input.gpus {
        let Some(at) = &gpu.listed else {
            return Err(RentalRejection::NotAvailable(gpu.gpu_uuid.clone()));
        };
        listed.push(at);
    }
    let first = listed[0];
    if listed
        .iter()
        .any(|l| l.machine_id != first.machine_id || l.model_id != first.model_id)
    {
        return Err(RentalRejection::MixedMachines);
    }
    let price = input
        .price_per_gpu_hour
        .ok_or_else(|| RentalRejection::NotAvailable(uuids[0].clone()))?;
    if let Some(gpu) = input.gpus.iter().find(|g| g.leased) {
        return Err(RentalRejection::NotAvailable(gpu.gpu_uuid.clone()));
    }
    let started = RentalStarted {
        rental_id: input.rental_id,
        renter_id: input.renter_id,
        provider_id: first.provider_id,
        machine_id: first.machine_id,
        gpu_uuids: uuids.clone(),
        model_id: first.model_id.clone(),
        price_per_gpu_hour: price,
        started_at: input.at,
        workload: Some(input.workload.clone()),
    };
    let mut events = vec![RentalEvent::Started(started)];
    events.extend(uuids.into_iter().map(|gpu_uuid| {
        RentalEvent::GpuLeased(GpuLease {
            gpu_uuid,
            rental_id: input.rental_id,
            at: input.at,
        })
    }));
    Ok(events)
}

/// Decides the end of a rental: `before` (the rental's own events that come first, such as the
/// job's end its agent reported), the end, and one release per GPU, each GPU listed again.
/// Refuses a rental that already ended.
pub fn decide_end(
    started: &RentalStarted,
    already_ended: bool,
    ended: RentalEnded,
    before: Vec<RentalEvent>,
) -> Result<Vec<RentalEvent>, RentalRejection> {
    if already_ended {
        return Err(RentalRejection::AlreadyEnded);
    }
    let at = ended.ended_at;
    let mut events = before;
    events.push(RentalEvent::Ended(ended));
    events.extend(started.gpu_uuids.iter().map(|uuid| {
        RentalEvent::GpuReleased(GpuLease {
            gpu_uuid: uuid.clone(),
            rental_id: started.rental_id,
            at,
        })
    }));
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists_are_checked_and_rentals_end_once() {
        assert!(check_gpus(&["GPU-0a".to_owned()]).is_ok());
        assert_eq!(check_gpus(&[]), Err(RentalRejection::InvalidGpus));
        assert_eq!(
            check_gpus(&["GPU-0a".to_owned(), "GPU-0a".to_owned()]),
            Err(RentalRejection::InvalidGpus)
        );
        assert_eq!(
            check_gpus(&["gpu zero".to_owned()]),
            Err(RentalRejection::InvalidGpus)
        );
        let at = Timestamp::from_unix_micros(0);
        assert!(end(Uuid::nil(), false, EndCause::RenterCancelled, at, "t", "").is_ok());
        assert_eq!(
            end(Uuid::nil(), true, EndCause::RenterCancelled, at, "t", ""),
            Err(RentalRejection::AlreadyEnded)
        );
        assert!(EndCause::HardwareFault.is_provider_fault());
        assert!(EndCause::NetworkLoss.is_provider_fault());
        assert!(!EndCause::RenterCancelled.is_provider_fault());
    }

    #[test]
    fn an_end_releases_every_gpu_on_its_lease_stream_and_comes_once() {
        let started = RentalStarted {
            rental_id: Uuid::from_u128(7),
            renter_id: Uuid::from_u128(1),
            provider_id: Uuid::from_u128(2),
            machine_id: Uuid::from_u128(3),
            gpu_uuids: vec!["GPU-0a".to_owned(), "GPU-0b".to_owned()],
            model_id: "h100-80gb".to_owned(),
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            started_at: Timestamp::from_unix_micros(0),
            workload: None,
        };
        let at = Timestamp::from_unix_micros(5_000_000);
        let ended = end(
            started.rental_id,
            false,
            EndCause::RenterCancelled,
            at,
            "t",
            "",
        )
        .unwrap();
        let events = decide_end(&started, false, ended.clone(), Vec::new()).unwrap();
        let streams: Vec<String> = events.iter().map(|e| e.stream().to_string()).collect();
        assert_eq!(
            streams,
            [
                format!("rental-{}", started.rental_id),
                "gpu_lease-GPU-0a".to_owned(),
                "gpu_lease-GPU-0b".to_owned()
            ]
        );
        assert!(matches!(&events[1], RentalEvent::GpuReleased(l) if l.at == at));
        assert_eq!(
            decide_end(&started, true, ended, Vec::new()),
            Err(RentalRejection::AlreadyEnded)
        );
    }

    #[test]
    fn workloads_are_checked() {
        let ok = Workload {
            image: "nvidia/cuda:12.4.1-base-ubuntu22.04".to_owned(),
            command: vec!["nvidia-smi".to_owned()],
            env: BTreeMap::from([("BATCH_SIZE".to_owned(), "64".to_owned())]),
        };
        assert_eq!(validate_workload(&ok), Ok(()));
        let with = |f: &dyn Fn(&mut Workload)| {
            let mut w = ok.clone();
            f(&mut w);
            validate_workload(&w).map_err(|e| e.code().as_str())
        };
        assert_eq!(
            with(&|w| w.image = "Bad Image".to_owned()),
            Err("invalid_workload")
        );
        assert_eq!(with(&|w| w.image.clear()), Err("invalid_workload"));
        for good in [
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "ubuntu",
            "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            "registry.example.com:5000/team/my_model__v2:Latest",
            "localhost/train",
            "ghcr.io/org/image@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "a--b/c.d:1",
        ] {
            assert!(is_image_reference(good), "{good}");
        }
        for bad in [
            "../../../../etc/passwd",
            "file:///etc/passwd",
            "/etc/passwd",
            "./image",
            "image/",
            "Image",
            "nvidia//cuda",
            "nvidia/cuda:",
            "nvidia/cuda:.tag",
            "nvidia/cuda@sha256:abc",
            "nvidia/cuda@md5:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "-registry.io/x",
            "registry.io:port/x",
            "a..b",
            "a_-b",
            "image name",
            "nvidia/cuda;rm -rf /",
        ] {
            assert!(!is_image_reference(bad), "{bad}");
        }
        assert_eq!(
            with(&|w| {
                w.env
                    .insert("CUDA_VISIBLE_DEVICES".to_owned(), "0,1,2".to_owned());
            }),
            Err("invalid_workload")
        );
        assert_eq!(
            with(&|w| {
                w.env.insert("lower".to_owned(), "x".to_owned());
            }),
            Err("invalid_workload")
        );
        assert_eq!(
            with(&|w| w.command = vec![String::new()]),
            Err("invalid_workload")
        );
        assert_eq!(
            with(&|w| w.command = vec!["a\0b".to_owned()]),
            Err("invalid_workload")
        );
        assert_eq!(
            with(&|w| w.command = vec!["x".to_owned(); 65]),
            Err("invalid_workload")
        );
    }

    proptest::proptest! {
        /// Metering through `meter_usage`, with the online cap growing between reports (and the
        /// agent's counter sometimes ahead of it): the charges add up to the rounded total of the
        /// last billed counter, each event's gross = fee + net = its postings' total, and nothing
        /// is billed beyond the cap.
        #[test]
        fn capped_metering_never_drifts(
            rate in 10_000_i64..=100_000_000,
            reports in proptest::collection::vec((0_u64..500_000, 0_u64..5_000), 1..60),
            enterprise in proptest::prelude::any::<bool>(),
        ) {
            use crate::metering::{FeeSchedule, Meter, cumulative_charge};
            use crate::onboarding::Tier;
            let started = RentalStarted {
                rental_id: Uuid::nil(),
                renter_id: Uuid::from_u128(1),
                provider_id: Uuid::from_u128(2),
                machine_id: Uuid::from_u128(3),
                gpu_uuids: vec!["GPU-0a".to_owned()],
                model_id: "h100-80gb".to_owned(),
                price_per_gpu_hour: Usdc::from_micros(rate),
                started_at: Timestamp::from_unix_micros(0),
                workload: None,
            };
            let (mut meter, mut cap, mut gross) = (Meter::default(), 0_u64, 0_i64);
            for (i, (counter, online_growth)) in reports.into_iter().enumerate() {
                cap += online_growth;
                let input = UsageInput {
                    rental: &started,
                    meter,
                    tier: if enterprise { Tier::Enterprise } else { Tier::Community },
                    fees: FeeSchedule::default(),
                    reported_gpu_seconds: counter,
                    online_gpu_seconds: cap,
                    report_id: Uuid::from_u128(i as u128),
                    at: Timestamp::from_unix_micros(0),
                };
                if let Some(metered) = meter_usage(&input).unwrap() {
                    proptest::prop_assert_eq!(metered.fee.micros() + metered.net.micros(), metered.gross.micros());
                    proptest::prop_assert_eq!(metered.postings.total(), metered.gross);
                    proptest::prop_assert!(metered.to_gpu_seconds <= cap);
                    proptest::prop_assert_eq!(metered.from_gpu_seconds, meter.gpu_seconds);
                    gross += metered.gross.micros();
                    meter = Meter {
                        gpu_seconds: metered.to_gpu_seconds,
                        charged: Usdc::from_micros(meter.charged.micros() + metered.gross.micros()),
                    };
                }
            }
            let total = cumulative_charge(Usdc::from_micros(rate), meter.gpu_seconds).unwrap();
            proptest::prop_assert_eq!(gross, total.micros());
        }
    }

    #[test]
    fn job_evidence_reads_as_one_line() {
        let evidence = JobEvidence {
            exit_code: None,
            signal: Some(9),
            gpu_uuid: Some("GPU-0a".to_owned()),
            condition: Some(GpuCondition::Lost),
            detail: "GPU fell off the bus".to_owned(),
        };
        assert_eq!(
            evidence.summary(),
            "signal 9; GPU-0a: Lost; GPU fell off the bus"
        );
    }

    #[test]
    fn a_start_leases_listed_gpus_of_one_machine_at_the_price_in_force() {
        let machine = Uuid::from_u128(3);
        let listed = |machine_id, model: &str| {
            Some(ListedGpu {
                provider_id: Uuid::from_u128(2),
                machine_id,
                model_id: model.to_owned(),
            })
        };
        let gpu = |uuid: &str, listed, leased| AskedGpu {
            gpu_uuid: uuid.to_owned(),
            listed,
            leased,
        };
        let workload = Workload {
            image: "nvcr.io/nvidia/pytorch:24.05-py3".to_owned(),
            command: vec![],
            env: BTreeMap::new(),
        };
        let at = Timestamp::from_unix_micros(1_000_000);
        let decide = |gpus: &[AskedGpu], price: Option<i64>| {
            decide_start(&StartInput {
                rental_id: Uuid::from_u128(7),
                renter_id: Uuid::from_u128(1),
                gpus,
                price_per_gpu_hour: price.map(Usdc::from_micros),
                workload: &workload,
                at,
            })
        };
        let two = [
            gpu("GPU-0a", listed(machine, "h100-80gb"), false),
            gpu("GPU-0b", listed(machine, "h100-80gb"), false),
        ];
        let events = decide(&two, Some(2_500_000)).unwrap();
        let [
            RentalEvent::Started(started),
            RentalEvent::GpuLeased(a),
            RentalEvent::GpuLeased(b),
        ] = &events[..]
        else {
            panic!("a start and two leases: {events:?}")
        };
        assert_eq!(
            (started.machine_id, started.price_per_gpu_hour.micros()),
            (machine, 2_500_000)
        );
        assert_eq!(
            (a.gpu_uuid.as_str(), b.gpu_uuid.as_str()),
            ("GPU-0a", "GPU-0b")
        );
        assert_eq!(
            decide(&two, None),
            Err(RentalRejection::NotAvailable("GPU-0a".to_owned())),
            "no price in force"
        );
        let unlisted = [two[0].clone(), gpu("GPU-0b", None, false)];
        assert_eq!(
            decide(&unlisted, Some(1)),
            Err(RentalRejection::NotAvailable("GPU-0b".to_owned()))
        );
        let mixed = [
            two[0].clone(),
            gpu("GPU-0b", listed(Uuid::from_u128(4), "h100-80gb"), false),
        ];
        assert_eq!(decide(&mixed, Some(1)), Err(RentalRejection::MixedMachines));
        let taken = [
            two[0].clone(),
            gpu("GPU-0b", listed(machine, "h100-80gb"), true),
        ];
        assert_eq!(
            decide(&taken, Some(1)),
            Err(RentalRejection::NotAvailable("GPU-0b".to_owned())),
            "a lease held beats a listing a moment old"
        );
        assert_eq!(decide(&[], Some(1)), Err(RentalRejection::InvalidGpus));
    }
}
