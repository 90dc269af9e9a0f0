//! The marketplace over HTTP: providers set prices, schedules and maintenance; operators delist
//! GPUs; renters search listings. Searches are answered from a listing snapshot rebuilt whenever
//! the log moves and at least every minute (`gpunex_app::listings`), so a price change or a GPU
//! going offline shows in search well within a second.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::market::{
    self, MarketCommand, MarketEvent, MarketRejection, ProviderMarket, RankBreakdown,
};
use gpunex_domain::money::Usdc;
use gpunex_domain::onboarding::Tier;
use gpunex_domain::time::Timestamp;
use gpunex_projections::market::{Listing, SearchFilter, SortBy};
use gpunex_store::Metadata;
use gpunex_wire::market as wm;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::parse_time;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_app::ReadModels;

fn rejection(error: MarketRejection) -> ApiError {
    let field = match error {
        MarketRejection::PriceNotANumber(_)
        | MarketRejection::PriceNotPositive
        | MarketRejection::PriceOutOfRange => "/price_usdc",
        MarketRejection::EffectiveOutOfRange => "/effective_at",
        MarketRejection::ModelNotOffered(_) => "/model_id",
        MarketRejection::UnknownTimeZone(_) => "/availability/time_zone",
        MarketRejection::InvalidSchedule(_) => "/availability/windows",
        MarketRejection::InvalidMaintenance => "/until",
        MarketRejection::InvalidReason => "/reason",
        MarketRejection::UnknownMachine => "/machine_id",
        MarketRejection::NoSuchMaintenance
        | MarketRejection::AlreadyDelisted(_)
        | MarketRejection::NotDelisted(_) => {
            return ApiError::Refused {
                code: error.code(),
                detail: error.to_string(),
            };
        }
    };
    ApiError::body(field, error.code(), error.to_string())
}

/// Admins act for any provider; a provider for itself.
fn for_provider(caller: &Caller, provider_id: Uuid) -> Result<(), ApiError> {
    caller.for_provider(provider_id)
}

/// Runs a market command on the command executor (`gpunex_app::market`), with `prepare` called
/// right before each attempt's append; answers the events it wrote and where, once the listing
/// snapshot shows them.
async fn execute(
    state: &AppState,
    caller: &Caller,
    provider_id: Uuid,
    command: MarketCommand,
    prepare: impl FnMut(&ProviderMarket, &[MarketEvent]),
) -> Result<Vec<MarketEvent>, ApiError> {
    let exec = gpunex_app::command::Executor::new(&state.store, &state.credentials);
    let decided = gpunex_app::market::execute(
        &exec,
        provider_id,
        command,
        &Metadata::actor(caller.actor()),
        prepare,
    )
    .await?
    .map_err(|refused| {
        crate::error::command_refused(
            refused,
            rejection,
            "the provider's market changed while this request ran; try again",
        )
    })?;
    if let Some(position) = decided.done.position() {
        state.listings.wait_for(position).await;
    }
    Ok(decided.events)
}

fn price_view(set: &market::PriceSet) -> wm::PriceView {
    wm::PriceView {
        model_id: set.model_id.clone(),
        price_micro_usdc: set.price_micro_usdc.micros(),
        price_usdc: set.price_micro_usdc.to_string(),
        effective_at: timestamp(set.effective_at.unix_micros()),
        set_at: timestamp(set.set_at.unix_micros()),
    }
}

/// Every price the provider set, in log order: the stored price history, folded at least as far
/// as the in-memory models when the read began.
async fn stored_prices(
    state: &AppState,
    provider_id: Uuid,
) -> Result<Vec<(u64, market::PriceSet)>, ApiError> {
    let position = state.credentials.position();
    Ok(state.store.provider_prices(provider_id, position).await?)
}

/// The provider's prices per model now, from the stored history.
async fn stored_prices_view(
    state: &AppState,
    provider_id: Uuid,
) -> Result<wm::ProviderPrices, ApiError> {
    let history = stored_prices(state, provider_id).await?;
    Ok(prices_view(
        provider_id,
        history.into_iter().map(|(_, set)| set),
        state.clock.now(),
    ))
}

