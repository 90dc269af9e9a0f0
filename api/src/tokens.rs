//! Token endpoints: issue, list, rotate, revoke. Admins manage every token; a provider manages
//! its own and issues agent tokens for its own machines; no other role may touch tokens.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderName, StatusCode, header};
use gpunex_domain::DomainEvent;
use gpunex_domain::credentials::{self, CredentialEvent, CredentialRejection, Role, TokenIssued};
use gpunex_domain::time::Timestamp;
use gpunex_projections::credentials::CredentialRecord;
use gpunex_store::{AppendError, ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::{Allow, Caller, CredentialCache, NewToken};
use crate::error::ApiError;
use crate::server::{AppState, timestamp};

/// The clock, read at the edge: the domain only ever receives instants.
pub fn now() -> Timestamp {
    Timestamp::from_unix_micros(chrono::Utc::now().timestamp_micros())
}

fn stream_of(token_id: Uuid) -> gpunex_domain::StreamId {
    gpunex_domain::StreamId::parse(format!("credential-{token_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

fn rejection(error: CredentialRejection) -> ApiError {
    match error {
        CredentialRejection::InvalidLabel => {
            ApiError::invalid("label", error.code(), error.to_string())
        }
        CredentialRejection::InvalidSecretHash => {
            ApiError::invalid("token", error.code(), error.to_string())
        }
        CredentialRejection::AlreadyRevoked => ApiError::Conflict {
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
            ApiError::Conflict {
                code: "already_issued",
                detail: "the provider's first token was already issued; manage tokens with it"
                    .to_owned(),
            }
        }
        AppendError::WrongExpectedVersion { .. } => ApiError::Conflict {
            code: "concurrent_change",
            detail: "the token changed while this request ran; read it again".to_owned(),
        },
        other => ApiError::Conflict {
            code: other.code(),
            detail: other.to_string(),
        },
    }
}

/// A response that carries a token must not be kept by any cache.
const NO_STORE: [(HeaderName, &str); 1] = [(header::CACHE_CONTROL, "no-store")];

/// Most active (unrevoked) tokens bound to one provider.
pub const PROVIDER_TOKENS_ACTIVE_MAX: usize = 200;

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
    cache: Option<&CredentialCache>,
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
    let at = now();
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
    store.append_streams(streams).await.map_err(append_error)?;
    if let Some(cache) = cache {
        events.iter().for_each(|event| cache.apply(event));
    }
    Ok((new, issued))
}

pub fn info(record: &CredentialRecord) -> wire::TokenInfo {
    wire::TokenInfo {
        token_id: record.token_id,
        role: serde_json::to_value(record.role).unwrap_or_default(),
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
        role: serde_json::to_value(issued.role).unwrap_or_default(),
        label: issued.label.clone(),
        issued_at: timestamp(issued.issued_at.unix_micros()),
        issued_by: issued.issued_by.clone(),
        replaces: issued.replaces,
        revoked_at: None,
    }
}

/// The token `token_id` if the caller may manage it; other providers' tokens do not exist for
/// a provider (404, not 403, so ids cannot be probed).
fn manageable(
    state: &AppState,
    caller: &Caller,
    token_id: Uuid,
) -> Result<CredentialRecord, ApiError> {
    caller.require(&[Allow::Admin, Allow::Provider])?;
    let record = state
        .credentials
        .get(&token_id)
        .ok_or(ApiError::NotFound("token"))?;
    match caller.role {
        Role::Admin => Ok(record),
        _ if record.role.provider_id().is_some()
            && record.role.provider_id() == caller.role.provider_id() =>
        {
            Ok(record)
        }
        _ => Err(ApiError::NotFound("token")),
    }
}

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
    caller.require(&[Allow::Admin, Allow::Provider])?;
    let role: Role = serde_json::from_value(request.role)
        .map_err(|e| ApiError::invalid("role", "invalid_role", e.to_string()))?;
    if let Role::Provider { provider_id } = caller.role {
        // A provider issues agent tokens for its own machines, nothing else.
        let own_agent = matches!(role, Role::Agent { provider_id: p, .. } if p == provider_id);
        if !own_agent {
            return Err(ApiError::Forbidden);
        }
    }
    if let Role::Agent {
        provider_id,
        machine_id,
    } = role
        && state
            .credentials
            .with_fleet(|f| f.machine(&machine_id).map(|m| m.provider_id))
            .is_some_and(|owner| owner != provider_id)
    {
        return Err(ApiError::Conflict {
            code: "machine_registered_elsewhere",
            detail: format!("machine {machine_id} is registered to another provider"),
        });
    }
    if let Some(provider_id) = role.provider_id() {
        let active = state
            .credentials
            .list(Some(provider_id))
            .iter()
            .filter(|record| record.revoked_at.is_none())
            .count();
        if active >= PROVIDER_TOKENS_ACTIVE_MAX {
            return Err(ApiError::Conflict {
                code: "too_many_tokens",
                detail: format!(
                    "a provider may hold at most {PROVIDER_TOKENS_ACTIVE_MAX} active tokens; revoke some first"
                ),
            });
        }
    }
    let actor = caller.actor();
    let (new, issued) = issue_token(
        &state.store,
        Some(&state.credentials),
        TokenRequest {
            caller: Some(caller.token_id),
            ..TokenRequest::new(role, &request.label, &actor)
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
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    axum::extract::Query(query): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Result<Json<wire::TokenList>, ApiError> {
    caller.require(&[Allow::Admin, Allow::Provider])?;
    let provider = match caller.role {
        Role::Admin => None,
        role => Some(role.provider_id().ok_or(ApiError::Forbidden)?),
    };
    let limit = match query.get("limit") {
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=TOKENS_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", "out_of_range", format!("1 to {TOKENS_PAGE_MAX}"))
            })?,
        None => TOKENS_PAGE_MAX,
    };
    let all = state.credentials.list(provider);
    let start = match query.get("after") {
        Some(cursor) => {
            let after = Uuid::try_parse(cursor).map_err(|_| {
                ApiError::invalid("after", "invalid_cursor", "a cursor from next_after")
            })?;
            all.iter()
                .position(|record| record.token_id == after)
                .map(|index| index + 1)
                .ok_or_else(|| {
                    ApiError::invalid("after", "invalid_cursor", "a cursor from next_after")
                })?
        }
        None => 0,
    };
    let page: Vec<_> = all.iter().skip(start).take(limit + 1).collect();
    let next_after = (page.len() > limit).then(|| page[limit - 1].token_id);
    let tokens = page.into_iter().take(limit).map(info).collect();
    Ok(Json(wire::TokenList { tokens, next_after }))
}

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
        now(),
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
    state
        .store
        .append_streams(streams)
        .await
        .map_err(append_error)?;
    state.credentials.apply(&event);
    let record = state
        .credentials
        .get(&token_id)
        .ok_or(ApiError::NotFound("token"))?;
    Ok(Json(info(&record)))
}
