//! Agents and the fleet over HTTP: registration and GPU conditions delivered from an agent's
//! durable queue, heartbeats with telemetry, the presence watchdog, and the provider and
//! operator views.
//!
//! An agent's token is bound to one provider and one machine; every report names the machine
//! and is refused unless it is the token's own.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use gpunex_domain::credentials::Role;
use gpunex_domain::fleet::{self, GpuConditionChanged, ReportError, Span};
use gpunex_domain::time::{MICROS_PER_DAY, MICROS_PER_SECOND, Timestamp};
use gpunex_projections::fleet::MachineState;
use gpunex_store::fleet::{Presence, TelemetryRow};
use gpunex_wire::fleet as wf;
use uuid::Uuid;

use crate::agent::{Delivery, agent_metadata, agent_of, not_owned};
use crate::auth::Caller;
use crate::convert::{parse_time, parse_time_in, timestamp};
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_app::command::{Executor, Rejection};
use gpunex_app::fleet::{self as app_fleet, Recorded};
use gpunex_domain::benchmark_log::BenchmarkRejection;

use gpunex_app::presence::whole_seconds as seconds;
pub use gpunex_app::presence::{FleetConfig, run_watchdog};

fn report_invalid(prefix: &str, error: ReportError) -> ApiError {
    ApiError::body(
        &format!("{prefix}{}", error.field),
        error.code,
        error.message,
    )
}