/// The provider's prices per model, from every price it set in log order.
fn prices_view(
    provider_id: Uuid,
    history: impl IntoIterator<Item = market::PriceSet>,
    at: Timestamp,
) -> wm::ProviderPrices {
    let mut models: std::collections::BTreeMap<String, Vec<market::PriceSet>> =
        std::collections::BTreeMap::new();
    for set in history {
        models.entry(set.model_id.clone()).or_default().push(set);
    }
    wm::ProviderPrices {
        provider_id,
        models: models
            .into_iter()
            .map(|(model_id, history)| {
                let current = history
                    .iter()
                    .filter(|p| p.effective_at <= at)
                    .max_by_key(|p| p.effective_at)
                    .map(price_view);
                wm::ModelPrices {
                    model_id,
                    current,
                    history: history.iter().map(price_view).collect(),
                }
            })
            .collect(),
    }
}

/// `POST /v1/providers/{provider_id}/prices`
#[utoipa::path(
    post,
    path = "/v1/providers/{provider_id}/prices",
    operation_id = "market_set_price",
    tag = "market",
    summary = "set the hourly price of a model, now or from a later instant",
    responses((status = 200, description = "set the hourly price of a model, now or from a later instant", body = wm::ProviderPrices)),
)]
pub async fn set_price(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Json(request): Json<wm::SetPrice>,
) -> Result<Json<wm::ProviderPrices>, ApiError> {
    for_provider(&caller, provider_id)?;
    let effective_at = request
        .effective_at
        .as_deref()
        .map(|text| parse_time("/effective_at", text))
        .transpose()?;
    let model_id = match crate::catalog::resolve_model(&state, &request.model_id) {
        Ok(id) => id,
        Err((ErrorCode::AmbiguousModel, message)) => {
            return Err(ApiError::body(
                "/model_id",
                ErrorCode::AmbiguousModel,
                message,
            ));
        }
        // Not a catalog model: only an unlisted model the provider offers can be priced.
        Err(_) => request.model_id.clone(),
    };
    // The answer is the prices with this one: prepared before the append, so a retry after a
    // crash between the commit and the answer gets exactly it. The stored history is read
    // first; what was set since is in memory (which keeps every price set in the last day).
    let stored = stored_prices(&state, provider_id).await?;
    let mut view = None;
    let command = MarketCommand::SetPrice {
        model_id,
        price: request.price_usdc,
        effective_at,
        by: caller.actor(),
    };
    execute(&state, &caller, provider_id, command, |_, events| {
        let mut history = stored.clone();
        history.extend(
            state
                .credentials
                .with_market(|m| m.recent_prices(provider_id)),
        );
        // A price both stored and still in memory counts once.
        history.sort_by_key(|(position, _)| *position);
        history.dedup_by_key(|(position, _)| *position);
        // Then this command's, not appended yet.
        let sets = history
            .into_iter()
            .map(|(_, set)| set)
            .chain(events.iter().filter_map(|event| match event {
                MarketEvent::PriceSet(set) => Some(set.clone()),
                _ => None,
            }));
        let prepared = prices_view(provider_id, sets, state.clock.now());
        crate::idempotency::prepare_response(StatusCode::OK, &prepared);
        view = Some(prepared);
    })
    .await?;
    let view = match view {
        Some(view) => view,
        None => stored_prices_view(&state, provider_id).await?,
    };
    Ok(Json(view))
}

