//! Token endpoints: issue, list, rotate, revoke. Admins manage every token; a provider manages
//! its own and issues agent tokens for its own machines; no other role may touch tokens.

use crate::json::Json;
use crate::params::Path;
use axum::extract::State;
use axum::http::{HeaderName, StatusCode, header};
use gpunex_app::command::Rejection;
use gpunex_domain::codes::ErrorCode;
use gpunex_domain::credentials::{CredentialRejection, Role, TokenIssued};
use gpunex_projections::credentials::CredentialRecord;
use gpunex_store::Store;
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::{Caller, NewToken};
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_app::ReadModels;

fn rejection(error: CredentialRejection) -> ApiError {
    match error {
        CredentialRejection::InvalidLabel => {
            ApiError::body("/label", error.code(), error.to_string())
        }
        CredentialRejection::InvalidSecretHash => {
            ApiError::body("/token", error.code(), error.to_string())
        }
        CredentialRejection::CallerRevoked => ApiError::Unauthorized,
        CredentialRejection::AlreadyRevoked | CredentialRejection::FirstTokenClaimed => {
            ApiError::Refused {
                code: error.code(),
                detail: error.to_string(),
            }
        }
    }
}

/// A response that carries a token must not be kept by any cache.
const NO_STORE: [(HeaderName, &str); 1] = [(header::CACHE_CONTROL, "no-store")];

/// Most active (unrevoked) tokens bound to one provider.
pub const PROVIDER_TOKENS_ACTIVE_MAX: usize = 200;
/// Most active renter tokens of one person.
pub const PERSON_TOKENS_ACTIVE_MAX: usize = 20;

pub use gpunex_app::credentials::TokenRequest;

/// A credential command the executor refused, in the API's words.
pub(crate) fn refused(refusal: Rejection<CredentialRejection>) -> ApiError {
    crate::error::command_refused(
        refusal,
        rejection,
        "the token changed while this request ran; read it again",
    )
}

/// Issues a token (and, when rotating, revokes the one it replaces) in one atomic append on the
/// command executor, and waits until `models` have folded it. Used by the API, the benches and
/// the tests; the command line's bootstrap, which hosts no read models, uses
/// `gpunex_app::credentials::issue_unattended`.
pub async fn issue_token(
    store: &Store,
    models: &ReadModels,
    request: TokenRequest<'_>,
) -> Result<(NewToken, TokenIssued), ApiError> {
    gpunex_app::credentials::issue(&gpunex_app::command::Executor::new(store, models), &request)
        .await?
        .map_err(refused)
}

pub fn role_to_wire(role: Role) -> wire::TokenRole {
    match role {
        Role::Admin => wire::TokenRole::Admin,
        Role::Finance => wire::TokenRole::Finance,
        Role::Treasury => wire::TokenRole::Treasury,
        Role::Provider { provider_id } => wire::TokenRole::Provider { provider_id },
        Role::Agent {
            provider_id,
            machine_id,
        } => wire::TokenRole::Agent {
            provider_id,
            machine_id,
        },
        Role::Renter { user_id } => wire::TokenRole::Renter { user_id },
        Role::User { user_id } => wire::TokenRole::User { user_id },
    }
}

pub fn info(record: &CredentialRecord) -> wire::TokenInfo {
    wire::TokenInfo {
        token_id: record.token_id,
        role: role_to_wire(record.role),
        label: record.label.clone(),
        issued_at: timestamp(record.issued_at.unix_micros()),
        issued_by: record.issued_by.clone(),
        replaces: record.replaces,
        revoked_at: record.revoked_at.map(|t| timestamp(t.unix_micros())),
    }
}

pub fn issued_info(issued: &TokenIssued) -> wire::TokenInfo {
    wire::TokenInfo {
        token_id: issued.token_id,
        role: role_to_wire(issued.role),
        label: issued.label.clone(),
        issued_at: timestamp(issued.issued_at.unix_micros()),
        issued_by: issued.issued_by.clone(),
        replaces: issued.replaces,
        revoked_at: None,
    }
}

/// Whose tokens a caller may see and manage.
enum Owner {
    Everyone,
    Provider(Uuid),
    Person(Uuid),
}

fn owner_of(caller: &Caller) -> Result<Owner, ApiError> {
    match caller.role {
        Role::Admin => Ok(Owner::Everyone),
        Role::Provider { provider_id } => Ok(Owner::Provider(provider_id)),
        Role::User { user_id } => Ok(Owner::Person(user_id)),
        _ => Err(ApiError::Forbidden),
    }
}

impl Owner {
    fn holds(&self, role: Role) -> bool {
        match self {
            Owner::Everyone => true,
            Owner::Provider(provider_id) => role.provider_id() == Some(*provider_id),
            Owner::Person(user_id) => role == Role::Renter { user_id: *user_id },
        }
    }
}

/// The token `token_id` if the caller may manage it; other owners' tokens do not exist for a
/// provider or a person (404, not 403, so ids cannot be probed).
fn manageable(
    state: &AppState,
    caller: &Caller,
    token_id: Uuid,
) -> Result<CredentialRecord, ApiError> {
    let owner = owner_of(caller)?;
    state
        .credentials
        .get(&token_id)
        .filter(|record| owner.holds(record.role))
        .ok_or(ApiError::NotFound("token"))
}

