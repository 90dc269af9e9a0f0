//! Routes, handlers and the conversions from store values to wire types.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::params::{Path, Query};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use gpunex_domain::{Account, Side};
use gpunex_store::{RecordedEvent, Store};
use gpunex_wire as wire;

use crate::auth::{Allow, Caller};
use crate::error::ApiError;

/// Default and largest page of events or journal lines.
pub const PAGE_ITEMS_DEFAULT: u64 = 100;
pub const PAGE_ITEMS_MAX: u64 = 1_000;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub credentials: crate::auth::CredentialCache,
    pub login_limiter: crate::accounts::LoginLimiter,
    pub fleet: crate::fleet::FleetConfig,
    /// The marketplace listings, rebuilt as the log moves.
    pub listings: crate::market::ListingIndex,
    /// Payout rules and the platform's bank account.
    pub payouts: std::sync::Arc<crate::payout_run::PayoutConfig>,
    /// Connection and request limits.
    pub limits: crate::http_server::ServerLimits,
    /// Requests in flight per token.
    pub token_load: crate::http_server::TokenLoad,
}

impl AppState {
    /// Loads the credential registry from the log and keeps it current.
    pub async fn load(store: Store) -> Result<AppState, gpunex_store::StoreError> {
        let credentials = crate::auth::CredentialCache::load(&store).await?;
        let listings = crate::market::ListingIndex::default();
        listings.rebuild(&credentials, crate::tokens::now());
        tokio::spawn(crate::market::run_listing_index(
            credentials.clone(),
            listings.clone(),
        ));
        Ok(AppState {
            store,
            credentials,
            login_limiter: crate::accounts::LoginLimiter::default(),
            fleet: crate::fleet::FleetConfig::default(),
            listings,
            payouts: std::sync::Arc::default(),
            limits: crate::http_server::ServerLimits::default(),
            token_load: crate::http_server::TokenLoad::default(),
        })
    }

    /// Sets the payout rules and the platform's bank account.
    pub fn with_payout_config(mut self, config: crate::payout_run::PayoutConfig) -> AppState {
        self.payouts = std::sync::Arc::new(config);
        self
    }

    /// Sets the connection and request limits.
    pub fn with_limits(mut self, limits: crate::http_server::ServerLimits) -> AppState {
        self.limits = limits;
        self
    }