/// `GET /v1/providers/{provider_id}/prices`
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/prices",
    operation_id = "market_prices",
    tag = "market",
    summary = "current prices and price history per model",
    responses((status = 200, description = "current prices and price history per model", body = wm::ProviderPrices)),
)]
pub async fn prices(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wm::ProviderPrices>, ApiError> {
    for_provider(&caller, provider_id)?;
    Ok(Json(stored_prices_view(&state, provider_id).await?))
}

/// How far ahead an availability view lists when GPUs are listed, in days.
const UPCOMING_DAYS: i64 = 7;
/// The most intervals it lists (a week of many short windows is cut there).
const UPCOMING_INTERVALS_MAX: usize = 200;
const MICROS_PER_DAY: i64 = 86_400_000_000;

fn availability_view(
    registry: &ReadModels,
    provider_id: Uuid,
    now: Timestamp,
) -> wm::AvailabilityView {
    let availability = registry.with_market(|m| m.availability(provider_id));
    let week_after =
        Timestamp::from_unix_micros(now.unix_micros() + UPCOMING_DAYS * MICROS_PER_DAY);
    let upcoming = market::open_intervals(&availability, now, week_after, UPCOMING_INTERVALS_MAX)
        .into_iter()
        .map(|(from, until)| wm::OpenInterval {
            from: timestamp(from.unix_micros()),
            until: timestamp(until.unix_micros()),
        })
        .collect();
    wm::AvailabilityView {
        provider_id,
        open_now: market::available_at(&availability, now),
        availability,
        upcoming,
    }
}

/// `POST /v1/providers/{provider_id}/availability`
#[utoipa::path(
    post,
    path = "/v1/providers/{provider_id}/availability",
    operation_id = "market_set_availability",
    tag = "market",
    summary = "set the weekly availability schedule (or always on)",
    responses((status = 200, description = "set the weekly availability schedule (or always on)", body = wm::AvailabilityView)),
)]
pub async fn set_availability(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Json(request): Json<wm::SetAvailability>,
) -> Result<Json<wm::AvailabilityView>, ApiError> {
    for_provider(&caller, provider_id)?;
    let command = MarketCommand::SetAvailability {
        availability: request.availability,
    };
    execute(&state, &caller, provider_id, command, |_, _| {}).await?;
    Ok(Json(availability_view(
        &state.credentials,
        provider_id,
        state.clock.now(),
    )))
}

/// `GET /v1/providers/{provider_id}/availability`
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/availability",
    operation_id = "market_availability",
    tag = "market",
    summary = "the availability schedule and whether it is open now",
    responses((status = 200, description = "the availability schedule and whether it is open now", body = wm::AvailabilityView)),
)]
pub async fn availability(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wm::AvailabilityView>, ApiError> {
    for_provider(&caller, provider_id)?;
    Ok(Json(availability_view(
        &state.credentials,
        provider_id,
        state.clock.now(),
    )))
}

fn maintenance_view(m: &market::MaintenanceAnnounced, at: Timestamp) -> wm::MaintenanceView {
    wm::MaintenanceView {
        maintenance_id: m.maintenance_id,
        provider_id: m.provider_id,
        machine_id: m.machine_id,
        from: timestamp(m.from.unix_micros()),
        until: timestamp(m.until.unix_micros()),
        reason: m.reason.clone(),
        active_now: m.from <= at && at < m.until,
    }
}

/// `POST /v1/providers/{provider_id}/maintenance`
#[utoipa::path(
    post,
    path = "/v1/providers/{provider_id}/maintenance",
    operation_id = "market_announce_maintenance",
    tag = "market",
    summary = "announce maintenance (hidden from renters meanwhile)",
    responses((status = 201, description = "announce maintenance (hidden from renters meanwhile)", body = wm::MaintenanceView)),
)]
pub async fn announce_maintenance(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Json(request): Json<wm::AnnounceMaintenance>,
) -> Result<(StatusCode, Json<wm::MaintenanceView>), ApiError> {
    for_provider(&caller, provider_id)?;
    let from = parse_time("/from", &request.from)?;
    let until = parse_time("/until", &request.until)?;
    let command = MarketCommand::AnnounceMaintenance {
        maintenance_id: Uuid::now_v7(),
        machine_id: request.machine_id,
        from,
        until,
        reason: request.reason,
    };
    let events = execute(&state, &caller, provider_id, command, |_, _| {}).await?;
    let at = state.clock.now();
    let Some(view) = events.iter().find_map(|event| match event {
        MarketEvent::MaintenanceAnnounced(announced) => Some(maintenance_view(announced, at)),
        _ => None,
    }) else {
        unreachable!("an announcement that is not refused announces")
    };
    Ok((StatusCode::CREATED, Json(view)))
}

