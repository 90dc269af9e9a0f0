//! JSON types that cross the network between the GPUnex server, its clients and the agent.
//! No logic lives here: the server converts domain values into these at its edge.
//!
//! Money is always sent twice: as exact integer micro-USDC (`*_micro_usdc`) for programs and as
//! a six-decimal string (`*_usdc`, e.g. `"12.500000"`) for people. Never as a float.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `GET /healthz`: the process is up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
    pub version: String,
}

/// `GET /readyz`: the database answers and every projection's lag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Readiness {
    pub status: String,
    pub database: String,
    pub head_position: u64,
    pub projections: Vec<ProjectionStatus>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectionStatus {
    pub projection: String,
    pub checkpoint: u64,
    /// Events in the log not yet folded into this projection.
    pub lag_events: u64,
}

/// One stored event, as operators see it in `GET /v1/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Event {
    pub position: u64,
    pub event_id: Uuid,
    pub stream_id: String,
    pub stream_version: u64,
    pub event_type: String,
    pub schema_version: u32,
    /// RFC 3339, microsecond precision, UTC.
    pub recorded_at: String,
    pub payload: serde_json::Value,
    pub metadata: serde_json::Value,
    /// Hex SHA-256 chain hash of this event.
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventsPage {
    pub events: Vec<Event>,
    /// Pass as `after` to get the next page; equal to the request's `after` when empty.
    pub next_after: u64,
}

/// One account of the ledger read model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AccountBalance {
    pub account: String,
    pub debits_micro_usdc: i64,
    pub credits_micro_usdc: i64,
    /// On the account's normal side: what a payable owes, what a receivable is owed.
    pub balance_micro_usdc: i64,
    pub balance_usdc: String,
    pub last_position: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AccountBalances {
    pub accounts: Vec<AccountBalance>,
    /// The log position the ledger read model reflects.
    pub as_of_position: u64,
    /// Pass as `after` for the next page (accounts are in account order); absent on the last.
    pub next_after: Option<String>,
}

/// One posting, with the event it came from: the audit trail of a balance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JournalLine {
    pub position: u64,
    pub line_index: u32,
    pub event_id: Uuid,
    pub entry_id: Uuid,
    pub account: String,
    pub side: String,
    pub amount_micro_usdc: i64,
    pub amount_usdc: String,
    pub recorded_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JournalPage {
    pub lines: Vec<JournalLine>,
    pub next_after: u64,
}

/// An RFC 9457 problem document (`application/problem+json`), with a stable machine `code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// One invalid field of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldError {
    /// A JSON Pointer (RFC 6901) into the request body, or the name of a query or path
    /// parameter or a header.
    pub field: String,
    /// `body`, `query`, `path` or `header`.
    #[serde(rename = "in", default)]
    pub location: String,
    pub code: String,
    pub message: String,
}

/// Who a token acts as, as listed and as issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenRole {
    Admin,
    Finance,
    Treasury,
    Provider { provider_id: Uuid },
    Agent { provider_id: Uuid, machine_id: Uuid },
    Renter { user_id: Uuid },
    User { user_id: Uuid },
}

/// The role a `POST /v1/tokens` asks for. What may be omitted is filled from the caller: a
/// provider's agent token is for the provider itself, a person's renter token for themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RequestedRole {
    Admin,
    Finance,
    Treasury,
    Provider {
        provider_id: Uuid,
    },
    /// Machine ids are minted by the platform: omit `machine_id` for a new machine; name one
    /// only to issue another token for a machine already bound to the same provider.
    Agent {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_id: Option<Uuid>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine_id: Option<Uuid>,
    },
    Renter {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user_id: Option<Uuid>,
    },
}

/// `POST /v1/tokens`: issue a token. Without a `label`, the token is named after its role
/// (and machine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"role": {"kind": "agent"}, "label": "rack 4, host gpu-07"}), json!({"role": {"kind": "renter"}})))]
pub struct IssueToken {
    pub role: RequestedRole,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 100)]
    pub label: Option<String>,
}

/// A token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenInfo {
    pub token_id: Uuid,
    pub role: TokenRole,
    pub label: String,
    pub issued_at: String,
    pub issued_by: String,
    pub replaces: Option<Uuid>,
    pub revoked_at: Option<String>,
}

/// A newly issued token: `token` is shown this once and cannot be recovered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct IssuedToken {
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<Uuid>,
}

/// `POST /v1/tokens/{id}/revoke`
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(examples(json!({"reason": "the host was decommissioned"})))]
pub struct RevokeToken {
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: String,
}

/// `POST /v1/accounts` (sign up) and `POST /v1/sessions` (sign in).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(examples(json!({"email": "ada@example.com", "password": "correct horse battery staple"})))]
pub struct Credentials {
    #[schema(
        max_length = 254,
        pattern = "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z]{2,63}$"
    )]
    pub email: String,
    #[schema(min_length = 12, max_length = 128)]
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Account {
    pub user_id: Uuid,
    pub email: String,
}

/// A session token: send it as `Authorization: Bearer <token>` until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Session {
    pub token: String,
    pub user_id: Uuid,
    pub expires_at: String,
}

/// A browser session (`POST /v1/browser-sessions`): the token itself is only in the
/// `HttpOnly` cookie the answer sets; a state change sends `csrf_token` as `X-CSRF-Token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BrowserSession {
    pub user_id: Uuid,
    pub expires_at: String,
    pub csrf_token: String,
}

