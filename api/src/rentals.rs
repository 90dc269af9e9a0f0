//! Rentals over HTTP: a renter takes listed GPUs of one machine at the price in force, and ends
//! the rental. Two renters racing for a GPU cannot both get it: the lease streams' expected
//! versions decide (see `domain::rental`).

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::credentials::Role;
use gpunex_domain::rental::{self, EndCause, RentalEvent, RentalRejection};
use gpunex_projections::market::RentalState;
use gpunex_store::Metadata;
use gpunex_wire::rentals as wr;
use uuid::Uuid;

use gpunex_app::command::{Executor, Rejection};
use gpunex_app::rentals::{self as app_rentals, Refusal};

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;

fn rejection(error: RentalRejection) -> ApiError {
    match error {
        RentalRejection::InvalidGpus => {
            ApiError::body("/gpu_uuids", error.code(), error.to_string())
        }
        RentalRejection::MixedMachines => {
            ApiError::body("/gpu_uuids", error.code(), error.to_string())
        }
        RentalRejection::InvalidEvidence => {
            ApiError::body("/evidence", error.code(), error.to_string())
        }
        RentalRejection::InvalidWorkload(_) => {
            ApiError::body("/workload", error.code(), error.to_string())
        }
        RentalRejection::NotAvailable(_) | RentalRejection::AlreadyEnded => ApiError::Refused {
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
        workload: started.workload.clone(),
        job_status: match (&rental.job_started, &rental.job_ended) {
            (_, Some(_)) => "ended",
            (Some(_), None) => "running",
            (None, None) => "pending",
        }
        .to_owned(),
        job_cause: rental.job_ended.as_ref().map(|j| j.cause),
        job_evidence: rental.job_ended.as_ref().map(|j| j.evidence.clone()),
        gpu_seconds: rental.meter.gpu_seconds,
        charged_micro_usdc: rental.meter.charged.micros(),
    }
}

/// Who may see a rental: its renter (by renter token or signed in), its provider, admins and
/// finance.
fn may_see(caller: &Caller, rental: &RentalState) -> bool {
    match caller.role {
        Role::Admin | Role::Finance => true,
        Role::Renter { user_id } | Role::User { user_id } => user_id == rental.started.renter_id,
        Role::Provider { provider_id } => provider_id == rental.started.provider_id,
        Role::Agent { .. } | Role::Treasury => false,
    }
}

// Renting appends the rental and one lease per GPU in one atomic append, and ending it the
// release of each: the most GPUs a rental may name must fit the store's limit on one append.
const _: () = assert!(
    rental::RENTAL_GPUS_MAX < gpunex_store::APPEND_STREAMS_MAX,
    "a rental of RENTAL_GPUS_MAX GPUs must fit one append"
);
const _: () = assert!(
    gpunex_domain::fleet::MACHINE_GPUS_MAX <= rental::RENTAL_GPUS_MAX,
    "every GPU of one machine can be rented at once"
);

/// `POST /v1/rentals`
#[utoipa::path(
    post,
    path = "/v1/rentals",
    operation_id = "rentals_rent",
    tag = "rentals",
    summary = "rent listed GPUs of one machine at the price in force",
    responses((status = 201, description = "the rental, active: its GPUs leave the listings", body = wr::RentalView)),
)]
pub async fn rent(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wr::RentRequest>,
) -> Result<(StatusCode, Json<wr::RentalView>), ApiError> {
    let renter_id = caller.renter_id().ok_or(ApiError::Forbidden)?;
    rental::validate_workload(&request.workload).map_err(rejection)?;
    let snapshot = state.listings.current();
    let gpu_uuids = match (&request.filter, request.gpus) {
        (None, None) => request.gpu_uuids.clone(),
        (Some(filter), Some(count)) if request.gpu_uuids.is_empty() => {
            pick(&state, &snapshot, filter, count)?
        }
        _ => {
            return Err(ApiError::body(
                "",
                ErrorCode::InvalidBody,
                "name either gpu_uuids, or gpus and a filter",
            ));
        }
    };
    rental::check_gpus(&gpu_uuids).map_err(rejection)?;
    // The answer is the new rental: prepared before the append, so a retry after a crash
    // between the commit and the answer gets exactly it.
    let mut answer = None;
    let (position, _) = app_rentals::start(
        &executor(&state),
        &state.listings,
        app_rentals::Rent {
            rental_id: Uuid::now_v7(),
            renter_id,
            gpu_uuids: &gpu_uuids,
            workload: &request.workload,
        },
        &Metadata::actor(caller.actor()),
        |started| {
            let prepared = view(&RentalState::started(started.clone()));
            crate::idempotency::prepare_response(StatusCode::CREATED, &prepared);
            answer = Some(prepared);
        },
    )
    .await?
    .map_err(|refusal| match refusal {
        Rejection::Contended { .. } => ApiError::Refused {
            code: ErrorCode::GpuNotAvailable,
            detail: "the GPUs kept being taken and released while this request ran; search again"
                .to_owned(),
        },
        other => refused(other),
    })?;
    state.listings.wait_for(position).await;
    let Some(answer) = answer else {
        unreachable!("a rental that started was prepared")
    };
    Ok((StatusCode::CREATED, Json(answer)))
}