/// `POST /v1/providers/{provider_id}/maintenance/{maintenance_id}/cancel`
#[utoipa::path(
    post,
    path = "/v1/providers/{provider_id}/maintenance/{maintenance_id}/cancel",
    operation_id = "market_cancel_maintenance",
    tag = "market",
    summary = "cancel announced maintenance",
    responses((status = 200, description = "cancel announced maintenance", body = wm::MaintenanceView)),
)]
pub async fn cancel_maintenance(
    State(state): State<AppState>,
    caller: Caller,
    Path((provider_id, maintenance_id)): Path<(Uuid, Uuid)>,
) -> Result<Json<wm::MaintenanceView>, ApiError> {
    for_provider(&caller, provider_id)?;
    let mut announced = None;
    let command = MarketCommand::CancelMaintenance { maintenance_id };
    execute(&state, &caller, provider_id, command, |market, _| {
        announced = market
            .maintenance
            .iter()
            .find(|m| m.maintenance_id == maintenance_id)
            .cloned();
    })
    .await?;
    let announced = announced.ok_or_else(|| rejection(MarketRejection::NoSuchMaintenance))?;
    let at = state.clock.now();
    let mut view = maintenance_view(&announced, at);
    view.active_now = false;
    Ok(Json(view))
}

/// `GET /v1/providers/{provider_id}/maintenance`: announced and not yet ended.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/maintenance",
    operation_id = "market_maintenance",
    tag = "market",
    summary = "announced maintenance that has not ended",
    responses((status = 200, description = "announced maintenance that has not ended", body = Vec<wm::MaintenanceView>)),
)]
pub async fn maintenance(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<Vec<wm::MaintenanceView>>, ApiError> {
    for_provider(&caller, provider_id)?;
    let at = state.clock.now();
    let list = state
        .credentials
        .with_market(|m| m.maintenance_of(provider_id, at));
    Ok(Json(list.iter().map(|m| maintenance_view(m, at)).collect()))
}

async fn change_listing(
    state: AppState,
    caller: Caller,
    gpu_uuid: String,
    request: wm::ListingChange,
    delist: bool,
) -> Result<Json<wm::ProviderListing>, ApiError> {
    let provider_id = state
        .credentials
        .with_fleet(|f| f.machine_of_gpu(&gpu_uuid).map(|m| m.provider_id))
        .ok_or(ApiError::NotFound("gpu"))?;
    let command = MarketCommand::ChangeListing {
        gpu_uuid: gpu_uuid.clone(),
        delist,
        reason: request.reason,
        by: caller.actor(),
    };
    execute(&state, &caller, provider_id, command, |_, _| {}).await?;
    let snapshot = state.listings.current();
    snapshot
        .status(&gpu_uuid)
        .map(|s| Json(provider_listing(&snapshot, s)))
        .ok_or(ApiError::NotFound("gpu"))
}

/// `POST /v1/gpus/{gpu_uuid}/delist`
#[utoipa::path(
    post,
    path = "/v1/gpus/{gpu_uuid}/delist",
    operation_id = "market_delist",
    tag = "market",
    summary = "take a GPU off the marketplace",
    responses((status = 200, description = "take a GPU off the marketplace", body = wm::ProviderListing)),
)]
pub async fn delist(
    State(state): State<AppState>,
    caller: Caller,
    Path(gpu_uuid): Path<String>,
    Json(request): Json<wm::ListingChange>,
) -> Result<Json<wm::ProviderListing>, ApiError> {
    change_listing(state, caller, gpu_uuid, request, true).await
}

/// `POST /v1/gpus/{gpu_uuid}/relist`
#[utoipa::path(
    post,
    path = "/v1/gpus/{gpu_uuid}/relist",
    operation_id = "market_relist",
    tag = "market",
    summary = "put a delisted GPU back",
    responses((status = 200, description = "put a delisted GPU back", body = wm::ProviderListing)),
)]
pub async fn relist(
    State(state): State<AppState>,
    caller: Caller,
    Path(gpu_uuid): Path<String>,
    Json(request): Json<wm::ListingChange>,
) -> Result<Json<wm::ProviderListing>, ApiError> {
    change_listing(state, caller, gpu_uuid, request, false).await
}

fn percent_bp(bp: u32) -> String {
    format!("{}.{:02}", bp / 100, bp % 100)
}

fn tenths(value: u64) -> String {
    format!("{}.{}", value / 10, value % 10)
}

fn rank_view(rank: &RankBreakdown) -> wm::RankView {
    wm::RankView {
        total: rank.total,
        uptime_pct: percent_bp(rank.uptime_bp),
        uptime_points: rank.uptime_points,
        price_usdc: Usdc::from_micros(rank.price_micro_usdc).to_string(),
        median_price_usdc: Usdc::from_micros(rank.median_price_micro_usdc).to_string(),
        price_points: rank.price_points,
        tier_points: rank.tier_points,
        commitment_months: rank.commitment_months,
        commitment_points: rank.commitment_points,
        reliability_points: None,
        performance_points: None,
    }
}