    /// Sets how presence is judged, and whether simulated GPUs may be listed.
    pub fn with_fleet_config(mut self, config: crate::fleet::FleetConfig) -> AppState {
        self.fleet = config;
        self.listings.set_dev_mode(config.dev_mode);
        self
    }
}

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
    crate::routes::Routes::default()
        .get("/healthz", "the process is up", PUBLIC, healthz)
        .get(
            "/readyz",
            "the database answers; projection lag",
            PUBLIC,
            readyz,
        )
        .get(
            "/docs/errors",
            "the error codes: every code a problem document can carry, its status and meaning",
            PUBLIC,
            crate::docs::errors,
        )
        .get(
            "/v1/openapi.json",
            "this document",
            PUBLIC,
            crate::routes::openapi,
        )
        .get(
            "/v1/events",
            "the event log, in position order, paged",
            ADMIN,
            list_events,
        )
        .get(
            "/v1/projections",
            "each read model's checkpoint and lag",
            ADMIN_FINANCE,
            projections,
        )
        .get(
            "/v1/ledger/accounts",
            "every account's balance, as of one position",
            ADMIN_FINANCE,
            balances,
        )
        .get(
            "/v1/ledger/accounts/{account}/lines",
            "an account's journal lines, each with its event",
            ADMIN_FINANCE,
            account_lines,
        )
        .get(
            "/v1/catalog/models",
            "the GPU models applications may name",
            PUBLIC,
            crate::catalog::list,
        )
        .post(
            "/v1/catalog/models",
            "add a model evaluated case by case",
            ADMIN,
            crate::catalog::add,
        )
        .post(
            "/v1/accounts",
            "sign up with email and password",
            PUBLIC,
            acc::sign_up,
        )
        .post(
            "/v1/sessions",
            "sign in: an expiring session token",
            PUBLIC,
            acc::sign_in,
        )
        .post(
            "/v1/sessions/current/revoke",
            "sign out",
            USER,
            acc::sign_out,
        )
        .get(
            "/v1/me",
            "the Roles page: who you are and what you may do",
            USER,
            acc::me,
        )
        .post("/v1/applications", "apply as a provider", USER, app::submit)
        .get(
            "/v1/applications",
            "applications: all for reviewers, your own for people",
            ADMIN_USER,
            app::list,
        )
        .get(
            "/v1/applications/{id}",
            "one application",
            ADMIN_USER,
            app::read,
        )
        .post(
            "/v1/applications/{id}/withdraw",
            "withdraw your application",
            USER,
            app::withdraw,
        )
        .post(
            "/v1/applications/{id}/answer",
            "answer an information request",
            USER,
            app::answer,
        )
        .post(
            "/v1/applications/{id}/request-information",
            "ask the applicant for more",
            ADMIN,
            app::request_information,
        )
        .post(
            "/v1/applications/{id}/approve",
            "approve with a tier",
            ADMIN,
            app::approve,
        )
        .post(
            "/v1/applications/{id}/reject",
            "reject with a reason",
            ADMIN,
            app::reject,
        )
        .post(
            "/v1/applications/{id}/provider-token",
            "take the approved provider's first token, once",
            USER,
            app::claim_provider_token,
        )
        .get(
            "/v1/tokens",
            "tokens, without secrets",
            TOKEN_HOLDERS,
            tok::list,
        )
        .post(
            "/v1/tokens",
            "issue a token, shown once",
            TOKEN_HOLDERS,
            tok::issue,
        )
        .post(
            "/v1/tokens/{token_id}/rotate",
            "replace a token with a new one",
            TOKEN_HOLDERS,
            tok::rotate,
        )
        .post(
            "/v1/tokens/{token_id}/revoke",
            "revoke a token at once",
            TOKEN_HOLDERS,
            tok::revoke,
        )
        .post(
            "/v1/agent/events",
            "deliver events from the agent's durable queue (registration, GPU conditions, usage, jobs)",
            AGENT,
            fleet::agent_events,
        )
        .post(
            "/v1/agent/heartbeat",
            "presence and per-GPU telemetry",
            AGENT,
            fleet::heartbeat,
        )
        .get(
            "/v1/providers/{provider_id}/earnings",
            "this week, this month, all time, pending balance, per GPU and per model (tz, from, to)",
            PROVIDER_DASHBOARD,
            earnings::summary,
        )
        .get(
            "/v1/providers/{provider_id}/earnings/daily",
            "earnings per local day over from..to (at most 366 days)",
            PROVIDER_DASHBOARD,
            earnings::daily,
        )
        .get(
            "/v1/providers/{provider_id}/earnings/statement.csv",
            "every usage line of from..to as CSV, naming its rental and usage event",
            PROVIDER_DASHBOARD,
            earnings::statement,
        )
        .get(
            "/v1/providers/{provider_id}/payout-settings",
            "the provider's payout schedule and method",
            PROVIDER_DASHBOARD,
            crate::payouts::read,
        )
        .put(
            "/v1/providers/{provider_id}/payout-settings",
            "choose weekly or monthly payouts and a Solana wallet or SEPA bank details",
            ADMIN_PROVIDER,
            crate::payouts::set,
        )
        .get(
            "/v1/providers/{provider_id}/payouts",
            "the provider's balance, pending payouts and payout history with transaction details",
            PAYOUT_VIEWERS,
            crate::payouts::history,
        )
        .post(
            "/v1/payout-batches",
            "build a date's payout batch (or show it with dry_run); a rerun creates nothing",
            ADMIN_TREASURY,
            crate::payouts::create_batch,
        )
        .get(
            "/v1/payout-batches",
            "every payout batch, newest first",
            PAYOUT_READERS,
            crate::payouts::list_batches,
        )
        .get(
            "/v1/payout-batches/{date}",
            "a date's payout batch: its payouts and the balances rolled forward",
            PAYOUT_READERS,
            crate::payouts::read_batch,
        )
        .post(
            "/v1/payout-batches/{date}/bank-files",
            "make the SEPA credit transfer files (pain.001.001.09) of a batch's bank payouts",
            ADMIN_TREASURY,
            crate::payouts::create_bank_files,
        )
        .get(
            "/v1/payout-batches/{date}/bank-files/{message_id}",
            "download a SEPA credit transfer file, byte for byte as recorded",
            PAYOUT_READERS,
            crate::payouts::bank_file,
        )
        .post(
            "/v1/bank-status-reports",
            "import the bank's pain.002 status report on a SEPA file: settled transfers confirm their payouts, rejected ones return to the balance",
            ADMIN_TREASURY,
            crate::payouts::import_status_report,
        )
        .get(
            "/v1/payouts/{payout_id}",
            "one payout: amount, method, status and transaction details",
            PAYOUT_VIEWERS,
            crate::payouts::read_payout,
        )
        .get(
            "/v1/payouts/{payout_id}/proof",
            "the earnings lines a payout settled and their sum: lines + brought forward = amount + carried",
            PAYOUT_VIEWERS,
            crate::payouts::proof,
        )
        .post(
            "/v1/payouts/{payout_id}/confirm",
            "finance: a bank transfer settled (with the bank's reference)",
            ADMIN_TREASURY,
            crate::payouts::confirm,
        )
        .post(
            "/v1/payouts/{payout_id}/return",
            "finance: the bank returned a transfer; the amount goes back to the provider's balance",
            ADMIN_TREASURY,
            crate::payouts::return_payout,
        )
        .get(
            "/v1/market/recommendations",
            "a recommended price for a model (and region), with the supply, demand and prices behind it",
            PUBLIC,
            crate::pricing::recommendations,
        )
        .get(
            "/v1/audit/reconcile",
            "usage money checked to the micro-USDC from the events, and the earnings projection against them",
            ADMIN_FINANCE,
            crate::reconcile::endpoint,
        )
        .get(
            "/v1/earnings",
            "every provider's earnings in a period, pending balances and platform totals",
            ADMIN_FINANCE,
            earnings::finance,
        )
        .get(
            "/v1/agent/assignments",
            "the rentals this machine must run or stop (long poll with since and wait_seconds)",
            AGENT,
            rentals::assignments,
        )
        .get(
            "/v1/agent/identity",
            "the provider and machine this agent token is bound to",
            AGENT,
            fleet::agent_identity,
        )
        .get(
            "/v1/agent/machine",
            "the agent's machine as the platform sees it",
            AGENT,
            fleet::agent_machine,
        )
        .get(
            "/v1/providers/{provider_id}/machines",
            "the provider dashboard: machines, GPUs, status, telemetry, declared vs detected",
            PROVIDER_DASHBOARD,
            fleet::provider_machines,
        )
        .get(
            "/v1/machines/{machine_id}",
            "one machine with its GPUs and latest telemetry",
            FLEET_READERS,
            fleet::machine,
        )
        .get(
            "/v1/machines/{machine_id}/gpus/{gpu_uuid}/telemetry",
            "one GPU's telemetry samples in a time range",
            FLEET_READERS,
            fleet::telemetry,
        )
        .post(
            "/v1/providers/{provider_id}/prices",
            "set the hourly price of a model, now or from a later instant",
            ADMIN_PROVIDER,
            market::set_price,
        )
        .get(
            "/v1/providers/{provider_id}/prices",
            "current prices and price history per model",
            ADMIN_PROVIDER,
            market::prices,
        )
        .post(
            "/v1/providers/{provider_id}/availability",
            "set the weekly availability schedule (or always on)",
            ADMIN_PROVIDER,
            market::set_availability,
        )
        .get(
            "/v1/providers/{provider_id}/availability",
            "the availability schedule and whether it is open now",
            ADMIN_PROVIDER,
            market::availability,
        )
        .post(
            "/v1/providers/{provider_id}/maintenance",
            "announce maintenance (hidden from renters meanwhile)",
            ADMIN_PROVIDER,
            market::announce_maintenance,
        )
        .get(
            "/v1/providers/{provider_id}/maintenance",
            "announced maintenance that has not ended",
            ADMIN_PROVIDER,
            market::maintenance,
        )
        .post(
            "/v1/providers/{provider_id}/maintenance/{maintenance_id}/cancel",
            "cancel announced maintenance",
            ADMIN_PROVIDER,
            market::cancel_maintenance,
        )
        .get(
            "/v1/providers/{provider_id}/listings",
            "each GPU of the provider: listed or why not, and its rank breakdown",
            PROVIDER_DASHBOARD,
            market::provider_listings,
        )
        .post(
            "/v1/gpus/{gpu_uuid}/delist",
            "take a GPU off the marketplace",
            ADMIN,
            market::delist,
        )
        .post(
            "/v1/gpus/{gpu_uuid}/relist",
            "put a delisted GPU back",
            ADMIN,
            market::relist,
        )
        .get(
            "/v1/listings",
            "search listed GPUs: filters, sort, cursor pages",
            PUBLIC,
            market::search,
        )
        .get(
            "/v1/listings/{gpu_uuid}",
            "one listed GPU with its rank breakdown",
            PUBLIC,
            market::listing,
        )
        .post(
            "/v1/rentals",
            "rent listed GPUs of one machine at the price in force",
            RENTER,
            rentals::rent,
        )
        .get(
            "/v1/rentals",
            "a renter's rentals, newest first",
            RENTAL_LISTERS,
            rentals::list,
        )
        .get(
            "/v1/rentals/{rental_id}",
            "one rental",
            RENTAL_READERS,
            rentals::read,
        )
        .post(
            "/v1/rentals/{rental_id}/end",
            "end a rental; its GPUs are listed again",
            ADMIN_RENTER,
            rentals::end,
        )
        .get(
            "/v1/fleet",
            "every machine, filtered by status, provider, model, simulated, condition",
            ADMIN_FINANCE,
            fleet::fleet_view,
        )
}