/// `GET /v1/sessions/current`: the session this request is made with. `csrf_token` is the
/// browser session's (`null` for a bearer token, which needs none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CurrentSession {
    pub user_id: Uuid,
    pub token_id: Uuid,
    pub expires_at: Option<String>,
    /// `cookie` (the console's session) or `bearer`.
    pub presented_as: String,
    pub csrf_token: Option<String>,
}

/// `GET /v1/me`: the Roles page. `roles` lists what the person may do: `renter` always,
/// `applicant` while an application is open, `provider:<id>` per approved application, and the
/// staff roles granted to the account (`admin`, `finance`, `treasury`). A session acts in any of
/// them but `renter` and `applicant` by naming it in `X-GPUnex-Act-As`. `apply_as_provider` is
/// the entry point to the provider application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Me {
    pub user_id: Uuid,
    pub email: String,
    pub roles: Vec<String>,
    pub apply_as_provider: String,
}

/// One step of an application's life, as its applicant and reviewers read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApplicationStep {
    pub at: String,
    /// `submitted`, `information_requested`, `information_provided`, `approved`, `rejected` or
    /// `withdrawn`.
    pub kind: String,
    /// The reviewer's question, the applicant's answer, or the reason of a rejection.
    pub text: Option<String>,
    /// The tier an approval granted.
    pub tier: Option<String>,
}

/// A provider application as its applicant and reviewers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApplicationView {
    pub application_id: Uuid,
    pub applicant_user_id: Uuid,
    /// `under_review`, `information_requested`, `approved`, `rejected` or `withdrawn`.
    pub status: String,
    pub submitted_at: String,
    pub decided_at: Option<String>,
    pub tier: Option<String>,
    pub provider_id: Option<Uuid>,
    pub information_requests: u32,
    /// Waiting on reviewers longer than 3 business days.
    pub overdue: bool,
    /// The validated form, as submitted.
    pub form: serde_json::Value,
    /// Where a rule of the requested tier is not met (for reviewers), empty otherwise.
    pub enterprise_violations: Vec<serde_json::Value>,
    /// GPU entries whose model is not in the catalog (nor one of its aliases): flagged to the
    /// applicant and the reviewer.
    pub unlisted_models: Vec<UnlistedModel>,
    /// The application's life, oldest first: only `GET /v1/applications/{id}` answers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<ApplicationStep>>,
}

/// A GPU entry naming a model the catalog does not know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UnlistedModel {
    /// A JSON Pointer to the entry's model in the form, e.g. `/gpus/0/model`.
    pub field: String,
    /// The model as written.
    pub name: String,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ApplicationList {
    pub applications: Vec<ApplicationView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<String>,
}

/// `POST /v1/applications/{id}/request-information`, `/answer`, `/reject`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(examples(json!({"text": "Please send a photo of the UPS unit's label."})))]
pub struct Message {
    #[schema(min_length = 1, max_length = 4000)]
    pub text: String,
}

/// `POST /v1/applications/{id}/approve`: `"enterprise"` or `"community"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(examples(json!({"tier": "community"})))]
pub struct Approval {
    #[schema(pattern = "^(enterprise|community)$")]
    pub tier: String,
}

pub mod benchmarks;
pub mod earnings;
pub mod fleet;

pub mod market;
pub mod payouts;

pub mod rentals;

/// One line of a proposed adjustment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdjustmentLine {
    /// An account: `provider_payable:<provider id>`, `renter_receivable:<user id>`,
    /// `platform_revenue` or `platform_adjustments`.
    #[schema(
        pattern = "^(provider_payable:[0-9a-fA-F-]{36}|renter_receivable:[0-9a-fA-F-]{36}|platform_revenue|platform_adjustments)$"
    )]
    pub account: String,
    /// `debit` or `credit`.
    #[schema(pattern = "^(debit|credit)$")]
    pub side: String,
    #[schema(minimum = 1)]
    pub amount_micro_usdc: i64,
}

/// `POST /v1/ledger/adjustments`: propose a balanced entry, with why and what supports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "goodwill credit for the outage of 1 December", "evidence": "support ticket 4711", "postings": [
    {"account": "platform_adjustments", "side": "debit", "amount_micro_usdc": 5000000},
    {"account": "provider_payable:01939f0e-7b6a-7c2e-9a51-3f0c2d8e4b17", "side": "credit", "amount_micro_usdc": 5000000}
]})))]
pub struct ProposeAdjustment {
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
    #[schema(min_length = 1, max_length = 2000)]
    pub evidence: String,
    #[schema(min_items = 2, max_items = 64)]
    pub postings: Vec<AdjustmentLine>,
}

/// `POST /v1/ledger/adjustments/{id}/approve` and `/reject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "the outage credit was already granted in November"})))]
pub struct DecideAdjustment {
    /// Required to reject.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub reason: String,
}

/// A proposed adjustment and its decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdjustmentView {
    pub proposal_id: Uuid,
    /// The entry id the posting carries once approved.
    pub entry_id: Uuid,
    /// `proposed`, `approved` or `rejected`.
    pub status: String,
    pub reason: String,
    pub evidence: String,
    pub postings: Vec<AdjustmentLine>,
    pub total_micro_usdc: i64,
    pub total_usdc: String,
    pub proposed_by: String,
    pub proposed_at: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub decision_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdjustmentList {
    pub adjustments: Vec<AdjustmentView>,
}