/// `POST /v1/agent/events`: events from the agent's durable queue, in order. The whole request
/// is checked first and refused as one (nothing written) if any event is invalid; the agent
/// then sends events one by one to set the bad one aside. Events already recorded answer
/// `duplicate` with their original position.
#[utoipa::path(
    post,
    path = "/v1/agent/events",
    operation_id = "fleet_agent_events",
    tag = "fleet",
    summary = "deliver events from the agent's durable queue (registration, GPU conditions, usage, jobs)",
    responses((status = 200, description = "deliver events from the agent's durable queue (registration, GPU conditions, usage, jobs)", body = wf::AgentEventsResponse)),
)]
pub async fn agent_events(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wf::AgentEventsRequest>,
) -> Result<Json<wf::AgentEventsResponse>, ApiError> {
    let (provider_id, machine_id) = agent_of(&state, &caller)?;
    if request.events.is_empty() || request.events.len() > wf::AGENT_EVENTS_PER_REQUEST_MAX {
        return Err(ApiError::body(
            "/events",
            ErrorCode::OutOfRange,
            format!(
                "1 to {} events per request",
                wf::AGENT_EVENTS_PER_REQUEST_MAX
            ),
        ));
    }
    let received = state.clock.now();
    let mut checked = Vec::with_capacity(request.events.len());
    // GPUs this batch registers, so a condition may follow its registration in one request.
    let mut batch_gpus: Vec<String> = Vec::new();
    for (i, event) in request.events.iter().enumerate() {
        let at = |name: &str| format!("/events/{i}/{name}");
        if event.event_id.get_version_num() != 7 {
            return Err(ApiError::body(
                &at("event_id"),
                ErrorCode::InvalidEventId,
                "a UUIDv7 is required",
            ));
        }
        if request.events[..i]
            .iter()
            .any(|e| e.event_id == event.event_id)
        {
            return Err(ApiError::body(
                &at("event_id"),
                ErrorCode::DuplicateEventId,
                "sent twice in one request",
            ));
        }
        let occurred = parse_time(&at("occurred_at"), &event.occurred_at)?;
        if occurred.unix_micros() > received.unix_micros() + fleet::AGENT_CLOCK_SKEW_MAX_MICROS {
            return Err(ApiError::body(
                &at("occurred_at"),
                ErrorCode::ClockSkew,
                "more than 5 minutes ahead of the platform's clock; fix the host's time (NTP)",
            ));
        }
        match &event.body {
            wf::AgentEventBody::Registration(registration) => {
                if registration.machine_id != machine_id {
                    return Err(not_owned(registration.machine_id));
                }
                fleet::validate_inventory(&registration.host, &registration.gpus)
                    .map_err(|e| report_invalid(&at("body"), e))?;
                check_text(&at("body/agent_version"), &registration.agent_version)?;
                for (g, gpu) in registration.gpus.iter().enumerate() {
                    let owner = state
                        .credentials
                        .with_fleet(|f| f.machine_of_gpu(&gpu.gpu_uuid).map(|m| m.provider_id));
                    if owner.is_some_and(|owner| owner != provider_id) {
                        return Err(ApiError::Refused {
                            code: ErrorCode::GpuRegisteredElsewhere,
                            detail: format!(
                                "GPU {} (/events/{i}/body/gpus/{g}) is registered to another provider's machine",
                                gpu.gpu_uuid
                            ),
                        });
                    }
                }
                batch_gpus.extend(registration.gpus.iter().map(|g| g.gpu_uuid.clone()));
            }
            wf::AgentEventBody::Usage(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                rental_on_machine(&state, report.rental_id, machine_id, &at("body/rental_id"))
                    .await?;
                check_range_u64(&at("body/gpu_seconds"), report.gpu_seconds)?;
            }
            wf::AgentEventBody::JobStarted(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                rental_on_machine(&state, report.rental_id, machine_id, &at("body/rental_id"))
                    .await?;
                if !matches!(report.runtime.as_str(), "docker" | "process") {
                    return Err(ApiError::body(
                        &at("body/runtime"),
                        ErrorCode::InvalidRuntime,
                        "docker or process",
                    ));
                }
                check_text(&at("body/handle"), &report.handle)?;
            }
            wf::AgentEventBody::JobEnded(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                rental_on_machine(&state, report.rental_id, machine_id, &at("body/rental_id"))
                    .await?;
                check_range_u64(&at("body/gpu_seconds"), report.gpu_seconds)?;
                let job = gpunex_domain::rental::JobEnded {
                    rental_id: report.rental_id,
                    machine_id,
                    cause: report.cause,
                    evidence: report.evidence.clone(),
                    gpu_seconds: report.gpu_seconds,
                    ended_at: occurred,
                };
                gpunex_domain::rental::check_job_end(&job)
                    .map_err(|e| ApiError::body(&at("body/evidence"), e.code(), e.to_string()))?;
            }
            wf::AgentEventBody::BenchmarkRun(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                crate::benchmarks::check_report(
                    &state,
                    machine_id,
                    &format!("/events/{i}/body"),
                    report,
                    event.event_id,
                )?;
            }
            wf::AgentEventBody::BenchmarkSkipped(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                crate::benchmarks::check_skipped(
                    &state,
                    machine_id,
                    &format!("/events/{i}/body"),
                    report,
                )?;
            }
            wf::AgentEventBody::GpuCondition(report) => {
                if report.machine_id != machine_id {
                    return Err(not_owned(report.machine_id));
                }
                let registered = state.credentials.with_fleet(|f| {
                    f.machine(&machine_id)
                        .map(|m| m.gpus.iter().any(|g| g.gpu.gpu_uuid == report.gpu_uuid))
                });
                let known = registered == Some(true) || batch_gpus.contains(&report.gpu_uuid);
                if registered.is_none() && !batch_gpus.contains(&report.gpu_uuid) {
                    return Err(ApiError::Refused {
                        code: ErrorCode::MachineNotRegistered,
                        detail: "register the machine before reporting on its GPUs".to_owned(),
                    });
                }
                if !known {
                    return Err(ApiError::body(
                        &at("body/gpu_uuid"),
                        ErrorCode::UnknownGpu,
                        "not a GPU registered on this machine",
                    ));
                }
                if let Some(sample) = &report.evidence {
                    let gpus = state
                        .credentials
                        .with_fleet(|f| f.machine(&machine_id).map(|m| m.gpus.clone()))
                        .unwrap_or_default();
                    let detected: Vec<_> = gpus.into_iter().map(|g| g.gpu).collect();
                    if !detected.is_empty() {
                        fleet::validate_samples(std::slice::from_ref(sample), &detected)
                            .map_err(|e| report_invalid(&at("body/evidence"), e))?;
                    }
                }
            }
        }
        // A re-send is answered `duplicate` only if it carries what was delivered the first
        // time: other content under a stored id is refused before anything is written.
        let delivery = Delivery::of(event);
        let stored = state.store.event_delivery(event.event_id).await?;
        if let Some((_, Some(fingerprint))) = &stored
            && *fingerprint != delivery.content_sha256
        {
            return Err(ApiError::refused(
                ErrorCode::IdempotencyConflict,
                format!(
                    "/events/{i}: event {} was already recorded with other content; a re-send must carry exactly what was sent, a new event needs a new id",
                    event.event_id
                ),
            ));
        }
        checked.push((
            event,
            occurred,
            delivery,
            stored.map(|(position, _)| position),
        ));
    }
    let mut results = Vec::with_capacity(checked.len());
    for (i, (event, occurred, delivery, stored)) in checked.into_iter().enumerate() {
        let position = stored.map(|position| (Some(position), "duplicate"));
        let (position, status) = match position {
            Some(found) => found,
            None => match &event.body {
                wf::AgentEventBody::Registration(registration) => {
                    let (p, s) =
                        register(&state, provider_id, &delivery, occurred, registration).await?;
                    (Some(p), s)
                }
                wf::AgentEventBody::GpuCondition(report) => {
                    let (p, s) =
                        condition(&state, provider_id, &delivery, occurred, report).await?;
                    (Some(p), s)
                }
                wf::AgentEventBody::Usage(report) => {
                    crate::rentals::meter(
                        &state,
                        event.event_id,
                        delivery.metadata(machine_id),
                        report.rental_id,
                        report.gpu_seconds,
                    )
                    .await?
                }
                wf::AgentEventBody::JobStarted(report) => {
                    let (p, s) =
                        crate::rentals::job_started(&state, &delivery, occurred, report).await?;
                    (Some(p), s)
                }
                wf::AgentEventBody::JobEnded(report) => {
                    let (p, s) =
                        crate::rentals::job_ended(&state, &delivery, occurred, report).await?;
                    (Some(p), s)
                }
                wf::AgentEventBody::BenchmarkRun(report) => {
                    let (p, s) = benchmark_run(&state, &delivery, machine_id, i, report).await?;
                    (Some(p), s)
                }
                wf::AgentEventBody::BenchmarkSkipped(report) => {
                    let (p, s) =
                        benchmark_skipped(&state, &delivery, machine_id, i, report).await?;
                    (Some(p), s)
                }
            },
        };
        results.push(wf::AgentEventResult {
            event_id: event.event_id,
            status: status.to_owned(),
            position,
            error: None,
        });
    }
    // Read-your-writes: the views answer from the registry, which follows the log.
    if let Some(last) = results.iter().filter_map(|r| r.position).max() {
        state.credentials.wait_for(last).await?;
    }
    Ok(Json(wf::AgentEventsResponse { results }))
}

