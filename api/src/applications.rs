//! Provider applications over HTTP: a signed-in person applies, reads, answers and withdraws;
//! admins (reviewers) list, request information, approve with a tier, or reject. Every step runs
//! on the command executor (`gpunex_app::applications`): decided by `domain::onboarding::decide`
//! against the application folded from its stream and appended at that stream's version, so two
//! racing decisions cannot both land.

use crate::json::Json;
use crate::params::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::codes::ErrorCode;
use gpunex_domain::credentials::Role;
use gpunex_domain::onboarding::{
    self, Application, ApplicationCommand, ApplicationInput, ApplicationRejection,
    ApplicationStatus, Tier,
};
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use crate::tokens::{TokenRequest, issue_token};
use gpunex_domain::time::Timestamp;

/// Largest page of applications.
pub const APPLICATIONS_PAGE_MAX: usize = 100;

fn snake(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub fn view(application: &Application, now: Timestamp) -> wire::ApplicationView {
    wire::ApplicationView {
        application_id: application.application_id,
        applicant_user_id: application.applicant_user_id,
        status: snake(application.status),
        submitted_at: timestamp(application.submitted_at.unix_micros()),
        decided_at: application.decided_at.map(|t| timestamp(t.unix_micros())),
        tier: application.tier.map(snake),
        provider_id: application.provider_id,
        information_requests: application.information_requests,
        overdue: application.is_overdue(now),
        form: serde_json::to_value(&application.form).unwrap_or_default(),
        enterprise_violations: onboarding::tier_violations(&application.form, Tier::Enterprise)
            .iter()
            .filter_map(|v| serde_json::to_value(v).ok())
            .collect(),
        unlisted_models: application
            .form
            .gpus
            .iter()
            .enumerate()
            .filter_map(|(i, entry)| match &entry.model {
                onboarding::GpuModelChoice::Unlisted(name) => Some(wire::UnlistedModel {
                    field: format!("/gpus/{i}/model"),
                    name: name.clone(),
                    note: "not a catalog model nor one of its names (GET /v1/catalog/models): it is evaluated case by case, and the Enterprise tier needs catalog models until a reviewer adds it".to_owned(),
                }),
                onboarding::GpuModelChoice::Catalog(_) => None,
            })
            .collect(),
        steps: None,
    }
}

/// An application event as a step its applicant and reviewers read (reviewers' ids left out).
fn step_view(event: &onboarding::ApplicationEvent) -> wire::ApplicationStep {
    use onboarding::ApplicationEvent as E;
    let (at, kind, text, tier) = match event {
        E::Submitted(e) => (e.submitted_at, "submitted", None, None),
        E::InformationRequested(e) => (
            e.requested_at,
            "information_requested",
            Some(e.message.clone()),
            None,
        ),
        E::InformationProvided(e) => (
            e.provided_at,
            "information_provided",
            Some(e.answer.clone()),
            None,
        ),
        E::Approved(e) => (e.decided_at, "approved", None, Some(snake(e.tier))),
        E::Rejected(e) => (e.decided_at, "rejected", Some(e.reason.clone()), None),
        E::Withdrawn(e) => (e.withdrawn_at, "withdrawn", None, None),
    };
    wire::ApplicationStep {
        at: timestamp(at.unix_micros()),
        kind: kind.to_owned(),
        text,
        tier,
    }
}

fn rejection(error: ApplicationRejection) -> ApiError {
    let code = error.code();
    match error {
        ApplicationRejection::NotFound => ApiError::NotFound("application"),
        ApplicationRejection::NotTheApplicant => ApiError::Forbidden,
        ApplicationRejection::InvalidText { field } => {
            ApiError::body(&format!("/{field}"), code, error.to_string())
        }
        _ => ApiError::Refused {
            code,
            detail: error.to_string(),
        },
    }
}

fn user_of(caller: &Caller) -> Result<Uuid, ApiError> {
    match caller.role {
        Role::User { user_id } => Ok(user_id),
        _ => Err(ApiError::Forbidden),
    }
}

/// Decides `command` for the application on the command executor (`gpunex_app::applications`);
/// answers the application after its new events.
async fn execute(
    state: &AppState,
    caller: &Caller,
    application_id: Uuid,
    command: ApplicationCommand,
) -> Result<Application, ApiError> {
    let exec = gpunex_app::command::Executor::new(&state.store, &state.credentials);
    gpunex_app::applications::execute(&exec, &caller.actor(), application_id, &command)
        .await?
        .map_err(|refused| {
            crate::error::command_refused(
                refused,
                rejection,
                "the application changed while this request ran; read it again",
            )
        })
}

/// The application folded from its own stream.
async fn load(state: &AppState, id: Uuid) -> Result<Application, ApiError> {
    gpunex_app::applications::load(&state.store, id)
        .await?
        .0
        .ok_or(ApiError::NotFound("application"))
}

/// An applicant reads only their own; admins read all. Others' applications do not exist.
fn visible(caller: &Caller, application: &Application) -> Result<(), ApiError> {
    match caller.role {
        Role::Admin => Ok(()),
        Role::User { user_id } if user_id == application.applicant_user_id => Ok(()),
        _ => Err(ApiError::NotFound("application")),
    }
}

#[utoipa::path(
    post,
    path = "/v1/applications",
    operation_id = "applications_submit",
    tag = "applications",
    summary = "apply as a provider",
    responses((status = 201, description = "apply as a provider", body = wire::ApplicationView)),
)]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    Json(input): Json<ApplicationInput>,
) -> Result<(StatusCode, Json<wire::ApplicationView>), ApiError> {
    let applicant_user_id = user_of(&caller)?;
    let added = state.credentials.added_models();
    let catalog = gpunex_domain::gpu::Catalog { added: &added };
    let form = onboarding::validate_application(&input, &catalog).map_err(|errors| {
        ApiError::InvalidRequest(
            errors
                .into_iter()
                .map(|e| {
                    crate::error::field_error(
                        crate::error::Location::Body,
                        &e.field,
                        e.code,
                        e.message,
                    )
                })
                .collect(),
        )
    })?;
    let application_id = Uuid::now_v7();
    let command = ApplicationCommand::Submit {
        application_id,
        applicant_user_id,
        form,
        at: state.clock.now(),
    };
    let application = execute(&state, &caller, application_id, command).await?;
    // The registry shows it soon; the response does not wait for that.
    Ok((
        StatusCode::CREATED,
        Json(view(&application, state.clock.now())),
    ))
}