/// `GET /v1/rentals/{rental_id}`
#[utoipa::path(
    get,
    path = "/v1/rentals/{rental_id}",
    operation_id = "rentals_read",
    tag = "rentals",
    summary = "one rental",
    responses((status = 200, description = "one rental", body = wr::RentalView)),
)]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
) -> Result<Json<wr::RentalView>, ApiError> {
    app_rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .filter(|r| may_see(&caller, r))
        .map(|r| Json(view(&r)))
        .ok_or(ApiError::NotFound("rental"))
}

/// Most rentals one page of `GET /v1/rentals` holds, and its default.
pub const RENTALS_PAGE_MAX: u32 = 500;

/// `GET /v1/rentals`: a renter's own rentals (admins and finance pass `renter_id`), newest first,
/// one page at a time (`before` and `limit`; a `Link` header with `rel="next"` when there are
/// more). Read from the stored rentals projection, as of this process's read models.
#[utoipa::path(
    get,
    path = "/v1/rentals",
    operation_id = "rentals_list",
    tag = "rentals",
    summary = "a renter's rentals, newest first",
    params(
        ("renter_id" = Option<uuid::Uuid>, Query, description = "whose rentals (admin and finance; a renter sees its own)"),
        ("before" = Option<uuid::Uuid>, Query, description = "a rental id: the page holds the rentals older than it (the last of the previous page)"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "rentals in the page, 1 to 500 (default 500)"),
    ),
    responses((status = 200, description = "a renter's rentals, newest first", body = Vec<wr::RentalView>,
        headers(("Link" = String, description = "`</v1/rentals?...&before=ID>; rel=\"next\"` when older rentals follow"))
    )),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    if let Some(key) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "renter_id" | "before" | "limit"))
    {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: renter_id, before, limit",
        ));
    }
    let renter_id = match caller.renter_id() {
        Some(user_id) => user_id,
        None => query
            .get("renter_id")
            .and_then(|t| Uuid::try_parse(t).ok())
            .ok_or_else(|| {
                ApiError::query("renter_id", ErrorCode::Required, "a renter id (UUID)")
            })?,
    };
    let before = match query.get("before") {
        Some(cursor) => Some(Uuid::try_parse(cursor).map_err(|_| {
            ApiError::query(
                "before",
                ErrorCode::InvalidCursor,
                "a rental id (UUID): the last of the previous page",
            )
        })?),
        None => None,
    };
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=RENTALS_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::OutOfRange,
                    format!("1 to {RENTALS_PAGE_MAX}"),
                )
            })?,
        None => RENTALS_PAGE_MAX,
    };
    let mut page = state
        .store
        .renter_rentals(renter_id, before, limit + 1, state.credentials.position())
        .await?;
    let more = page.len() > limit as usize;
    page.truncate(limit as usize);
    let views: Vec<wr::RentalView> = page.iter().map(view).collect();
    let mut response = Json(views).into_response();
    if let (true, Some(last)) = (more, page.last()) {
        let mut next = format!(
            "/v1/rentals?before={}&limit={limit}",
            last.started.rental_id
        );
        if caller.renter_id().is_none() {
            next.push_str(&format!("&renter_id={renter_id}"));
        }
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("<{next}>; rel=\"next\"")) {
            response
                .headers_mut()
                .insert(axum::http::header::LINK, value);
        }
    }
    Ok(response)
}

