//! The route list and the router built from it, `serve` with its background tasks, and the
//! handlers of the ledger, OpenAPI and metrics endpoints. Every other module sits below this one.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::params::{Path, Query};
use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::json::Json;
use gpunex_domain::{Account, Side};
use gpunex_store::{RecordedEvent, Store};
use gpunex_wire as wire;

use crate::auth::Caller;
pub use crate::convert::timestamp;
use crate::error::ApiError;
pub use crate::state::AppState;

/// Default and largest page of events or journal lines.
pub const PAGE_ITEMS_DEFAULT: u64 = 100;
pub const PAGE_ITEMS_MAX: u64 = 1_000;

/// Every route, with what it does and who may call it: the router and `/v1/openapi.json` are
/// both built from this one list, so no route can exist undocumented.
pub fn endpoints() -> crate::routes::Routes {
    use crate::routes::{
        ADMIN, ADMIN_FINANCE, ADMIN_PROVIDER, ADMIN_RENTER, ADMIN_TREASURY, ADMIN_USER, AGENT,
        FLEET_READERS, PAYOUT_READERS, PAYOUT_VIEWERS, PROVIDER_DASHBOARD, PUBLIC, RENTAL_LISTERS,
        RENTAL_READERS, RENTER, TOKEN_HOLDERS, USER,
    };
    use crate::{
        accounts as acc, applications as app, earnings, fleet, market, rentals, tokens as tok,
    };
    use utoipa_axum::routes;
    crate::routes::Routes::default()
        .add(PUBLIC, routes!(healthz))
        .add(PUBLIC, routes!(readyz))
        .add(PUBLIC, routes!(crate::docs::errors))
        .add(PUBLIC, routes!(openapi))
        .add_loopback(ADMIN, routes!(metrics_endpoint))
        .add(ADMIN, routes!(list_events))
        .add(ADMIN_FINANCE, routes!(projections))
        .add(ADMIN_FINANCE, routes!(balances))
        .add(ADMIN_FINANCE, routes!(account_lines))
        .add(ADMIN_TREASURY, routes!(crate::adjustments::propose))
        .add(PAYOUT_READERS, routes!(crate::adjustments::list))
        .add(PAYOUT_READERS, routes!(crate::adjustments::read))
        .add(ADMIN_TREASURY, routes!(crate::adjustments::approve))
        .add(ADMIN_TREASURY, routes!(crate::adjustments::reject))
        .add(PUBLIC, routes!(crate::catalog::list))
        .add(ADMIN, routes!(crate::catalog::add))
        .add(PUBLIC, routes!(acc::sign_up))
        .add(PUBLIC, routes!(acc::sign_in))
        .add(PUBLIC, routes!(acc::sign_in_browser))
        .add(USER, routes!(acc::current_session))
        .add(USER, routes!(acc::sign_out))
        .add(USER, routes!(acc::me))
        .add(USER, routes!(app::submit))
        .add(ADMIN_USER, routes!(app::list))
        .add(ADMIN_USER, routes!(app::read))
        .add(USER, routes!(app::withdraw))
        .add(USER, routes!(app::answer))
        .add(ADMIN, routes!(app::request_information))
        .add(ADMIN, routes!(app::approve))
        .add(ADMIN, routes!(app::reject))
        .add(USER, routes!(app::claim_provider_token))
        .add(TOKEN_HOLDERS, routes!(tok::list))
        .add(TOKEN_HOLDERS, routes!(tok::issue))
        .add(TOKEN_HOLDERS, routes!(tok::rotate))
        .add(TOKEN_HOLDERS, routes!(tok::revoke))
        .add(AGENT, routes!(fleet::agent_events))
        .add(AGENT, routes!(fleet::heartbeat))
        .add(PROVIDER_DASHBOARD, routes!(earnings::summary))
        .add(PROVIDER_DASHBOARD, routes!(earnings::daily))
        .add(PROVIDER_DASHBOARD, routes!(earnings::statement))
        .add(PROVIDER_DASHBOARD, routes!(crate::payouts::read))
        .add(ADMIN_PROVIDER, routes!(crate::payouts::set))
        .add(PAYOUT_VIEWERS, routes!(crate::payouts::history))
        .add(ADMIN_TREASURY, routes!(crate::payouts::create_batch))
        .add(PAYOUT_READERS, routes!(crate::payouts::list_batches))
        .add(PAYOUT_READERS, routes!(crate::payouts::read_batch))
        .add(ADMIN_TREASURY, routes!(crate::payouts::create_bank_files))
        .add(PAYOUT_READERS, routes!(crate::payouts::bank_file))
        .add(
            ADMIN_TREASURY,
            routes!(crate::payouts::import_status_report),
        )
        .add(PAYOUT_VIEWERS, routes!(crate::payouts::read_payout))
        .add(PAYOUT_VIEWERS, routes!(crate::payouts::proof))
        .add(ADMIN_TREASURY, routes!(crate::payouts::confirm))
        .add(ADMIN_TREASURY, routes!(crate::payouts::return_payout))
        .add(PUBLIC, routes!(crate::pricing::recommendations))
        .add(ADMIN_FINANCE, routes!(crate::reconcile::endpoint))
        .add(ADMIN_FINANCE, routes!(earnings::finance))
        .add(AGENT, routes!(rentals::assignments))
        .add(AGENT, routes!(rentals::append_log))
        .add(AGENT, routes!(fleet::agent_identity))
        .add(AGENT, routes!(fleet::agent_machine))
        .add(PROVIDER_DASHBOARD, routes!(fleet::provider_machines))
        .add(FLEET_READERS, routes!(fleet::machine))
        .add(FLEET_READERS, routes!(fleet::telemetry))
        .add(ADMIN_PROVIDER, routes!(market::set_price))
        .add(ADMIN_PROVIDER, routes!(market::prices))
        .add(ADMIN_PROVIDER, routes!(market::set_availability))
        .add(ADMIN_PROVIDER, routes!(market::availability))
        .add(ADMIN_PROVIDER, routes!(market::announce_maintenance))
        .add(ADMIN_PROVIDER, routes!(market::maintenance))
        .add(ADMIN_PROVIDER, routes!(market::cancel_maintenance))
        .add(PROVIDER_DASHBOARD, routes!(market::provider_listings))
        .add(ADMIN, routes!(market::delist))
        .add(ADMIN, routes!(market::relist))
        .add(PUBLIC, routes!(market::search))
        .add(PUBLIC, routes!(market::listing))
        .add(RENTER, routes!(rentals::rent))
        .add(RENTAL_LISTERS, routes!(rentals::list))
        .add(RENTAL_READERS, routes!(rentals::read))
        .add(ADMIN_RENTER, routes!(rentals::end))
        .add(ADMIN_RENTER, routes!(rentals::logs))
        .add(ADMIN_FINANCE, routes!(fleet::fleet_view))
        .add(PUBLIC, routes!(crate::benchmarks::read))
        .add(ADMIN_PROVIDER, routes!(crate::benchmarks::retest))
        .add(ADMIN, routes!(crate::benchmarks::override_verdict))
        .add(ADMIN, routes!(crate::benchmarks::delisting_state))
        .add(ADMIN, routes!(crate::benchmarks::resume))
        .add(AGENT, routes!(crate::benchmarks::speedtest))
}

