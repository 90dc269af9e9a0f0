//! Providers' earnings and the finance view.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Sums of metered usage lines. `gross = fee + net` always.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Totals {
    pub gross_micro_usdc: i64,
    pub fee_micro_usdc: i64,
    pub net_micro_usdc: i64,
    pub gross_usdc: String,
    pub fee_usdc: String,
    pub net_usdc: String,
    pub gpu_seconds: u64,
    /// Usage lines summed.
    pub lines: u64,
}

/// A period in the provider's time zone: `[from, until)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Period {
    /// First and last local day (inclusive).
    pub first_day: String,
    pub last_day: String,
    pub from: String,
    pub until: String,
    pub totals: Totals,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GpuEarnings {
    pub gpu_uuid: String,
    pub model_id: String,
    pub totals: Totals,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelEarnings {
    pub model_id: String,
    pub totals: Totals,
}

/// `GET /v1/providers/{id}/earnings?tz=&from=&to=`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EarningsSummary {
    pub provider_id: Uuid,
    pub time_zone: String,
    pub as_of: String,
    pub this_week: Period,
    pub this_month: Period,
    pub all_time: Totals,
    /// Earned (plus adjustments) and not yet paid out.
    pub pending_balance_micro_usdc: i64,
    pub pending_balance_usdc: String,
    /// The period `per_gpu` and `per_model` cover (`from`..`to`, default this month).
    pub period: Period,
    pub per_gpu: Vec<GpuEarnings>,
    pub per_model: Vec<ModelEarnings>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Day {
    pub date: String,
    pub from: String,
    pub until: String,
    pub totals: Totals,
    /// With `by=gpu`: the day per GPU (GPUs with no line that day are absent); else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_gpu: Option<Vec<GpuEarnings>>,
}

/// `GET /v1/providers/{id}/earnings/daily?from=&to=&tz=`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DailyEarnings {
    pub provider_id: Uuid,
    pub time_zone: String,
    pub days: Vec<Day>,
    pub totals: Totals,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderTotals {
    pub provider_id: Uuid,
    pub period: Totals,
    pub pending_balance_micro_usdc: i64,
    pub pending_balance_usdc: String,
}

/// `GET /v1/earnings?from=&to=&tz=` (finance): every provider's earnings in the period and the
/// platform's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FinanceEarnings {
    pub time_zone: String,
    pub first_day: String,
    pub last_day: String,
    pub from: String,
    pub until: String,
    pub providers: Vec<ProviderTotals>,
    /// The period's totals over every provider: renter charges (gross) = provider earnings (net)
    /// + platform fees.
    pub totals: Totals,
    pub all_time: Totals,
}
