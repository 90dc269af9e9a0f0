//! The event catalog: every event type the ledger accepts, its schema versions, and the
//! upcasters that lift an older stored payload to the current shape on read.
//!
//! The stored form of an event is `(event_type, schema_version, JSON payload)`. Writers may send
//! any supported version; rows keep the version they were written with, and [`DomainEvent::decode`]
//! upcasts step by step (v1 -> v2 -> ... -> current) before deserializing. The catalog is
//! documented in `docs/events.md`; a tidy test keeps the two in step.

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::accounts::{AccountEvent, EmailClaimed, RoleGranted, RoleRevoked, UserRegistered};
pub use crate::adjustments::AdjustmentPosted;
use crate::benchmark_log::{
    BenchmarkEvent, DelistingPaused, DelistingResumed, ListingActed, OverrideCleared, OverrideSet,
    RetestRequested, RunRecorded, RunRefused, SuiteSkipped,
};
use crate::credentials::{CredentialEvent, ProviderTokenClaimed, TokenIssued, TokenRevoked};
use crate::fleet::{
    DeclarationCompared, FleetEvent, GpuConditionChanged, GpuDetected, MachineOffline,
    MachineOnline, MachineRegistered, PlatformOutageRecorded,
};
use crate::gpu::ModelAdded;
use crate::ledger::{Account, JournalEntry, Posting};
use crate::market::{
    AvailabilitySet, GpuListingChanged, MaintenanceAnnounced, MaintenanceCancelled, MarketEvent,
    PriceSet,
};
use crate::money::Usdc;
use crate::onboarding::{
    ApplicationApproved, ApplicationEvent, ApplicationRejected, ApplicationSubmitted,
    ApplicationWithdrawn, InformationProvided, InformationRequested,
};
use crate::payouts::PayoutEvent;
use crate::rental::{
    GpuLease, JobEnded, JobStarted, RentalEnded, RentalEvent, RentalStarted, UsageMetered,
};

/// One entry of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    pub event_type: &'static str,
    pub oldest_version: u32,
    pub current_version: u32,
}

pub const ADJUSTMENT_POSTED: &str = "ledger.adjustment_posted";
pub const ADJUSTMENT_PROPOSED: &str = "ledger.adjustment_proposed";
pub const ADJUSTMENT_DECIDED: &str = "ledger.adjustment_decided";

/// Every event type the store accepts. An append of any other type is rejected.
pub const EVENT_CATALOG: &[EventSpec] = &[
    EventSpec {
        event_type: ADJUSTMENT_POSTED,
        oldest_version: 1,
        current_version: 2,
    },
    v1(ADJUSTMENT_PROPOSED),
    v1(ADJUSTMENT_DECIDED),
    v1(APPLICATION_SUBMITTED),
    v1(APPLICATION_INFORMATION_REQUESTED),
    v1(APPLICATION_INFORMATION_PROVIDED),
    v1(APPLICATION_APPROVED),
    v1(APPLICATION_REJECTED),
    v1(APPLICATION_WITHDRAWN),
    v1(TOKEN_ISSUED),
    v1(TOKEN_REVOKED),
    v1(USER_REGISTERED),
    v1(EMAIL_CLAIMED),
    v1(ROLE_GRANTED),
    v1(ROLE_REVOKED),
    v1(PROVIDER_TOKEN_CLAIMED),
    v1(MODEL_ADDED),
    v1(MACHINE_REGISTERED),
    v1(GPU_DETECTED),
    v1(DECLARATION_COMPARED),
    v1(MACHINE_ONLINE),
    v1(MACHINE_OFFLINE),
    v1(GPU_CONDITION_CHANGED),
    v1(PLATFORM_OUTAGE_RECORDED),
    v1(PRICE_SET),
    v1(AVAILABILITY_SET),
    v1(MAINTENANCE_ANNOUNCED),
    v1(MAINTENANCE_CANCELLED),
    v1(GPU_DELISTED),
    v1(GPU_RELISTED),
    v1(RENTAL_STARTED),
    v1(RENTAL_ENDED),
    v1(GPU_LEASED),
    v1(GPU_RELEASED),
    v1(USAGE_METERED),
    v1(JOB_STARTED),
    v1(JOB_ENDED),
    v1(PAYOUT_SETTINGS_CHANGED),
    EventSpec {
        event_type: PAYOUT_BATCH_CREATED,
        oldest_version: 1,
        current_version: 2,
    },
    v1(PAYOUT_ROLLED_FORWARD),
    v1(PAYOUT_BATCH_STARTED),
    v1(PAYOUT_SCHEDULED),
    v1(PAYOUT_SUBMITTED),
    v1(PAYOUT_BANK_FILE_CREATED),
    v1(PAYOUT_CONFIRMED),
    v1(PAYOUT_FAILED),
    v1(BENCHMARK_RUN_RECORDED),
    v1(BENCHMARK_RUN_REFUSED),
    v1(BENCHMARK_RETEST_REQUESTED),
    v1(BENCHMARK_SUITE_SKIPPED),
    v1(BENCHMARK_OVERRIDE_SET),
    v1(BENCHMARK_OVERRIDE_CLEARED),
    v1(BENCHMARK_GPU_DELISTED),
    v1(BENCHMARK_GPU_RELISTED),
    v1(BENCHMARK_DELISTING_PAUSED),
    v1(BENCHMARK_DELISTING_RESUMED),
];

