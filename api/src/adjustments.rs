//! Ledger adjustments under dual control (`docs/money.md`, "Adjustments"): one person proposes a
//! balanced entry with a reason and evidence, a second approves it (the entry is posted) or
//! rejects it. Reads are open to finance, which audits them.

use axum::extract::State;
use axum::http::StatusCode;
use gpunex_app::adjustments::Refusal;
use gpunex_domain::adjustments::{self, Decision};
use gpunex_domain::ledger::{Account, Posting, Side};
use gpunex_domain::money::Usdc;
use gpunex_projections::adjustments::Proposal;
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::{ApiError, ErrorCode};
use crate::json::Json;
use crate::params::{Path, Query};
use crate::state::AppState;

fn rejection(error: adjustments::AdjustmentRejection) -> ApiError {
    use adjustments::AdjustmentRejection as R;
    match &error {
        R::InvalidText { field, .. } => {
            ApiError::body(&format!("/{field}"), error.code(), error.to_string())
        }
        R::Unbalanced(_) => ApiError::body("/postings", error.code(), error.to_string()),
        _ => ApiError::refused(error.code(), error.to_string()),
    }
}

fn refused(refusal: gpunex_app::command::Rejection<Refusal>) -> ApiError {
    crate::error::command_refused(
        refusal,
        |refusal| match refusal {
            Refusal::NotFound => ApiError::NotFound("adjustment"),
            Refusal::Rule(rule) => rejection(rule),
        },
        "the adjustment was decided meanwhile",
    )
}

fn line_view(posting: &Posting) -> wire::AdjustmentLine {
    wire::AdjustmentLine {
        account: posting.account.to_string(),
        side: match posting.side {
            Side::Debit => "debit",
            Side::Credit => "credit",
        }
        .to_owned(),
        amount_micro_usdc: posting.amount_micro_usdc.micros(),
    }
}

fn view(proposal: &Proposal) -> wire::AdjustmentView {
    let proposed = &proposal.proposed;
    let total = proposed.postings.total();
    wire::AdjustmentView {
        proposal_id: proposed.proposal_id,
        entry_id: proposed.entry_id,
        status: match proposal.decided.as_ref().map(|d| d.decision) {
            None => "proposed",
            Some(Decision::Approved) => "approved",
            Some(Decision::Rejected) => "rejected",
        }
        .to_owned(),
        reason: proposed.reason.clone(),
        evidence: proposed.evidence.clone(),
        postings: proposed.postings.lines().iter().map(line_view).collect(),
        total_micro_usdc: total.micros(),
        total_usdc: total.to_string(),
        proposed_by: proposed.proposed_by.clone(),
        proposed_at: timestamp(proposed.proposed_at.unix_micros()),
        decided_by: proposal.decided.as_ref().map(|d| d.decided_by.clone()),
        decided_at: proposal
            .decided
            .as_ref()
            .map(|d| timestamp(d.decided_at.unix_micros())),
        decision_reason: proposal
            .decided
            .as_ref()
            .filter(|d| !d.reason.is_empty())
            .map(|d| d.reason.clone()),
    }
}

/// The postings of a request, each field checked where it stands; an account must belong to an
/// approved provider or a person with an account.
fn postings(state: &AppState, lines: &[wire::AdjustmentLine]) -> Result<Vec<Posting>, ApiError> {
    let mut errors = Vec::new();
    let mut postings = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let at = |field: &str| format!("/postings/{i}/{field}");
        let account = line
            .account
            .parse::<Account>()
            .map_err(|e| {
                crate::error::field_error(
                    crate::error::Location::Body,
                    &at("account"),
                    ErrorCode::InvalidAccount,
                    e.to_string(),
                )
            })
            .and_then(|account| {
                let known = match account {
                    Account::ProviderPayable(id) => {
                        state.credentials.provider_application(&id).is_some()
                    }
                    Account::RenterReceivable(id) => state.credentials.user(&id).is_some(),
                    _ => true,
                };
                if known {
                    Ok(account)
                } else {
                    Err(crate::error::field_error(
                        crate::error::Location::Body,
                        &at("account"),
                        ErrorCode::UnknownAccountOwner,
                        "no approved provider or person with this id",
                    ))
                }
            });
        let side = match line.side.as_str() {
            "debit" => Ok(Side::Debit),
            "credit" => Ok(Side::Credit),
            _ => Err(crate::error::field_error(
                crate::error::Location::Body,
                &at("side"),
                ErrorCode::UnknownValue,
                "`debit` or `credit`",
            )),
        };
        let amount = (line.amount_micro_usdc > 0)
            .then(|| Usdc::from_micros(line.amount_micro_usdc))
            .ok_or_else(|| {
                crate::error::field_error(
                    crate::error::Location::Body,
                    &at("amount_micro_usdc"),
                    ErrorCode::OutOfRange,
                    "a positive whole number of micro-USDC",
                )
            });
        match (account, side, amount) {
            (Ok(account), Ok(side), Ok(amount_micro_usdc)) => postings.push(Posting {
                account,
                side,
                amount_micro_usdc,
            }),
            (account, side, amount) => {
                errors.extend(account.err());
                errors.extend(side.err());
                errors.extend(amount.err());
            }
        }
    }
    if errors.is_empty() {
        Ok(postings)
    } else {
        Err(ApiError::InvalidRequest(errors))
    }
}

