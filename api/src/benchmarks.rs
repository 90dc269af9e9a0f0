//! Benchmarks over HTTP (issue 18): a GPU's runs, score and verdict ("Pruebas de rendimiento"),
//! re-tests asked for by its provider or an admin, an admin's override, and resuming automatic
//! delisting after a fleet-wide anomaly. Runs arrive as agent events (`crate::fleet`).

use axum::extract::State;
use gpunex_app::benchmarks as app_benchmarks;
use gpunex_app::command::Executor;
use gpunex_domain::benchmark_log::{BenchedGpu, BenchmarkRejection, Submitted};
use gpunex_domain::codes::ErrorCode;
use gpunex_projections::benchmarks::{GpuBenchmarks, RunSummary};
use gpunex_store::Metadata;
use gpunex_wire::benchmarks as wb;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::{parse_time, timestamp};
use crate::error::ApiError;
use crate::json::Json;
use crate::params::Path;
use crate::state::AppState;

/// A refusal of the benchmark rules, naming the field where there is one.
pub(crate) fn rejection(prefix: &str, error: BenchmarkRejection) -> ApiError {
    match &error {
        BenchmarkRejection::Invalid { field, reason } => {
            ApiError::body(&format!("{prefix}/{field}"), error.code(), reason.clone())
        }
        BenchmarkRejection::UnsupportedMethod(_) => ApiError::body(
            &format!("{prefix}/run/method_version"),
            error.code(),
            error.to_string(),
        ),
        BenchmarkRejection::SimulationMismatch => ApiError::body(
            &format!("{prefix}/simulated_profile"),
            error.code(),
            error.to_string(),
        ),
        BenchmarkRejection::RetestTooSoon { .. } => ApiError::Refused {
            code: error.code(),
            detail: error.to_string(),
        },
        BenchmarkRejection::NotBenchmarkable
        | BenchmarkRejection::RetestPending
        | BenchmarkRejection::NothingToOverride
        | BenchmarkRejection::NoOverride
        | BenchmarkRejection::NotPaused => ApiError::Refused {
            code: error.code(),
            detail: error.to_string(),
        },
    }
}

/// The GPU an agent reports on, which must be on its own machine.
fn machine_gpu(
    state: &AppState,
    machine_id: Uuid,
    field: &str,
    gpu_uuid: &str,
) -> Result<BenchedGpu, ApiError> {
    app_benchmarks::benched_gpu(&state.credentials, machine_id, gpu_uuid).ok_or_else(|| {
        ApiError::body(
            &format!("{field}/gpu_uuid"),
            ErrorCode::UnknownGpu,
            "not a GPU registered on this machine",
        )
    })
}

/// Checks an agent's benchmark report as the write will decide it (the request is refused as
/// one, before anything is written): the GPU is on the agent's machine and the run passes the
/// domain's checks. Answers what the write needs.
pub(crate) fn check_report(
    state: &AppState,
    machine_id: Uuid,
    field: &str,
    report: &wb::BenchmarkRunReport,
    run_id: Uuid,
) -> Result<(BenchedGpu, Submitted), ApiError> {
    let gpu = machine_gpu(state, machine_id, field, &report.gpu_uuid)?;
    let submitted = Submitted {
        run_id,
        simulated_profile: report.simulated_profile.clone(),
        environment: report.environment.clone(),
        run: report.run.clone(),
        started_at: parse_time(&format!("{field}/started_at"), &report.started_at)?,
        finished_at: parse_time(&format!("{field}/finished_at"), &report.finished_at)?,
    };
    let now = state.clock.now();
    state
        .credentials
        .with_market(|m| {
            let benchmarks = m.benchmarks();
            gpunex_domain::benchmark_log::decide_record(
                &gpu,
                submitted.clone(),
                |model, metric| benchmarks.fleet_figure(model, metric),
                now,
            )
        })
        .map_err(|e| rejection(field, e))?;
    Ok((gpu, submitted))
}

/// Checks an agent's report that it skips a GPU's suite: the GPU is on the agent's machine and
/// the reason is a plain text of at most 500 characters. Answers what the write needs.
pub(crate) fn check_skipped(
    state: &AppState,
    machine_id: Uuid,
    field: &str,
    report: &wb::BenchmarkSkippedReport,
) -> Result<BenchedGpu, ApiError> {
    let gpu = machine_gpu(state, machine_id, field, &report.gpu_uuid)?;
    gpunex_domain::benchmark_log::decide_skipped(&gpu, &report.reason, state.clock.now())
        .map_err(|e| rejection(field, e))?;
    Ok(gpu)
}

fn percent(bp: u64) -> String {
    format!("{}.{:02}", bp / 100, bp % 100)
}