async fn rental_on_machine(
    state: &AppState,
    rental_id: Uuid,
    machine_id: Uuid,
    field: &str,
) -> Result<(), ApiError> {
    let on_machine = gpunex_app::rentals::rental_of(&state.store, &state.credentials, rental_id)
        .await?
        .map(|r| r.started.machine_id == machine_id);
    if on_machine != Some(true) {
        return Err(ApiError::body(
            field,
            ErrorCode::UnknownRental,
            "not a rental on this machine",
        ));
    }
    Ok(())
}

/// Counters are stored as signed 64-bit integers and summed: at most about 290,000 GPU-years.
fn check_range_u64(field: &str, value: u64) -> Result<(), ApiError> {
    if value > (i64::MAX as u64) / 1_000_000 {
        return Err(ApiError::body(
            field,
            ErrorCode::OutOfRange,
            "an implausibly large counter",
        ));
    }
    Ok(())
}

fn check_text(field: &str, text: &str) -> Result<(), ApiError> {
    if text.trim().is_empty()
        || text.chars().count() > fleet::AGENT_TEXT_CHARS_MAX
        || text.chars().any(char::is_control)
    {
        return Err(ApiError::body(
            field,
            ErrorCode::InvalidText,
            format!(
                "1 to {} characters on one line",
                fleet::AGENT_TEXT_CHARS_MAX
            ),
        ));
    }
    Ok(())
}

/// The answer to a report a fleet command recorded: `duplicate` when it was stored already
/// (re-sent, or delivered by a retry racing this one) with the same content, refused when its id
/// is stored with other content.
async fn delivered(
    state: &AppState,
    delivery: &Delivery,
    outcome: gpunex_app::fleet::Outcome<Recorded>,
) -> Result<(u64, &'static str), ApiError> {
    let delivered = delivery.event_id;
    match outcome? {
        Ok(recorded) => Ok((
            recorded.position,
            if recorded.replayed {
                "duplicate"
            } else {
                "recorded"
            },
        )),
        Err(Rejection::IdTaken { .. }) => match state.store.event_delivery(delivered).await? {
            Some((position, fingerprint))
                if fingerprint
                    .as_ref()
                    .is_none_or(|f| *f == delivery.content_sha256) =>
            {
                Ok((position, "duplicate"))
            }
            Some(_) => Err(ApiError::refused(
                ErrorCode::IdempotencyConflict,
                format!(
                    "event {delivered} was already recorded with other content; a new event needs a new id"
                ),
            )),
            None => Err(ApiError::Refused {
                code: ErrorCode::IdempotencyConflict,
                detail: "part of this delivery is stored with other content".to_owned(),
            }),
        },
        Err(Rejection::Contended { .. }) => Err(ApiError::Refused {
            code: ErrorCode::ConcurrentChange,
            detail: "the provider's machines kept changing; retry".to_owned(),
        }),
        Err(Rejection::Rule(never)) => match never {},
    }
}