/// The GPUs of a rental asked for by filter: in rank order, the first machine with `count`
/// matching GPUs listed, its best-ranked ones.
fn pick(
    state: &AppState,
    snapshot: &gpunex_projections::market::ListingSnapshot,
    filter: &std::collections::BTreeMap<String, String>,
    count: u32,
) -> Result<Vec<String>, ApiError> {
    if count == 0 || count as usize > rental::RENTAL_GPUS_MAX {
        return Err(ApiError::body(
            "/gpus",
            ErrorCode::InvalidGpus,
            format!("1 to {}", rental::RENTAL_GPUS_MAX),
        ));
    }
    let query: HashMap<String, String> = filter
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "sort" | "after" | "limit"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let search = crate::market::parse_search(state, &query).map_err(|error| match error {
        ApiError::InvalidRequest(errors) => ApiError::InvalidRequest(
            errors
                .into_iter()
                .map(|mut e| {
                    e.field = format!("filter/{}", e.field);
                    e
                })
                .collect(),
        ),
        other => other,
    })?;
    let (ranked, _) = snapshot.search(
        &search.filter,
        gpunex_projections::market::SortBy::Rank,
        None,
        usize::MAX,
    );
    let mut per_machine: HashMap<Uuid, Vec<String>> = HashMap::new();
    for listing in ranked {
        let gpus = per_machine.entry(listing.machine_id).or_default();
        gpus.push(listing.gpu_uuid.to_string());
        if gpus.len() == count as usize {
            return Ok(std::mem::take(gpus));
        }
    }
    Err(ApiError::Refused {
        code: ErrorCode::NoMatch,
        detail: format!("no machine has {count} listed GPUs matching the filter"),
    })
}

/// `POST /v1/rentals/{rental_id}/end`: the renter (or an admin, for the platform) ends it; its
/// GPUs are released and listed again. The agent learns it from its assignments and stops the
/// job.
#[utoipa::path(
    post,
    path = "/v1/rentals/{rental_id}/end",
    operation_id = "rentals_end",
    tag = "rentals",
    summary = "end a rental; its GPUs are listed again",
    responses((status = 200, description = "end a rental", body = wr::RentalView)),
)]
pub async fn end(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
    body: Option<Json<wr::EndRequest>>,
) -> Result<Json<wr::RentalView>, ApiError> {
    let request = body.map(|Json(request)| request).unwrap_or_default();
    let rental = app_rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .filter(|r| matches!(caller.role, Role::Admin) || may_see(&caller, r))
        .ok_or(ApiError::NotFound("rental"))?;
    let cause = match caller.role {
        Role::Admin => EndCause::Platform,
        _ => EndCause::RenterCancelled,
    };
    let position = app_rentals::end(
        &executor(&state),
        rental.started.rental_id,
        cause,
        &caller.actor(),
        &request.evidence,
    )
    .await?
    .map_err(refused)?;
    state.listings.wait_for(position).await;
    let rental = app_rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .ok_or(ApiError::NotFound("rental"))?;
    Ok(Json(view(&rental)))
}

/// The executor for this process's store and read models.
fn executor(state: &AppState) -> Executor<'_> {
    Executor::new(&state.store, &state.credentials)
}

/// The answer to a refused rental command.
fn refused(refusal: Rejection<Refusal>) -> ApiError {
    crate::error::command_refused(
        refusal,
        |refusal| match refusal {
            Refusal::NotFound => ApiError::NotFound("rental"),
            Refusal::Rule(error) => rejection(error),
            Refusal::Metering(error) => ApiError::Refused {
                code: ErrorCode::UsageOutOfRange,
                detail: error.to_string(),
            },
        },
        "the rental kept changing (usage was metered meanwhile); retry",
    )
}

/// Meters one usage report (an agent event): see `gpunex_app::rentals::meter`. A counter at or
/// below the highest metered (or one that adds less than a micro-USDC) is `absorbed`.
pub async fn meter(
    state: &AppState,
    report_id: Uuid,
    meta: Metadata,
    rental_id: Uuid,
    gpu_seconds: u64,
) -> Result<(Option<u64>, &'static str), ApiError> {
    let delivered = app_rentals::meter(
        &executor(state),
        state.fleet.fees,
        report_id,
        &meta,
        rental_id,
        gpu_seconds,
    )
    .await?
    .map_err(refused)?;
    Ok((delivered.position, delivered.delivery.as_str()))
}

