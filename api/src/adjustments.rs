//! Ledger adjustments under dual control (`docs/money.md`, "Adjustments"): one person proposes a
//! balanced entry with a reason and evidence, a second approves it (the entry is posted) or
//! rejects it. Reads are open to finance, which audits them.

use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::adjustments::{self, AdjustmentEvent, Decision};
use gpunex_domain::ledger::{Account, Posting, Side};
use gpunex_domain::money::Usdc;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_projections::adjustments::Proposal;
use gpunex_store::{ExpectedVersion, Metadata, NewEvent};
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::{ApiError, ErrorCode};
use crate::json::Json;
use crate::params::{Path, Query};
use crate::state::AppState;

fn stream(proposal_id: Uuid) -> StreamId {
    StreamId::parse(format!("adjustment-{proposal_id}"))
        .unwrap_or_else(|_| unreachable!("a uuid makes a valid stream id"))
}

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
    let proposed = adjustments::propose(
        Uuid::now_v7(),
        Uuid::now_v7(),
        &request.reason,
        &request.evidence,
        lines,
        &caller.actor(),
        state.clock.now(),
    )
    .map_err(rejection)?;
    let answer = view(&Proposal {
        proposed: proposed.clone(),
        decided: None,
        position: 0,
    });
    crate::idempotency::prepare_response(StatusCode::CREATED, &answer);
    let event = DomainEvent::Adjustment(AdjustmentEvent::Proposed(proposed.clone()));
    let committed = state
        .store
        .append(
            stream(proposed.proposal_id),
            ExpectedVersion::NoStream,
            vec![NewEvent::from_domain(
                Uuid::now_v7(),
                &event,
                Metadata::actor(caller.actor()),
            )],
        )
        .await?;
    state
        .credentials
        .wait_for(committed.last_position())
        .await?;
    Ok((StatusCode::CREATED, Json(answer)))
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

/// Whether `caller` is the person who proposed (the same token, or one token issued by the
/// other): operators hold one token each, and a second token of one's own does not make a
/// second person.
fn same_person(state: &AppState, caller: &Caller, proposed_by: &str) -> bool {
    let actor = caller.actor();
    if actor == proposed_by {
        return true;
    }
    let issued_by = |token: &str| {
        token
            .strip_prefix("token:")
            .and_then(|id| Uuid::parse_str(id).ok())
            .and_then(|id| state.credentials.get(&id))
            .map(|record| record.issued_by)
    };
    issued_by(&actor).is_some_and(|by| by == proposed_by)
        || issued_by(proposed_by).is_some_and(|by| by == actor)
}

async fn decide(
    state: AppState,
    caller: Caller,
    proposal_id: Uuid,
    decision: Decision,
    request: wire::DecideAdjustment,
) -> Result<Json<wire::AdjustmentView>, ApiError> {
    let current = proposal(&state, proposal_id)?;
    let (decided, posted) = adjustments::decide(
        &current.proposed,
        current.decided.as_ref().map(|d| d.decision),
        decision,
        same_person(&state, &caller, &current.proposed.proposed_by),
        &caller.actor(),
        &request.reason,
        state.clock.now(),
    )
    .map_err(rejection)?;
    let answer = view(&Proposal {
        decided: Some(decided.clone()),
        ..current.clone()
    });
    crate::idempotency::prepare_response(StatusCode::OK, &answer);
    let metadata = Metadata::actor(caller.actor());
    let mut events = vec![NewEvent::from_domain(
        Uuid::now_v7(),
        &DomainEvent::Adjustment(AdjustmentEvent::Decided(decided)),
        metadata.clone(),
    )];
    if let Some(posted) = posted {
        events.push(NewEvent::from_domain(
            Uuid::now_v7(),
            &DomainEvent::AdjustmentPosted(posted),
            metadata,
        ));
    }
    // At the proposal's version 1: a proposal is decided once, whichever process decides.
    let committed = state
        .store
        .append(stream(proposal_id), ExpectedVersion::Exact(1), events)
        .await
        .map_err(|error| match error {
            gpunex_store::AppendError::WrongExpectedVersion { .. } => ApiError::refused(
                ErrorCode::AlreadyDecided,
                "the adjustment was decided meanwhile",
            ),
            other => crate::error::append_failure(other),
        })?;
    state
        .credentials
        .wait_for(committed.last_position())
        .await?;
    Ok(Json(answer))
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
