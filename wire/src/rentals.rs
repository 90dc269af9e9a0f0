//! Rentals.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::rental::EndCause;

/// `POST /v1/rentals`: GPUs of one machine, as listed (`GET /v1/listings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RentRequest {
    pub gpu_uuids: Vec<String>,
}

/// `POST /v1/rentals/{id}/end`
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndRequest {
    #[serde(default)]
    pub evidence: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}