pub const BENCHMARK_RUN_RECORDED: &str = "benchmark.run_recorded";
pub const BENCHMARK_RUN_REFUSED: &str = "benchmark.run_refused";
pub const BENCHMARK_RETEST_REQUESTED: &str = "benchmark.retest_requested";
pub const BENCHMARK_SUITE_SKIPPED: &str = "benchmark.suite_skipped";
pub const BENCHMARK_OVERRIDE_SET: &str = "benchmark.override_set";
pub const BENCHMARK_OVERRIDE_CLEARED: &str = "benchmark.override_cleared";
pub const BENCHMARK_GPU_DELISTED: &str = "benchmark.gpu_delisted";
pub const BENCHMARK_GPU_RELISTED: &str = "benchmark.gpu_relisted";
pub const BENCHMARK_DELISTING_PAUSED: &str = "benchmark.delisting_paused";
pub const BENCHMARK_DELISTING_RESUMED: &str = "benchmark.delisting_resumed";

pub const USAGE_METERED: &str = "rental.usage_metered";

pub const RENTAL_STARTED: &str = "rental.started";
pub const RENTAL_ENDED: &str = "rental.ended";
pub const GPU_LEASED: &str = "rental.gpu_leased";
pub const GPU_RELEASED: &str = "rental.gpu_released";
pub const JOB_STARTED: &str = "rental.job_started";
pub const JOB_ENDED: &str = "rental.job_ended";

pub const PAYOUT_SETTINGS_CHANGED: &str = "payout.settings_changed";
pub const PAYOUT_BATCH_CREATED: &str = "payout.batch_created";
pub const PAYOUT_ROLLED_FORWARD: &str = "payout.rolled_forward";
pub const PAYOUT_BATCH_STARTED: &str = "payout.batch_started";
pub const PAYOUT_SCHEDULED: &str = "payout.scheduled";
pub const PAYOUT_SUBMITTED: &str = "payout.submitted";
pub const PAYOUT_BANK_FILE_CREATED: &str = "payout.bank_file_created";
pub const PAYOUT_CONFIRMED: &str = "payout.confirmed";
pub const PAYOUT_FAILED: &str = "payout.failed";

pub const PRICE_SET: &str = "market.price_set";
pub const AVAILABILITY_SET: &str = "market.availability_set";
pub const MAINTENANCE_ANNOUNCED: &str = "market.maintenance_announced";
pub const MAINTENANCE_CANCELLED: &str = "market.maintenance_cancelled";
pub const GPU_DELISTED: &str = "market.gpu_delisted";
pub const GPU_RELISTED: &str = "market.gpu_relisted";

pub const MACHINE_REGISTERED: &str = "fleet.machine_registered";
pub const GPU_DETECTED: &str = "fleet.gpu_detected";
pub const DECLARATION_COMPARED: &str = "fleet.declaration_compared";
pub const MACHINE_ONLINE: &str = "fleet.machine_online";
pub const MACHINE_OFFLINE: &str = "fleet.machine_offline";
pub const GPU_CONDITION_CHANGED: &str = "fleet.gpu_condition_changed";
pub const PLATFORM_OUTAGE_RECORDED: &str = "platform.outage_recorded";

pub const MODEL_ADDED: &str = "catalog.model_added";

pub const PROVIDER_TOKEN_CLAIMED: &str = "credential.provider_token_claimed";

pub const USER_REGISTERED: &str = "account.user_registered";
pub const EMAIL_CLAIMED: &str = "account.email_claimed";
pub const ROLE_GRANTED: &str = "account.role_granted";
pub const ROLE_REVOKED: &str = "account.role_revoked";

pub const TOKEN_ISSUED: &str = "credential.token_issued";
pub const TOKEN_REVOKED: &str = "credential.token_revoked";

pub const APPLICATION_SUBMITTED: &str = "provider.application_submitted";
pub const APPLICATION_INFORMATION_REQUESTED: &str = "provider.application_information_requested";
pub const APPLICATION_INFORMATION_PROVIDED: &str = "provider.application_information_provided";
pub const APPLICATION_APPROVED: &str = "provider.application_approved";
pub const APPLICATION_REJECTED: &str = "provider.application_rejected";
pub const APPLICATION_WITHDRAWN: &str = "provider.application_withdrawn";

const fn v1(event_type: &'static str) -> EventSpec {
    EventSpec {
        event_type,
        oldest_version: 1,
        current_version: 1,
    }
}

/// Longest free-text reason an adjustment may carry, in characters.
pub const REASON_CHARS_MAX: usize = crate::adjustments::ADJUSTMENT_REASON_CHARS_MAX;

/// The event types that post a journal entry ([`DomainEvent::journal_entry`]): the only ones
/// the ledger's fold reads, so it decodes no other event. `docs/events.md` says "Moves money" of
/// exactly these.
pub const JOURNAL_EVENT_TYPES: [&str; 5] = [
    ADJUSTMENT_POSTED,
    USAGE_METERED,
    PAYOUT_SCHEDULED,
    PAYOUT_CONFIRMED,
    PAYOUT_FAILED,
];

/// Whether events of `event_type` post a journal entry (one of [`JOURNAL_EVENT_TYPES`]).
pub fn posts_journal(event_type: &str) -> bool {
    JOURNAL_EVENT_TYPES.contains(&event_type)
}

pub fn spec(event_type: &str) -> Option<&'static EventSpec> {
    EVENT_CATALOG
        .iter()
        .find(|spec| spec.event_type == event_type)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown event type `{event_type}`")]
    UnknownEventType { event_type: String },
    #[error(
        "event type `{event_type}` has no schema version {version} (supported: {oldest}..={current})"
    )]
    UnsupportedSchemaVersion {
        event_type: String,
        version: u32,
        oldest: u32,
        current: u32,
    },
    #[error("malformed `{event_type}` v{version} payload: {reason}")]
    MalformedPayload {
        event_type: String,
        version: u32,
        reason: String,
    },
}

