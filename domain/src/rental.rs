//! Rentals: a renter takes one or more listed GPUs of one machine at the price in force when the
//! rental starts, and keeps that price until it ends.
//!
//! Each GPU has a lease stream (`gpu_lease-<gpu uuid>`). Starting a rental appends one
//! `rental.gpu_leased` to each of its GPUs' streams at the version that showed the GPU free, in
//! the same append as `rental.started`: of two renters racing for a GPU, one append fails on the
//! expected version, so both can never get it. Ending appends `rental.gpu_released` the same way.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
}

/// Why a rental ended: the evidence decides later whose fault an interruption was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RentalEvent {
    Started(RentalStarted),
    Ended(RentalEnded),
    GpuLeased(GpuLease),
    GpuReleased(GpuLease),
    UsageMetered(UsageMetered),
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
}

impl RentalRejection {
    pub fn code(&self) -> &'static str {
        match self {
            RentalRejection::InvalidGpus => "invalid_gpus",
            RentalRejection::NotAvailable(_) => "gpu_not_available",
            RentalRejection::MixedMachines => "mixed_machines",
            RentalRejection::AlreadyEnded => "already_ended",
            RentalRejection::InvalidEvidence => "invalid_evidence",
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
        assert!(!EndCause::RenterCancelled.is_provider_fault());
    }
}