fn run_view(run: &RunSummary) -> wb::BenchmarkRunView {
    wb::BenchmarkRunView {
        run_id: run.run_id,
        recorded_at: timestamp(run.recorded_at.unix_micros()),
        started_at: timestamp(run.started_at.unix_micros()),
        finished_at: timestamp(run.finished_at.unix_micros()),
        driver_version: run.driver_version.clone(),
        simulated_profile: run.simulated_profile.clone(),
        score_bp: run.score_bp,
        score_pct: percent(run.score_bp),
        outcome: run.outcome,
    }
}

/// The tab's view of one GPU.
pub fn gpu_view(gpu: &GpuBenchmarks, paused: Option<String>) -> wb::GpuBenchmarksView {
    let latest = gpu.latest.as_ref().map(|latest| {
        let summary = gpu
            .runs
            .back()
            .filter(|r| r.run_id == latest.recorded.run_id)
            .map(run_view);
        wb::LatestBenchmarkView {
            run: summary.unwrap_or_else(|| wb::BenchmarkRunView {
                run_id: latest.recorded.run_id,
                recorded_at: timestamp(latest.recorded.recorded_at.unix_micros()),
                started_at: timestamp(latest.recorded.started_at.unix_micros()),
                finished_at: timestamp(latest.recorded.finished_at.unix_micros()),
                driver_version: latest.recorded.environment.driver_version.clone(),
                simulated_profile: latest.recorded.simulated_profile.clone(),
                score_bp: latest.score.score_bp,
                score_pct: percent(latest.score.score_bp),
                outcome: latest.verdict.outcome,
            }),
            figures: latest.recorded.run.figures.clone(),
            environment: latest.recorded.environment.clone(),
            health: latest.recorded.run.health.clone(),
            parts: latest.score.parts.clone(),
            verdict: latest.verdict.clone(),
        }
    });
    // The first runs, then the kept latest ones that are not among them.
    let mut runs: Vec<wb::BenchmarkRunView> = gpu.first_runs.iter().map(run_view).collect();
    runs.extend(
        gpu.runs
            .iter()
            .filter(|r| !gpu.first_runs.iter().any(|f| f.run_id == r.run_id))
            .map(run_view),
    );
    let consistency = gpu.consistency();
    let benchmark_listing = match (&gpu.latest, gpu.delisted.is_some(), &gpu.override_set) {
        (None, false, _) => "not_benchmarked",
        (_, true, Some(_)) => "overridden",
        (_, true, None) => "delisted",
        (Some(_), false, _) => "listed",
    };
    wb::GpuBenchmarksView {
        gpu_uuid: gpu.gpu_uuid.clone(),
        provider_id: gpu.provider_id,
        model_id: gpu.model_id.clone(),
        benchmark_listing: benchmark_listing.to_owned(),
        score_bp: gpu.score_bp(),
        score_pct: gpu.score_bp().map(percent),
        latest,
        runs,
        runs_total: gpu.runs_total,
        refused: gpu
            .refused
            .iter()
            .map(|r| wb::RefusedRunView {
                run_id: r.run_id,
                recorded_at: timestamp(r.recorded_at.unix_micros()),
                reason: r.reason.clone(),
            })
            .collect(),
        refused_total: gpu.refused_total,
        consistency: wb::BenchmarkConsistencyView {
            runs: consistency.runs,
            spread_bp: consistency.spread_bp,
            last_vs_first_bp: consistency.last_vs_first_bp,
        },
        last_action: gpu
            .last_action
            .as_ref()
            .map(|(delisted, acted)| wb::BenchmarkActionView {
                delisted: *delisted,
                run_id: acted.run_id,
                score_bp: acted.score_bp,
                at: timestamp(acted.at.unix_micros()),
            }),
        override_set: gpu
            .override_set
            .as_ref()
            .map(|o| wb::BenchmarkOverrideView {
                run_id: o.run_id,
                reason: o.reason.clone(),
                by: o.by.clone(),
                at: timestamp(o.at.unix_micros()),
            }),
        retest: gpu.retest.as_ref().map(|r| wb::RetestView {
            by_admin: r.by_admin,
            reason: r.reason.clone(),
            at: timestamp(r.at.unix_micros()),
        }),
        delisting_paused: paused,
        suite_skipped: gpu.skipped.as_ref().map(|s| wb::SuiteSkippedView {
            reason: s.reason.clone(),
            at: timestamp(s.at.unix_micros()),
        }),
    }
}

