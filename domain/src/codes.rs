//! The closed list of error codes. Every refusal the platform gives, as a problem document's
//! `code` or a field error's, is one of these; `docs/errors.md` explains each in one table (the
//! tidy test keeps the two equal, and the server serves that table at `/docs/errors`). A code,
//! once published, keeps its meaning: add new ones rather than reuse.

use std::fmt;

macro_rules! error_codes {
    ($($variant:ident = $name:literal,)*) => {
        /// A stable, machine-readable reason for a refusal.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            /// Every code, in the order of the list.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as clients see it (`snake_case`).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)*
                }
            }
        }
    };
}

error_codes! {
    AccountNotAdjustable = "account_not_adjustable",
    AlreadyDecided = "already_decided",
    AlreadyDelisted = "already_delisted",
    AlreadyEnded = "already_ended",
    AlreadyIssued = "already_issued",
    AlreadyListed = "already_listed",
    AlreadyRevoked = "already_revoked",
    AlreadySignedOut = "already_signed_out",
    AlreadySubmitted = "already_submitted",
    AmbiguousModel = "ambiguous_model",
    AmountOutOfRange = "amount_out_of_range",
    BankFileChanged = "bank_file_changed",
    BankFileInvalid = "bank_file_invalid",
    BankRailNotConfigured = "bank_rail_not_configured",
    BankRegionUnsupported = "bank_region_unsupported",
    BatchInProgress = "batch_in_progress",
    BodyTooLarge = "body_too_large",
    BodyUnreadable = "body_unreadable",
    ClockSkew = "clock_skew",
    ConcurrentChange = "concurrent_change",
    CredentialsUnavailable = "credentials_unavailable",
    CsrfTokenInvalid = "csrf_token_invalid",
    DatabaseUnavailable = "database_unavailable",
    DateInFuture = "date_in_future",
    DatedBeforeSubmission = "dated_before_submission",
    DuplicateEventId = "duplicate_event_id",
    DuplicateGpu = "duplicate_gpu",
    DuplicateIndex = "duplicate_index",
    DuplicateKey = "duplicate_key",
    DuplicateParameter = "duplicate_parameter",
    EmailTaken = "email_taken",
    ExecutionDateClosed = "execution_date_closed",
    ExecutionDatePast = "execution_date_past",
    Forbidden = "forbidden",
    ForbiddenCharacter = "forbidden_character",
    GpuNotAvailable = "gpu_not_available",
    GpuRegisteredElsewhere = "gpu_registered_elsewhere",
    IdempotencyConflict = "idempotency_conflict",
    IdempotencyKeyReused = "idempotency_key_reused",
    Internal = "internal",
    InvalidAccount = "invalid_account",
    InvalidActAs = "invalid_act_as",
    InvalidAppend = "invalid_append",
    InvalidBankReference = "invalid_bank_reference",
    InvalidBenchmark = "invalid_benchmark",
    InvalidBic = "invalid_bic",
    InvalidBody = "invalid_body",
    InvalidCharacters = "invalid_characters",
    InvalidCountry = "invalid_country",
    InvalidCursor = "invalid_cursor",
    InvalidDate = "invalid_date",
    InvalidEffectiveAt = "invalid_effective_at",
    InvalidEmail = "invalid_email",
    InvalidEventId = "invalid_event_id",
    InvalidEvidence = "invalid_evidence",
    InvalidFilter = "invalid_filter",
    InvalidGpuUuid = "invalid_gpu_uuid",
    InvalidGpus = "invalid_gpus",
    InvalidIban = "invalid_iban",
    InvalidIdempotencyKey = "invalid_idempotency_key",
    InvalidLabel = "invalid_label",
    InvalidLength = "invalid_length",
    InvalidLimit = "invalid_limit",
    InvalidMaintenance = "invalid_maintenance",
    InvalidModel = "invalid_model",
    InvalidModelId = "invalid_model_id",
    InvalidModelName = "invalid_model_name",
    InvalidPathParameter = "invalid_path_parameter",
    InvalidPrice = "invalid_price",
    InvalidQuery = "invalid_query",
    InvalidRange = "invalid_range",
    InvalidRate = "invalid_rate",
    InvalidReason = "invalid_reason",
    InvalidReasonCode = "invalid_reason_code",
    InvalidRegion = "invalid_region",
    InvalidRequest = "invalid_request",
    InvalidRuntime = "invalid_runtime",
    InvalidSchedule = "invalid_schedule",
    InvalidSecretHash = "invalid_secret_hash",
    InvalidSort = "invalid_sort",
    InvalidStatus = "invalid_status",
    InvalidStatusReport = "invalid_status_report",
    InvalidText = "invalid_text",
    InvalidTier = "invalid_tier",
    InvalidTimeZone = "invalid_time_zone",
    InvalidTimestamp = "invalid_timestamp",
    InvalidTransition = "invalid_transition",
    InvalidType = "invalid_type",
    InvalidValue = "invalid_value",
    InvalidVram = "invalid_vram",
    InvalidWallet = "invalid_wallet",
    InvalidWindow = "invalid_window",
    InvalidWorkload = "invalid_workload",
    MachineIdUnknown = "machine_id_unknown",
    MachineNotOwned = "machine_not_owned",
    MachineNotRegistered = "machine_not_registered",
    MachineRegisteredElsewhere = "machine_registered_elsewhere",
    MalformedJson = "malformed_json",
    MethodNotAllowed = "method_not_allowed",
    MissingField = "missing_field",
    MixedMachines = "mixed_machines",
    ModelNotOffered = "model_not_offered",
    NoGpus = "no_gpus",
    NoMatch = "no_match",
    NoOverride = "no_override",
    NoSuchMaintenance = "no_such_maintenance",
    NotABankPayout = "not_a_bank_payout",
    NotACreditTransferReport = "not_a_credit_transfer_report",
    NotAPayoutDate = "not_a_payout_date",
    NotApproved = "not_approved",
    NotBenchmarkable = "not_benchmarkable",
    NotDelisted = "not_delisted",
    NotFound = "not_found",
    NotPaused = "not_paused",
    NotTheApplicant = "not_the_applicant",
    NothingToFile = "nothing_to_file",
    NothingToOverride = "nothing_to_override",
    OtherProvider = "other_provider",
    OutOfRange = "out_of_range",
    OverlappingWindow = "overlapping_window",
    PayoutNotSubmitted = "payout_not_submitted",
    PriceNotPositive = "price_not_positive",
    PriceOutOfRange = "price_out_of_range",
    ReportAmountMismatch = "report_amount_mismatch",
    ReportContradictsPayout = "report_contradicts_payout",
    ReportTransactionTwice = "report_transaction_twice",
    ReportTransactionUnknown = "report_transaction_unknown",
    ReportTransactionUnmatched = "report_transaction_unmatched",
    RequestCommitted = "request_committed",
    RequestInProgress = "request_in_progress",
    RequestTimeout = "request_timeout",
    Required = "required",
    ResponseTooLarge = "response_too_large",
    RetestPending = "retest_pending",
    RetestTooSoon = "retest_too_soon",
    RoleNotHeld = "role_not_held",
    RoleNotIssuable = "role_not_issuable",
    SamePerson = "same_person",
    SelfReview = "self_review",
    ServerBusy = "server_busy",
    SimulationMismatch = "simulation_mismatch",
    StatusReportTooLarge = "status_report_too_large",
    StoreUnavailable = "store_unavailable",
    TierRulesBroken = "tier_rules_broken",
    TooLong = "too_long",
    TooManyAttempts = "too_many_attempts",
    TooManyGpus = "too_many_gpus",
    TooManyRequests = "too_many_requests",
    TooManyTokens = "too_many_tokens",
    Unauthorized = "unauthorized",
    UnbalancedEntry = "unbalanced_entry",
    UndecodableEvent = "undecodable_event",
    UnknownAccountOwner = "unknown_account_owner",
    UnknownField = "unknown_field",
    UnknownGpu = "unknown_gpu",
    UnknownMachine = "unknown_machine",
    UnknownModel = "unknown_model",
    UnknownParameter = "unknown_parameter",
    UnknownRental = "unknown_rental",
    UnknownTimeZone = "unknown_time_zone",
    UnknownUser = "unknown_user",
    UnknownValue = "unknown_value",
    UnsupportedBenchmarkMethod = "unsupported_benchmark_method",
    UnsupportedMediaType = "unsupported_media_type",
    UsageOutOfRange = "usage_out_of_range",
    WalletOffCurve = "wallet_off_curve",
    WeakPassword = "weak_password",
    WrongExpectedVersion = "wrong_expected_version",
}

impl ErrorCode {
    /// The code named `name`, if it is one.
    pub fn parse(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == name)
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_snake_case_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let name = code.as_str();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}"
            );
            assert_eq!(ErrorCode::parse(name), Some(*code));
        }
    }
}