/// A decoded event at its current schema version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainEvent {
    AdjustmentPosted(AdjustmentPosted),
    Adjustment(crate::adjustments::AdjustmentEvent),
    Application(ApplicationEvent),
    Credential(CredentialEvent),
    Account(AccountEvent),
    ModelAdded(ModelAdded),
    Fleet(FleetEvent),
    Market(MarketEvent),
    Rental(RentalEvent),
    Payout(crate::payouts::PayoutEvent),
    Benchmark(BenchmarkEvent),
}

/// v1 of `ledger.adjustment_posted`: a single debit/credit pair. Kept so rows written with it
/// still decode; the upcaster turns it into a two-line journal entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdjustmentPostedV1 {
    entry_id: Uuid,
    reason: String,
    debit_account: Account,
    credit_account: Account,
    amount_micro_usdc: Usdc,
}

impl DomainEvent {
    pub fn event_type(&self) -> &'static str {
        match self {
            DomainEvent::AdjustmentPosted(_) => ADJUSTMENT_POSTED,
            DomainEvent::Adjustment(crate::adjustments::AdjustmentEvent::Proposed(_)) => {
                ADJUSTMENT_PROPOSED
            }
            DomainEvent::Adjustment(crate::adjustments::AdjustmentEvent::Decided(_)) => {
                ADJUSTMENT_DECIDED
            }
            DomainEvent::Application(event) => match event {
                ApplicationEvent::Submitted(_) => APPLICATION_SUBMITTED,
                ApplicationEvent::InformationRequested(_) => APPLICATION_INFORMATION_REQUESTED,
                ApplicationEvent::InformationProvided(_) => APPLICATION_INFORMATION_PROVIDED,
                ApplicationEvent::Approved(_) => APPLICATION_APPROVED,
                ApplicationEvent::Rejected(_) => APPLICATION_REJECTED,
                ApplicationEvent::Withdrawn(_) => APPLICATION_WITHDRAWN,
            },
            DomainEvent::Credential(CredentialEvent::Issued(_)) => TOKEN_ISSUED,
            DomainEvent::Credential(CredentialEvent::Revoked(_)) => TOKEN_REVOKED,
            DomainEvent::Credential(CredentialEvent::ProviderTokenClaimed(_)) => {
                PROVIDER_TOKEN_CLAIMED
            }
            DomainEvent::Account(AccountEvent::UserRegistered(_)) => USER_REGISTERED,
            DomainEvent::Account(AccountEvent::EmailClaimed(_)) => EMAIL_CLAIMED,
            DomainEvent::Account(AccountEvent::RoleGranted(_)) => ROLE_GRANTED,
            DomainEvent::Account(AccountEvent::RoleRevoked(_)) => ROLE_REVOKED,
            DomainEvent::ModelAdded(_) => MODEL_ADDED,
            DomainEvent::Fleet(event) => match event {
                FleetEvent::MachineRegistered(_) => MACHINE_REGISTERED,
                FleetEvent::GpuDetected(_) => GPU_DETECTED,
                FleetEvent::DeclarationCompared(_) => DECLARATION_COMPARED,
                FleetEvent::MachineOnline(_) => MACHINE_ONLINE,
                FleetEvent::MachineOffline(_) => MACHINE_OFFLINE,
                FleetEvent::GpuConditionChanged(_) => GPU_CONDITION_CHANGED,
                FleetEvent::PlatformOutageRecorded(_) => PLATFORM_OUTAGE_RECORDED,
            },
            DomainEvent::Market(event) => match event {
                MarketEvent::PriceSet(_) => PRICE_SET,
                MarketEvent::AvailabilitySet(_) => AVAILABILITY_SET,
                MarketEvent::MaintenanceAnnounced(_) => MAINTENANCE_ANNOUNCED,
                MarketEvent::MaintenanceCancelled(_) => MAINTENANCE_CANCELLED,
                MarketEvent::GpuDelisted(_) => GPU_DELISTED,
                MarketEvent::GpuRelisted(_) => GPU_RELISTED,
            },
            DomainEvent::Rental(event) => match event {
                RentalEvent::Started(_) => RENTAL_STARTED,
                RentalEvent::Ended(_) => RENTAL_ENDED,
                RentalEvent::GpuLeased(_) => GPU_LEASED,
                RentalEvent::GpuReleased(_) => GPU_RELEASED,
                RentalEvent::UsageMetered(_) => USAGE_METERED,
                RentalEvent::JobStarted(_) => JOB_STARTED,
                RentalEvent::JobEnded(_) => JOB_ENDED,
            },
            DomainEvent::Payout(event) => match event {
                PayoutEvent::SettingsChanged(_) => PAYOUT_SETTINGS_CHANGED,
                PayoutEvent::BatchCreated(_) => PAYOUT_BATCH_CREATED,
                PayoutEvent::RolledForward(_) => PAYOUT_ROLLED_FORWARD,
                PayoutEvent::BatchStarted(_) => PAYOUT_BATCH_STARTED,
                PayoutEvent::Scheduled(_) => PAYOUT_SCHEDULED,
                PayoutEvent::Submitted(_) => PAYOUT_SUBMITTED,
                PayoutEvent::BankFileCreated(_) => PAYOUT_BANK_FILE_CREATED,
                PayoutEvent::Confirmed(_) => PAYOUT_CONFIRMED,
                PayoutEvent::Failed(_) => PAYOUT_FAILED,
            },
            DomainEvent::Benchmark(event) => match event {
                BenchmarkEvent::RunRecorded(_) => BENCHMARK_RUN_RECORDED,
                BenchmarkEvent::RunRefused(_) => BENCHMARK_RUN_REFUSED,
                BenchmarkEvent::RetestRequested(_) => BENCHMARK_RETEST_REQUESTED,
                BenchmarkEvent::SuiteSkipped(_) => BENCHMARK_SUITE_SKIPPED,
                BenchmarkEvent::OverrideSet(_) => BENCHMARK_OVERRIDE_SET,
                BenchmarkEvent::OverrideCleared(_) => BENCHMARK_OVERRIDE_CLEARED,
                BenchmarkEvent::GpuDelisted(_) => BENCHMARK_GPU_DELISTED,
                BenchmarkEvent::GpuRelisted(_) => BENCHMARK_GPU_RELISTED,
                BenchmarkEvent::DelistingPaused(_) => BENCHMARK_DELISTING_PAUSED,
                BenchmarkEvent::DelistingResumed(_) => BENCHMARK_DELISTING_RESUMED,
            },
        }
    }

    /// The schema version [`DomainEvent::to_payload`] writes.
    pub fn schema_version(&self) -> u32 {
        spec(self.event_type()).map_or(1, |spec| spec.current_version)
    }

    pub fn to_payload(&self) -> Value {
        let encoded = match self {
            DomainEvent::AdjustmentPosted(event) => serde_json::to_value(event),
            DomainEvent::Adjustment(crate::adjustments::AdjustmentEvent::Proposed(e)) => {
                serde_json::to_value(e)
            }
            DomainEvent::Adjustment(crate::adjustments::AdjustmentEvent::Decided(e)) => {
                serde_json::to_value(e)
            }
            DomainEvent::Application(event) => match event {
                ApplicationEvent::Submitted(e) => serde_json::to_value(e),
                ApplicationEvent::InformationRequested(e) => serde_json::to_value(e),
                ApplicationEvent::InformationProvided(e) => serde_json::to_value(e),
                ApplicationEvent::Approved(e) => serde_json::to_value(e),
                ApplicationEvent::Rejected(e) => serde_json::to_value(e),
                ApplicationEvent::Withdrawn(e) => serde_json::to_value(e),
            },
            DomainEvent::Credential(CredentialEvent::Issued(e)) => serde_json::to_value(e),
            DomainEvent::Credential(CredentialEvent::Revoked(e)) => serde_json::to_value(e),
            DomainEvent::Credential(CredentialEvent::ProviderTokenClaimed(e)) => {
                serde_json::to_value(e)
            }
            DomainEvent::Account(AccountEvent::UserRegistered(e)) => serde_json::to_value(e),
            DomainEvent::Account(AccountEvent::EmailClaimed(e)) => serde_json::to_value(e),
            DomainEvent::Account(AccountEvent::RoleGranted(e)) => serde_json::to_value(e),
            DomainEvent::Account(AccountEvent::RoleRevoked(e)) => serde_json::to_value(e),
            DomainEvent::ModelAdded(e) => serde_json::to_value(e),
            DomainEvent::Fleet(event) => match event {
                FleetEvent::MachineRegistered(e) => serde_json::to_value(e),
                FleetEvent::GpuDetected(e) => serde_json::to_value(e),
                FleetEvent::DeclarationCompared(e) => serde_json::to_value(e),
                FleetEvent::MachineOnline(e) => serde_json::to_value(e),
                FleetEvent::MachineOffline(e) => serde_json::to_value(e),
                FleetEvent::GpuConditionChanged(e) => serde_json::to_value(e),
                FleetEvent::PlatformOutageRecorded(e) => serde_json::to_value(e),
            },
            DomainEvent::Market(event) => match event {
                MarketEvent::PriceSet(e) => serde_json::to_value(e),
                MarketEvent::AvailabilitySet(e) => serde_json::to_value(e),
                MarketEvent::MaintenanceAnnounced(e) => serde_json::to_value(e),
                MarketEvent::MaintenanceCancelled(e) => serde_json::to_value(e),
                MarketEvent::GpuDelisted(e) | MarketEvent::GpuRelisted(e) => {
                    serde_json::to_value(e)
                }
            },
            DomainEvent::Rental(event) => match event {
                RentalEvent::Started(e) => serde_json::to_value(e),
                RentalEvent::Ended(e) => serde_json::to_value(e),
                RentalEvent::GpuLeased(e) | RentalEvent::GpuReleased(e) => serde_json::to_value(e),
                RentalEvent::UsageMetered(e) => serde_json::to_value(e),
                RentalEvent::JobStarted(e) => serde_json::to_value(e),
                RentalEvent::JobEnded(e) => serde_json::to_value(e),
            },
            DomainEvent::Payout(event) => match event {
                PayoutEvent::SettingsChanged(e) => serde_json::to_value(e),
                PayoutEvent::BatchCreated(e) => serde_json::to_value(e),
                PayoutEvent::RolledForward(e) => serde_json::to_value(e),
                PayoutEvent::BatchStarted(e) => serde_json::to_value(e),
                PayoutEvent::Scheduled(e) => serde_json::to_value(e),
                PayoutEvent::Submitted(e) => serde_json::to_value(e),
                PayoutEvent::BankFileCreated(e) => serde_json::to_value(e),
                PayoutEvent::Confirmed(e) => serde_json::to_value(e),
                PayoutEvent::Failed(e) => serde_json::to_value(e),
            },
            DomainEvent::Benchmark(event) => match event {
                BenchmarkEvent::RunRecorded(e) => serde_json::to_value(e),
                BenchmarkEvent::RunRefused(e) => serde_json::to_value(e),
                BenchmarkEvent::RetestRequested(e) => serde_json::to_value(e),
                BenchmarkEvent::SuiteSkipped(e) => serde_json::to_value(e),
                BenchmarkEvent::OverrideSet(e) => serde_json::to_value(e),
                BenchmarkEvent::OverrideCleared(e) => serde_json::to_value(e),
                BenchmarkEvent::GpuDelisted(e) | BenchmarkEvent::GpuRelisted(e) => {
                    serde_json::to_value(e)
                }
                BenchmarkEvent::DelistingPaused(e) => serde_json::to_value(e),
                BenchmarkEvent::DelistingResumed(e) => serde_json::to_value(e),
            },
        };
        // Serializing these plain structs into a Value cannot fail: no maps with non-string keys.
        encoded.unwrap_or(Value::Null)
    }

    /// The postings this event moves, if it moves money.
    pub fn journal(&self) -> Option<&JournalEntry> {
        self.journal_entry().map(|(_, entry)| entry)
    }

    /// The journal entry's id and postings, if this event moves money.
    pub fn journal_entry(&self) -> Option<(Uuid, &JournalEntry)> {
        // A type left out of the list posts nothing anywhere, not only where the list filters.
        if !posts_journal(self.event_type()) {
            return None;
        }
        match self {
            DomainEvent::AdjustmentPosted(event) => Some((event.entry_id, &event.postings)),
            DomainEvent::Rental(RentalEvent::UsageMetered(event)) => {
                Some((event.entry_id, &event.postings))
            }
            DomainEvent::Payout(PayoutEvent::Scheduled(event)) => {
                Some((event.payout_id, &event.postings))
            }
            DomainEvent::Payout(PayoutEvent::Confirmed(event)) => Some((
                crate::payouts::entry_id(event.payout_id, "confirmed"),
                &event.postings,
            )),
            DomainEvent::Payout(PayoutEvent::Failed(event)) => Some((
                crate::payouts::entry_id(event.payout_id, "failed"),
                &event.postings,
            )),
            DomainEvent::Adjustment(_)
            | DomainEvent::Application(_)
            | DomainEvent::Credential(_)
            | DomainEvent::Account(_)
            | DomainEvent::ModelAdded(_)
            | DomainEvent::Fleet(_)
            | DomainEvent::Market(_)
            | DomainEvent::Rental(_)
            | DomainEvent::Payout(_)
            | DomainEvent::Benchmark(_) => None,
        }
    }

    /// Decodes a submitted payload of any supported version, upcasting it first.
    pub fn decode(
        event_type: &str,
        version: u32,
        payload: &Value,
    ) -> Result<DomainEvent, DecodeError> {
        decode_with(event_type, version, FromValue(payload))
    }

    /// Decodes a stored payload (JSON text) of any supported version, upcasting it first.
    pub fn decode_json(
        event_type: &str,
        version: u32,
        payload: &str,
    ) -> Result<DomainEvent, DecodeError> {
        decode_with(event_type, version, FromText(payload))
    }
}

