//! Payout settings.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::payouts::{BankAddress, BankDetails, PayoutMethod, Schedule};

/// `PUT /v1/providers/{id}/payout-settings`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"schedule": "weekly", "method": {"kind": "solana", "wallet": "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH"}})))]
pub struct PayoutSettingsRequest {
    pub schedule: Schedule,
    pub method: PayoutMethod,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayoutSettingsView {
    pub provider_id: Uuid,
    pub schedule: Schedule,
    pub method: PayoutMethod,
    /// The minimum balance the schedule pays out (below it the balance rolls forward).
    pub minimum_micro_usdc: i64,
    pub minimum_usdc: String,
    pub changed_at: String,
    pub changed_by: String,
}

pub use gpunex_domain::payouts::Rail;

/// `POST /v1/payout-batches` (finance, admin): build the batch of a date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"date": "2026-11-02", "dry_run": true})))]
pub struct BatchRequest {
    /// `YYYY-MM-DD`.
    #[schema(pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$")]
    pub date: String,
    /// Show what would be paid; write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// A payout as a batch, a provider's history and finance see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayoutView {
    pub payout_id: Uuid,
    pub batch_id: Uuid,
    pub provider_id: Uuid,
    pub payout_date: String,
    pub period: String,
    pub schedule: Schedule,
    pub rail: Rail,
    /// The method it is paid to (the one in force when it was scheduled).
    pub method: PayoutMethod,
    pub amount_micro_usdc: i64,
    pub amount_usdc: String,
    /// `scheduled`, `submitted`, `confirmed` or `failed`.
    pub status: String,
    /// Earnings dated before this instant were eligible.
    pub cutoff: String,
    /// How many earnings lines it settles, and their net sum.
    pub lines: u64,
    pub lines_net_micro_usdc: i64,
    /// Carried from earlier payouts, returned by failed ones, moved by adjustments.
    pub brought_forward_micro_usdc: i64,
    /// The sub-cent remainder left in the balance (bank transfers).
    pub carried_micro_usdc: i64,
    pub scheduled_at: String,
    /// Solana: the latest attempt's signature.
    pub signature: Option<String>,
    pub attempts: u32,
    /// Bank: the file's message id and the end-to-end id of the transfer.
    pub bank_message_id: Option<String>,
    pub bank_end_to_end_id: Option<String>,
    /// Bank: what the file orders, in cents of `bank_currency`.
    pub bank_amount_cents: Option<i64>,
    pub bank_currency: Option<String>,
    /// Bank: the reference finance gave when confirming.
    pub bank_reference: Option<String>,
    /// Solana: the slot the transfer was finalized in.
    pub slot: Option<u64>,
    pub submitted_at: Option<String>,
    pub settled_at: Option<String>,
    pub failure_code: Option<String>,
    pub failure_reason: Option<String>,
}

/// A provider whose balance rolls forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RolledForwardView {
    pub provider_id: Uuid,
    pub schedule: Schedule,
    pub available_micro_usdc: i64,
    pub minimum_micro_usdc: i64,
}

/// A date's batch: what it pays, what rolls forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchView {
    pub batch_id: Uuid,
    pub date: String,
    pub cutoff: String,
    /// True when nothing was written (a dry run).
    pub dry_run: bool,
    /// False when the batch already existed: a rerun creates nothing.
    pub created: bool,
    /// All the batch's payouts.
    pub payout_count: u64,
    /// The payouts of this page, in the order they were scheduled.
    pub payouts: Vec<PayoutView>,
    /// When more payouts follow: `?after=` this id gives the next page.
    pub next_after: Option<Uuid>,
    /// The balances rolled forward (on the first page only).
    pub rolled_forward: Vec<RolledForwardView>,
    /// Providers with money due on this date but no payout method.
    pub without_method: Vec<Uuid>,
    pub total_micro_usdc: i64,
    pub total_usdc: String,
    /// The bank files made from it (message ids).
    pub bank_files: Vec<String>,
}

/// `GET /v1/payout-batches`: one batch, without its payouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchSummary {
    pub batch_id: Uuid,
    pub date: String,
    pub cutoff: String,
    pub payout_count: u64,
    pub rolled_forward_count: u64,
    pub total_micro_usdc: i64,
    pub total_usdc: String,
    /// Payouts per status: `scheduled`, `submitted`, `confirmed`, `failed`.
    pub by_status: std::collections::BTreeMap<String, u64>,
    pub bank_files: Vec<String>,
}