/// Records a registration (`gpunex_app::fleet::register`): the machine, each GPU identified
/// against the catalog, and the provider's GPUs compared with its approved application.
async fn register(
    state: &AppState,
    provider_id: Uuid,
    delivery: &Delivery,
    occurred: Timestamp,
    registration: &wf::Registration,
) -> Result<(u64, &'static str), ApiError> {
    let machine_id = registration.machine_id;
    let registration = fleet::Registration {
        machine_id,
        provider_id,
        host: &registration.host,
        agent_version: &registration.agent_version,
        simulated: registration.simulated,
        gpus: &registration.gpus,
        detected_at: occurred,
    };
    let exec = Executor::new(&state.store, &state.credentials);
    let meta = agent_metadata(machine_id, delivery);
    let outcome = app_fleet::register(&exec, delivery.event_id, &meta, &registration).await;
    delivered(state, delivery, outcome).await
}

async fn condition(
    state: &AppState,
    provider_id: Uuid,
    delivery: &Delivery,
    occurred: Timestamp,
    report: &wf::GpuConditionReport,
) -> Result<(u64, &'static str), ApiError> {
    let changed = GpuConditionChanged {
        machine_id: report.machine_id,
        provider_id,
        gpu_uuid: report.gpu_uuid.clone(),
        condition: report.condition,
        active: report.active,
        observed_at: occurred,
        evidence: report.evidence.clone(),
    };
    let exec = Executor::new(&state.store, &state.credentials);
    let meta = agent_metadata(report.machine_id, delivery);
    let outcome = app_fleet::condition(&exec, delivery.event_id, &meta, &changed).await;
    delivered(state, delivery, outcome).await
}

/// Records a benchmark run under the agent's event id (the run id).
async fn benchmark_run(
    state: &AppState,
    delivery: &Delivery,
    machine_id: Uuid,
    i: usize,
    report: &gpunex_wire::benchmarks::BenchmarkRunReport,
) -> Result<(u64, &'static str), ApiError> {
    let field = format!("/events/{i}/body");
    let (gpu, submitted) =
        crate::benchmarks::check_report(state, machine_id, &field, report, delivery.event_id)?;
    let exec = Executor::new(&state.store, &state.credentials);
    let meta = agent_metadata(machine_id, delivery);
    let outcome =
        gpunex_app::benchmarks::record_run(&exec, delivery.event_id, &meta, &gpu, &submitted)
            .await?;
    benchmark_delivered(state, delivery, &field, "benchmark run", outcome).await
}

/// Records that the agent skips a GPU's suite, under the agent's event id.
async fn benchmark_skipped(
    state: &AppState,
    delivery: &Delivery,
    machine_id: Uuid,
    i: usize,
    report: &gpunex_wire::benchmarks::BenchmarkSkippedReport,
) -> Result<(u64, &'static str), ApiError> {
    let field = format!("/events/{i}/body");
    let gpu = crate::benchmarks::check_skipped(state, machine_id, &field, report)?;
    let exec = Executor::new(&state.store, &state.credentials);
    let meta = agent_metadata(machine_id, delivery);
    let outcome = gpunex_app::benchmarks::record_skipped(
        &exec,
        delivery.event_id,
        &meta,
        &gpu,
        &report.reason,
    )
    .await?;
    benchmark_delivered(state, delivery, &field, "benchmark skipped", outcome).await
}

/// A benchmark command's answer as a delivery's result.
async fn benchmark_delivered(
    state: &AppState,
    delivery: &Delivery,
    field: &str,
    retry: &'static str,
    outcome: Result<gpunex_app::command::Done, Rejection<BenchmarkRejection>>,
) -> Result<(u64, &'static str), ApiError> {
    let outcome = match outcome {
        Ok(done) => match done {
            gpunex_app::command::Done::Committed(committed) => Ok(Recorded {
                position: committed.last_position(),
                replayed: committed.replayed,
            }),
            gpunex_app::command::Done::Nothing => Err(Rejection::Contended { retry, attempts: 1 }),
        },
        Err(Rejection::Rule(error)) => {
            return Err(crate::benchmarks::rejection(field, error));
        }
        Err(Rejection::Contended { retry, attempts }) => {
            Err(Rejection::Contended { retry, attempts })
        }
        Err(Rejection::IdTaken { event_id, reason }) => {
            Err(Rejection::IdTaken { event_id, reason })
        }
    };
    delivered(state, delivery, Ok(outcome)).await
}