/// The GPU's view, or an empty one for a registered GPU with no benchmark event yet.
fn read_view(state: &AppState, gpu_uuid: &str) -> Result<wb::GpuBenchmarksView, ApiError> {
    let registered = state.credentials.with_fleet(|f| {
        f.machine_of_gpu(gpu_uuid).and_then(|m| {
            m.gpus
                .iter()
                .find(|g| g.gpu.gpu_uuid == gpu_uuid)
                .map(|g| (m.provider_id, m.machine_id, g.model_id.clone()))
        })
    });
    let (view, paused) = state.credentials.with_market(|m| {
        let benchmarks = m.benchmarks();
        (
            benchmarks.gpu(gpu_uuid).cloned(),
            benchmarks.paused().map(|p| p.evidence.clone()),
        )
    });
    match (view, registered) {
        (Some(mut gpu), registered) => {
            // A GPU whose first benchmark event is not a run (a re-test asked for, a skipped
            // suite) has its model from the fleet.
            if gpu.model_id.is_empty()
                && let Some((_, _, Some(model_id))) = registered
            {
                gpu.model_id = model_id;
            }
            Ok(gpu_view(&gpu, paused))
        }
        (None, Some((provider_id, machine_id, model_id))) => {
            let empty = GpuBenchmarks::new(
                gpu_uuid,
                provider_id,
                machine_id,
                model_id.as_deref().unwrap_or(""),
            );
            Ok(gpu_view(&empty, paused))
        }
        (None, None) => Err(ApiError::NotFound("gpu")),
    }
}

/// `GET /v1/gpus/{gpu_uuid}/benchmarks`
#[utoipa::path(
    get,
    path = "/v1/gpus/{gpu_uuid}/benchmarks",
    operation_id = "benchmarks_read",
    tag = "benchmarks",
    summary = "a GPU's benchmark runs, score, verdict and listing state",
    params(("gpu_uuid" = String, Path, description = "the GPU's NVML UUID")),
    responses((status = 200, description = "a GPU's benchmark runs, score, verdict and listing state", body = wb::GpuBenchmarksView)),
)]
pub async fn read(
    State(state): State<AppState>,
    Path(gpu_uuid): Path<String>,
) -> Result<Json<wb::GpuBenchmarksView>, ApiError> {
    read_view(&state, &gpu_uuid).map(Json)
}

/// The provider of a registered GPU; a provider may act only on its own.
fn provider_of(state: &AppState, caller: &Caller, gpu_uuid: &str) -> Result<Uuid, ApiError> {
    let provider_id = state
        .credentials
        .with_fleet(|f| f.machine_of_gpu(gpu_uuid).map(|m| m.provider_id))
        .ok_or(ApiError::NotFound("gpu"))?;
    caller.for_provider(provider_id)?;
    Ok(provider_id)
}

async fn answer(
    state: &AppState,
    gpu_uuid: &str,
    outcome: app_benchmarks::Outcome,
) -> Result<Json<wb::GpuBenchmarksView>, ApiError> {
    let done = outcome?.map_err(|refused| {
        crate::error::command_refused(
            refused,
            |e| rejection("", e),
            "the GPU's benchmarks changed while this request ran; try again",
        )
    })?;
    if let Some(position) = done.position() {
        state.listings.wait_for(position).await;
    }
    read_view(state, gpu_uuid).map(Json)
}

/// `POST /v1/gpus/{gpu_uuid}/benchmarks/retest`
#[utoipa::path(
    post,
    path = "/v1/gpus/{gpu_uuid}/benchmarks/retest",
    operation_id = "benchmarks_retest",
    tag = "benchmarks",
    summary = "ask for the benchmark suite to run again on a GPU (a provider once an hour per GPU)",
    params(("gpu_uuid" = String, Path, description = "the GPU's NVML UUID")),
    request_body = wb::RetestRequest,
    responses((status = 200, description = "the re-test is waiting for the agent", body = wb::GpuBenchmarksView)),
)]
pub async fn retest(
    State(state): State<AppState>,
    caller: Caller,
    Path(gpu_uuid): Path<String>,
    Json(request): Json<wb::RetestRequest>,
) -> Result<Json<wb::GpuBenchmarksView>, ApiError> {
    let provider_id = provider_of(&state, &caller, &gpu_uuid)?;
    let by_admin = matches!(caller.role, gpunex_domain::credentials::Role::Admin);
    let exec = Executor::new(&state.store, &state.credentials);
    let outcome = app_benchmarks::request_retest(
        &exec,
        &gpu_uuid,
        provider_id,
        by_admin,
        &request.reason,
        &Metadata::actor(caller.actor()),
    )
    .await;
    answer(&state, &gpu_uuid, outcome).await
}

