//! Payouts over HTTP.
//!
//! - Settings: a provider chooses weekly or monthly payouts and one method, a Solana wallet or
//!   SEPA bank details, checked by `gpunex-payouts`. Each change is an event
//!   (`payout.settings_changed`); a payout keeps the method it was scheduled with.
//! - Finance: batches (build, dry run, list), SEPA files per batch, bank confirmations and
//!   returns, every payout with the lines it settled.
//! - Providers: pending payouts and history with transaction details.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use chrono::NaiveDate;
use gpunex_domain::payouts::{BankFileCreated, PayoutPolicy, PayoutSettingsChanged};
use gpunex_projections::earnings::Earnings;
use gpunex_projections::payouts::PayoutRecord;
use gpunex_wire::payouts as wp;
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_app::payouts::{BankFiling, Refusal, Settlement};

fn view(policy: &PayoutPolicy, settings: &PayoutSettingsChanged) -> wp::PayoutSettingsView {
    let minimum = policy.minimum(settings.schedule);
    wp::PayoutSettingsView {
        provider_id: settings.provider_id,
        schedule: settings.schedule,
        method: settings.method.clone(),
        minimum_micro_usdc: minimum.micros(),
        minimum_usdc: minimum.to_string(),
        changed_at: timestamp(settings.changed_at.unix_micros()),
        changed_by: settings.changed_by.clone(),
    }
}

/// The provider itself, finance or an admin may read a provider's payouts; the provider must
/// exist.
fn may_read(state: &AppState, caller: &Caller, provider_id: Uuid) -> Result<(), ApiError> {
    caller.for_provider(provider_id)?;
    check_provider(state, provider_id)
}

fn check_provider(state: &AppState, provider_id: Uuid) -> Result<(), ApiError> {
    match state.credentials.provider_application(&provider_id) {
        Some(_) => Ok(()),
        None => Err(ApiError::NotFound("provider")),
    }
}

/// `GET /v1/providers/{provider_id}/payout-settings`
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/payout-settings",
    operation_id = "payouts_read",
    tag = "payouts",
    summary = "the provider's payout schedule and method",
    responses((status = 200, description = "the provider's payout schedule and method", body = wp::PayoutSettingsView)),
)]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wp::PayoutSettingsView>, ApiError> {
    may_read(&state, &caller, provider_id)?;
    state
        .credentials
        .with_earnings(|e| {
            e.payout_settings(provider_id)
                .map(|s| view(&state.payouts.policy, s))
        })
        .map(Json)
        .ok_or(ApiError::NotFound("payout_settings"))
}

/// `PUT /v1/providers/{provider_id}/payout-settings` (the provider, or an admin)
#[utoipa::path(
    put,
    path = "/v1/providers/{provider_id}/payout-settings",
    operation_id = "payouts_set",
    tag = "payouts",
    summary = "choose weekly or monthly payouts and a Solana wallet or SEPA bank details",
    responses((status = 200, description = "choose weekly or monthly payouts and a Solana wallet or SEPA bank details", body = wp::PayoutSettingsView)),
)]
pub async fn set(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
    Json(request): Json<wp::PayoutSettingsRequest>,
) -> Result<Json<wp::PayoutSettingsView>, ApiError> {
    caller.for_provider(provider_id)?;
    check_provider(&state, provider_id)?;
    let method = gpunex_payouts::check_method(&request.method).map_err(|errors| {
        ApiError::InvalidRequest(
            errors
                .into_iter()
                .map(|e| {
                    crate::error::field_error(
                        crate::error::Location::Body,
                        e.field,
                        e.code,
                        e.message,
                    )
                })
                .collect(),
        )
    })?;
    let policy = &state.payouts.policy;
    let changed = gpunex_app::payouts::set_settings(
        &state.executor(),
        provider_id,
        request.schedule,
        method,
        &caller.actor(),
        // Prepared before the append, so a retry after a crash between the commit and the
        // answer gets exactly it.
        |changed| {
            crate::idempotency::prepare_response(axum::http::StatusCode::OK, &view(policy, changed))
        },
    )
    .await?
    .map_err(refused)?;
    Ok(Json(view(policy, &changed)))
}

