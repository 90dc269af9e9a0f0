//! `GET /v1/market/recommendations`: a recommended hourly price per model and region, with the
//! market figures it came from (`domain::pricing` has the rule).

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::Query;
use axum::extract::State;
use gpunex_domain::fleet::{Span, online_micros};
use gpunex_domain::money::Usdc;
use gpunex_domain::pricing::{self, Basis, MarketSample, WINDOW_DAYS};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use gpunex_projections::market::{SearchFilter, SortBy, location_of, model_facts};
use gpunex_wire::market as wm;
use uuid::Uuid;

use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;

/// A machine's presence transitions.
type Transitions = Vec<(bool, Timestamp)>;

/// One region's and the whole model's samples, filled as the market is read.
#[derive(Default)]
struct Samples {
    region: MarketSample,
    model: MarketSample,
    rented_gpus: (u32, u32),
}

fn view(sample: &MarketSample, rented_gpus: u32) -> wm::MarketSampleView {
    let quartiles = |values: &[i64]| {
        pricing::quartiles(&mut values.to_vec())
            .map(|q| q.map(|micros| Usdc::from_micros(micros).to_string()))
    };
    wm::MarketSampleView {
        supply: sample.supply,
        rentals: sample.rentals,
        rented_gpus,
        rented_gpu_seconds: sample.rented_gpu_seconds,
        available_gpu_seconds: sample.available_gpu_seconds,
        demand_bp: sample.demand_bp(),
        rented_price_quartiles_usdc: quartiles(&sample.rented_prices),
        idle_price_quartiles_usdc: quartiles(&sample.idle_prices),
    }
}

fn reason(basis: Basis) -> String {
    match basis {
        Basis::RegionRentals => format!(
            "from the prices of GPUs rented in this region over the last {WINDOW_DAYS} days; \
             the pick within their quartiles follows demand"
        ),
        Basis::RegionListings => format!(
            "fewer than {} rentals in this region over the last {WINDOW_DAYS} days: from the \
             prices listed and rented here",
            pricing::MIN_RENTALS
        ),
        Basis::ModelRentals => {
            "too little market data in this region: from the model's rentals in every region"
                .to_owned()
        }
        Basis::ModelListings => {
            "too little market data for the model: from its prices in every region".to_owned()
        }
        Basis::Reference => "no market data for the model: its datasheet FP16 figure at the \
                             platform's median price per TFLOPS, range +/-20%"
            .to_owned(),
        Basis::None => "no market data at all: no recommendation".to_owned(),
    }
}

fn basis_name(basis: Basis) -> &'static str {
    match basis {
        Basis::RegionRentals => "region_rentals",
        Basis::RegionListings => "region_listings",
        Basis::ModelRentals => "model_rentals",
        Basis::ModelListings => "model_listings",
        Basis::Reference => "reference",
        Basis::None => "none",
    }
}