/// Where a payload comes from: a submitted JSON value or stored JSON text. Stored text is parsed
/// straight into the versioned struct, without building a `Value` first.
trait PayloadSource {
    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error>;
}

struct FromValue<'a>(&'a Value);
struct FromText<'a>(&'a str);

impl PayloadSource for FromValue<'_> {
    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(self.0)
    }
}

impl PayloadSource for FromText<'_> {
    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0)
    }
}

fn decode_with(
    event_type: &str,
    version: u32,
    source: impl PayloadSource,
) -> Result<DomainEvent, DecodeError> {
    let spec = spec(event_type).ok_or_else(|| DecodeError::UnknownEventType {
        event_type: event_type.chars().take(128).collect(),
    })?;
    if version < spec.oldest_version || version > spec.current_version {
        return Err(DecodeError::UnsupportedSchemaVersion {
            event_type: spec.event_type.to_owned(),
            version,
            oldest: spec.oldest_version,
            current: spec.current_version,
        });
    }
    let malformed = |reason: String| DecodeError::MalformedPayload {
        event_type: spec.event_type.to_owned(),
        version,
        reason,
    };
    let json = |e: serde_json::Error| malformed(e.to_string());
    let application = DomainEvent::Application;
    let fleet = DomainEvent::Fleet;
    let market = DomainEvent::Market;
    let benchmark = DomainEvent::Benchmark;
    let event = match (spec.event_type, version) {
        (ADJUSTMENT_POSTED, 1) => {
            let event = upcast_adjustment_v1(source.parse().map_err(json)?).map_err(malformed)?;
            validate_reason(&event.reason).map_err(malformed)?;
            DomainEvent::AdjustmentPosted(event)
        }
        (ADJUSTMENT_POSTED, _) => {
            let event: AdjustmentPosted = source.parse().map_err(json)?;
            validate_reason(&event.reason).map_err(malformed)?;
            DomainEvent::AdjustmentPosted(event)
        }
        (ADJUSTMENT_PROPOSED, _) => DomainEvent::Adjustment(
            crate::adjustments::AdjustmentEvent::Proposed(source.parse().map_err(json)?),
        ),
        (ADJUSTMENT_DECIDED, _) => DomainEvent::Adjustment(
            crate::adjustments::AdjustmentEvent::Decided(source.parse().map_err(json)?),
        ),
        (APPLICATION_SUBMITTED, _) => application(ApplicationEvent::Submitted(
            source.parse::<ApplicationSubmitted>().map_err(json)?,
        )),
        (APPLICATION_INFORMATION_REQUESTED, _) => {
            application(ApplicationEvent::InformationRequested(
                source.parse::<InformationRequested>().map_err(json)?,
            ))
        }
        (APPLICATION_INFORMATION_PROVIDED, _) => {
            application(ApplicationEvent::InformationProvided(
                source.parse::<InformationProvided>().map_err(json)?,
            ))
        }
        (APPLICATION_APPROVED, _) => application(ApplicationEvent::Approved(
            source.parse::<ApplicationApproved>().map_err(json)?,
        )),
        (APPLICATION_REJECTED, _) => application(ApplicationEvent::Rejected(
            source.parse::<ApplicationRejected>().map_err(json)?,
        )),
        (APPLICATION_WITHDRAWN, _) => application(ApplicationEvent::Withdrawn(
            source.parse::<ApplicationWithdrawn>().map_err(json)?,
        )),
        (TOKEN_ISSUED, _) => DomainEvent::Credential(CredentialEvent::Issued(
            source.parse::<TokenIssued>().map_err(json)?,
        )),
        (USER_REGISTERED, _) => DomainEvent::Account(AccountEvent::UserRegistered(
            source.parse::<UserRegistered>().map_err(json)?,
        )),
        (EMAIL_CLAIMED, _) => DomainEvent::Account(AccountEvent::EmailClaimed(
            source.parse::<EmailClaimed>().map_err(json)?,
        )),
        (ROLE_GRANTED, _) => DomainEvent::Account(AccountEvent::RoleGranted(
            source.parse::<RoleGranted>().map_err(json)?,
        )),
        (ROLE_REVOKED, _) => DomainEvent::Account(AccountEvent::RoleRevoked(
            source.parse::<RoleRevoked>().map_err(json)?,
        )),
        (MODEL_ADDED, _) => DomainEvent::ModelAdded(source.parse::<ModelAdded>().map_err(json)?),
        (PROVIDER_TOKEN_CLAIMED, _) => {
            DomainEvent::Credential(CredentialEvent::ProviderTokenClaimed(
                source.parse::<ProviderTokenClaimed>().map_err(json)?,
            ))
        }
        (MACHINE_REGISTERED, _) => fleet(FleetEvent::MachineRegistered(
            source.parse::<MachineRegistered>().map_err(json)?,
        )),
        (GPU_DETECTED, _) => fleet(FleetEvent::GpuDetected(
            source.parse::<GpuDetected>().map_err(json)?,
        )),
        (DECLARATION_COMPARED, _) => fleet(FleetEvent::DeclarationCompared(
            source.parse::<DeclarationCompared>().map_err(json)?,
        )),
        (MACHINE_ONLINE, _) => fleet(FleetEvent::MachineOnline(
            source.parse::<MachineOnline>().map_err(json)?,
        )),
        (MACHINE_OFFLINE, _) => fleet(FleetEvent::MachineOffline(
            source.parse::<MachineOffline>().map_err(json)?,
        )),
        (GPU_CONDITION_CHANGED, _) => fleet(FleetEvent::GpuConditionChanged(
            source.parse::<GpuConditionChanged>().map_err(json)?,
        )),
        (PLATFORM_OUTAGE_RECORDED, _) => fleet(FleetEvent::PlatformOutageRecorded(
            source.parse::<PlatformOutageRecorded>().map_err(json)?,
        )),
        (PRICE_SET, _) => {
            let event: PriceSet = source.parse().map_err(json)?;
            if !(crate::market::PRICE_MICRO_USDC_MIN..=crate::market::PRICE_MICRO_USDC_MAX)
                .contains(&event.price_micro_usdc.micros())
            {
                return Err(malformed("price out of range".to_owned()));
            }
            market(MarketEvent::PriceSet(event))
        }
        (AVAILABILITY_SET, _) => {
            let event: AvailabilitySet = source.parse().map_err(json)?;
            crate::market::validate_availability(&event.availability)
                .map_err(|e| malformed(e.to_string()))?;
            market(MarketEvent::AvailabilitySet(event))
        }
        (MAINTENANCE_ANNOUNCED, _) => market(MarketEvent::MaintenanceAnnounced(
            source.parse::<MaintenanceAnnounced>().map_err(json)?,
        )),
        (MAINTENANCE_CANCELLED, _) => market(MarketEvent::MaintenanceCancelled(
            source.parse::<MaintenanceCancelled>().map_err(json)?,
        )),
        (GPU_DELISTED, _) => market(MarketEvent::GpuDelisted(
            source.parse::<GpuListingChanged>().map_err(json)?,
        )),
        (GPU_RELISTED, _) => market(MarketEvent::GpuRelisted(
            source.parse::<GpuListingChanged>().map_err(json)?,
        )),
        (RENTAL_STARTED, _) => DomainEvent::Rental(RentalEvent::Started(
            source.parse::<RentalStarted>().map_err(json)?,
        )),
        (RENTAL_ENDED, _) => DomainEvent::Rental(RentalEvent::Ended(
            source.parse::<RentalEnded>().map_err(json)?,
        )),
        (GPU_LEASED, _) => DomainEvent::Rental(RentalEvent::GpuLeased(
            source.parse::<GpuLease>().map_err(json)?,
        )),
        (USAGE_METERED, _) => {
            let event: UsageMetered = source.parse().map_err(json)?;
            let sums = event.fee.checked_add(event.net).ok() == Some(event.gross)
                && event.postings.total() == event.gross;
            if !sums {
                return Err(malformed(
                    "gross must equal fee + net and the posted total".to_owned(),
                ));
            }
            DomainEvent::Rental(RentalEvent::UsageMetered(event))
        }
        (GPU_RELEASED, _) => DomainEvent::Rental(RentalEvent::GpuReleased(
            source.parse::<GpuLease>().map_err(json)?,
        )),
        (JOB_STARTED, _) => DomainEvent::Rental(RentalEvent::JobStarted(
            source.parse::<JobStarted>().map_err(json)?,
        )),
        (BENCHMARK_RUN_RECORDED, _) => benchmark(BenchmarkEvent::RunRecorded(Box::new(
            source.parse::<RunRecorded>().map_err(json)?,
        ))),
        (BENCHMARK_RUN_REFUSED, _) => benchmark(BenchmarkEvent::RunRefused(Box::new(
            source.parse::<RunRefused>().map_err(json)?,
        ))),
        (BENCHMARK_RETEST_REQUESTED, _) => benchmark(BenchmarkEvent::RetestRequested(
            source.parse::<RetestRequested>().map_err(json)?,
        )),
        (BENCHMARK_SUITE_SKIPPED, _) => benchmark(BenchmarkEvent::SuiteSkipped(
            source.parse::<SuiteSkipped>().map_err(json)?,
        )),
        (BENCHMARK_OVERRIDE_SET, _) => benchmark(BenchmarkEvent::OverrideSet(
            source.parse::<OverrideSet>().map_err(json)?,
        )),
        (BENCHMARK_OVERRIDE_CLEARED, _) => benchmark(BenchmarkEvent::OverrideCleared(
            source.parse::<OverrideCleared>().map_err(json)?,
        )),
        (BENCHMARK_GPU_DELISTED, _) => benchmark(BenchmarkEvent::GpuDelisted(
            source.parse::<ListingActed>().map_err(json)?,
        )),
        (BENCHMARK_GPU_RELISTED, _) => benchmark(BenchmarkEvent::GpuRelisted(
            source.parse::<ListingActed>().map_err(json)?,
        )),
        (BENCHMARK_DELISTING_PAUSED, _) => benchmark(BenchmarkEvent::DelistingPaused(
            source.parse::<DelistingPaused>().map_err(json)?,
        )),
        (BENCHMARK_DELISTING_RESUMED, _) => benchmark(BenchmarkEvent::DelistingResumed(
            source.parse::<DelistingResumed>().map_err(json)?,
        )),
        (JOB_ENDED, _) => DomainEvent::Rental(RentalEvent::JobEnded(
            source.parse::<JobEnded>().map_err(json)?,
        )),
        (PAYOUT_SETTINGS_CHANGED, _) => DomainEvent::Payout(PayoutEvent::SettingsChanged(
            source
                .parse::<crate::payouts::PayoutSettingsChanged>()
                .map_err(json)?,
        )),
        (PAYOUT_BATCH_CREATED, 1) => DomainEvent::Payout(PayoutEvent::BatchCreated(
            source
                .parse::<crate::payouts::BatchCreatedV1>()
                .map_err(json)?
                .into(),
        )),
        (PAYOUT_BATCH_CREATED, _) => DomainEvent::Payout(PayoutEvent::BatchCreated(
            source
                .parse::<crate::payouts::BatchCreated>()
                .map_err(json)?,
        )),
        (PAYOUT_BATCH_STARTED, _) => DomainEvent::Payout(PayoutEvent::BatchStarted(
            source
                .parse::<crate::payouts::BatchStarted>()
                .map_err(json)?,
        )),
        (PAYOUT_ROLLED_FORWARD, _) => {
            let event: crate::payouts::RolledForwardRecorded = source.parse().map_err(json)?;
            if event.providers.is_empty()
                || event.providers.len() > crate::payouts::ROLLED_FORWARD_PER_EVENT
            {
                return Err(malformed(format!(
                    "providers: 1 to {} entries",
                    crate::payouts::ROLLED_FORWARD_PER_EVENT
                )));
            }
            DomainEvent::Payout(PayoutEvent::RolledForward(event))
        }
        (PAYOUT_SCHEDULED, _) => {
            let event: crate::payouts::PayoutScheduled = source.parse().map_err(json)?;
            event.check().map_err(malformed)?;
            DomainEvent::Payout(PayoutEvent::Scheduled(event))
        }
        (PAYOUT_SUBMITTED, _) => DomainEvent::Payout(PayoutEvent::Submitted(
            source
                .parse::<crate::payouts::PayoutSubmitted>()
                .map_err(json)?,
        )),
        (PAYOUT_BANK_FILE_CREATED, _) => {
            let event: crate::payouts::BankFileCreated = source.parse().map_err(json)?;
            event.check().map_err(malformed)?;
            DomainEvent::Payout(PayoutEvent::BankFileCreated(event))
        }
        (PAYOUT_CONFIRMED, _) => {
            let event: crate::payouts::PayoutConfirmed = source.parse().map_err(json)?;
            let expected = crate::payouts::confirm_entry(event.provider_id, event.amount)
                .map_err(|e| malformed(e.to_string()))?;
            if expected != event.postings {
                return Err(malformed(
                    "postings must move the amount from clearing to the treasury".to_owned(),
                ));
            }
            DomainEvent::Payout(PayoutEvent::Confirmed(event))
        }
        (PAYOUT_FAILED, _) => {
            let event: crate::payouts::PayoutFailed = source.parse().map_err(json)?;
            let expected = crate::payouts::fail_entry(event.provider_id, event.amount)
                .map_err(|e| malformed(e.to_string()))?;
            if expected != event.postings {
                return Err(malformed(
                    "postings must move the amount from clearing back to payable".to_owned(),
                ));
            }
            DomainEvent::Payout(PayoutEvent::Failed(event))
        }
        (TOKEN_REVOKED, _) => DomainEvent::Credential(CredentialEvent::Revoked(
            source.parse::<TokenRevoked>().map_err(json)?,
        )),
        _ => {
            return Err(DecodeError::UnknownEventType {
                event_type: spec.event_type.to_owned(),
            });
        }
    };
    Ok(event)
}