/// A payout command the executor refused, in the API's words.
fn refused(refusal: gpunex_app::command::Rejection<Refusal>) -> ApiError {
    crate::error::command_refused(
        refusal,
        refusal_of,
        "the payout changed while this request ran; read it again",
    )
}

const NOT_SUBMITTED: &str = "only a payout in a bank file (submitted) can be confirmed or returned";

fn refusal_of(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::UnknownProvider => ApiError::NotFound("provider"),
        Refusal::UnknownPayout => ApiError::NotFound("payout"),
        Refusal::NotABankPayout => ApiError::Refused {
            code: ErrorCode::NotABankPayout,
            detail: "Solana payouts are confirmed on chain by the sender, not by hand".to_owned(),
        },
        Refusal::NotSubmitted(status) => ApiError::Refused {
            code: ErrorCode::PayoutNotSubmitted,
            detail: format!("the payout is {status:?}: {NOT_SUBMITTED}").to_lowercase(),
        },
        Refusal::Amount(detail) => ApiError::Refused {
            code: ErrorCode::AmountOutOfRange,
            detail,
        },
        Refusal::UnknownBatch => ApiError::NotFound("payout_batch"),
        Refusal::NothingToFile => ApiError::Refused {
            code: ErrorCode::NothingToFile,
            detail: "the batch has no bank payouts waiting for a file".to_owned(),
        },
        Refusal::BankFileInvalid(detail) => ApiError::Refused {
            code: ErrorCode::BankFileInvalid,
            detail,
        },
        Refusal::UnknownBankFile => ApiError::NotFound("bank_file"),
        Refusal::ReportAmountMismatch(detail) => ApiError::Refused {
            code: ErrorCode::ReportAmountMismatch,
            detail,
        },
        Refusal::ReportContradictsPayout(detail) => ApiError::Refused {
            code: ErrorCode::ReportContradictsPayout,
            detail,
        },
        Refusal::ReportTransactionUnknown(detail) => ApiError::Refused {
            code: ErrorCode::ReportTransactionUnknown,
            detail,
        },
    }
}

fn parse_date(
    location: crate::error::Location,
    field: &str,
    text: &str,
) -> Result<NaiveDate, ApiError> {
    gpunex_domain::calendar::date(text)
        .map_err(|e| ApiError::invalid_in(location, field, ErrorCode::InvalidDate, e.to_string()))
}

/// `POST /v1/payout-batches`: build (or, with `dry_run`, show) a date's batch.
#[utoipa::path(
    post,
    path = "/v1/payout-batches",
    operation_id = "payouts_create_batch",
    tag = "payouts",
    summary = "build a date's payout batch (or show it with dry_run); a rerun creates nothing",
    responses((status = 200, description = "build a date's payout batch (or show it with dry_run)", body = wp::BatchView)),
)]
pub async fn create_batch(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wp::BatchRequest>,
) -> Result<Json<wp::BatchView>, ApiError> {
    let date = parse_date(crate::error::Location::Body, "/date", &request.date)?;
    let mut view = crate::payout_run::run_batch(
        &state.store,
        &state.credentials,
        &state.payouts.policy,
        date,
        request.dry_run,
        &caller.actor(),
    )
    .await?;
    // A recorded batch answers with its first page; `GET /v1/payout-batches/{date}?after=`
    // gives the rest. A dry run is not recorded: it shows every payout.
    if !view.dry_run && view.payouts.len() > crate::payout_run::PAGE_DEFAULT {
        view.payouts.truncate(crate::payout_run::PAGE_DEFAULT);
        view.next_after = view.payouts.last().map(|p| p.payout_id);
    }
    Ok(Json(view))
}