/// `GET /v1/market/recommendations?model=&region=`: public, like the listings.
#[utoipa::path(
    get,
    path = "/v1/market/recommendations",
    operation_id = "pricing_recommendations",
    tag = "market",
    summary = "a recommended price for a model (and region), with the supply, demand and prices behind it",
    params(
        ("model" = String, Query, description = "a catalog model id or alias"),
        ("region" = Option<String>, Query, description = "a region, as in listings"),
    ),
    responses((status = 200, description = "a recommended price for a model (and region), with the supply, demand and prices behind it", body = wm::PriceRecommendation)),
)]
pub async fn recommendations(
    State(state): State<AppState>,
    Query(query): Query,
) -> Result<Json<wm::PriceRecommendation>, ApiError> {
    if let Some(key) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "model" | "region"))
    {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: model, region",
        ));
    }
    let model = query
        .get("model")
        .ok_or_else(|| ApiError::query("model", ErrorCode::Required, "a catalog model id"))?;
    let added = state.credentials.added_models();
    let model_id = crate::catalog::resolve_model(&state, model)
        .map_err(|(code, message)| ApiError::query("model", code, message))?;
    let region = query.get("region").map(|r| r.trim().to_owned());
    if region
        .as_deref()
        .is_some_and(|r| r.is_empty() || r.chars().count() > 100)
    {
        return Err(ApiError::query(
            "region",
            ErrorCode::InvalidRegion,
            "a region name, 1 to 100 characters",
        ));
    }
    let at = state.clock.now();
    let window = Span {
        from: Timestamp::from_unix_micros(at.unix_micros() - WINDOW_DAYS * MICROS_PER_DAY),
        until: at,
    };
    let in_region = |r: &str| {
        region
            .as_deref()
            .is_some_and(|want| want.eq_ignore_ascii_case(r))
    };
    let mut samples = Samples::default();

    // Supply and idle prices: what is listed now.
    let snapshot = state.listings.current();
    let filter = SearchFilter {
        model: Some(model_id.clone()),
        ..SearchFilter::default()
    };
    let (listed, _) = snapshot.search(&filter, SortBy::Price, None, usize::MAX);
    for listing in listed {
        samples.model.supply += 1;
        samples.model.idle_prices.push(listing.price.micros());
        if in_region(&listing.region) {
            samples.region.supply += 1;
            samples.region.idle_prices.push(listing.price.micros());
        }
    }
    let reference: Vec<(i64, u32)> = snapshot
        .listings
        .iter()
        .map(|l| (l.price.micros(), l.fp16_tflops_tenths))
        .collect();

    // Each provider's region for this model, from its application.
    let mut regions: HashMap<Uuid, Option<String>> = HashMap::new();
    let mut region_of = |provider_id: Uuid| -> bool {
        let found = regions.entry(provider_id).or_insert_with(|| {
            state
                .credentials
                .provider_application(&provider_id)
                .and_then(|a| location_of(&a, &model_id).map(|l| l.region.clone()))
        });
        found.as_deref().is_some_and(&in_region)
    };

    // Demand and rented prices: rentals overlapping the window.
    // (Rentals that ended before the window add nothing: the stored projection's index skips
    // them.)
    let rentals: Vec<(Uuid, Timestamp, Option<Timestamp>, u32, i64)> = state
        .store
        .model_rentals_since(&model_id, window.from, state.credentials.position())
        .await?
        .into_iter()
        .map(|r| {
            (
                r.started.provider_id,
                r.started.started_at,
                r.ended.as_ref().map(|e| e.ended_at),
                r.started.gpu_uuids.len() as u32,
                r.started.price_per_gpu_hour.micros(),
            )
        })
        .collect();
    for (provider_id, started, ended, gpus, price) in rentals {
        let from = started.max(window.from);
        let until = ended.unwrap_or(at).min(window.until);
        let seconds = u64::try_from((until.unix_micros() - from.unix_micros()).max(0) / 1_000_000)
            .unwrap_or(0)
            * u64::from(gpus);
        let here = region_of(provider_id);
        let started_in_window = started >= window.from;
        for (sample, counted) in [(&mut samples.model, true), (&mut samples.region, here)] {
            if !counted {
                continue;
            }
            sample.rented_gpu_seconds += seconds;
            if started_in_window {
                sample.rentals += 1;
                sample
                    .rented_prices
                    .extend(std::iter::repeat_n(price, gpus as usize));
            }
        }
        if started_in_window {
            samples.rented_gpus.0 += gpus;
            if here {
                samples.rented_gpus.1 += gpus;
            }
        }
    }

    // Available time: the model's GPUs online in the window.
    let machines: Vec<(Uuid, u64, Transitions)> = state.credentials.with_fleet(|f| {
        f.machines()
            .into_iter()
            .filter(|m| !m.simulated || state.fleet.dev_mode)
            .map(|m| {
                let count = m
                    .gpus
                    .iter()
                    .filter(|g| g.model_id.as_deref() == Some(model_id.as_str()))
                    .count() as u64;
                (m.provider_id, count, m.transitions.clone())
            })
            .filter(|(_, count, _)| *count > 0)
            .collect()
    });
    for (provider_id, count, transitions) in machines {
        let online = u64::try_from(online_micros(&transitions, window) / 1_000_000).unwrap_or(0);
        samples.model.available_gpu_seconds += online * count;
        if region_of(provider_id) {
            samples.region.available_gpu_seconds += online * count;
        }
    }

    let model_tenths = model_facts(&model_id, None, &added).map_or(0, |(_, _, fp16)| fp16);
    let region_sample = if region.is_some() {
        &samples.region
    } else {
        &samples.model
    };
    let recommendation =
        pricing::recommend(region_sample, &samples.model, (model_tenths, &reference));
    let money = |u: Option<Usdc>| u.map(|u| u.to_string());
    Ok(Json(wm::PriceRecommendation {
        model_id: model_id.clone(),
        region: region.clone(),
        as_of: timestamp(at.unix_micros()),
        window_days: WINDOW_DAYS,
        basis: basis_name(recommendation.basis).to_owned(),
        fallback: recommendation.fallback,
        reason: reason(recommendation.basis),
        recommended_price_usdc: money(recommendation.recommended),
        recommended_price_micro_usdc: recommendation.recommended.map(|u| u.micros()),
        low_usdc: money(recommendation.low),
        high_usdc: money(recommendation.high),
        demand_bp: recommendation.demand_bp,
        region_market: region
            .is_some()
            .then(|| view(&samples.region, samples.rented_gpus.1)),
        model_market: view(&samples.model, samples.rented_gpus.0),
    }))
}
