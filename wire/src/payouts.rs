//! Payout settings.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::payouts::{BankAddress, BankDetails, PayoutMethod, Schedule};

/// `PUT /v1/providers/{id}/payout-settings`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutSettingsRequest {
    pub schedule: Schedule,
    pub method: PayoutMethod,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
