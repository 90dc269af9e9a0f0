//! Token endpoints: issue, list, rotate, revoke. Admins manage every token; a provider manages
//! its own and issues agent tokens for its own machines; no other role may touch tokens.

use crate::json::Json;
use crate::params::Path;
use axum::extract::State;
use axum::http::{HeaderName, StatusCode, header};
use gpunex_domain::DomainEvent;
use gpunex_domain::codes::ErrorCode;
use gpunex_domain::credentials::{self, CredentialEvent, CredentialRejection, Role, TokenIssued};
use gpunex_domain::time::Timestamp;
use gpunex_projections::credentials::CredentialRecord;
use gpunex_store::{AppendError, ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::{Caller, NewToken};
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_app::ReadModels;

fn stream_of(token_id: Uuid) -> gpunex_domain::StreamId {
    gpunex_domain::StreamId::parse(format!("credential-{token_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

fn rejection(error: CredentialRejection) -> ApiError {
    match error {
        CredentialRejection::InvalidLabel => {
            ApiError::body("/label", error.code(), error.to_string())
        }
        CredentialRejection::InvalidSecretHash => {
            ApiError::body("/token", error.code(), error.to_string())
        }
        CredentialRejection::AlreadyRevoked => ApiError::Refused {
            code: error.code(),
            detail: error.to_string(),
        },
    }
}

fn append_error(error: AppendError) -> ApiError {
    match error {
        AppendError::Store(error) => error.into(),
        AppendError::WrongExpectedVersion { stream_id, .. }
            if stream_id.starts_with("provider_token_claim-") =>
        {
            ApiError::Refused {
                code: ErrorCode::AlreadyIssued,
                detail: "the provider's first token was already issued; manage tokens with it"
                    .to_owned(),
            }
        }
        AppendError::WrongExpectedVersion { .. } => ApiError::Refused {
            code: ErrorCode::ConcurrentChange,
            detail: "the token changed while this request ran; read it again".to_owned(),
        },
        other => crate::error::append_failure(other),
    }
}

/// A response that carries a token must not be kept by any cache.
const NO_STORE: [(HeaderName, &str); 1] = [(header::CACHE_CONTROL, "no-store")];

/// Most active (unrevoked) tokens bound to one provider.
pub const PROVIDER_TOKENS_ACTIVE_MAX: usize = 200;
/// Most active renter tokens of one person.
pub const PERSON_TOKENS_ACTIVE_MAX: usize = 20;

/// An empty append to the caller's own credential stream, expecting it at version 1 (issued,
/// not revoked): the write fails if the caller was revoked meanwhile, in any process.
fn caller_still_active(caller_token_id: Uuid) -> StreamAppend {
    StreamAppend {
        stream_id: stream_of(caller_token_id),
        expected: ExpectedVersion::Exact(1),
        events: Vec::new(),
    }
}

/// Issues a token (and, when rotating, revokes the one it replaces) in one atomic append, then
/// applies the events to `cache` at once. Used by the API and by `gpunex admin create-token`.
/// `caller` is the token making the request, which must still be active when the append commits.
/// What to issue: the role and label, who asks, and what it replaces or how long it lives.
pub struct TokenRequest<'a> {
    pub role: Role,
    pub label: &'a str,
    /// `token:<id>`, `user:<id>` or `cli`.
    pub issued_by: &'a str,
    /// The token a rotation retires (revoked in the same append).
    pub replaces: Option<&'a CredentialRecord>,
    /// The requesting token, which must still be active when the append commits.
    pub caller: Option<Uuid>,
    /// Sessions expire; API tokens do not.
    pub expires_at: Option<Timestamp>,
    /// `(provider_id, application_id)`: this is the provider's first token, claimable once.
    pub first_for_provider: Option<(Uuid, Uuid)>,
}

impl<'a> TokenRequest<'a> {
    /// An API token of `role` issued by `issued_by`, replacing nothing, never expiring.
    pub fn new(role: Role, label: &'a str, issued_by: &'a str) -> TokenRequest<'a> {
        TokenRequest {
            role,
            label,
            issued_by,
            replaces: None,
            caller: None,
            expires_at: None,
            first_for_provider: None,
        }
    }
}

pub async fn issue_token(
    store: &Store,
    cache: Option<&ReadModels>,
    request: TokenRequest<'_>,
) -> Result<(NewToken, TokenIssued), ApiError> {
    let TokenRequest {
        role,
        label,
        issued_by,
        replaces,
        caller,
        expires_at,
        first_for_provider,
    } = request;
    let at = store.clock().now();
    let new = NewToken::generate();
    let mut issued = credentials::issue(
        new.token_id,
        role,
        label,
        &new.secret_sha256,
        issued_by,
        replaces.map(|r| r.token_id),
        at,
    )
    .map_err(rejection)?;
    issued.expires_at = expires_at;
    let mut events = vec![DomainEvent::Credential(CredentialEvent::Issued(
        issued.clone(),
    ))];
    let mut streams = vec![StreamAppend {
        stream_id: stream_of(new.token_id),
        expected: ExpectedVersion::NoStream,
        events: vec![NewEvent::from_domain(
            Uuid::now_v7(),
            &events[0],
            Metadata::actor(issued_by),
        )],
    }];
    if let Some(old) = replaces {
        let revoked = credentials::revoke(
            old.revoked_at.is_some(),
            old.token_id,
            issued_by,
            "rotated",
            at,
        )
        .map_err(rejection)?;
        let event = DomainEvent::Credential(CredentialEvent::Revoked(revoked));
        streams.push(StreamAppend {
            stream_id: stream_of(old.token_id),
            // Issued is version 1; anything later means it was revoked meanwhile.
            expected: ExpectedVersion::Exact(1),
            events: vec![NewEvent::from_domain(
                Uuid::now_v7(),
                &event,
                Metadata::actor(issued_by),
            )],
        });
        events.push(event);
    }
    if let Some((provider_id, application_id)) = first_for_provider {
        let claimed = DomainEvent::Credential(CredentialEvent::ProviderTokenClaimed(
            credentials::ProviderTokenClaimed {
                provider_id,
                application_id,
                token_id: new.token_id,
                claimed_at: at,
            },
        ));
        streams.push(StreamAppend {
            stream_id: gpunex_domain::StreamId::parse(format!(
                "provider_token_claim-{provider_id}"
            ))
            .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id")),
            expected: ExpectedVersion::NoStream,
            events: vec![NewEvent::from_domain(
                Uuid::now_v7(),
                &claimed,
                Metadata::actor(issued_by),
            )],
        });
    }
    if let Some(caller) = caller.filter(|caller| Some(*caller) != replaces.map(|r| r.token_id)) {
        streams.push(caller_still_active(caller));
    }
    let committed = store.append_streams(streams).await.map_err(append_error)?;
    if let Some(cache) = cache {
        cache.wait_for(committed.last_position()).await?;
    }
    Ok((new, issued))
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
        Some(&state.credentials),
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
        Some(&state.credentials),
        TokenRequest {
            replaces: Some(&old),
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
    let record = manageable(&state, &caller, token_id)?;
    let reason = body.map(|Json(b)| b.reason).unwrap_or_default();
    let revoked = credentials::revoke(
        record.revoked_at.is_some(),
        token_id,
        &caller.actor(),
        &reason,
        state.clock.now(),
    )
    .map_err(rejection)?;
    let event = DomainEvent::Credential(CredentialEvent::Revoked(revoked));
    let mut streams = vec![StreamAppend {
        stream_id: stream_of(token_id),
        expected: ExpectedVersion::Exact(1),
        events: vec![NewEvent::from_domain(
            Uuid::now_v7(),
            &event,
            Metadata::actor(caller.actor()),
        )],
    }];
    if caller.token_id != token_id {
        streams.push(caller_still_active(caller.token_id));
    }
    let committed = state
        .store
        .append_streams(streams)
        .await
        .map_err(append_error)?;
    state
        .credentials
        .wait_for(committed.last_position())
        .await?;
    let record = state
        .credentials
        .get(&token_id)
        .ok_or(ApiError::NotFound("token"))?;
    Ok(Json(info(&record)))
}
