//! Tokens on the command executor: issuing (and rotating) and revoking, decided by
//! `gpunex_domain::credentials::{decide_issue, decide_revoke}`. Every token has its own stream
//! (`credential-{token_id}`: issued is version 1, revoked version 2). A write carries the
//! versions it read: the new token's stream must not exist, the token a rotation retires must
//! still be at version 1, the token making the request is guarded at its version (so a token
//! revoked meanwhile, in any process, writes nothing), and a provider's first token claims
//! `provider_token_claim-{provider_id}`, which exists once.

use gpunex_domain::credentials::{
    self, CredentialEvent, CredentialRejection, IssueCommand, Role, TokenIssued,
};
use gpunex_domain::time::Timestamp;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::{AppendError, Metadata, NewEvent, Store, StreamAppend};
use uuid::Uuid;

use crate::command::{Executor, Rejection, Retry, append_at, guard_at};
use crate::read_models::NewToken;
use crate::{AppError, ReadModels};

/// Decides again after another write moved a stream the command reads (a revocation of the
/// token it retires or of the caller, a racing first-token claim): the second decision refuses.
pub const CREDENTIAL_RETRY: Retry = Retry {
    name: "credential",
    attempts: 2,
};

pub fn credential_stream(token_id: Uuid) -> StreamId {
    StreamId::parse(format!("credential-{token_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

pub fn first_token_stream(provider_id: Uuid) -> StreamId {
    StreamId::parse(format!("provider_token_claim-{provider_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// What to issue: the role and label, who asks, and what it replaces or how long it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest<'a> {
    pub role: Role,
    pub label: &'a str,
    /// `token:<id>`, `user:<id>` or `cli`.
    pub issued_by: &'a str,
    /// The token a rotation retires (revoked in the same append).
    pub replaces: Option<Uuid>,
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

/// A token as a command reads it: whether it is revoked and its stream's version (0 when the
/// read models know no such token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TokenAt {
    token_id: Uuid,
    revoked: bool,
    version: u64,
}

async fn token_at(models: &ReadModels, store: &Store, token_id: Uuid) -> Result<TokenAt, AppError> {
    let version = models
        .at_stream(store, &credential_stream(token_id))
        .await?;
    Ok(TokenAt {
        token_id,
        revoked: models
            .get(&token_id)
            .is_none_or(|record| record.revoked_at.is_some()),
        version,
    })
}

/// What issuing reads: the retired token, the caller and the first-token claim's version.
struct IssueState {
    replaces: Option<TokenAt>,
    caller: Option<TokenAt>,
    /// The claim stream's version, and whether the provider holds any token already.
    first: Option<(u64, bool)>,
}

/// Issues a token as `request` says; answers the token (its secret shown once) and the event.
pub async fn issue(
    exec: &Executor<'_>,
    request: &TokenRequest<'_>,
) -> Result<Result<(NewToken, TokenIssued), Rejection<CredentialRejection>>, AppError> {
    let models = exec.models();
    let store = exec.store();
    let new = NewToken::generate();
    let meta = Metadata::actor(request.issued_by);
    // The caller's guard is left out when it is the token being retired (checked there).
    let caller = request.caller.filter(|c| Some(*c) != request.replaces);
    let mut decided = None;
    let outcome = exec
        .execute(
            CREDENTIAL_RETRY,
            || async move {
                let replaces = match request.replaces {
                    Some(id) => Some(token_at(models, store, id).await?),
                    None => None,
                };
                let caller = match caller {
                    Some(id) => Some(token_at(models, store, id).await?),
                    None => None,
                };
                let first = match request.first_for_provider {
                    Some((provider_id, _)) => {
                        let version = models
                            .at_stream(store, &first_token_stream(provider_id))
                            .await?;
                        Some((version, !models.list(Some(provider_id)).is_empty()))
                    }
                    None => None,
                };
                Ok(IssueState {
                    replaces,
                    caller,
                    first,
                })
            },
            |state: &IssueState, now| {
                let decision = credentials::decide_issue(
                    &IssueCommand {
                        token_id: new.token_id,
                        role: request.role,
                        label: request.label,
                        secret_sha256: &new.secret_sha256,
                        issued_by: request.issued_by,
                        expires_at: request.expires_at,
                        replaces: state.replaces.map(|t| (t.token_id, t.revoked)),
                        caller_revoked: state.caller.map(|t| t.revoked),
                        first_for_provider: request.first_for_provider.zip(state.first).map(
                            |((provider_id, application_id), (version, held))| {
                                (provider_id, application_id, version > 0 || held)
                            },
                        ),
                    },
                    now,
                )?;
                decided = Some(decision.issued.clone());
                let mut writes = vec![append_at(
                    credential_stream(new.token_id),
                    0,
                    [DomainEvent::Credential(CredentialEvent::Issued(
                        decision.issued,
                    ))],
                    &meta,
                )];
                if let (Some(revoked), Some(old)) = (decision.revoked, state.replaces) {
                    writes.push(append_at(
                        credential_stream(old.token_id),
                        old.version,
                        [DomainEvent::Credential(CredentialEvent::Revoked(revoked))],
                        &meta,
                    ));
                }
                if let (Some(claimed), Some((provider_id, _))) =
                    (decision.claimed, request.first_for_provider)
                {
                    writes.push(append_at(
                        first_token_stream(provider_id),
                        0,
                        [DomainEvent::Credential(
                            CredentialEvent::ProviderTokenClaimed(claimed),
                        )],
                        &meta,
                    ));
                }
                if let Some(caller) = state.caller {
                    writes.push(guard_at(credential_stream(caller.token_id), caller.version));
                }
                Ok(writes)
            },
        )
        .await?;
    Ok(outcome.and_then(|_| {
        decided
            .map(|issued| (new, issued))
            .ok_or(Rejection::Rule(CredentialRejection::AlreadyRevoked))
    }))
}

/// Issues a token with nothing to read: the command line's bootstrap (`gpunex admin
/// create-token`), run where no read models are hosted. It replaces nothing and no token asks
/// for it; the new token's stream must not exist.
pub async fn issue_unattended(
    store: &Store,
    role: Role,
    label: &str,
    issued_by: &str,
) -> Result<Result<(NewToken, TokenIssued), CredentialRejection>, AppError> {
    let new = NewToken::generate();
    let decision = match credentials::decide_issue(
        &IssueCommand {
            token_id: new.token_id,
            role,
            label,
            secret_sha256: &new.secret_sha256,
            issued_by,
            expires_at: None,
            replaces: None,
            caller_revoked: None,
            first_for_provider: None,
        },
        store.clock().now(),
    ) {
        Ok(decision) => decision,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let event = DomainEvent::Credential(CredentialEvent::Issued(decision.issued.clone()));
    let append = StreamAppend {
        stream_id: credential_stream(new.token_id),
        expected: gpunex_store::ExpectedVersion::NoStream,
        events: vec![NewEvent::from_domain(
            Uuid::now_v7(),
            &event,
            Metadata::actor(issued_by),
        )],
    };
    match store.append_streams(vec![append]).await {
        Ok(_) => Ok(Ok((new, decision.issued))),
        Err(AppendError::Store(error)) => Err(error.into()),
        Err(other) => Err(AppError::Append(other)),
    }
}

/// Revokes `token_id` as `actor`, whose own token is `caller` (guarded unless it revokes itself).
pub async fn revoke(
    exec: &Executor<'_>,
    token_id: Uuid,
    caller: Option<Uuid>,
    actor: &str,
    reason: &str,
) -> Result<Result<(), Rejection<CredentialRejection>>, AppError> {
    let models = exec.models();
    let store = exec.store();
    let meta = Metadata::actor(actor);
    let caller = caller.filter(|c| *c != token_id);
    let outcome = exec
        .execute(
            CREDENTIAL_RETRY,
            || async move {
                let target = token_at(models, store, token_id).await?;
                let caller = match caller {
                    Some(id) => Some(token_at(models, store, id).await?),
                    None => None,
                };
                Ok((target, caller))
            },
            |(target, caller): &(TokenAt, Option<TokenAt>), now| {
                let revoked = credentials::decide_revoke(
                    token_id,
                    target.revoked,
                    caller.map(|c| c.revoked),
                    actor,
                    reason,
                    now,
                )?;
                let mut writes = vec![append_at(
                    credential_stream(token_id),
                    target.version,
                    [DomainEvent::Credential(CredentialEvent::Revoked(revoked))],
                    &meta,
                )];
                if let Some(caller) = caller {
                    writes.push(guard_at(credential_stream(caller.token_id), caller.version));
                }
                Ok(writes)
            },
        )
        .await?;
    Ok(outcome.map(|_| ()))
}