#[utoipa::path(
    get,
    path = "/v1/applications/{id}",
    operation_id = "applications_read",
    tag = "applications",
    summary = "one application, with its steps (the reviewers' questions, the answers, the decision)",
    responses((status = 200, description = "one application, with its steps", body = wire::ApplicationView)),
)]
pub async fn read(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let application = state
        .credentials
        .application(&id)
        .ok_or(ApiError::NotFound("application"))?;
    visible(&caller, &application)?;
    let steps = gpunex_app::applications::events(&state.store, id).await?;
    Ok(Json(wire::ApplicationView {
        steps: Some(steps.iter().map(step_view).collect()),
        ..view(&application, state.clock.now())
    }))
}

/// `GET /v1/applications?status=&overdue=true&after=&limit=`: reviewers, oldest first. A
/// signed-in person gets their own applications.
#[utoipa::path(
    get,
    path = "/v1/applications",
    operation_id = "applications_list",
    tag = "applications",
    summary = "applications: all for reviewers, your own for people",
    params(
        ("status" = Option<String>, Query, pattern = "^(under_review|information_requested|approved|rejected|withdrawn)$", description = "only applications in this status: `under_review`, `information_requested`, `approved`, `rejected` or `withdrawn`"),
        ("overdue" = Option<bool>, Query, description = "only applications past their review target (`true`)"),
        ("after" = Option<u64>, Query, description = "a submission position: the page starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 100, description = "1 to 100 (default 100)"),
    ),
    responses((status = 200, description = "applications", body = wire::ApplicationList)),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query,
) -> Result<Json<wire::ApplicationList>, ApiError> {
    let status: Option<ApplicationStatus> = match query.get("status") {
        Some(text) => Some(
            serde_json::from_value(serde_json::Value::String(text.clone())).map_err(|_| {
                ApiError::query(
                    "status",
                    ErrorCode::InvalidStatus,
                    "under_review, information_requested, approved, rejected or withdrawn",
                )
            })?,
        ),
        None => None,
    };
    let overdue_only = match query.get("overdue").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::query(
                "overdue",
                ErrorCode::InvalidFilter,
                "true or false",
            ));
        }
    };
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=APPLICATIONS_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::OutOfRange,
                    format!("1 to {APPLICATIONS_PAGE_MAX}"),
                )
            })?,
        None => APPLICATIONS_PAGE_MAX,
    };
    // The cursor is the log position of the last application of the previous page.
    let after = match query.get("after") {
        Some(cursor) => Some(cursor.parse::<u64>().map_err(|_| {
            ApiError::query(
                "after",
                ErrorCode::InvalidCursor,
                "a cursor from next_after",
            )
        })?),
        None => None,
    };
    let at = state.clock.now();
    let mut page: Vec<(u64, Application)> = state
        .credentials
        .applications()
        .into_iter()
        .filter(|(position, a)| {
            after.is_none_or(|after| *position > after)
                && match caller.role {
                    Role::User { user_id } => a.applicant_user_id == user_id,
                    _ => true,
                }
                && status.is_none_or(|s| s == a.status)
                && (!overdue_only || a.is_overdue(at))
        })
        .take(limit + 1)
        .collect();
    // One more than asked says whether another page exists.
    let more = page.len() > limit;
    page.truncate(limit);
    Ok(Json(wire::ApplicationList {
        next_after: if more {
            page.last().map(|(position, _)| position.to_string())
        } else {
            None
        },
        applications: page
            .iter()
            .map(|(_, a)| view(a, state.clock.now()))
            .collect(),
    }))
}

async fn step(
    state: AppState,
    caller: Caller,
    id: Uuid,
    make: impl FnOnce(&Caller) -> Result<ApplicationCommand, ApiError>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let application = load(&state, id).await?;
    visible(&caller, &application)?;
    let command = make(&caller)?;
    let application = execute(&state, &caller, id, command).await?;
    Ok(Json(view(&application, state.clock.now())))
}