/// The machine a new agent token of `provider_id` is bound to. Machine ids are minted by the
/// platform: without `requested`, a new one; a requested id must already be held by the same
/// provider (registered to it, or bound to one of its earlier agent tokens), so no provider can
/// take an id another holds or will register.
pub fn agent_machine(
    cache: &ReadModels,
    provider_id: Uuid,
    requested: Option<Uuid>,
) -> Result<Uuid, ApiError> {
    let Some(machine_id) = requested else {
        return Ok(Uuid::now_v7());
    };
    match cache.machine_holder(&machine_id) {
        Some(holder) if holder == provider_id => Ok(machine_id),
        Some(_) => Err(ApiError::Refused {
            code: ErrorCode::MachineRegisteredElsewhere,
            detail: format!("machine {machine_id} belongs to another provider"),
        }),
        None => Err(ApiError::Refused {
            code: ErrorCode::MachineIdUnknown,
            detail: format!(
                "no machine {machine_id} is bound to this provider; machine ids are minted by the platform: omit machine_id to get a new one"
            ),
        }),
    }
}

/// The role a caller may issue for a request: an admin any role, a provider agent tokens for
/// itself, a person renter tokens for themselves.
fn resolve_role(
    cache: &ReadModels,
    caller: Role,
    requested: wire::RequestedRole,
) -> Result<Role, ApiError> {
    use wire::RequestedRole as R;
    let own = |given: Option<Uuid>, own: Uuid| given.is_none_or(|given| given == own);
    match (caller, requested) {
        (Role::Admin, R::Admin) => Ok(Role::Admin),
        (Role::Admin, R::Finance) => Ok(Role::Finance),
        (Role::Admin, R::Treasury) => Ok(Role::Treasury),
        (Role::Admin, R::Provider { provider_id }) => Ok(Role::Provider { provider_id }),
        (
            Role::Admin,
            R::Agent {
                provider_id: Some(provider_id),
                machine_id,
            },
        ) => Ok(Role::Agent {
            provider_id,
            machine_id: agent_machine(cache, provider_id, machine_id)?,
        }),
        (Role::Admin, R::Agent { provider_id: None, .. }) => Err(ApiError::body(
            "/role/provider_id",
            ErrorCode::MissingField,
            "an agent token is bound to a provider: name it",
        )),
        (Role::Admin, R::Renter { user_id: Some(user_id) }) => cache
            .user(&user_id)
            .map(|_| Role::Renter { user_id })
            .ok_or_else(|| {
                ApiError::body("/role/user_id", ErrorCode::UnknownUser, "no such person")
            }),
        (Role::Admin, R::Renter { user_id: None }) => Err(ApiError::body(
            "/role/user_id",
            ErrorCode::MissingField,
            "a renter token is bound to a person: name them",
        )),
        (
            Role::Provider {
                provider_id: caller_provider,
            },
            R::Agent {
                provider_id,
                machine_id,
            },
        ) if own(provider_id, caller_provider) => Ok(Role::Agent {
            provider_id: caller_provider,
            machine_id: agent_machine(cache, caller_provider, machine_id)?,
        }),
        (Role::User { user_id }, R::Renter { user_id: given }) if own(given, user_id) => {
            Ok(Role::Renter { user_id })
        }
        _ => Err(ApiError::Refused {
            code: ErrorCode::RoleNotIssuable,
            detail: "you may not issue a token with this role: an admin issues any, a provider agent tokens for itself, a person renter tokens for themselves".to_owned(),
        }),
    }
}

/// The label of a token when the request names none.
fn default_label(role: Role) -> String {
    match role {
        Role::Agent { machine_id, .. } => format!("machine {machine_id}"),
        role => format!("{} token", role.name()),
    }
}