/// `POST /v1/agent/heartbeat`: presence and one telemetry sample per GPU. The first heartbeat
/// after registration or after being offline records the machine online.
#[utoipa::path(
    post,
    path = "/v1/agent/heartbeat",
    operation_id = "fleet_heartbeat",
    tag = "fleet",
    summary = "presence and per-GPU telemetry",
    responses((status = 200, description = "presence and per-GPU telemetry", body = wf::HeartbeatAck)),
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Json(beat): Json<wf::Heartbeat>,
) -> Result<Json<wf::HeartbeatAck>, ApiError> {
    let (provider_id, machine_id) = agent_of(&state, &caller)?;
    if beat.machine_id != machine_id {
        return Err(not_owned(beat.machine_id));
    }
    let machine = state
        .credentials
        .with_fleet(|f| f.machine(&machine_id).cloned())
        .ok_or_else(|| ApiError::Refused {
            code: ErrorCode::MachineNotRegistered,
            detail: "register the machine (gpunex-agent register) before sending heartbeats"
                .to_owned(),
        })?;
    let registered: Vec<_> = machine.gpus.iter().map(|g| g.gpu.clone()).collect();
    fleet::validate_samples(&beat.gpus, &registered).map_err(|e| report_invalid("", e))?;
    let at = state.clock.now();
    state
        .store
        .record_heartbeat(machine_id, provider_id, at.unix_micros(), &beat.gpus)
        .await?;
    let mut online = machine.online;
    if !machine.online {
        let exec = Executor::new(&state.store, &state.credentials);
        let (now_online, position) = app_fleet::heartbeat_online(&exec, machine_id).await?;
        if let Some(position) = position {
            // Read-your-writes for the listings too: once the agent hears "online", its GPUs'
            // listing status no longer says offline.
            state.listings.wait_for(position).await;
        }
        online = now_online;
    }
    Ok(Json(wf::HeartbeatAck {
        status: if online { "online" } else { "offline" }.to_owned(),
        received_at: timestamp(at.unix_micros()),
        heartbeat_interval_seconds: seconds(state.fleet.heartbeat_interval),
        offline_after_seconds: seconds(state.fleet.offline_grace),
    }))
}

fn telemetry_view(row: &TelemetryRow) -> wf::Telemetry {
    let s = &row.sample;
    wf::Telemetry {
        at: timestamp(row.at_us),
        utilization_pct: s.utilization_pct,
        memory_used_mib: s.memory_used_mib,
        temperature_c: s.temperature_c,
        power_draw_mw: s.power_draw_mw,
        sm_clock_mhz: s.sm_clock_mhz,
        clock_event_reasons: s.clock_event_reasons.map(fleet::clock_events::names),
        ecc_corrected: s.ecc_corrected,
        ecc_uncorrected: s.ecc_uncorrected,
    }
}

/// What the views need besides the registry: presence and latest telemetry.
struct Observed {
    presences: HashMap<Uuid, Presence>,
    latest: HashMap<String, TelemetryRow>,
    outages: Vec<Span>,
    now: Timestamp,
}

async fn observe(state: &AppState, machines: Option<&[Uuid]>) -> Result<Observed, ApiError> {
    let presences = state
        .store
        .presences(machines)
        .await?
        .into_iter()
        .map(|p| (p.machine_id, p))
        .collect();
    let latest = state
        .store
        .latest_telemetry(machines)
        .await?
        .into_iter()
        .map(|row| (row.sample.gpu_uuid.clone(), row))
        .collect();
    Ok(Observed {
        presences,
        latest,
        outages: state.credentials.with_fleet(|f| f.outages().to_vec()),
        now: state.clock.now(),
    })
}