/// An agent started a rental's workload (`rental.job_started`, under the agent's event id).
pub async fn job_started(
    state: &AppState,
    delivery: &crate::agent::Delivery,
    occurred: gpunex_domain::time::Timestamp,
    report: &gpunex_wire::fleet::JobStartedReport,
) -> Result<(u64, &'static str), ApiError> {
    let started = rental::JobStarted {
        rental_id: report.rental_id,
        machine_id: report.machine_id,
        runtime: report.runtime.clone(),
        handle: report.handle.clone(),
        started_at: occurred,
    };
    let delivered = app_rentals::record(
        &executor(state),
        report.rental_id,
        delivery.event_id,
        RentalEvent::JobStarted(started),
        &delivery.metadata(report.machine_id),
    )
    .await?
    .map_err(refused)?;
    Ok((delivered.position.unwrap_or(0), delivered.delivery.as_str()))
}

/// An agent's job ended: its final counter is metered (under an id derived from the event's),
/// then `rental.job_ended` is recorded under the event's id; if the rental was still active, it
/// ends with the job's cause and evidence and its GPUs are released (listed again).
pub async fn job_ended(
    state: &AppState,
    delivery: &crate::agent::Delivery,
    occurred: gpunex_domain::time::Timestamp,
    report: &gpunex_wire::fleet::JobEndedReport,
) -> Result<(u64, &'static str), ApiError> {
    let event_id = delivery.event_id;
    let meta = delivery.metadata(report.machine_id);
    let usage_id = gpunex_domain::fleet::derived_event_id(event_id, 1);
    meter(
        state,
        usage_id,
        meta.clone(),
        report.rental_id,
        report.gpu_seconds,
    )
    .await?;
    let job = rental::JobEnded {
        rental_id: report.rental_id,
        machine_id: report.machine_id,
        cause: report.cause,
        evidence: report.evidence.clone(),
        gpu_seconds: report.gpu_seconds,
        ended_at: occurred,
    };
    let delivered = app_rentals::job_ended(&executor(state), event_id, &job, occurred, &meta)
        .await?
        .map_err(refused)?;
    let position = delivered.position.unwrap_or(0);
    state.listings.wait_for(position).await;
    Ok((position, delivered.delivery.as_str()))
}

/// Longest an agent's assignment poll may wait for a change.
pub const ASSIGNMENTS_WAIT_MAX_SECONDS: u64 = 30;

fn assignments_of(state: &AppState, machine_id: Uuid) -> Vec<gpunex_wire::fleet::Assignment> {
    state.credentials.with_market(|m| {
        m.assignments_of(machine_id)
            .into_iter()
            .map(|r| gpunex_wire::fleet::Assignment {
                rental_id: r.started.rental_id,
                gpu_uuids: r.started.gpu_uuids.clone(),
                workload: r.started.workload.clone(),
                started_at: timestamp(r.started.started_at.unix_micros()),
                status: if r.ended.is_some() { "ended" } else { "active" }.to_owned(),
                end_cause: r.ended.as_ref().map(|e| e.cause),
                job_started: r.job_started.is_some(),
            })
            .collect()
    })
}