/// `GET /v1/payout-batches`: every batch, newest first, without its payouts.
#[utoipa::path(
    get,
    path = "/v1/payout-batches",
    operation_id = "payouts_list_batches",
    tag = "payouts",
    summary = "every payout batch, newest first",
    responses((status = 200, description = "every payout batch, newest first", body = Vec<wp::BatchSummary>)),
)]
pub async fn list_batches(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<Vec<wp::BatchSummary>>, ApiError> {
    let as_of = state.credentials.with_earnings(Earnings::position);
    let mut summaries = Vec::new();
    for batch in state.store.stored_batches(as_of).await?.iter().rev() {
        summaries.extend(crate::payout_run::batch_summary(&state.store, batch).await?);
    }
    Ok(Json(summaries))
}

/// `?after=<payout id>&limit=<1..1000>`; any other parameter is refused.
fn page(query: &HashMap<String, String>) -> Result<crate::payout_run::Page, ApiError> {
    if let Some(unknown) = query.keys().find(|k| *k != "after" && *k != "limit") {
        return Err(ApiError::query(
            unknown,
            ErrorCode::UnknownParameter,
            "the parameters are after and limit",
        ));
    }
    let after = match query.get("after") {
        None => None,
        Some(text) => Some(Uuid::parse_str(text.trim()).map_err(|_| {
            ApiError::query("after", ErrorCode::InvalidCursor, "after: a payout id")
        })?),
    };
    let limit = match query.get("limit") {
        None => crate::payout_run::PAGE_DEFAULT,
        Some(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=crate::payout_run::PAGE_MAX).contains(l))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::InvalidLimit,
                    format!("limit: 1 to {}", crate::payout_run::PAGE_MAX),
                )
            })?,
    };
    Ok(crate::payout_run::Page { after, limit })
}

/// `GET /v1/payout-batches/{date}?after=&limit=`: a batch and a page of its payouts.
#[utoipa::path(
    get,
    path = "/v1/payout-batches/{date}",
    operation_id = "payouts_read_batch",
    tag = "payouts",
    summary = "a date's payout batch: its payouts and the balances rolled forward",
    params(
        ("date" = String, Path, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "the payout date, YYYY-MM-DD"),
        ("after" = Option<uuid::Uuid>, Query, description = "a payout id: the page of payouts starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 1000, description = "payouts per page, 1 to 1,000 (default 500)"),
    ),
    responses((status = 200, description = "a date's payout batch", body = wp::BatchView)),
)]
pub async fn read_batch(
    State(state): State<AppState>,
    _caller: Caller,
    Path(date): Path<String>,
    Query(query): Query,
) -> Result<Json<wp::BatchView>, ApiError> {
    let date = parse_date(crate::error::Location::Path, "date", &date)?;
    let page = page(&query)?;
    let as_of = state.credentials.with_earnings(Earnings::position);
    let batch = state
        .store
        .stored_batch_on(date, as_of)
        .await?
        .ok_or(ApiError::NotFound("payout_batch"))?;
    Ok(Json(
        crate::payout_run::batch_view(&state.store, &batch, false, page).await?,
    ))
}

/// A payout as the read models hold it: open ones from memory, the rest from the stored
/// payouts projection.
async fn payout_record(state: &AppState, payout_id: Uuid) -> Result<PayoutRecord, ApiError> {
    gpunex_app::payouts::payout_as_held(&state.executor(), payout_id)
        .await?
        .ok_or(ApiError::NotFound("payout"))
}

/// A payout the caller may read: its provider's, finance's or an admin's.
async fn readable_payout(
    state: &AppState,
    caller: &Caller,
    payout_id: Uuid,
) -> Result<PayoutRecord, ApiError> {
    let record = payout_record(state, payout_id).await?;
    caller.for_provider(record.scheduled.provider_id)?;
    Ok(record)
}

/// `GET /v1/payouts/{payout_id}`
#[utoipa::path(
    get,
    path = "/v1/payouts/{payout_id}",
    operation_id = "payouts_read_payout",
    tag = "payouts",
    summary = "one payout: amount, method, status and transaction details",
    responses((status = 200, description = "one payout", body = wp::PayoutView)),
)]
pub async fn read_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(payout_id): Path<Uuid>,
) -> Result<Json<wp::PayoutView>, ApiError> {
    let record = readable_payout(&state, &caller, payout_id).await?;
    Ok(Json(crate::payout_run::payout_view(&record)))
}

/// Settled lines read per page from the stored earnings projection.
const PROOF_LINES_PAGE: usize = 5_000;