fn listing_view(listing: &Listing) -> wm::ListingView {
    wm::ListingView {
        gpu_uuid: listing.gpu_uuid.to_string(),
        machine_id: listing.machine_id,
        provider_id: listing.provider_id,
        model_id: listing.model_id.to_string(),
        model_name: listing.model_name.to_string(),
        vram_gb: listing.vram_gb,
        vram_mib: listing.vram_mib,
        gpus_on_machine: listing.gpus_on_machine,
        price_micro_usdc: listing.price.micros(),
        price_usdc: listing.price.to_string(),
        country: listing.country.to_string(),
        region: listing.region.to_string(),
        city: listing.city.to_string(),
        tier: listing.tier,
        commitment_months: listing.commitment_months,
        uptime_pct: percent_bp(listing.uptime_bp),
        fp16_tflops: tenths(u64::from(listing.fp16_tflops_tenths)),
        performance_source: if listing.fp16_measured {
            "benchmark"
        } else {
            "datasheet"
        }
        .to_owned(),
        performance_score: listing
            .performance_score_bp
            .map(|bp| format!("{}.{:02}", bp / 100, bp % 100)),
        tflops_per_usdc_hour: format!(
            "{}.{:03}",
            listing.tflops_per_usdc_milli / 1_000,
            listing.tflops_per_usdc_milli % 1_000
        ),
        reliability_score: None,
        rank: listing.rank.total,
        simulated: listing.simulated,
    }
}

fn provider_listing(
    snapshot: &gpunex_projections::market::ListingSnapshot,
    status: &gpunex_projections::market::GpuStatus,
) -> wm::ProviderListing {
    let place = snapshot.place_in_model(&status.gpu_uuid);
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    wm::ProviderListing {
        gpu_uuid: status.gpu_uuid.to_string(),
        machine_id: status.machine_id,
        listed: status.hidden.is_empty(),
        hidden: status.hidden.clone(),
        rank: status.rank.as_ref().map(rank_view),
        search_place: place.map(|(at, _)| count(at)),
        model_listed: place.map(|(_, of)| count(of)),
    }
}

/// Largest search page.
pub const LISTING_PAGE_MAX: usize = 200;

fn sort_name(sort: SortBy) -> &'static str {
    match sort {
        SortBy::Rank => "rank",
        SortBy::Price => "price",
        SortBy::PerfPerDollar => "perf_per_dollar",
        SortBy::Performance => "performance",
    }
}

/// A listing search as parsed from its query parameters.
pub(crate) struct SearchRequest {
    pub filter: SearchFilter,
    pub sort: SortBy,
    pub after: Option<(i64, String)>,
    pub limit: usize,
}

