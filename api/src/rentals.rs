//! Rentals over HTTP: a renter takes listed GPUs of one machine at the price in force, and ends
//! the rental. Two renters racing for a GPU cannot both get it: the lease streams' expected
//! versions decide (see `domain::rental`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use gpunex_domain::credentials::Role;
use gpunex_domain::rental::{
    self, EndCause, GpuLease, RentalEvent, RentalRejection, RentalStarted,
};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_projections::market::RentalState;
use gpunex_store::{AppendError, ExpectedVersion, Metadata, NewEvent, StreamAppend};
use gpunex_wire::rentals as wr;
use uuid::Uuid;

use crate::auth::{Allow, Caller};
use crate::error::ApiError;
use crate::server::{AppState, timestamp};
use crate::tokens::now;

fn stream(name: String) -> StreamId {
    StreamId::parse(name)
        .unwrap_or_else(|_| unreachable!("uuids and GPU uuids make valid stream ids"))
}

fn rejection(error: RentalRejection) -> ApiError {
    match error {
        RentalRejection::InvalidGpus => {
            ApiError::invalid("gpu_uuids", error.code(), error.to_string())
        }
        RentalRejection::MixedMachines => {
            ApiError::invalid("gpu_uuids", error.code(), error.to_string())
        }
        RentalRejection::InvalidEvidence => {
            ApiError::invalid("evidence", error.code(), error.to_string())
        }
        RentalRejection::NotAvailable(_) | RentalRejection::AlreadyEnded => ApiError::Conflict {
            code: error.code(),
            detail: error.to_string(),
        },
    }
}

fn view(rental: &RentalState) -> wr::RentalView {
    let started = &rental.started;
    wr::RentalView {
        rental_id: started.rental_id,
        renter_id: started.renter_id,
        provider_id: started.provider_id,
        machine_id: started.machine_id,
        gpu_uuids: started.gpu_uuids.clone(),
        model_id: started.model_id.clone(),
        price_per_gpu_hour_micro_usdc: started.price_per_gpu_hour.micros(),
        price_per_gpu_hour_usdc: started.price_per_gpu_hour.to_string(),
        started_at: timestamp(started.started_at.unix_micros()),
        status: if rental.ended.is_some() {
            "ended"
        } else {
            "active"
        }
        .to_owned(),
        ended_at: rental
            .ended
            .as_ref()
            .map(|e| timestamp(e.ended_at.unix_micros())),
        cause: rental.ended.as_ref().map(|e| e.cause),
        evidence: rental.ended.as_ref().map(|e| e.evidence.clone()),
    }
}

/// Who may see a rental: its renter, its provider, admins and finance.
fn may_see(caller: &Caller, rental: &RentalState) -> bool {
    match caller.role {
        Role::Admin | Role::Finance => true,
        Role::Renter { user_id } => user_id == rental.started.renter_id,
        Role::Provider { provider_id } => provider_id == rental.started.provider_id,
        Role::Agent { .. } | Role::User { .. } => false,
    }
}