/// `GET /v1/payouts/{payout_id}/proof`: the earnings lines the payout settled, their sum, and
/// the arithmetic that makes the amount.
#[utoipa::path(
    get,
    path = "/v1/payouts/{payout_id}/proof",
    operation_id = "payouts_proof",
    tag = "payouts",
    summary = "the earnings lines a payout settled and their sum: lines + brought forward = amount + carried",
    responses((status = 200, description = "the earnings lines a payout settled and their sum", body = wp::PayoutProof)),
)]
pub async fn proof(
    State(state): State<AppState>,
    caller: Caller,
    Path(payout_id): Path<Uuid>,
) -> Result<Json<wp::PayoutProof>, ApiError> {
    let record = readable_payout(&state, &caller, payout_id).await?;
    let settled = record.scheduled.lines;
    state
        .store
        .earnings_reached(settled.through_position)
        .await?;
    let range = gpunex_store::earnings::LineRange::Positions {
        after: settled.after_position,
        through: settled.through_position,
    };
    let mut lines: Vec<wp::SettledLineView> = Vec::new();
    loop {
        let after = lines.last().map_or(0, |l| l.position);
        let page = state
            .store
            .earnings_lines(record.scheduled.provider_id, range, after, PROOF_LINES_PAGE)
            .await?;
        let full = page.len() == PROOF_LINES_PAGE;
        lines.extend(page.iter().map(|l| wp::SettledLineView {
            position: l.position,
            at: timestamp(l.at.unix_micros()),
            usage_entry_id: l.entry_id,
            rental_id: l.rental.rental_id,
            gpu_seconds: l.gpu_seconds(),
            gross_micro_usdc: l.gross.micros(),
            fee_micro_usdc: l.fee.micros(),
            net_micro_usdc: l.net.micros(),
        }));
        if !full {
            break;
        }
    }
    let scheduled = &record.scheduled;
    let net: i64 = lines.iter().map(|l| l.net_micro_usdc).sum();
    let count = u64::try_from(lines.len()).unwrap_or(u64::MAX);
    let balanced = net == scheduled.lines.net.micros()
        && count == scheduled.lines.count
        && net + scheduled.brought_forward.micros()
            == scheduled.amount.micros() + scheduled.carried.micros();
    Ok(Json(wp::PayoutProof {
        payout: crate::payout_run::payout_view(&record),
        lines,
        lines_net_micro_usdc: net,
        brought_forward_micro_usdc: scheduled.brought_forward.micros(),
        amount_micro_usdc: scheduled.amount.micros(),
        carried_micro_usdc: scheduled.carried.micros(),
        balanced,
    }))
}

/// `GET /v1/providers/{provider_id}/payouts`: pending payouts and history.
#[utoipa::path(
    get,
    path = "/v1/providers/{provider_id}/payouts",
    operation_id = "payouts_history",
    tag = "payouts",
    summary = "the provider's balance, pending payouts and payout history with transaction details",
    responses((status = 200, description = "the provider's balance, pending payouts and payout history with transaction details", body = wp::PayoutHistory)),
)]
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Path(provider_id): Path<Uuid>,
) -> Result<Json<wp::PayoutHistory>, ApiError> {
    may_read(&state, &caller, provider_id)?;
    let (sums, balance, as_of) = state.credentials.with_earnings(|e| {
        (
            e.payouts().provider(provider_id),
            e.pending_balance(provider_id),
            e.position(),
        )
    });
    let mut pending = Vec::new();
    let mut history = Vec::new();
    for record in state
        .store
        .provider_payouts(provider_id, as_of)
        .await?
        .iter()
        .rev()
    {
        let view = crate::payout_run::payout_view(record);
        if record.is_open() {
            pending.push(view);
        } else {
            history.push(view);
        }
    }
    let next_payout = gpunex_app::payout_run::next_payout(
        &state.store,
        &state.credentials,
        &state.payouts.policy,
        provider_id,
        state.clock.now(),
    )
    .await?
    .map(|next| wp::NextPayoutView {
        date: next.date.to_string(),
        cutoff: timestamp(next.cutoff.unix_micros()),
        schedule: next.schedule,
        rail: next.rail,
        minimum_micro_usdc: next.minimum.micros(),
        minimum_usdc: next.minimum.to_string(),
        available_micro_usdc: next.available.micros(),
        available_usdc: next.available.to_string(),
        amount_micro_usdc: next.amount.map(|a| a.paid.micros()),
        amount_usdc: next.amount.map(|a| a.paid.to_string()),
    });
    Ok(Json(wp::PayoutHistory {
        provider_id,
        balance_micro_usdc: balance,
        in_flight_micro_usdc: sums.in_flight(),
        paid_micro_usdc: sums.confirmed,
        next_payout,
        pending,
        history,
    }))
}