pub fn router(state: AppState) -> Router {
    endpoints()
        .into_router(&state)
        .fallback(|| async { ApiError::NoRoute })
        .with_state(state)
        .layer(axum::middleware::from_fn(crate::error::problem_bodies))
}

async fn healthz() -> Json<wire::Health> {
    Json(wire::Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    })
}

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

async fn projections(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<Vec<wire::ProjectionStatus>>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Finance])?;
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

async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::EventsPage>, ApiError> {
    caller.require(&[Allow::Admin])?;
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

/// RFC 3339 in UTC with microseconds, from microseconds since the epoch.
pub fn timestamp(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_else(|| us.to_string())
}

async fn balances(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::AccountBalances>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Finance])?;
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

async fn account_lines(
    State(state): State<AppState>,
    caller: Caller,
    Path(account): Path<String>,
    Query(query): Query,
) -> Result<Json<wire::JournalPage>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Finance])?;
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

/// Serves the API until SIGTERM or Ctrl-C, with the projection runner in the background.
/// In-flight requests finish before the process exits.
/// What the server does about payouts.
#[derive(Debug)]
pub struct Payouts {
    pub config: crate::payout_run::PayoutConfig,
    /// Run each payout date's batch.
    pub scheduler: bool,
    /// Send Solana payouts.
    pub solana: Option<crate::payout_send::SolanaRail>,
}

pub async fn serve(
    store: Store,
    listen: std::net::SocketAddr,
    notifications: Option<crate::outbox::Transport>,
    fleet: crate::fleet::FleetConfig,
    payouts: Payouts,
    limits: crate::http_server::ServerLimits,
) -> anyhow::Result<()> {
    let runner = tokio::spawn(crate::runner::run_projections(store.clone()));
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr()?;
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
        .with_limits(limits);
    let scheduler = payouts.scheduler.then(|| {
        tokio::spawn(crate::payout_run::run_scheduler(
            state.store.clone(),
            state.credentials.clone(),
            payouts.config.policy.clone(),
            crate::payout_run::today_utc,
            std::time::Duration::from_secs(60),
        ))
    });
    let sender = payouts.solana.map(|rail| {
        tokio::spawn(crate::payout_send::run(
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
    let outbox = notifications.map(|transport| {
        tokio::spawn(crate::outbox::run(
            state.store.clone(),
            state.credentials.clone(),
            transport,
        ))
    });
    let app = router(state).layer(axum::middleware::from_fn(log_request));
    crate::http_server::serve(listener, app, limits, shutdown_signal()).await?;
    runner.abort();
    watchdog.abort();
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