fn upcast_adjustment_v1(v1: AdjustmentPostedV1) -> Result<AdjustmentPosted, String> {
    let postings = JournalEntry::new(vec![
        Posting::debit(v1.debit_account, v1.amount_micro_usdc),
        Posting::credit(v1.credit_account, v1.amount_micro_usdc),
    ])
    .map_err(|e| e.to_string())?;
    Ok(AdjustmentPosted {
        entry_id: v1.entry_id,
        reason: v1.reason,
        postings,
    })
}

fn validate_reason(reason: &str) -> Result<(), String> {
    if reason.trim().is_empty() {
        return Err("reason must not be blank".to_owned());
    }
    let chars = reason.chars().count();
    if chars > REASON_CHARS_MAX {
        return Err(format!(
            "reason has {chars} characters, more than {REASON_CHARS_MAX}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PROVIDER: &str = "01900000-0000-7000-8000-000000000001";
    const ENTRY: &str = "01900000-0000-7000-8000-0000000000aa";

    fn v2_payload(amount: i64) -> Value {
        json!({
            "entry_id": ENTRY,
            "reason": "goodwill credit for outage",
            "postings": [
                {"account": "platform_adjustments", "side": "debit", "amount_micro_usdc": amount},
                {"account": format!("provider_payable:{PROVIDER}"), "side": "credit", "amount_micro_usdc": amount},
            ]
        })
    }

    #[test]
    fn current_version_round_trips() {
        let event = DomainEvent::decode(ADJUSTMENT_POSTED, 2, &v2_payload(1_500_000)).unwrap();
        assert_eq!(event.schema_version(), 2);
        assert_eq!(
            event.journal().unwrap().total(),
            Usdc::from_micros(1_500_000)
        );
        let again = DomainEvent::decode(ADJUSTMENT_POSTED, 2, &event.to_payload()).unwrap();
        assert_eq!(again, event);
    }

    #[test]
    fn v1_is_upcast_to_the_current_shape() {
        let v1 = json!({
            "entry_id": ENTRY,
            "reason": "goodwill credit for outage",
            "debit_account": "platform_adjustments",
            "credit_account": format!("provider_payable:{PROVIDER}"),
            "amount_micro_usdc": 1_500_000,
        });
        let upcast = DomainEvent::decode(ADJUSTMENT_POSTED, 1, &v1).unwrap();
        let current = DomainEvent::decode(ADJUSTMENT_POSTED, 2, &v2_payload(1_500_000)).unwrap();
        assert_eq!(upcast, current);
    }

    #[test]
    fn a_v1_batch_is_upcast_to_counts_keeping_its_rolled_forward_list() {
        let rolled = json!({"provider_id": PROVIDER, "schedule": "weekly",
                            "available": 19_999_200, "minimum": 20_000_000});
        let v1 = json!({
            "batch_id": ENTRY, "payout_date": "2026-11-02", "cutoff": 1_793_318_400_000_000_i64,
            "payouts": [ENTRY, PROVIDER], "total": 45_500_000, "rolled_forward": [rolled],
            "created_at": 1_794_000_000_000_000_i64,
        });
        let DomainEvent::Payout(PayoutEvent::BatchCreated(batch)) =
            DomainEvent::decode(PAYOUT_BATCH_CREATED, 1, &v1).unwrap()
        else {
            panic!("not a batch");
        };
        assert_eq!(batch.payout_count, 2);
        assert_eq!(batch.rolled_forward_count, 1);
        assert_eq!(batch.rolled_forward.len(), 1);
        assert_eq!(batch.total.micros(), 45_500_000);
        // v2 writers leave the list out; a v2 event reads back the same.
        let v2 = DomainEvent::Payout(PayoutEvent::BatchCreated(crate::payouts::BatchCreated {
            rolled_forward: Vec::new(),
            ..batch
        }));
        let payload = v2.to_payload();
        assert!(payload.get("rolled_forward").is_none(), "{payload}");
        assert_eq!(
            DomainEvent::decode(PAYOUT_BATCH_CREATED, 2, &payload).unwrap(),
            v2
        );
        // A rolled-forward event holds 1 to 200 providers.
        let empty = json!({"batch_id": ENTRY, "payout_date": "2026-11-02", "providers": []});
        assert!(DomainEvent::decode(PAYOUT_ROLLED_FORWARD, 1, &empty).is_err());
    }

    #[test]
    fn text_and_value_decoding_agree() {
        let payload = v2_payload(42);
        let text = payload.to_string();
        assert_eq!(
            DomainEvent::decode_json(ADJUSTMENT_POSTED, 2, &text),
            DomainEvent::decode(ADJUSTMENT_POSTED, 2, &payload)
        );
        assert!(matches!(
            DomainEvent::decode_json(ADJUSTMENT_POSTED, 2, "{not json"),
            Err(DecodeError::MalformedPayload { .. })
        ));
    }

    #[test]
    fn bad_input_gets_typed_errors() {
        assert!(matches!(
            DomainEvent::decode("ledger.nonsense", 1, &json!({})),
            Err(DecodeError::UnknownEventType { .. })
        ));
        assert!(matches!(
            DomainEvent::decode(ADJUSTMENT_POSTED, 3, &v2_payload(1)),
            Err(DecodeError::UnsupportedSchemaVersion {
                version: 3,
                current: 2,
                ..
            })
        ));
        assert!(matches!(
            DomainEvent::decode(ADJUSTMENT_POSTED, 0, &v2_payload(1)),
            Err(DecodeError::UnsupportedSchemaVersion { version: 0, .. })
        ));
        let mut unbalanced = v2_payload(10);
        unbalanced["postings"][1]["amount_micro_usdc"] = json!(9);
        let error = DomainEvent::decode(ADJUSTMENT_POSTED, 2, &unbalanced).unwrap_err();
        assert!(error.to_string().contains("unbalanced"), "{error}");
        let mut extra = v2_payload(10);
        extra["surprise"] = json!(true);
        assert!(matches!(
            DomainEvent::decode(ADJUSTMENT_POSTED, 2, &extra),
            Err(DecodeError::MalformedPayload { .. })
        ));
        let mut blank = v2_payload(10);
        blank["reason"] = json!("   ");
        assert!(matches!(
            DomainEvent::decode(ADJUSTMENT_POSTED, 2, &blank),
            Err(DecodeError::MalformedPayload { .. })
        ));
        assert!(matches!(
            DomainEvent::decode(ADJUSTMENT_POSTED, 2, &json!("not an object")),
            Err(DecodeError::MalformedPayload { .. })
        ));
    }
}