async fn settle(
    state: &AppState,
    caller: &Caller,
    payout_id: Uuid,
    settlement: Settlement,
) -> Result<Json<wp::PayoutView>, ApiError> {
    let record =
        gpunex_app::payouts::settle(&state.executor(), payout_id, &settlement, &caller.actor())
            .await?
            .map_err(refused)?;
    Ok(Json(crate::payout_run::payout_view(&record)))
}

/// `POST /v1/payouts/{payout_id}/confirm`: the bank transfer settled.
#[utoipa::path(
    post,
    path = "/v1/payouts/{payout_id}/confirm",
    operation_id = "payouts_confirm",
    tag = "payouts",
    summary = "finance: a bank transfer settled (with the bank's reference)",
    responses((status = 200, description = "finance", body = wp::PayoutView)),
)]
pub async fn confirm(
    State(state): State<AppState>,
    caller: Caller,
    Path(payout_id): Path<Uuid>,
    Json(request): Json<wp::ConfirmRequest>,
) -> Result<Json<wp::PayoutView>, ApiError> {
    let reference = request.bank_reference.trim();
    if reference.is_empty() || reference.chars().count() > 140 {
        return Err(ApiError::body(
            "/bank_reference",
            ErrorCode::InvalidBankReference,
            "the bank's reference for the transfer: 1 to 140 characters",
        ));
    }
    settle(
        &state,
        &caller,
        payout_id,
        Settlement::Confirm {
            bank_reference: reference.to_owned(),
        },
    )
    .await
}

/// `POST /v1/payouts/{payout_id}/return`: the bank returned the transfer; the amount goes back
/// to the provider's balance.
#[utoipa::path(
    post,
    path = "/v1/payouts/{payout_id}/return",
    operation_id = "payouts_return_payout",
    tag = "payouts",
    summary = "finance: the bank returned a transfer; the amount goes back to the provider's balance",
    responses((status = 200, description = "finance", body = wp::PayoutView)),
)]
pub async fn return_payout(
    State(state): State<AppState>,
    caller: Caller,
    Path(payout_id): Path<Uuid>,
    Json(request): Json<wp::ReturnRequest>,
) -> Result<Json<wp::PayoutView>, ApiError> {
    let code = request.reason_code.trim();
    if code.len() != 4
        || !code
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
    {
        return Err(ApiError::body(
            "/reason_code",
            ErrorCode::InvalidReasonCode,
            "an ISO 20022 return reason code: four letters or digits (AC01, AC04, MD07, ...)",
        ));
    }
    let reason = request.reason.trim();
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(ApiError::body(
            "/reason",
            ErrorCode::InvalidReason,
            "1 to 500 characters",
        ));
    }
    settle(
        &state,
        &caller,
        payout_id,
        Settlement::Return {
            reason_code: code.to_owned(),
            reason: reason.to_owned(),
        },
    )
    .await
}

fn file_view(date: NaiveDate, file: &BankFileCreated) -> wp::BankFileView {
    wp::BankFileView {
        message_id: file.message_id.clone(),
        batch_id: file.batch_id,
        currency: file.currency.clone(),
        rate: file.rate.to_string(),
        execution_date: file.execution_date.to_string(),
        transfers: u64::try_from(file.transfers.len()).unwrap_or(u64::MAX),
        control_sum_cents: file.control_sum_cents,
        sha256: file.sha256.clone(),
        created_at: timestamp(file.created_at.unix_micros()),
        href: format!("/v1/payout-batches/{date}/bank-files/{}", file.message_id),
    }
}

