//! Prices, availability, maintenance and marketplace listings.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use gpunex_domain::market::Hidden;
pub use gpunex_domain::onboarding::{Availability, Tier, WeeklyWindow};

/// `POST /v1/providers/{id}/prices`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"model_id": "H100", "price_usdc": "2.50"}), json!({"model_id": "rtx-4090-24gb", "price_usdc": "0.45", "effective_at": "2026-12-07T00:00:00Z"})))]
pub struct SetPrice {
    #[schema(min_length = 1, max_length = 100)]
    pub model_id: String,
    /// USDC per GPU per hour, a decimal string with at most 6 decimals, e.g. `"2.50"`.
    #[schema(pattern = "^[0-9]{1,9}(\\.[0-9]{1,6})?$")]
    pub price_usdc: String,
    /// RFC 3339; default now. At most 90 days ahead.
    #[schema(
        pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
    )]
    pub effective_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PriceView {
    pub model_id: String,
    pub price_micro_usdc: i64,
    pub price_usdc: String,
    pub effective_at: String,
    pub set_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelPrices {
    pub model_id: String,
    /// The price in force now, if any.
    pub current: Option<PriceView>,
    /// Every change, oldest first (including ones that take effect later).
    pub history: Vec<PriceView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderPrices {
    pub provider_id: Uuid,
    pub models: Vec<ModelPrices>,
}

/// `POST /v1/providers/{id}/availability` and its answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"availability": {"kind": "always_on"}}), json!({"availability": {"kind": "weekly", "time_zone": "Europe/Madrid", "windows": [{"day": "saturday", "start_minute": 0, "end_minute": 1440}]}})))]
pub struct SetAvailability {
    pub availability: Availability,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AvailabilityView {
    pub provider_id: Uuid,
    pub availability: Availability,
    /// Whether the schedule lists GPUs right now.
    pub open_now: bool,
    /// When the schedule lists GPUs over the next 7 days, as instants (RFC 3339, UTC), each
    /// boundary where the provider's wall clock puts it: across a daylight-saving change a
    /// window is as long in real time as the local clock makes it. Always on is one interval.
    pub upcoming: Vec<OpenInterval>,
}

/// `[from, until)`: the schedule lists GPUs in between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OpenInterval {
    pub from: String,
    pub until: String,
}

/// `POST /v1/providers/{id}/maintenance`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"from": "2026-12-12T22:00:00Z", "until": "2026-12-13T04:00:00Z", "reason": "replacing a power supply"})))]
pub struct AnnounceMaintenance {
    /// One machine, or every machine of the provider when absent.
    pub machine_id: Option<Uuid>,
    /// RFC 3339.
    #[schema(
        pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
    )]
    pub from: String,
    /// RFC 3339: after `from`, at most 14 days later.
    #[schema(
        pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
    )]
    pub until: String,
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MaintenanceView {
    pub maintenance_id: Uuid,
    pub provider_id: Uuid,
    pub machine_id: Option<Uuid>,
    pub from: String,
    pub until: String,
    pub reason: String,
    pub active_now: bool,
}

/// How a listing's rank is made (`docs/marketplace.md`): points per component, and the inputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RankView {
    pub total: u32,
    pub uptime_pct: String,
    pub uptime_points: u32,
    pub price_usdc: String,
    pub median_price_usdc: String,
    pub price_points: u32,
    pub tier_points: u32,
    pub commitment_months: u32,
    pub commitment_points: u32,
    /// `null` until reliability scores exist.
    pub reliability_points: Option<u32>,
    /// `null` until benchmark scores exist.
    pub performance_points: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListingView {
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub model_id: String,
    pub model_name: String,
    pub vram_gb: u32,
    pub vram_mib: u64,
    /// Listed GPUs on the same machine, this one included.
    pub gpus_on_machine: u32,
    pub price_micro_usdc: i64,
    pub price_usdc: String,
    pub country: String,
    pub region: String,
    pub city: String,
    pub tier: Tier,
    pub commitment_months: u32,
    /// Over the last 30 days, platform outages excluded.
    pub uptime_pct: String,
    /// Dense FP16 tensor TFLOPS: the GPU's latest accepted benchmark figure, else the datasheet's.
    pub fp16_tflops: String,
    /// `benchmark` (measured on this GPU) or `datasheet`.
    pub performance_source: String,
    /// The benchmark score, percent of the model's reference (two decimals); `null` until the
    /// GPU has an accepted run. `GET /v1/gpus/{gpu_uuid}/benchmarks` has its breakdown.
    pub performance_score: Option<String>,
    pub tflops_per_usdc_hour: String,
    /// `null` until reliability scores exist.
    pub reliability_score: Option<String>,
    pub rank: u32,
    pub simulated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListingPage {
    pub listings: Vec<ListingView>,
    /// Pass as `after` (with the same filters and sort) for the next page.
    pub next_after: Option<String>,
    /// The instant the listings were computed for.
    pub as_of: String,
}

/// One of a provider's GPUs on the marketplace: listed or why not, and its rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderListing {
    pub gpu_uuid: String,
    pub machine_id: Uuid,
    pub listed: bool,
    pub hidden: Vec<Hidden>,
    pub rank: Option<RankView>,
    /// Where a listed GPU appears in a search for its model in the default order (1 is first);
    /// `null` when not listed.
    pub search_place: Option<u32>,
    /// How many GPUs of its model are listed (with `search_place`).
    pub model_listed: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProviderListings {
    pub provider_id: Uuid,
    pub as_of: String,
    pub gpus: Vec<ProviderListing>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListingDetail {
    pub listing: ListingView,
    pub rank: RankView,
    pub as_of: String,
}

/// `POST /v1/gpus/{gpu_uuid}/delist` and `/relist`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"reason": "benchmark score below the model's floor three runs in a row"})))]
pub struct ListingChange {
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// What the market showed for a recommendation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MarketSampleView {
    /// GPUs listed now.
    pub supply: u32,
    /// Rentals started in the window, and the GPUs they held.
    pub rentals: u32,
    pub rented_gpus: u32,
    pub rented_gpu_seconds: u64,
    /// GPU-seconds the GPUs were online in the window.
    pub available_gpu_seconds: u64,
    /// Rented share of the available GPU-time, in basis points.
    pub demand_bp: u32,
    /// Nearest-rank quartiles `[Q1, median, Q3]`, USDC per GPU-hour.
    pub rented_price_quartiles_usdc: Option<[String; 3]>,
    pub idle_price_quartiles_usdc: Option<[String; 3]>,
}

/// `GET /v1/market/recommendations?model=&region=`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PriceRecommendation {
    pub model_id: String,
    pub region: Option<String>,
    pub as_of: String,
    pub window_days: i64,
    /// `region_rentals`, `region_listings`, `model_rentals`, `model_listings`, `reference` or
    /// `none`.
    pub basis: String,
    /// True unless the region's own rentals decided it.
    pub fallback: bool,
    /// Why this basis, in words.
    pub reason: String,
    pub recommended_price_usdc: Option<String>,
    pub recommended_price_micro_usdc: Option<i64>,
    pub low_usdc: Option<String>,
    pub high_usdc: Option<String>,
    /// The demand the pick within the range used.
    pub demand_bp: u32,
    /// The inputs: the region's market (absent without `region`) and the model's everywhere.
    pub region_market: Option<MarketSampleView>,
    pub model_market: MarketSampleView,
}