fn machine_view(machine: &MachineState, observed: &Observed) -> wf::MachineView {
    let status = if machine.online { "online" } else { "offline" };
    let window = |days: i64| Span {
        from: Timestamp::from_unix_micros(observed.now.unix_micros() - days * MICROS_PER_DAY),
        until: observed.now,
    };
    let downtime = |days| {
        machine.downtime_micros(&observed.outages, window(days), observed.now) / MICROS_PER_SECOND
    };
    wf::MachineView {
        machine_id: machine.machine_id,
        provider_id: machine.provider_id,
        status: status.to_owned(),
        since: machine.since.map(|t| timestamp(t.unix_micros())),
        last_seen: observed
            .presences
            .get(&machine.machine_id)
            .map(|p| timestamp(p.last_heartbeat_us)),
        registered_at: timestamp(machine.registered_at.unix_micros()),
        simulated: machine.simulated,
        agent_version: machine.agent_version.clone(),
        host: machine.host.clone(),
        gpus: machine
            .gpus
            .iter()
            .map(|g| wf::GpuView {
                gpu_uuid: g.gpu.gpu_uuid.clone(),
                index: g.gpu.index,
                name: g.gpu.name.clone(),
                model_id: g.model_id.clone(),
                model_match: g.model_match,
                vram_mib: g.gpu.vram_mib,
                vram_below_model: g.vram_below_model,
                driver_version: g.gpu.driver_version.clone(),
                cuda_driver_version: g.gpu.cuda_driver_version.clone(),
                pcie_current: g.gpu.pcie_current,
                pcie_max: g.gpu.pcie_max,
                power_limit_w: g.gpu.power_limit_w,
                default_power_limit_w: g.gpu.default_power_limit_w,
                power_limit_lowered: g.power_limit_lowered,
                ecc_enabled: g.gpu.ecc_enabled,
                mig_enabled: g.gpu.mig_enabled,
                // A GPU NVML no longer answers for is `lost` while its machine is online.
                status: match machine.conditions.get(&g.gpu.gpu_uuid) {
                    Some(active)
                        if machine.online && active.contains_key(&fleet::GpuCondition::Lost) =>
                    {
                        "lost".to_owned()
                    }
                    _ => status.to_owned(),
                },
                conditions: machine
                    .conditions
                    .get(&g.gpu.gpu_uuid)
                    .map(|c| c.keys().copied().collect())
                    .unwrap_or_default(),
                telemetry: observed
                    .latest
                    .get(&g.gpu.gpu_uuid)
                    .filter(|row| row.machine_id == machine.machine_id)
                    .map(telemetry_view),
            })
            .collect(),
        downtime_seconds_24h: downtime(1),
        downtime_seconds_30d: downtime(30),
    }
}

/// Admins and finance see every machine; a provider its own; an agent only its machine, and
/// only while that machine belongs to the agent's provider (a token's binding names a machine
/// id, which is not proof of owning the machine registered under it).
fn may_see(caller: &Caller, machine: &MachineState) -> bool {
    match caller.role {
        Role::Admin | Role::Finance => true,
        Role::Provider { provider_id } => provider_id == machine.provider_id,
        Role::Agent {
            provider_id,
            machine_id,
        } => machine_id == machine.machine_id && provider_id == machine.provider_id,
        Role::Treasury | Role::Renter { .. } | Role::User { .. } => false,
    }
}

/// `GET /v1/providers/{provider_id}/machines`: the provider dashboard.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/machines",
    operation_id = "fleet_provider_machines",
    tag = "fleet",
    summary = "the provider dashboard: machines, GPUs, status, telemetry, declared vs detected",
    responses((status = 200, description = "the provider dashboard", body = wf::ProviderFleet)),
)]
pub async fn provider_machines(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wf::ProviderFleet>, ApiError> {
    caller.for_provider(provider_id)?;
    let machines: Vec<MachineState> = state
        .credentials
        .with_fleet(|f| f.machines_of(&provider_id).into_iter().cloned().collect());
    let ids: Vec<Uuid> = machines.iter().map(|m| m.machine_id).collect();
    let observed = observe(&state, Some(&ids)).await?;
    let declaration = state.credentials.with_fleet(|f| {
        f.comparison(&provider_id).map(|c| wf::DeclarationView {
            application_id: c.application_id,
            declared: c.declared.clone(),
            detected: c.detected.clone(),
            discrepancies: c.discrepancies.clone(),
        })
    });
    Ok(Json(wf::ProviderFleet {
        provider_id,
        machines: machines
            .iter()
            .map(|m| machine_view(m, &observed))
            .collect(),
        declaration,
    }))
}

async fn one_machine(
    state: &AppState,
    caller: &Caller,
    machine_id: Uuid,
) -> Result<wf::MachineView, ApiError> {
    let machine = state
        .credentials
        .with_fleet(|f| f.machine(&machine_id).cloned())
        .filter(|m| may_see(caller, m))
        .ok_or(ApiError::NotFound("machine"))?;
    let observed = observe(state, Some(&[machine_id])).await?;
    Ok(machine_view(&machine, &observed))
}

/// `GET /v1/machines/{machine_id}`
#[utoipa::path(
    get,
    path = "/v1/machines/{machine_id}",
    operation_id = "fleet_machine",
    tag = "fleet",
    summary = "one machine with its GPUs and latest telemetry",
    responses((status = 200, description = "one machine with its GPUs and latest telemetry", body = wf::MachineView)),
)]
pub async fn machine(
    State(state): State<AppState>,
    caller: Caller,
    Path(machine_id): Path<Uuid>,
) -> Result<Json<wf::MachineView>, ApiError> {
    Ok(Json(one_machine(&state, &caller, machine_id).await?))
}