/// A fingerprint of an answer, for long polls (change detection only).
fn version_of(
    assignments: &[gpunex_wire::fleet::Assignment],
    retests: &[gpunex_wire::fleet::RetestAssignment],
) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(assignments)
        .unwrap_or_default()
        .hash(&mut hasher);
    if !retests.is_empty() {
        serde_json::to_string(retests)
            .unwrap_or_default()
            .hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// The benchmark re-tests waiting for `machine_id`'s agent.
fn retests_of(state: &AppState, machine_id: Uuid) -> Vec<gpunex_wire::fleet::RetestAssignment> {
    let gpus: Vec<String> = state.credentials.with_fleet(|f| {
        f.machine(&machine_id)
            .map(|m| m.gpus.iter().map(|g| g.gpu.gpu_uuid.clone()).collect())
            .unwrap_or_default()
    });
    state.credentials.with_market(|m| {
        m.benchmarks()
            .retests_of(&gpus)
            .into_iter()
            .map(|r| gpunex_wire::fleet::RetestAssignment {
                gpu_uuid: r.gpu_uuid.clone(),
                requested_at: crate::convert::timestamp(r.at.unix_micros()),
            })
            .collect()
    })
}

/// `GET /v1/agent/assignments?since=V&wait_seconds=W`: the rentals this machine must run
/// (active) or stop (ended while their job runs). With `since` (the `version` of the previous
/// answer) and `wait_seconds`, waits up to that long for the assignments to differ (long poll).
#[utoipa::path(
    get,
    path = "/v1/agent/assignments",
    operation_id = "rentals_assignments",
    tag = "rentals",
    summary = "the rentals this machine must run or stop (long poll with since and wait_seconds)",
    params(
        ("since" = Option<String>, Query, description = "the `version` of the last answer: wait until something changes after it"),
        ("wait_seconds" = Option<u64>, Query, minimum = 0, maximum = 30, description = "how long to wait for a change, 0 to 30 (default 0)"),
    ),
    responses((status = 200, description = "the rentals this machine must run or stop (long poll with since and wait_seconds)", body = gpunex_wire::fleet::Assignments)),
)]
pub async fn assignments(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query,
) -> Result<Json<gpunex_wire::fleet::Assignments>, ApiError> {
    let (_, machine_id) = crate::agent::agent_of(&state, &caller)?;
    let wait = match query.get("wait_seconds") {
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= ASSIGNMENTS_WAIT_MAX_SECONDS)
            .ok_or_else(|| {
                ApiError::query(
                    "wait_seconds",
                    ErrorCode::OutOfRange,
                    format!("a whole number up to {ASSIGNMENTS_WAIT_MAX_SECONDS}"),
                )
            })?,
        None => 0,
    };
    let since = query.get("since");
    if let Some(key) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "wait_seconds" | "since"))
    {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: since, wait_seconds",
        ));
    }
    let mut positions = state.credentials.watch_position();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(wait);
    loop {
        positions.borrow_and_update();
        let now = assignments_of(&state, machine_id);
        let retests = retests_of(&state, machine_id);
        let version = version_of(&now, &retests);
        if since != Some(&version)
            || wait == 0
            || !matches!(
                tokio::time::timeout_at(deadline, positions.changed()).await,
                Ok(Ok(()))
            )
        {
            return Ok(Json(gpunex_wire::fleet::Assignments {
                assignments: now,
                retests,
                version,
            }));
        }
    }
}