/// `POST /v1/rentals`
pub async fn rent(
    State(state): State<AppState>,
    caller: Caller,
    Json(body): Json<serde_json::Value>,
) -> Result<(StatusCode, Json<wr::RentalView>), ApiError> {
    caller.require(&[Allow::Renter])?;
    let Role::Renter { user_id: renter_id } = caller.role else {
        return Err(ApiError::Forbidden);
    };
    let request: wr::RentRequest = serde_json::from_value(body)
        .map_err(|e| ApiError::invalid("body", "invalid_body", e.to_string()))?;
    rental::check_gpus(&request.gpu_uuids).map_err(rejection)?;
    let at = now();
    let snapshot = state.listings.current();
    let mut listings = Vec::with_capacity(request.gpu_uuids.len());
    for uuid in &request.gpu_uuids {
        let listing = snapshot
            .listing(uuid)
            .ok_or_else(|| rejection(RentalRejection::NotAvailable(uuid.clone())))?;
        listings.push(listing);
    }
    let first = listings[0];
    if listings
        .iter()
        .any(|l| l.machine_id != first.machine_id || l.model_id != first.model_id)
    {
        return Err(rejection(RentalRejection::MixedMachines));
    }
    // The registry is authoritative (the snapshot may be a moment old): the price in force now,
    // and each GPU's lease stream version, which the append must still find.
    let (price, versions) = state.credentials.with_market(|market| {
        let price = gpunex_domain::market::price_at(
            market.price_history(first.provider_id, &first.model_id),
            at,
        );
        let versions: Vec<(u64, bool)> = request
            .gpu_uuids
            .iter()
            .map(|uuid| (market.lease_version(uuid), market.lease_of(uuid).is_some()))
            .collect();
        (price, versions)
    });
    let price = price
        .ok_or_else(|| rejection(RentalRejection::NotAvailable(request.gpu_uuids[0].clone())))?;
    if let Some(i) = versions.iter().position(|(_, leased)| *leased) {
        return Err(rejection(RentalRejection::NotAvailable(
            request.gpu_uuids[i].clone(),
        )));
    }
    let rental_id = Uuid::now_v7();
    let started = RentalStarted {
        rental_id,
        renter_id,
        provider_id: first.provider_id,
        machine_id: first.machine_id,
        gpu_uuids: request.gpu_uuids.clone(),
        model_id: first.model_id.to_string(),
        price_per_gpu_hour: price,
        started_at: at,
    };
    let meta = Metadata::actor(caller.actor());
    let event = |e: RentalEvent| {
        NewEvent::from_domain(Uuid::now_v7(), &DomainEvent::Rental(e), meta.clone())
    };
    let mut streams = vec![StreamAppend {
        stream_id: stream(format!("rental-{rental_id}")),
        expected: ExpectedVersion::NoStream,
        events: vec![event(RentalEvent::Started(started))],
    }];
    for (uuid, (version, _)) in request.gpu_uuids.iter().zip(&versions) {
        streams.push(StreamAppend {
            stream_id: stream(format!("gpu_lease-{uuid}")),
            expected: if *version == 0 {
                ExpectedVersion::NoStream
            } else {
                ExpectedVersion::Exact(*version)
            },
            events: vec![event(RentalEvent::GpuLeased(GpuLease {
                gpu_uuid: uuid.clone(),
                rental_id,
                at,
            }))],
        });
    }
    let committed = state
        .store
        .append_streams(streams)
        .await
        .map_err(|error| match error {
            AppendError::WrongExpectedVersion { stream_id, .. } => ApiError::Conflict {
                code: "gpu_not_available",
                detail: format!(
                    "{} was just taken by another rental",
                    stream_id.strip_prefix("gpu_lease-").unwrap_or(&stream_id)
                ),
            },
            AppendError::Store(error) => error.into(),
            other => ApiError::Conflict {
                code: other.code(),
                detail: other.to_string(),
            },
        })?;
    let position = committed.last_position();
    state.credentials.wait_for(position).await?;
    state.listings.wait_for(position).await;
    let rental = state
        .credentials
        .with_market(|m| m.rental(&rental_id).cloned())
        .ok_or(ApiError::NotFound("rental"))?;
    Ok((StatusCode::CREATED, Json(view(&rental))))
}

/// `GET /v1/rentals/{rental_id}`
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
) -> Result<Json<wr::RentalView>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Finance, Allow::Renter, Allow::Provider])?;
    state
        .credentials
        .with_market(|m| m.rental(&rental_id).cloned())
        .filter(|r| may_see(&caller, r))
        .map(|r| Json(view(&r)))
        .ok_or(ApiError::NotFound("rental"))
}