/// `GET /v1/agent/identity`: the provider and machine this agent token is bound to.
#[utoipa::path(
    get,
    path = "/v1/agent/identity",
    operation_id = "fleet_agent_identity",
    tag = "fleet",
    summary = "the provider and machine this agent token is bound to",
    responses((status = 200, description = "the provider and machine this agent token is bound to", body = wf::AgentIdentity)),
)]
pub async fn agent_identity(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<wf::AgentIdentity>, ApiError> {
    let (provider_id, machine_id) = agent_of(&state, &caller)?;
    Ok(Json(wf::AgentIdentity {
        token_id: caller.token_id,
        provider_id,
        machine_id,
    }))
}

/// `GET /v1/agent/machine`: the agent's own machine as the platform sees it.
#[utoipa::path(
    get,
    path = "/v1/agent/machine",
    operation_id = "fleet_agent_machine",
    tag = "fleet",
    summary = "the agent's machine as the platform sees it",
    responses((status = 200, description = "the agent's machine as the platform sees it", body = wf::MachineView)),
)]
pub async fn agent_machine(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<wf::MachineView>, ApiError> {
    let (_, machine_id) = agent_of(&state, &caller)?;
    Ok(Json(one_machine(&state, &caller, machine_id).await?))
}

/// Largest telemetry page.
pub const TELEMETRY_PAGE_MAX: u32 = 5_000;

/// `GET /v1/machines/{machine_id}/gpus/{gpu_uuid}/telemetry?from=&until=&limit=`
#[utoipa::path(
    get,
    path = "/v1/machines/{machine_id}/gpus/{gpu_uuid}/telemetry",
    operation_id = "fleet_telemetry",
    tag = "fleet",
    summary = "one GPU's telemetry samples in a time range",
    params(
        ("from" = Option<String>, Query, description = "RFC 3339 start (default an hour ago)"),
        ("until" = Option<String>, Query, description = "RFC 3339 end (default now)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 5000, description = "samples, 1 to 5,000"),
    ),
    responses((status = 200, description = "one GPU's telemetry samples in a time range", body = wf::TelemetrySeries)),
)]
pub async fn telemetry(
    State(state): State<AppState>,
    caller: Caller,
    Path((machine_id, gpu_uuid)): Path<(Uuid, String)>,
    Query(query): Query,
) -> Result<Json<wf::TelemetrySeries>, ApiError> {
    let machine = state
        .credentials
        .with_fleet(|f| f.machine(&machine_id).cloned())
        .filter(|m| may_see(&caller, m))
        .ok_or(ApiError::NotFound("machine"))?;
    if !machine.gpus.iter().any(|g| g.gpu.gpu_uuid == gpu_uuid) {
        return Err(ApiError::NotFound("gpu"));
    }
    let at = state.clock.now();
    let from = match query.get("from") {
        Some(text) => parse_time_in(crate::error::Location::Query, "from", text)?,
        None => Timestamp::from_unix_micros(at.unix_micros() - 3_600 * MICROS_PER_SECOND),
    };
    let until = match query.get("until") {
        Some(text) => parse_time_in(crate::error::Location::Query, "until", text)?,
        None => Timestamp::from_unix_micros(at.unix_micros() + MICROS_PER_SECOND),
    };
    if until <= from {
        return Err(ApiError::query(
            "until",
            ErrorCode::InvalidRange,
            "must be after `from`",
        ));
    }
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=TELEMETRY_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::OutOfRange,
                    format!("1 to {TELEMETRY_PAGE_MAX}"),
                )
            })?,
        None => 1_000,
    };
    let rows = state
        .store
        .telemetry_series(&gpu_uuid, from.unix_micros(), until.unix_micros(), limit)
        .await?;
    let next_from = (rows.len() == limit as usize)
        .then(|| rows.last().map(|r| timestamp(r.at_us + 1)))
        .flatten();
    Ok(Json(wf::TelemetrySeries {
        gpu_uuid,
        samples: rows.iter().map(telemetry_view).collect(),
        next_from,
    }))
}