/// `POST /v1/gpus/{gpu_uuid}/benchmarks/override`
#[utoipa::path(
    post,
    path = "/v1/gpus/{gpu_uuid}/benchmarks/override",
    operation_id = "benchmarks_override",
    tag = "benchmarks",
    summary = "keep a GPU listed whatever its latest verdict, or end that (admins)",
    params(("gpu_uuid" = String, Path, description = "the GPU's NVML UUID")),
    request_body = wb::BenchmarkOverrideRequest,
    responses((status = 200, description = "the GPU's benchmarks with the override", body = wb::GpuBenchmarksView)),
)]
pub async fn override_verdict(
    State(state): State<AppState>,
    caller: Caller,
    Path(gpu_uuid): Path<String>,
    Json(request): Json<wb::BenchmarkOverrideRequest>,
) -> Result<Json<wb::GpuBenchmarksView>, ApiError> {
    provider_of(&state, &caller, &gpu_uuid)?;
    let exec = Executor::new(&state.store, &state.credentials);
    let outcome = app_benchmarks::change_override(
        &exec,
        &gpu_uuid,
        request.keep_listed,
        &request.reason,
        &Metadata::actor(caller.actor()),
    )
    .await;
    answer(&state, &gpu_uuid, outcome).await
}

/// `GET /v1/admin/benchmarks/delisting`
#[utoipa::path(
    get,
    path = "/v1/admin/benchmarks/delisting",
    operation_id = "benchmarks_delisting_state",
    tag = "benchmarks",
    summary = "whether automatic delisting is paused, and why",
    responses((status = 200, description = "whether automatic delisting is paused, and why", body = wb::DelistingState)),
)]
pub async fn delisting_state(State(state): State<AppState>) -> Json<wb::DelistingState> {
    Json(delisting(&state))
}

fn delisting(state: &AppState) -> wb::DelistingState {
    let evidence = state
        .credentials
        .with_market(|m| m.benchmarks().paused().map(|p| p.evidence.clone()));
    wb::DelistingState {
        paused: evidence.is_some(),
        evidence,
    }
}

/// `POST /v1/admin/benchmarks/resume`
#[utoipa::path(
    post,
    path = "/v1/admin/benchmarks/resume",
    operation_id = "benchmarks_resume",
    tag = "benchmarks",
    summary = "resume automatic delisting after a fleet-wide anomaly paused it",
    request_body = wb::ResumeDelistingRequest,
    responses((status = 200, description = "automatic delisting resumed", body = wb::DelistingState)),
)]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wb::ResumeDelistingRequest>,
) -> Result<Json<wb::DelistingState>, ApiError> {
    let exec = Executor::new(&state.store, &state.credentials);
    let outcome =
        app_benchmarks::resume_delisting(&exec, &request.reason, &Metadata::actor(caller.actor()))
            .await?;
    let done = outcome.map_err(|refused| {
        crate::error::command_refused(
            refused,
            |e| rejection("", e),
            "automatic delisting changed while this request ran; try again",
        )
    })?;
    if let Some(position) = done.position() {
        state.credentials.wait_for(position).await?;
    }
    Ok(Json(delisting(&state)))
}

/// The most one speed-test download sends.
pub const SPEEDTEST_BYTES_MAX: u64 = 64 << 20;
/// What a download sends when `bytes` is not given.
pub const SPEEDTEST_BYTES_DEFAULT: u64 = 8 << 20;

/// `GET /v1/agent/speedtest?bytes=N`: `N` bytes (zeros) for the benchmark suite's network
/// throughput, streamed from a shared 64 KiB buffer (a download costs the server no memory).
#[utoipa::path(
    get,
    path = "/v1/agent/speedtest",
    operation_id = "benchmarks_speedtest",
    tag = "benchmarks",
    summary = "bytes to download for the benchmark suite's network throughput (agents)",
    params(("bytes" = Option<u64>, Query, minimum = 1, maximum = 67108864, description = "how many bytes (default 8 MiB, at most 64 MiB)")),
    responses((status = 200, description = "the bytes asked for", content_type = "application/octet-stream", body = String)),
)]
pub async fn speedtest(
    caller: Caller,
    crate::params::Query(query): crate::params::Query,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    // Only agents (the route's roles); the caller is named so the guard's check is explicit.
    let _ = caller;
    if let Some(key) = query.keys().find(|k| k.as_str() != "bytes") {
        return Err(ApiError::query(
            key,
            ErrorCode::UnknownParameter,
            "known: bytes",
        ));
    }
    let bytes = match query.get("bytes") {
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=SPEEDTEST_BYTES_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "bytes",
                    ErrorCode::OutOfRange,
                    format!("a whole number from 1 to {SPEEDTEST_BYTES_MAX}"),
                )
            })?,
        None => SPEEDTEST_BYTES_DEFAULT,
    };
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let chunks = bytes.div_ceil(ZEROS.len() as u64);
    let last = bytes - (chunks - 1) * ZEROS.len() as u64;
    let stream = futures_util::stream::iter((0..chunks).map(move |i| {
        let len = if i + 1 == chunks {
            usize::try_from(last).unwrap_or(ZEROS.len())
        } else {
            ZEROS.len()
        };
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from_static(&ZEROS[..len]))
    }));
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/octet-stream".to_owned(),
            ),
            (axum::http::header::CONTENT_LENGTH, bytes.to_string()),
            (axum::http::header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}