/// `GET /v1/rentals`: a renter's own rentals (admins and finance pass `renter_id`), newest first.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Vec<wr::RentalView>>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Finance, Allow::Renter])?;
    let renter_id = match caller.role {
        Role::Renter { user_id } => user_id,
        _ => query
            .get("renter_id")
            .and_then(|t| Uuid::try_parse(t).ok())
            .ok_or_else(|| ApiError::invalid("renter_id", "required", "a renter id (UUID)"))?,
    };
    let rentals = state
        .credentials
        .with_market(|m| m.rentals_of(renter_id).into_iter().map(view).collect());
    Ok(Json(rentals))
}

/// `POST /v1/rentals/{rental_id}/end`: the renter (or an admin, for the platform) ends it; its
/// GPUs are released and listed again.
pub async fn end(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
    body: Option<Json<serde_json::Value>>,
) -> Result<Json<wr::RentalView>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Renter])?;
    let request: wr::EndRequest = match body {
        Some(Json(value)) => serde_json::from_value(value)
            .map_err(|e| ApiError::invalid("body", "invalid_body", e.to_string()))?,
        None => wr::EndRequest::default(),
    };
    let rental = state
        .credentials
        .with_market(|m| m.rental(&rental_id).cloned())
        .filter(|r| matches!(caller.role, Role::Admin) || may_see(&caller, r))
        .ok_or(ApiError::NotFound("rental"))?;
    let cause = match caller.role {
        Role::Admin => EndCause::Platform,
        _ => EndCause::RenterCancelled,
    };
    let at = now();
    let ended = rental::end(
        rental_id,
        rental.ended.is_some(),
        cause,
        at,
        &caller.actor(),
        &request.evidence,
    )
    .map_err(rejection)?;
    let meta = Metadata::actor(caller.actor());
    let event = |e: RentalEvent| {
        NewEvent::from_domain(Uuid::now_v7(), &DomainEvent::Rental(e), meta.clone())
    };
    let versions: Vec<u64> = state.credentials.with_market(|m| {
        rental
            .started
            .gpu_uuids
            .iter()
            .map(|uuid| m.lease_version(uuid))
            .collect()
    });
    // At the rental stream's version as folded: ending twice (or racing a usage report) fails on
    // it.
    let mut streams = vec![StreamAppend {
        stream_id: stream(format!("rental-{rental_id}")),
        expected: ExpectedVersion::Exact(rental.stream_version),
        events: vec![event(RentalEvent::Ended(ended))],
    }];
    for (uuid, version) in rental.started.gpu_uuids.iter().zip(versions) {
        streams.push(StreamAppend {
            stream_id: stream(format!("gpu_lease-{uuid}")),
            expected: ExpectedVersion::Exact(version),
            events: vec![event(RentalEvent::GpuReleased(GpuLease {
                gpu_uuid: uuid.clone(),
                rental_id,
                at,
            }))],
        });
    }
    let ended_meanwhile = || {
        state
            .credentials
            .with_market(|m| m.rental(&rental_id).is_some_and(|r| r.ended.is_some()))
    };
    let committed = state
        .store
        .append_streams(streams)
        .await
        .map_err(|error| match error {
            AppendError::WrongExpectedVersion { .. } if ended_meanwhile() => {
                rejection(RentalRejection::AlreadyEnded)
            }
            AppendError::WrongExpectedVersion { .. } => ApiError::Conflict {
                code: "concurrent_change",
                detail: "the rental changed while it was being ended (usage was metered); retry"
                    .to_owned(),
            },
            AppendError::Store(error) => error.into(),
            other => ApiError::Conflict {
                code: other.code(),
                detail: other.to_string(),
            },
        })?;
    let position = committed.last_position();
    state.credentials.wait_for(position).await?;
    state.listings.wait_for(position).await;
    let rental = state
        .credentials
        .with_market(|m| m.rental(&rental_id).cloned())
        .ok_or(ApiError::NotFound("rental"))?;
    Ok(Json(view(&rental)))
}