/// `POST /v1/agent/rentals/{rental_id}/logs`: the agent running a rental's job ships a chunk of
/// its output. Kept outside the event log, the newest 16 MiB per rental
/// (`gpunex_store::job_logs::KEEP_BYTES`).
#[utoipa::path(
    post,
    path = "/v1/agent/rentals/{rental_id}/logs",
    operation_id = "agent_job_log_append",
    tag = "agent",
    summary = "ship a chunk of a job's output",
    request_body = gpunex_wire::fleet::JobLogChunk,
    responses((status = 204, description = "stored (or already stored at that offset)")),
)]
pub async fn append_log(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
    Json(chunk): Json<gpunex_wire::fleet::JobLogChunk>,
) -> Result<StatusCode, ApiError> {
    use base64::Engine as _;
    let (_, machine_id) = crate::agent::agent_of(&state, &caller)?;
    let on_machine = app_rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .map(|r| r.started.machine_id == machine_id);
    if on_machine != Some(true) {
        return Err(ApiError::path(
            "rental_id",
            ErrorCode::UnknownRental,
            "not a rental on this machine",
        ));
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(chunk.data_base64.as_bytes())
        .map_err(|e| {
            ApiError::body(
                "/data_base64",
                ErrorCode::InvalidValue,
                format!("not standard base64 with padding: {e}"),
            )
        })?;
    let max = gpunex_wire::fleet::JOB_LOG_CHUNK_MAX_BYTES;
    if data.is_empty() || data.len() > max {
        return Err(ApiError::body(
            "/data_base64",
            ErrorCode::InvalidLength,
            format!("1 to {max} bytes once decoded"),
        ));
    }
    if chunk.offset > i64::MAX as u64 / 2 {
        return Err(ApiError::body(
            "/offset",
            ErrorCode::OutOfRange,
            "an implausibly large offset",
        ));
    }
    let at = state.clock.now();
    state
        .store
        .append_job_log(rental_id, chunk.offset, &data, at.unix_micros())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The most bytes one page of `GET /v1/rentals/{id}/logs` holds, and its default.
pub const LOG_PAGE_BYTES_MAX: usize = 256 * 1024;

/// `GET /v1/rentals/{rental_id}/logs`: the job's output, one page at a time, while it runs and
/// after it ends. Only the rental's renter and admins.
#[utoipa::path(
    get,
    path = "/v1/rentals/{rental_id}/logs",
    operation_id = "rentals_logs",
    tag = "rentals",
    summary = "a rental's job output, paged by byte offset",
    params(
        ("after" = Option<u64>, Query, description = "the byte offset to read from: 0 (the default) for the start, or the `next` of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 262144, description = "bytes in the page, 1 to 262,144 (default 262,144)"),
    ),
    responses((status = 200, description = "the output from `from` to `next`", body = wr::JobLog)),
)]
pub async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    Path(rental_id): Path<Uuid>,
    Query(query): Query,
) -> Result<Json<wr::JobLog>, ApiError> {
    if let Some(key) = query
        .keys()
        .find(|k| !matches!(k.as_str(), "after" | "limit"))
    {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: after, limit",
        ));
    }
    let after = match query.get("after") {
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= i64::MAX as u64)
            .ok_or_else(|| {
                ApiError::query(
                    "after",
                    ErrorCode::InvalidCursor,
                    "a byte offset (0 or more)",
                )
            })?,
        None => 0,
    };
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LOG_PAGE_BYTES_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::InvalidLimit,
                    format!("a whole number from 1 to {LOG_PAGE_BYTES_MAX}"),
                )
            })?,
        None => LOG_PAGE_BYTES_MAX,
    };
    // A provider sees its rentals but not what renters' programs print.
    let rental = app_rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .filter(|r| match caller.role {
            Role::Admin => true,
            Role::Renter { user_id } | Role::User { user_id } => user_id == r.started.renter_id,
            _ => false,
        })
        .ok_or(ApiError::NotFound("rental"))?;
    let read = state.store.read_job_log(rental_id, after, limit).await?;
    let cut = utf8_cut(&read.data, read.from + read.data.len() as u64 >= read.end);
    Ok(Json(wr::JobLog {
        rental_id,
        from: read.from,
        next: read.from + cut as u64,
        text: String::from_utf8_lossy(&read.data[..cut]).into_owned(),
        truncated: read.from > after,
        first_kept: read.first_kept,
        end: read.end,
        job_ended: rental.job_ended.is_some()
            || (rental.ended.is_some() && rental.job_started.is_none()),
    }))
}

/// How many bytes of `data` a page returns: all of them, less an incomplete UTF-8 character at
/// the end, unless the page reaches the end of what was shipped (where nothing will complete it)
/// or holds nothing else.
fn utf8_cut(data: &[u8], at_end: bool) -> usize {
    if at_end {
        return data.len();
    }
    match std::str::from_utf8(data) {
        Ok(_) => data.len(),
        // `error_len() == None`: the bytes end inside a character that may continue.
        Err(error) if error.error_len().is_none() && error.valid_up_to() + 4 > data.len() => {
            let valid = error.valid_up_to();
            if valid == 0 { data.len() } else { valid }
        }
        Err(_) => {
            // Invalid bytes in the middle stay (shown as U+FFFD); only a tail that may be the
            // start of a character is held back.
            let tail_start = data.len().saturating_sub(3);
            (tail_start..data.len())
                .find(|&i| {
                    let b = data[i];
                    b >= 0xC0
                        && std::str::from_utf8(&data[i..]).is_err_and(|e| e.error_len().is_none())
                })
                .filter(|&i| i > 0)
                .unwrap_or(data.len())
        }
    }
}

#[cfg(test)]
mod log_tests {
    use super::utf8_cut;

    #[test]
    fn a_page_never_ends_inside_a_character() {
        let text = "año €".as_bytes();
        assert_eq!(utf8_cut(text, false), text.len());
        // "€" is three bytes: a page that holds two of them stops before it.
        assert_eq!(utf8_cut(&text[..text.len() - 1], false), text.len() - 3);
        // At the end of what was shipped, nothing will complete it: all of it.
        assert_eq!(utf8_cut(&text[..text.len() - 1], true), text.len() - 1);
        // Invalid bytes in the middle stay (replaced when shown).
        let mixed = [b'a', 0xFF, b'b', 0xE2, 0x82];
        assert_eq!(utf8_cut(&mixed, false), 3);
        assert_eq!(utf8_cut(&[0xE2, 0x82], false), 2);
    }
}