#[utoipa::path(
    post,
    path = "/v1/applications/{id}/withdraw",
    operation_id = "applications_withdraw",
    tag = "applications",
    summary = "withdraw your application",
    responses((status = 200, description = "withdraw your application", body = wire::ApplicationView)),
)]
pub async fn withdraw(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let now = state.clock.now();
    step(state, caller, id, |caller| {
        Ok(ApplicationCommand::Withdraw {
            applicant_user_id: user_of(caller)?,
            at: now,
        })
    })
    .await
}

#[utoipa::path(
    post,
    path = "/v1/applications/{id}/answer",
    operation_id = "applications_answer",
    tag = "applications",
    summary = "answer an information request",
    responses((status = 200, description = "answer an information request", body = wire::ApplicationView)),
)]
pub async fn answer(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(message): Json<wire::Message>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let now = state.clock.now();
    step(state, caller, id, |caller| {
        Ok(ApplicationCommand::ProvideInformation {
            applicant_user_id: user_of(caller)?,
            answer: message.text,
            at: now,
        })
    })
    .await
}

#[utoipa::path(
    post,
    path = "/v1/applications/{id}/request-information",
    operation_id = "applications_request_information",
    tag = "applications",
    summary = "ask the applicant for more",
    responses((status = 200, description = "ask the applicant for more", body = wire::ApplicationView)),
)]
pub async fn request_information(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(message): Json<wire::Message>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let now = state.clock.now();
    step(state, caller, id, |caller| {
        Ok(ApplicationCommand::RequestInformation {
            reviewer_user_id: caller.token_id,
            message: message.text,
            at: now,
        })
    })
    .await
}

#[utoipa::path(
    post,
    path = "/v1/applications/{id}/reject",
    operation_id = "applications_reject",
    tag = "applications",
    summary = "reject with a reason",
    responses((status = 200, description = "reject with a reason", body = wire::ApplicationView)),
)]
pub async fn reject(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(message): Json<wire::Message>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let now = state.clock.now();
    step(state, caller, id, |caller| {
        Ok(ApplicationCommand::Reject {
            reviewer_user_id: caller.token_id,
            reason: message.text,
            at: now,
        })
    })
    .await
}

#[utoipa::path(
    post,
    path = "/v1/applications/{id}/approve",
    operation_id = "applications_approve",
    tag = "applications",
    summary = "approve with a tier",
    responses((status = 200, description = "approve with a tier", body = wire::ApplicationView)),
)]
pub async fn approve(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
    Json(approval): Json<wire::Approval>,
) -> Result<Json<wire::ApplicationView>, ApiError> {
    let tier: Tier = serde_json::from_value(serde_json::Value::String(approval.tier))
        .map_err(|_| ApiError::body("/tier", ErrorCode::InvalidTier, "enterprise or community"))?;
    let now = state.clock.now();
    step(state, caller, id, |caller| {
        Ok(ApplicationCommand::Approve {
            reviewer_user_id: caller.token_id,
            tier,
            provider_id: Uuid::now_v7(),
            at: now,
        })
    })
    .await
}

/// `POST /v1/applications/{id}/provider-token`: the applicant of an approved application takes
/// the provider's first API token, shown once. Later tokens come from `/v1/tokens` with it.
#[utoipa::path(
    post,
    path = "/v1/applications/{id}/provider-token",
    operation_id = "applications_claim_provider_token",
    tag = "applications",
    summary = "take the approved provider's first token, once",
    responses((status = 201, description = "take the approved provider's first token, once", body = wire::IssuedToken)),
)]
pub async fn claim_provider_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<Uuid>,
) -> Result<
    (
        StatusCode,
        [(axum::http::HeaderName, &'static str); 1],
        Json<wire::IssuedToken>,
    ),
    ApiError,
> {
    let application = state
        .credentials
        .application(&id)
        .ok_or(ApiError::NotFound("application"))?;
    visible(&caller, &application)?;
    let Some(provider_id) = application
        .provider_id
        .filter(|_| application.status == ApplicationStatus::Approved)
    else {
        return Err(ApiError::Refused {
            code: ErrorCode::NotApproved,
            detail: "the application is not approved".to_owned(),
        });
    };
    if !state.credentials.list(Some(provider_id)).is_empty() {
        return Err(ApiError::Refused {
            code: ErrorCode::AlreadyIssued,
            detail: "the provider's first token was already issued; manage tokens with it"
                .to_owned(),
        });
    }
    let actor = caller.actor();
    let (new, issued) = issue_token(
        &state.store,
        &state.credentials,
        TokenRequest {
            caller: Some(caller.token_id),
            // Exclusive in the store, not just checked here: two racing claims cannot both land.
            first_for_provider: Some((provider_id, id)),
            ..TokenRequest::new(
                Role::Provider { provider_id },
                "first provider token",
                &actor,
            )
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(wire::IssuedToken {
            token: new.token,
            info: crate::tokens::issued_info(&issued),
        }),
    ))
}