/// Meters one usage report (an agent event): the charge beyond what the rental was already
/// charged, at the rental's locked price, split into fee and net by the provider's tier, and
/// posted. Appended to the rental's stream at its expected version under the report's id, so a
/// re-sent report is a duplicate and two reports never charge the same seconds twice. A counter
/// at or below the highest metered (or one that adds less than a micro-USDC) is `absorbed`.
pub async fn meter(
    state: &AppState,
    report_id: Uuid,
    report: &gpunex_wire::fleet::UsageReport,
) -> Result<(Option<u64>, &'static str), ApiError> {
    use gpunex_domain::metering::{FeeSchedule, charge_entry};
    use gpunex_domain::rental::UsageMetered;
    let fees = FeeSchedule::default();
    for _attempt in 0..5 {
        let head = state.store.head_position().await?;
        state.credentials.wait_for(head).await?;
        let rental = state
            .credentials
            .with_market(|m| m.rental(&report.rental_id).cloned())
            .ok_or(ApiError::NotFound("rental"))?;
        let tier = state
            .credentials
            .applications()
            .into_iter()
            .map(|(_, a)| a)
            .find(|a| a.provider_id == Some(rental.started.provider_id))
            .and_then(|a| a.tier)
            .unwrap_or(gpunex_domain::onboarding::Tier::Community);
        let mut meter = rental.meter;
        let money = |e: gpunex_domain::money::MoneyError| ApiError::Unprocessable {
            code: "usage_out_of_range",
            detail: e.to_string(),
        };
        let Some(charge) = meter
            .report(rental.started.price_per_gpu_hour, report.gpu_seconds)
            .map_err(money)?
            .filter(|c| c.amount.is_positive())
        else {
            return Ok((None, "absorbed"));
        };
        let (fee, net) = fees.split(charge.amount, tier).map_err(money)?;
        let postings = charge_entry(
            rental.started.renter_id,
            rental.started.provider_id,
            charge.amount,
            fee,
        )
        .map_err(|e| ApiError::Unprocessable {
            code: "usage_out_of_range",
            detail: e.to_string(),
        })?;
        let event = DomainEvent::Rental(RentalEvent::UsageMetered(UsageMetered {
            entry_id: report_id,
            rental_id: report.rental_id,
            renter_id: rental.started.renter_id,
            provider_id: rental.started.provider_id,
            report_id,
            from_gpu_seconds: charge.from_gpu_seconds,
            to_gpu_seconds: charge.to_gpu_seconds,
            price_per_gpu_hour: rental.started.price_per_gpu_hour,
            gross: charge.amount,
            fee,
            net,
            fee_bp: fees.rate_bp(tier),
            postings,
        }));
        let appended = state
            .store
            .append(
                stream(format!("rental-{}", report.rental_id)),
                ExpectedVersion::Exact(rental.stream_version),
                vec![NewEvent::from_domain(
                    report_id,
                    &event,
                    Metadata::actor(format!("agent:{}", report.machine_id)),
                )],
            )
            .await;
        match appended {
            Ok(committed) => {
                let position = committed.last_position();
                state.credentials.wait_for(position).await?;
                return Ok((
                    Some(position),
                    if committed.replayed {
                        "duplicate"
                    } else {
                        "recorded"
                    },
                ));
            }
            Err(AppendError::WrongExpectedVersion { .. }) => continue,
            Err(AppendError::IdempotencyConflict { .. }) => {
                return Ok((state.store.event_position(report_id).await?, "duplicate"));
            }
            Err(AppendError::Store(error)) => return Err(error.into()),
            Err(other) => {
                return Err(ApiError::Conflict {
                    code: other.code(),
                    detail: other.to_string(),
                });
            }
        }
    }
    Err(ApiError::Conflict {
        code: "concurrent_change",
        detail: "the rental kept changing; retry".to_owned(),
    })
}