#[utoipa::path(
    post,
    path = "/v1/tokens",
    operation_id = "tokens_issue",
    tag = "tokens",
    summary = "issue a token, shown once",
    responses((status = 201, description = "issue a token, shown once", body = wire::IssuedToken)),
)]
pub async fn issue(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<wire::IssueToken>,
) -> Result<
    (
        StatusCode,
        [(HeaderName, &'static str); 1],
        Json<wire::IssuedToken>,
    ),
    ApiError,
> {
    let role = resolve_role(&state.credentials, caller.role, request.role)?;
    if let Some(provider_id) = role.provider_id() {
        let active = state
            .credentials
            .list(Some(provider_id))
            .iter()
            .filter(|record| record.revoked_at.is_none())
            .count();
        if active >= PROVIDER_TOKENS_ACTIVE_MAX {
            return Err(ApiError::Refused {
                code: ErrorCode::TooManyTokens,
                detail: format!(
                    "a provider may hold at most {PROVIDER_TOKENS_ACTIVE_MAX} active tokens; revoke some first"
                ),
            });
        }
    }
    if let Role::Renter { user_id } = role {
        let active = state
            .credentials
            .list_of_user(user_id)
            .iter()
            .filter(|record| record.revoked_at.is_none())
            .count();
        if active >= PERSON_TOKENS_ACTIVE_MAX {
            return Err(ApiError::Refused {
                code: ErrorCode::TooManyTokens,
                detail: format!(
                    "a person may hold at most {PERSON_TOKENS_ACTIVE_MAX} active renter tokens; revoke some first"
                ),
            });
        }
    }
    let actor = caller.actor();
    let label = request.label.unwrap_or_else(|| default_label(role));
    let (new, issued) = issue_token(
        &state.store,
        &state.credentials,
        TokenRequest {
            caller: Some(caller.token_id),
            ..TokenRequest::new(role, &label, &actor)
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        NO_STORE,
        Json(wire::IssuedToken {
            token: new.token,
            info: issued_info(&issued),
        }),
    ))
}

/// Largest page of tokens.
pub const TOKENS_PAGE_MAX: usize = 100;

/// `GET /v1/tokens?after=<token id>&limit=`: oldest first, without secrets.
#[utoipa::path(
    get,
    path = "/v1/tokens",
    operation_id = "tokens_list",
    tag = "tokens",
    summary = "tokens, without secrets",
    params(
        ("after" = Option<uuid::Uuid>, Query, description = "a token id: the page starts after it (from `next_after`)"),
        ("limit" = Option<u64>, Query, minimum = 1, maximum = 100, description = "1 to 100 (default 100)"),
    ),
    responses((status = 200, description = "tokens, without secrets", body = wire::TokenList)),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    crate::params::Query(query): crate::params::Query,
) -> Result<Json<wire::TokenList>, ApiError> {
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=TOKENS_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::query(
                    "limit",
                    ErrorCode::OutOfRange,
                    format!("1 to {TOKENS_PAGE_MAX}"),
                )
            })?,
        None => TOKENS_PAGE_MAX,
    };
    let all = match owner_of(&caller)? {
        Owner::Everyone => state.credentials.list(None),
        Owner::Provider(provider_id) => state.credentials.list(Some(provider_id)),
        Owner::Person(user_id) => state.credentials.list_of_user(user_id),
    };
    let start = match query.get("after") {
        Some(cursor) => {
            let after = Uuid::try_parse(cursor).map_err(|_| {
                ApiError::query(
                    "after",
                    ErrorCode::InvalidCursor,
                    "a cursor from next_after",
                )
            })?;
            all.iter()
                .position(|record| record.token_id == after)
                .map(|index| index + 1)
                .ok_or_else(|| {
                    ApiError::query(
                        "after",
                        ErrorCode::InvalidCursor,
                        "a cursor from next_after",
                    )
                })?
        }
        None => 0,
    };
    let page: Vec<_> = all.iter().skip(start).take(limit + 1).collect();
    let next_after = (page.len() > limit).then(|| page[limit - 1].token_id);
    let tokens = page.into_iter().take(limit).map(info).collect();
    Ok(Json(wire::TokenList { tokens, next_after }))
}

#[utoipa::path(
    post,
    path = "/v1/tokens/{token_id}/rotate",
    operation_id = "tokens_rotate",
    tag = "tokens",
    summary = "replace a token with a new one",
    responses((status = 201, description = "replace a token with a new one", body = wire::IssuedToken)),
)]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path(token_id): Path<Uuid>,
) -> Result<
    (
        StatusCode,
        [(HeaderName, &'static str); 1],
        Json<wire::IssuedToken>,
    ),
    ApiError,
> {
    let old = manageable(&state, &caller, token_id)?;
    if old.revoked_at.is_some() {
        return Err(rejection(CredentialRejection::AlreadyRevoked));
    }
    let actor = caller.actor();
    let (new, issued) = issue_token(
        &state.store,
        &state.credentials,
        TokenRequest {
            replaces: Some(old.token_id),
            caller: Some(caller.token_id),
            ..TokenRequest::new(old.role, &old.label, &actor)
        },
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        NO_STORE,
        Json(wire::IssuedToken {
            token: new.token,
            info: issued_info(&issued),
        }),
    ))
}

#[utoipa::path(
    post,
    path = "/v1/tokens/{token_id}/revoke",
    operation_id = "tokens_revoke",
    tag = "tokens",
    summary = "revoke a token at once",
    responses((status = 200, description = "revoke a token at once", body = wire::TokenInfo)),
)]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path(token_id): Path<Uuid>,
    body: Option<Json<wire::RevokeToken>>,
) -> Result<Json<wire::TokenInfo>, ApiError> {
    manageable(&state, &caller, token_id)?;
    let reason = body.map(|Json(b)| b.reason).unwrap_or_default();
    gpunex_app::credentials::revoke(
        &state.executor(),
        token_id,
        Some(caller.token_id),
        &caller.actor(),
        &reason,
    )
    .await?
    .map_err(refused)?;
    let record = state
        .credentials
        .get(&token_id)
        .ok_or(ApiError::NotFound("token"))?;
    Ok(Json(info(&record)))
}