/// Parses search parameters (`GET /v1/listings`, and a rental's `filter`), reporting every bad
/// one at once.
pub(crate) fn parse_search(
    state: &AppState,
    query: &HashMap<String, String>,
) -> Result<SearchRequest, ApiError> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, code: ErrorCode, message: String| {
        errors.push(crate::error::field_error(
            crate::error::Location::Query,
            field,
            code,
            message,
        ));
    };
    const KNOWN: [&str; 12] = [
        "model",
        "min_vram_gb",
        "country",
        "region",
        "max_price_usdc",
        "tier",
        "min_gpus",
        "min_reliability",
        "min_performance",
        "sort",
        "after",
        "limit",
    ];
    for key in query.keys().filter(|k| !KNOWN.contains(&k.as_str())) {
        bad(
            key,
            ErrorCode::UnknownParameter,
            format!("known: {}", KNOWN.join(", ")),
        );
    }
    let mut number = |name: &str, max: u32| -> Option<u32> {
        let text = query.get(name)?;
        match text.parse::<u32>() {
            Ok(n) if n <= max => Some(n),
            _ => {
                bad(
                    name,
                    ErrorCode::OutOfRange,
                    format!("a whole number from 0 to {max}"),
                );
                None
            }
        }
    };
    let min_vram_gb = number("min_vram_gb", 4_096);
    let min_gpus = number("min_gpus", 64);
    let limit = number("limit", LISTING_PAGE_MAX as u32)
        .unwrap_or(50)
        .max(1) as usize;
    let min_reliability_bp = match query.get("min_reliability") {
        Some(text) => match text.parse::<rust_decimal::Decimal>() {
            Ok(d) if d >= rust_decimal::Decimal::ZERO && d <= rust_decimal::Decimal::ONE => {
                u32::try_from((d * rust_decimal::Decimal::from(10_000)).trunc().mantissa()).ok()
            }
            _ => {
                bad(
                    "min_reliability",
                    ErrorCode::OutOfRange,
                    "a score from 0 to 1".to_owned(),
                );
                None
            }
        },
        None => None,
    };
    // A percentage of the model's reference, up to the score's cap (110).
    let min_performance_bp = match query.get("min_performance") {
        Some(text) => match text.parse::<rust_decimal::Decimal>() {
            Ok(d) if d >= rust_decimal::Decimal::ZERO && d <= rust_decimal::Decimal::from(110) => {
                u64::try_from((d * rust_decimal::Decimal::from(100)).trunc().mantissa()).ok()
            }
            _ => {
                bad(
                    "min_performance",
                    ErrorCode::OutOfRange,
                    "a benchmark score from 0 to 110 (percent of the model's reference)".to_owned(),
                );
                None
            }
        },
        None => None,
    };
    let max_price = match query.get("max_price_usdc") {
        Some(text) => match text.parse::<Usdc>() {
            Ok(price) if price.is_positive() => Some(price),
            _ => {
                bad(
                    "max_price_usdc",
                    ErrorCode::InvalidPrice,
                    "a positive USDC amount, at most 6 decimals".to_owned(),
                );
                None
            }
        },
        None => None,
    };
    let tier = match query.get("tier").map(String::as_str) {
        Some("enterprise") => Some(Tier::Enterprise),
        Some("community") => Some(Tier::Community),
        Some(_) => {
            bad(
                "tier",
                ErrorCode::InvalidTier,
                "enterprise or community".to_owned(),
            );
            None
        }
        None => None,
    };
    let model = match query.get("model") {
        Some(text) => match crate::catalog::resolve_model(state, text) {
            Ok(id) => Some(id),
            Err((code, message)) => {
                bad("model", code, message);
                None
            }
        },
        None => None,
    };
    let sort = match query.get("sort").map(String::as_str) {
        None | Some("rank") => SortBy::Rank,
        Some("price") => SortBy::Price,
        Some("perf_per_dollar") => SortBy::PerfPerDollar,
        Some("performance") => SortBy::Performance,
        Some(_) => {
            bad(
                "sort",
                ErrorCode::InvalidSort,
                "rank, price, perf_per_dollar or performance".to_owned(),
            );
            SortBy::Rank
        }
    };
    let after = match query.get("after") {
        Some(text) => match parse_cursor(text, sort) {
            Some(cursor) => Some(cursor),
            None => {
                bad(
                    "after",
                    ErrorCode::InvalidCursor,
                    "a next_after value from a search with the same sort".to_owned(),
                );
                None
            }
        },
        None => None,
    };
    if !errors.is_empty() {
        return Err(ApiError::InvalidRequest(errors));
    }
    let filter = SearchFilter {
        model,
        min_vram_gb,
        country: query.get("country").cloned(),
        region: query.get("region").cloned(),
        max_price,
        tier,
        min_gpus_on_machine: min_gpus,
        min_reliability_bp,
        min_performance_bp,
    };
    Ok(SearchRequest {
        filter,
        sort,
        after,
        limit,
    })
}