/// `POST /v1/payout-batches/{date}/bank-files`: a pain.001.001.09 file for the batch's bank
/// payouts not yet in one (at most 500 per file; more make more files). Each file is an event;
/// its payouts are submitted from then on.
#[utoipa::path(
    post,
    path = "/v1/payout-batches/{date}/bank-files",
    operation_id = "payouts_create_bank_files",
    tag = "payouts",
    summary = "make the SEPA credit transfer files (pain.001.001.09) of a batch's bank payouts",
    params(("date" = String, Path, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "the payout date, YYYY-MM-DD")),
    responses((status = 200, description = "make the SEPA credit transfer files (pain.001.001.09) of a batch's bank payouts", body = Vec<wp::BankFileView>)),
)]
pub async fn create_bank_files(
    State(state): State<AppState>,
    caller: Caller,
    Path(date): Path<String>,
    Json(request): Json<wp::BankFileRequest>,
) -> Result<Json<Vec<wp::BankFileView>>, ApiError> {
    let date = parse_date(crate::error::Location::Path, "date", &date)?;
    let rate: Decimal = request
        .eur_per_usdc
        .trim()
        .parse()
        .ok()
        .filter(|r: &Decimal| *r > Decimal::ZERO && r.scale() <= 6)
        .ok_or_else(|| {
            ApiError::body(
                "/eur_per_usdc",
                ErrorCode::InvalidRate,
                "euros per USDC: a positive decimal with at most 6 places, as text",
            )
        })?;
    // A TARGET2 business day at or after the next cut-off (`docs/payouts.md`).
    let earliest = gpunex_domain::sepa_calendar::earliest_execution(state.clock.now());
    let execution_date = match &request.execution_date {
        Some(text) => parse_date(crate::error::Location::Body, "/execution_date", text)?,
        None => gpunex_domain::sepa_calendar::next_target2_business_day(date.max(earliest)),
    };
    if execution_date < earliest {
        return Err(ApiError::body(
            "/execution_date",
            ErrorCode::ExecutionDatePast,
            format!(
                "a file made now can be executed on {earliest} at the earliest (the next TARGET2 business day after the {}:00 UTC cut-off)",
                gpunex_domain::sepa_calendar::CUTOFF_HOUR_UTC
            ),
        ));
    }
    if !gpunex_domain::sepa_calendar::is_target2_business_day(execution_date) {
        return Err(ApiError::body(
            "/execution_date",
            ErrorCode::ExecutionDateClosed,
            format!(
                "TARGET2 is closed on {execution_date} (weekends, 1 January, Good Friday, Easter Monday, 1 May, 25 and 26 December): the next business day is {}",
                gpunex_domain::sepa_calendar::next_target2_business_day(execution_date)
            ),
        ));
    }
    make_bank_files(&state, date, rate, execution_date, &caller.actor())
        .await
        .map(Json)
}

/// Writes the files of `date`'s bank payouts not yet in one, at `rate` euros per USDC, each as
/// a `payout.bank_file_created` event on the batch's stream.
pub async fn make_bank_files(
    state: &AppState,
    date: NaiveDate,
    rate: Decimal,
    execution_date: NaiveDate,
    actor: &str,
) -> Result<Vec<wp::BankFileView>, ApiError> {
    let Some(debtor) = state.payouts.debtor.clone() else {
        return Err(ApiError::Refused {
            code: ErrorCode::BankRailNotConfigured,
            detail: "the server has no platform bank account (--sepa-debtor)".to_owned(),
        });
    };
    let files = gpunex_app::payouts::file_bank_payouts(
        &state.executor(),
        &BankFiling {
            date,
            rate,
            execution_date,
            debtor,
        },
        actor,
    )
    .await?
    .map_err(|refusal| match refusal {
        gpunex_app::command::Rejection::Rule(Refusal::NothingToFile) => ApiError::Refused {
            code: ErrorCode::NothingToFile,
            detail: format!("the batch of {date} has no bank payouts waiting for a file"),
        },
        refusal => refused(refusal),
    })?;
    Ok(files.iter().map(|file| file_view(date, file)).collect())
}