/// A provider's payouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayoutHistory {
    pub provider_id: Uuid,
    /// Not yet in a payout.
    pub balance_micro_usdc: i64,
    /// Scheduled or submitted.
    pub in_flight_micro_usdc: i64,
    pub paid_micro_usdc: i64,
    /// The next payout as it stands now (`null` without payout settings).
    pub next_payout: Option<NextPayoutView>,
    pub pending: Vec<PayoutView>,
    pub history: Vec<PayoutView>,
}

/// The date the provider's schedule pays next (today while today's batch has not run) and what
/// the lines stored so far make available at its cutoff. Earnings dated before a cutoff still in
/// the future can add to it; the batch pays what is available when it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NextPayoutView {
    /// `YYYY-MM-DD`.
    pub date: String,
    /// Earnings dated before this instant are paid on `date`.
    pub cutoff: String,
    pub schedule: Schedule,
    pub rail: Rail,
    pub minimum_micro_usdc: i64,
    pub minimum_usdc: String,
    /// Earned before the cutoff and not yet paid, plus what is brought forward.
    pub available_micro_usdc: i64,
    pub available_usdc: String,
    /// What would be sent if the batch ran now (bank transfers in whole cents); `null` below the
    /// minimum, when the balance rolls forward.
    pub amount_micro_usdc: Option<i64>,
    pub amount_usdc: Option<String>,
}

/// One earnings line a payout settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SettledLineView {
    pub position: u64,
    pub at: String,
    pub usage_entry_id: Uuid,
    pub rental_id: Uuid,
    pub gpu_seconds: u64,
    pub gross_micro_usdc: i64,
    pub fee_micro_usdc: i64,
    pub net_micro_usdc: i64,
}

/// `GET /v1/payouts/{id}/proof`: the lines a payout settled and the arithmetic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PayoutProof {
    pub payout: PayoutView,
    pub lines: Vec<SettledLineView>,
    pub lines_net_micro_usdc: i64,
    pub brought_forward_micro_usdc: i64,
    pub amount_micro_usdc: i64,
    pub carried_micro_usdc: i64,
    /// `lines_net + brought_forward == amount + carried`, and the lines are the ones recorded.
    pub balanced: bool,
}

/// `POST /v1/payout-batches/{date}/bank-files` (finance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"eur_per_usdc": "0.9234", "execution_date": "2026-11-03"})))]
pub struct BankFileRequest {
    /// Euros per USDC, at most 6 decimals (as text: `"0.9234"`).
    #[schema(pattern = "^[0-9]{1,9}(\\.[0-9]{1,6})?$")]
    pub eur_per_usdc: String,
    /// `YYYY-MM-DD`; default: the batch's date, or today if later.
    #[serde(default)]
    #[schema(pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$")]
    pub execution_date: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BankFileView {
    pub message_id: String,
    pub batch_id: Uuid,
    pub currency: String,
    pub rate: String,
    pub execution_date: String,
    pub transfers: u64,
    pub control_sum_cents: i64,
    pub sha256: String,
    pub created_at: String,
    /// Where to download it.
    pub href: String,
}

/// `POST /v1/payouts/{id}/confirm` (finance, bank transfers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"bank_reference": "NOTPROVIDED-20261103-000417"})))]
pub struct ConfirmRequest {
    #[schema(min_length = 1, max_length = 140)]
    pub bank_reference: String,
}

/// `POST /v1/payouts/{id}/return` (finance, bank transfers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason_code": "AC04", "reason": "the account was closed"})))]
pub struct ReturnRequest {
    /// The ISO 20022 return reason code (`AC01`, `AC04`, `MD07`, ...).
    #[schema(pattern = "^[A-Z0-9]{4}$")]
    pub reason_code: String,
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// One transfer of a status report still in progress at the bank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingTransferView {
    pub payout_id: Uuid,
    /// The ISO 20022 status the bank sent (`ACSP`, `PDNG`, ...).
    pub status: String,
}

/// `POST /v1/bank-status-reports` (finance): what a pain.002 report settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatusReportView {
    /// The report's `MsgId`: the bank reference of the payouts it confirms.
    pub message_id: String,
    /// The file it answers.
    pub original_message_id: String,
    pub batch_date: String,
    /// Payouts confirmed, failed (returned to the balance), still pending, and already in the
    /// state the report gives (a report imported twice changes nothing).
    pub confirmed: Vec<Uuid>,
    pub failed: Vec<Uuid>,
    pub pending: Vec<PendingTransferView>,
    pub unchanged: Vec<Uuid>,
}