fn proposal(state: &AppState, proposal_id: Uuid) -> Result<Proposal, ApiError> {
    state
        .credentials
        .with_adjustments(|a| a.get(&proposal_id).cloned())
        .ok_or(ApiError::NotFound("adjustment"))
}

/// `POST /v1/ledger/adjustments`
#[utoipa::path(
    post,
    path = "/v1/ledger/adjustments",
    operation_id = "adjustments_propose",
    tag = "adjustments",
    summary = "propose a ledger adjustment (a goodwill credit, a correction, a chargeback): a second person approves or rejects it",
    responses((status = 201, description = "the proposal, waiting for a second person", body = wire::AdjustmentView)),
)]
pub async fn propose(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wire::ProposeAdjustment>,
) -> Result<(StatusCode, Json<wire::AdjustmentView>), ApiError> {
    let lines = postings(&state, &request.postings)?;
    let proposal = gpunex_app::adjustments::propose(
        &state.executor(),
        gpunex_app::adjustments::Propose {
            proposal_id: Uuid::now_v7(),
            entry_id: Uuid::now_v7(),
            reason: &request.reason,
            evidence: &request.evidence,
            postings: lines,
        },
        &caller.actor(),
        |proposal| crate::idempotency::prepare_response(StatusCode::CREATED, &view(proposal)),
    )
    .await?
    .map_err(refused)?;
    Ok((StatusCode::CREATED, Json(view(&proposal))))
}

/// `GET /v1/ledger/adjustments`
#[utoipa::path(
    get,
    path = "/v1/ledger/adjustments",
    operation_id = "adjustments_list",
    tag = "adjustments",
    summary = "ledger adjustments, oldest first, with their decisions",
    params(("status" = Option<String>, Query, pattern = "^(proposed|approved|rejected)$", description = "only `proposed`, `approved` or `rejected` ones")),
    responses((status = 200, description = "the adjustments", body = wire::AdjustmentList)),
)]
pub async fn list(
    State(state): State<AppState>,
    _caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::AdjustmentList>, ApiError> {
    let status = query.get("status").map(String::as_str);
    if status.is_some_and(|s| !["proposed", "approved", "rejected"].contains(&s)) {
        return Err(ApiError::query(
            "status",
            ErrorCode::InvalidStatus,
            "`proposed`, `approved` or `rejected`",
        ));
    }
    let adjustments = state.credentials.with_adjustments(|a| {
        a.all()
            .map(view)
            .filter(|v| status.is_none_or(|s| v.status == s))
            .collect()
    });
    Ok(Json(wire::AdjustmentList { adjustments }))
}

/// `GET /v1/ledger/adjustments/{proposal_id}`
#[utoipa::path(
    get,
    path = "/v1/ledger/adjustments/{proposal_id}",
    operation_id = "adjustments_read",
    tag = "adjustments",
    summary = "one ledger adjustment and its decision",
    responses((status = 200, description = "the adjustment", body = wire::AdjustmentView)),
)]
pub async fn read(
    State(state): State<AppState>,
    _caller: Caller,
    Path(proposal_id): Path<Uuid>,
) -> Result<Json<wire::AdjustmentView>, ApiError> {
    Ok(Json(view(&proposal(&state, proposal_id)?)))
}

async fn decide(
    state: AppState,
    caller: Caller,
    proposal_id: Uuid,
    decision: Decision,
    request: wire::DecideAdjustment,
) -> Result<Json<wire::AdjustmentView>, ApiError> {
    let proposal = gpunex_app::adjustments::decide(
        &state.executor(),
        proposal_id,
        decision,
        &request.reason,
        &caller.actor(),
        |proposal| crate::idempotency::prepare_response(StatusCode::OK, &view(proposal)),
    )
    .await?
    .map_err(refused)?;
    Ok(Json(view(&proposal)))
}

/// `POST /v1/ledger/adjustments/{proposal_id}/approve`
#[utoipa::path(
    post,
    path = "/v1/ledger/adjustments/{proposal_id}/approve",
    operation_id = "adjustments_approve",
    tag = "adjustments",
    summary = "approve a ledger adjustment (a second person): its entry is posted",
    responses((status = 200, description = "the adjustment, approved and posted", body = wire::AdjustmentView)),
)]
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(proposal_id): Path<Uuid>,
    request: Option<Json<wire::DecideAdjustment>>,
) -> Result<Json<wire::AdjustmentView>, ApiError> {
    let request = request.map(|Json(r)| r).unwrap_or_default();
    decide(state, caller, proposal_id, Decision::Approved, request).await
}

/// `POST /v1/ledger/adjustments/{proposal_id}/reject`
#[utoipa::path(
    post,
    path = "/v1/ledger/adjustments/{proposal_id}/reject",
    operation_id = "adjustments_reject",
    tag = "adjustments",
    summary = "reject a ledger adjustment (a second person), with the reason",
    responses((status = 200, description = "the adjustment, rejected: nothing posted", body = wire::AdjustmentView)),
)]
pub async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    Path(proposal_id): Path<Uuid>,
    Json(request): Json<wire::DecideAdjustment>,
) -> Result<Json<wire::AdjustmentView>, ApiError> {
    decide(state, caller, proposal_id, Decision::Rejected, request).await
}