/// `GET /v1/payout-batches/{date}/bank-files/{message_id}`: the file, as recorded.
#[utoipa::path(
    get,
    path = "/v1/payout-batches/{date}/bank-files/{message_id}",
    operation_id = "payouts_bank_file",
    tag = "payouts",
    summary = "download a SEPA credit transfer file, byte for byte as recorded",
    params(("date" = String, Path, pattern = "^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$", description = "the payout date, YYYY-MM-DD"), ("message_id" = String, Path, description = "the file's message id, from the batch")),
    responses((status = 200, description = "the pain.001.001.09 file, byte for byte as recorded", content_type = "application/xml", body = String)),
)]
pub async fn bank_file(
    State(state): State<AppState>,
    _caller: Caller,
    Path((date, message_id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let date = parse_date(crate::error::Location::Path, "date", &date)?;
    let as_of = state.credentials.with_earnings(Earnings::position);
    let file = state
        .store
        .stored_batch_on(date, as_of)
        .await?
        .and_then(|b| b.files.into_iter().find(|f| f.message_id == message_id))
        .ok_or(ApiError::NotFound("bank_file"))?;
    let ids: Vec<Uuid> = file.transfers.iter().map(|t| t.payout_id).collect();
    let payouts = state.store.payouts_by_id(&ids, as_of).await?;
    let xml = gpunex_app::payouts::render_file(&file, |id| payouts.get(&id))
        .map_err(|r| refused(gpunex_app::command::Rejection::Rule(r)))?;
    if gpunex_app::payouts::file_sha256(&xml) != file.sha256 {
        return Err(ApiError::Refused {
            code: ErrorCode::BankFileChanged,
            detail: "the file no longer renders to the recorded bytes".to_owned(),
        });
    }
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "application/xml; charset=utf-8".to_owned(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{message_id}.xml\""),
            ),
        ],
        xml,
    ))
}

/// Most bytes of a status report (a report on a full file of 500 transfers is about 300 KB;
/// under the server's 2 MB body limit, so this error, not a bare 413, answers).
const STATUS_REPORT_BYTES_MAX: usize = 1024 * 1024;

/// `POST /v1/bank-status-reports`: the bank's pain.002 status report on one of our files, as
/// the body (XML). Settled transfers confirm their payouts (bank reference: the report's
/// `MsgId`), rejected ones fail (the amount returns to the provider's balance), the rest stay
/// submitted. Everything is checked before anything is written; importing a report again
/// changes nothing.
#[utoipa::path(
    post,
    path = "/v1/bank-status-reports",
    operation_id = "payouts_import_status_report",
    tag = "payouts",
    summary = "import the bank's pain.002 status report on a SEPA file: settled transfers confirm their payouts, rejected ones return to the balance",
    request_body(
        content = String,
        content_type = "application/xml",
        description = "the bank's pain.002 status report (XML), at most 1 MiB"
    ),
    responses((status = 200, description = "what the report did to each payout of the file", body = wp::StatusReportView)),
)]
pub async fn import_status_report(
    State(state): State<AppState>,
    caller: Caller,
    crate::json::XmlBody(body): crate::json::XmlBody,
) -> Result<Json<wp::StatusReportView>, ApiError> {
    if body.len() > STATUS_REPORT_BYTES_MAX {
        return Err(ApiError::body(
            "",
            ErrorCode::StatusReportTooLarge,
            format!("a status report is at most {STATUS_REPORT_BYTES_MAX} bytes"),
        ));
    }
    let xml = std::str::from_utf8(&body).map_err(|_| {
        ApiError::body(
            "",
            ErrorCode::InvalidStatusReport,
            "the body must be the pain.002 XML, in UTF-8",
        )
    })?;
    let report = gpunex_payouts::bank_report::read_status_report(xml)
        .map_err(|e| ApiError::body("", e.code(), e.to_string()))?;
    let reference = report.message_id.clone();
    if reference.is_empty() || reference.chars().count() > 140 {
        return Err(ApiError::body(
            "",
            ErrorCode::InvalidStatusReport,
            "the report's MsgId must be 1 to 140 characters",
        ));
    }
    let imported =
        gpunex_app::payouts::import_status_report(&state.executor(), &report, &caller.actor())
            .await?
            .map_err(refused)?;
    let view = wp::StatusReportView {
        message_id: report.message_id.clone(),
        original_message_id: report.original_message_id.clone(),
        batch_date: imported
            .batch_date
            .map(|d| d.to_string())
            .unwrap_or_default(),
        confirmed: imported.confirmed,
        failed: imported.failed,
        pending: imported
            .pending
            .into_iter()
            .map(|(payout_id, status)| wp::PendingTransferView { payout_id, status })
            .collect(),
        unchanged: imported.unchanged,
    };
    tracing::info!(
        report = %view.message_id,
        file = %view.original_message_id,
        confirmed = view.confirmed.len(),
        failed = view.failed.len(),
        pending = view.pending.len(),
        "bank status report imported"
    );
    Ok(Json(view))
}