/// `GET /v1/fleet?status=&provider_id=&model=&simulated=&condition=&after=&limit=`: every
/// machine for operators, filtered, in machine id order.
#[utoipa::path(
    get,
    path = "/v1/fleet",
    operation_id = "fleet_fleet_view",
    tag = "fleet",
    summary = "every machine, filtered by status, provider, model, simulated, condition",
    params(
        ("status" = Option<String>, Query, pattern = "^(online|offline)$", description = "`online` or `offline`"),
        ("provider_id" = Option<uuid::Uuid>, Query, description = "one provider"),
        ("model" = Option<String>, Query, description = "a catalog model id"),
        ("simulated" = Option<bool>, Query, description = "simulated machines only, or none"),
        ("condition" = Option<String>, Query, pattern = "^(hw_slowdown|thermal|power_brake|ecc_uncorrected|lost)$", description = "machines with a GPU in this condition"),
        ("after" = Option<uuid::Uuid>, Query, description = "a machine id: the page starts after it"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 500, description = "1 to 500"),
    ),
    responses((status = 200, description = "every machine, filtered by status, provider, model, simulated, condition", body = wf::FleetPage)),
)]
pub async fn fleet_view(
    State(state): State<AppState>,
    _caller: Caller,
    Query(query): Query,
) -> Result<Json<wf::FleetPage>, ApiError> {
    let mut errors = Vec::new();
    let mut bad = |field: &str, message: &str| {
        errors.push(crate::error::field_error(
            crate::error::Location::Query,
            field,
            ErrorCode::InvalidFilter,
            message,
        ));
    };
    let status = query.get("status").map(String::as_str);
    if status.is_some_and(|s| s != "online" && s != "offline") {
        bad("status", "online or offline");
    }
    let provider = match query.get("provider_id").map(|t| Uuid::try_parse(t)) {
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            bad("provider_id", "a provider id (UUID)");
            None
        }
        None => None,
    };
    let simulated = match query.get("simulated").map(String::as_str) {
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => {
            bad("simulated", "true or false");
            None
        }
        None => None,
    };
    let condition: Option<fleet::GpuCondition> = match query.get("condition") {
        Some(text) => match serde_json::from_value(serde_json::Value::String(text.clone())) {
            Ok(c) => Some(c),
            Err(_) => {
                bad(
                    "condition",
                    "hw_slowdown, thermal, power_brake, ecc_uncorrected or lost",
                );
                None
            }
        },
        None => None,
    };
    let after = match query.get("after").map(|t| Uuid::try_parse(t)) {
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            bad("after", "a machine id (UUID) from next_after");
            None
        }
        None => None,
    };
    let limit = match query.get("limit").map(|t| t.parse::<usize>()) {
        Some(Ok(n)) if (1..=500).contains(&n) => n,
        Some(_) => {
            bad("limit", "1 to 500");
            100
        }
        None => 100,
    };
    let model = query.get("model").cloned();
    if !errors.is_empty() {
        return Err(ApiError::InvalidRequest(errors));
    }
    let mut matching: Vec<MachineState> = state.credentials.with_fleet(|f| {
        f.machines()
            .into_iter()
            .filter(|m| status.is_none_or(|s| (s == "online") == m.online))
            .filter(|m| provider.is_none_or(|p| p == m.provider_id))
            .filter(|m| simulated.is_none_or(|s| s == m.simulated))
            .filter(|m| {
                model.as_deref().is_none_or(|wanted| {
                    m.gpus.iter().any(|g| g.model_id.as_deref() == Some(wanted))
                })
            })
            .filter(|m| {
                condition
                    .is_none_or(|c| m.conditions.values().any(|active| active.contains_key(&c)))
            })
            .cloned()
            .collect()
    });
    matching.sort_by_key(|m| m.machine_id);
    let matching_machines = matching.len() as u64;
    let matching_gpus = matching.iter().map(|m| m.gpus.len() as u64).sum();
    let page: Vec<MachineState> = matching
        .into_iter()
        .filter(|m| after.is_none_or(|a| m.machine_id > a))
        .take(limit + 1)
        .collect();
    let next_after = (page.len() > limit).then(|| page[limit - 1].machine_id);
    let page = &page[..page.len().min(limit)];
    let ids: Vec<Uuid> = page.iter().map(|m| m.machine_id).collect();
    let observed = observe(&state, Some(&ids)).await?;
    Ok(Json(wf::FleetPage {
        machines: page.iter().map(|m| machine_view(m, &observed)).collect(),
        matching_machines,
        matching_gpus,
        next_after,
    }))
}