/// `GET /agent/install.sh`: the agent installer for this platform (`crate::installer`).
async fn agent_installer(State(state): State<AppState>) -> axum::response::Response {
    state.installer.response()
}

pub fn router(state: AppState) -> Router {
    let metrics = state.metrics.clone();
    endpoints()
        .into_router(&state)
        .merge(crate::console::router())
        .route("/agent/install.sh", axum::routing::get(agent_installer))
        .fallback(|| async { ApiError::NoRoute })
        .with_state(state)
        .layer(axum::middleware::from_fn(crate::error::problem_bodies))
        // Outermost, so it counts the status that is sent; `Router::layer` runs after routing,
        // so the matched route template is known.
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            crate::metrics::record,
        ))
}

#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "operations",
    summary = "the process is up",
    responses((status = 200, description = "the process is up", body = wire::Health)),
)]
async fn healthz() -> Json<wire::Health> {
    Json(wire::Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "operations",
    summary = "the database answers; projection lag",
    responses((status = 200, description = "the database answers; each projection's lag", body = wire::Readiness)),
)]
async fn readyz(State(state): State<AppState>) -> Response {
    if !state.credentials.is_healthy() {
        return ApiError::CredentialsUnavailable.into_response();
    }
    match readiness(&state.store).await {
        Ok(ready) => Json(ready).into_response(),
        Err(error) => {
            tracing::warn!(%error, "not ready");
            ApiError::Unavailable(error).into_response()
        }
    }
}