/// `GET /v1/listings?model=&min_vram_gb=&country=&region=&max_price_usdc=&tier=&min_gpus=&min_reliability=&min_performance=&sort=&after=&limit=`
#[utoipa::path(
    get,
    path = "/v1/listings",
    operation_id = "market_search",
    tag = "market",
    summary = "search listed GPUs: filters, sort, cursor pages",
    params(
        ("model" = Option<String>, Query, description = "a catalog model id or alias"),
        ("min_vram_gb" = Option<u64>, Query, maximum = 4096, description = "at least this much GPU memory"),
        ("country" = Option<String>, Query, description = "ISO 3166-1 alpha-2"),
        ("region" = Option<String>, Query, description = "a region"),
        ("max_price_usdc" = Option<String>, Query, pattern = "^[0-9]{1,9}(\\.[0-9]{1,6})?$", description = "at most this hourly price (decimal USDC)"),
        ("tier" = Option<String>, Query, pattern = "^(enterprise|community)$", description = "`enterprise` or `community`"),
        ("min_gpus" = Option<u64>, Query, maximum = 64, description = "machines with at least this many such GPUs listed"),
        ("min_reliability" = Option<String>, Query, description = "reliability score at least this (0 to 100)"),
        ("min_performance" = Option<String>, Query, description = "benchmark score at least this, percent of the model's reference (0 to 110); GPUs not benchmarked yet do not match"),
        ("sort" = Option<String>, Query, pattern = "^(rank|price|perf_per_dollar|performance)$", description = "`rank` (default), `price`, `perf_per_dollar`, `performance` (benchmark score, highest first)"),
        ("after" = Option<String>, Query, description = "the cursor from `next_after`"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 200, description = "1 to 200 (default 50)"),
    ),
    responses((status = 200, description = "search listed GPUs", body = wm::ListingPage)),
)]
pub async fn search(
    State(state): State<AppState>,
    Query(query): Query,
) -> Result<Json<wm::ListingPage>, ApiError> {
    let SearchRequest {
        filter,
        sort,
        after,
        limit,
    } = parse_search(&state, &query)?;
    let snapshot = state.listings.current();
    let (page, more) = snapshot.search(&filter, sort, after.as_ref(), limit);
    let next_after = more
        .then(|| {
            page.last()
                .map(|l| format!("{}:{}:{}", sort_name(sort), sort.key(l), l.gpu_uuid))
        })
        .flatten();
    Ok(Json(wm::ListingPage {
        listings: page.into_iter().map(listing_view).collect(),
        next_after,
        as_of: timestamp(snapshot.as_of.unix_micros()),
    }))
}

fn parse_cursor(text: &str, sort: SortBy) -> Option<(i64, String)> {
    let mut parts = text.splitn(3, ':');
    if parts.next()? != sort_name(sort) {
        return None;
    }
    let key = parts.next()?.parse().ok()?;
    let uuid = parts.next()?;
    gpunex_domain::fleet::valid_gpu_uuid(uuid).then(|| (key, uuid.to_owned()))
}

/// `GET /v1/listings/{gpu_uuid}`: one listed GPU with its rank breakdown.
#[utoipa::path(
    get,
    path = "/v1/listings/{gpu_uuid}",
    operation_id = "market_listing",
    tag = "market",
    summary = "one listed GPU with its rank breakdown",
    responses((status = 200, description = "one listed GPU with its rank breakdown", body = wm::ListingDetail)),
)]
pub async fn listing(
    State(state): State<AppState>,
    Path(gpu_uuid): Path<String>,
) -> Result<Json<wm::ListingDetail>, ApiError> {
    let snapshot = state.listings.current();
    let listing = snapshot
        .listing(&gpu_uuid)
        .ok_or(ApiError::NotFound("listing"))?;
    Ok(Json(wm::ListingDetail {
        listing: listing_view(listing),
        rank: rank_view(&listing.rank),
        as_of: timestamp(snapshot.as_of.unix_micros()),
    }))
}

/// `GET /v1/providers/{provider_id}/listings`: every GPU of the provider, listed or why not,
/// with its rank breakdown.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/listings",
    operation_id = "market_provider_listings",
    tag = "market",
    summary = "each GPU of the provider: listed or why not, and its rank breakdown",
    responses((status = 200, description = "each GPU of the provider", body = wm::ProviderListings)),
)]
pub async fn provider_listings(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wm::ProviderListings>, ApiError> {
    caller.for_provider(provider_id)?;
    let snapshot = state.listings.current();
    let gpus: Vec<String> = state.credentials.with_fleet(|f| {
        f.machines_of(&provider_id)
            .into_iter()
            .flat_map(|m| m.gpus.iter().map(|g| g.gpu.gpu_uuid.clone()))
            .collect()
    });
    Ok(Json(wm::ProviderListings {
        provider_id,
        as_of: timestamp(snapshot.as_of.unix_micros()),
        gpus: gpus
            .iter()
            .filter_map(|uuid| snapshot.status(uuid))
            .map(|status| provider_listing(&snapshot, status))
            .collect(),
    }))
}