async fn readiness(store: &Store) -> Result<wire::Readiness, gpunex_store::StoreError> {
    let statuses = store.projection_status().await?;
    Ok(wire::Readiness {
        status: "ready".to_owned(),
        database: format!("{:?}", store.backend()).to_lowercase(),
        head_position: statuses
            .first()
            .map_or(store.head_position().await?, |s| s.head),
        projections: statuses.iter().map(projection_status).collect(),
    })
}

fn projection_status(status: &gpunex_store::ProjectionStatus) -> wire::ProjectionStatus {
    wire::ProjectionStatus {
        projection: status.projection.to_owned(),
        checkpoint: status.checkpoint,
        lag_events: status.lag(),
    }
}

#[utoipa::path(
    get,
    path = "/v1/projections",
    operation_id = "projections",
    tag = "operations",
    summary = "each read model's checkpoint and lag",
    responses((status = 200, description = "each read model's checkpoint and lag", body = Vec<wire::ProjectionStatus>)),
)]
async fn projections(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<Vec<wire::ProjectionStatus>>, ApiError> {
    let statuses = state.store.projection_status().await?;
    Ok(Json(statuses.iter().map(projection_status).collect()))
}

/// `after` and `limit` query parameters, parsed at the edge with field-level errors.
struct Page {
    after: u64,
    limit: u64,
}

impl Page {
    fn parse(query: &HashMap<String, String>) -> Result<Page, ApiError> {
        let mut errors = Vec::new();
        let mut number = |name: &str, default: u64, max: u64, min: u64| -> u64 {
            let Some(text) = query.get(name) else {
                return default;
            };
            match text.parse::<u64>() {
                Ok(value) if (min..=max).contains(&value) => value,
                _ => {
                    errors.push(crate::error::field_error(
                        crate::error::Location::Query,
                        name,
                        ErrorCode::OutOfRange,
                        format!(
                            "must be a whole number from {min} to {max}, got `{}`",
                            truncate(text)
                        ),
                    ));
                    default
                }
            }
        };
        let after = number("after", 0, i64::MAX as u64, 0);
        let limit = number("limit", PAGE_ITEMS_DEFAULT, PAGE_ITEMS_MAX, 1);
        if errors.is_empty() {
            Ok(Page { after, limit })
        } else {
            Err(ApiError::InvalidRequest(errors))
        }
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(40).collect()
}

#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "operations",
    summary = "the event log, in position order, paged",
    params(
        ("after" = Option<u64>, Query, description = "a log position: the page starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "items per page, 1 to 1,000 (default 100)"),
    ),
    responses((status = 200, description = "the event log, in position order, paged", body = wire::EventsPage)),
)]
async fn list_events(
    State(state): State<AppState>,
    _caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::EventsPage>, ApiError> {
    let page = Page::parse(&query)?;
    let events = state
        .store
        .read_all(page.after, page.limit as usize)
        .await?;
    let next_after = events.last().map_or(page.after, |e| e.position);
    Ok(Json(wire::EventsPage {
        events: events.iter().map(event_to_wire).collect(),
        next_after,
    }))
}

pub fn event_to_wire(event: &RecordedEvent) -> wire::Event {
    wire::Event {
        position: event.position,
        event_id: event.event_id,
        stream_id: event.stream_id.clone(),
        stream_version: event.stream_version,
        event_type: event.event_type.clone(),
        schema_version: event.schema_version,
        recorded_at: timestamp(event.recorded_at_us),
        payload: serde_json::from_str(&event.payload).unwrap_or(serde_json::Value::Null),
        metadata: serde_json::from_str(&event.metadata).unwrap_or(serde_json::Value::Null),
        hash: hex_lower(&event.hash),
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[utoipa::path(
    get,
    path = "/v1/ledger/accounts",
    operation_id = "balances",
    tag = "operations",
    summary = "every account's balance, as of one position",
    params(
        ("after" = Option<String>, Query, description = "an account: the page starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "accounts per page, 1 to 1,000 (default 100)"),
    ),
    responses((status = 200, description = "every account's balance, as of one position", body = wire::AccountBalances)),
)]
async fn balances(
    State(state): State<AppState>,
    _caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::AccountBalances>, ApiError> {
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=PAGE_ITEMS_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::OutOfRange,
                    format!("1 to {PAGE_ITEMS_MAX}"),
                )
            })?,
        None => PAGE_ITEMS_DEFAULT,
    } as usize;
    let after: Option<Account> = match query.get("after") {
        Some(text) => Some(text.parse().map_err(
            |e: gpunex_domain::ledger::AccountParseError| {
                ApiError::query("after", ErrorCode::InvalidCursor, e.to_string())
            },
        )?),
        None => None,
    };
    let (as_of_position, balances) = state.store.balances_as_of().await?;
    let page: Vec<_> = balances
        .iter()
        .filter(|(account, _)| after.is_none_or(|after| **account > after))
        .take(limit + 1)
        .collect();
    let next_after = (page.len() > limit).then(|| page[limit - 1].0.to_string());
    let mut accounts = Vec::with_capacity(page.len().min(limit));
    for (account, totals) in page.into_iter().take(limit) {
        let balance = totals.balance(*account).map_err(|e| {
            ApiError::Internal(gpunex_store::StoreError::CorruptRow {
                position: totals.last_position,
                reason: e.to_string(),
            })
        })?;
        accounts.push(wire::AccountBalance {
            account: account.to_string(),
            debits_micro_usdc: totals.debits.micros(),
            credits_micro_usdc: totals.credits.micros(),
            balance_micro_usdc: balance.micros(),
            balance_usdc: balance.to_string(),
            last_position: totals.last_position,
        });
    }
    Ok(Json(wire::AccountBalances {
        accounts,
        as_of_position,
        next_after,
    }))
}

#[utoipa::path(
    get,
    path = "/v1/ledger/accounts/{account}/lines",
    operation_id = "account_lines",
    tag = "operations",
    summary = "an account's journal lines, each with its event",
    params(
        ("after" = Option<u64>, Query, description = "a log position: the page starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "items per page, 1 to 1,000 (default 100)"),
    ),
    responses((status = 200, description = "an account's journal lines, each with its event", body = wire::JournalPage)),
)]
async fn account_lines(
    State(state): State<AppState>,
    _caller: Caller,
    Path(account): Path<String>,
    Query(query): Query,
) -> Result<Json<wire::JournalPage>, ApiError> {
    let account: Account =
        account
            .parse()
            .map_err(|e: gpunex_domain::ledger::AccountParseError| {
                ApiError::path("account", ErrorCode::InvalidAccount, e.to_string())
            })?;
    let page = Page::parse(&query)?;
    let lines = state
        .store
        .journal_lines(Some(account), page.after, page.limit as usize)
        .await?;
    let next_after = lines.last().map_or(page.after, |l| l.position);
    Ok(Json(wire::JournalPage {
        lines: lines
            .iter()
            .map(|line| wire::JournalLine {
                position: line.position,
                line_index: line.line_index,
                event_id: line.event_id,
                entry_id: line.entry_id,
                account: line.account.to_string(),
                side: match line.side {
                    Side::Debit => "debit",
                    Side::Credit => "credit",
                }
                .to_owned(),
                amount_micro_usdc: line.amount.micros(),
                amount_usdc: line.amount.to_string(),
                recorded_at: timestamp(line.recorded_at_us),
            })
            .collect(),
        next_after,
    }))
}

/// What the server does about payouts.
#[derive(Debug)]
pub struct Payouts {
    pub config: crate::payout_run::PayoutConfig,
    /// Run each payout date's batch.
    pub scheduler: bool,
    /// Send Solana payouts.
    pub solana: Option<gpunex_app::payout_send::SolanaRail>,
}

/// How the HTTP side runs: its limits, and who reads `/metrics`.
#[derive(Debug, Clone)]
pub struct Http {
    pub limits: crate::http_server::ServerLimits,
    /// `GET /metrics` admits loopback requests without credentials.
    pub metrics_loopback: bool,
    /// The agent image `/agent/install.sh` installs (`None`: [`crate::installer::default_image`]).
    pub agent_image: Option<String>,
}

/// Serves the API until SIGTERM or Ctrl-C, with the projection runner in the background.
/// In-flight requests finish before the process exits.
pub async fn serve(
    store: Store,
    listen: std::net::SocketAddr,
    notifications: Option<gpunex_app::outbox::Transport>,
    fleet: crate::fleet::FleetConfig,
    payouts: Payouts,
    http: Http,
    public_url: Option<String>,
) -> anyhow::Result<()> {
    let Http {
        limits,
        metrics_loopback,
        agent_image,
    } = http;
    let runner = tokio::spawn(gpunex_app::runner::run_projections(store.clone()));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr()?;
    // Where people reach the platform, for the steps notifications give.
    let public_url = public_url.unwrap_or_else(|| format!("http://{local}"));
    tracing::info!(
        address = %local,
        database = ?store.backend(),
        outbox = notifications.is_some(),
        payout_scheduler = payouts.scheduler,
        solana_sender = payouts.solana.is_some(),
        dev_mode = fleet.dev_mode,
        "gpunex listening"
    );
    let state = AppState::load(store)
        .await?
        .with_fleet_config(fleet)
        .with_payout_config(payouts.config.clone())
        .with_limits(limits)
        .with_metrics_loopback(metrics_loopback)
        .with_secure_cookies(public_url.starts_with("https://"))
        .with_installer(crate::installer::Installer::new(
            &public_url,
            &agent_image.unwrap_or_else(crate::installer::default_image),
        )?);
    let scheduler = payouts.scheduler.then(|| {
        tokio::spawn(gpunex_app::payout_run::run_scheduler(
            state.store.clone(),
            state.credentials.clone(),
            payouts.config.policy.clone(),
            {
                let clock = state.clock.clone();
                move || gpunex_app::payout_run::today_utc(clock.now())
            },
            std::time::Duration::from_secs(60),
        ))
    });
    let sender = payouts.solana.map(|rail| {
        tokio::spawn(gpunex_app::payout_send::run(
            state.store.clone(),
            state.credentials.clone(),
            rail,
        ))
    });
    let watchdog = tokio::spawn(crate::fleet::run_watchdog(
        state.store.clone(),
        state.credentials.clone(),
        fleet,
    ));
    let benchmark_actions = tokio::spawn(gpunex_app::benchmarks::run_actions(
        state.store.clone(),
        state.credentials.clone(),
    ));
    let outbox = notifications.map(|transport| {
        tokio::spawn(gpunex_app::outbox::run(
            state.store.clone(),
            state.credentials.clone(),
            transport,
            public_url.clone(),
        ))
    });
    let connections = state.metrics.connections.clone();
    let app = router(state).layer(axum::middleware::from_fn(log_request));
    crate::http_server::serve(listener, app, limits, connections, shutdown_signal()).await?;
    runner.abort();
    watchdog.abort();
    benchmark_actions.abort();
    for task in [scheduler, sender].into_iter().flatten() {
        task.abort();
    }
    if let Some(outbox) = outbox {
        outbox.abort();
    }
    tracing::info!("gpunex stopped");
    Ok(())
}

/// One INFO line per request with method, path, status and latency.
async fn log_request(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        latency_us = started.elapsed().as_micros() as u64,
        "request"
    );
    response
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown requested; finishing in-flight requests");
}

#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "operations",
    summary = "the server's figures for Prometheus",
    description = "Prometheus text exposition format 0.0.4: requests by route, method and status, latency histograms, connections, log appends and group commits, projection and outbox lag, payout queues. Admins, and requests from the loopback interface without credentials (unless the server runs with `--metrics-loopback false`).",
    responses((status = 200, description = "the figures", content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)),
)]
pub async fn metrics_endpoint(State(state): State<AppState>) -> Response {
    let body = crate::metrics::render(&state.metrics, &state.store, &state.credentials).await;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        body,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tag = "operations",
    summary = "this document",
    responses((status = 200, description = "this document (OpenAPI 3.1)", body = Object)),
)]
pub async fn openapi() -> Json<serde_json::Value> {
    static DOCUMENT: std::sync::LazyLock<serde_json::Value> =
        std::sync::LazyLock::new(|| endpoints().document());
    Json(DOCUMENT.clone())
}
