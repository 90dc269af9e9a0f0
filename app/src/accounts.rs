//! Sign-up on the command executor: a person's stream (`user-{user_id}`) and the address's
//! claim stream (`user_email-{sha256 of the address}`) are appended together, both expected not
//! to exist, so two sign-ups of one address cannot both succeed in any process; the later one
//! decides again and is refused as `EmailTaken` (`gpunex_domain::accounts::decide_sign_up`).

use gpunex_domain::accounts::{self, AccountEvent, AccountRejection, UserRegistered};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::Metadata;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::AppError;
use crate::command::{Executor, Rejection, Retry, append_at};

/// One more decision after another sign-up of the same address landed first (which the second
/// refuses).
pub const SIGN_UP_RETRY: Retry = Retry {
    name: "sign_up",
    attempts: 2,
};

pub fn user_stream(user_id: Uuid) -> StreamId {
    StreamId::parse(format!("user-{user_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// The claim stream of an address: keyed by the hex SHA-256 of it in lower case, so no stream
/// id names an address.
pub fn email_stream(email: &str) -> StreamId {
    let key = hex::encode(Sha256::digest(email.to_lowercase().as_bytes()));
    StreamId::parse(format!("user_email-{key}"))
        .unwrap_or_else(|_| unreachable!("hex digits make a valid stream id"))
}

/// Registers `user_id` with the (normalized) `email` and its Argon2id `password_hash`.
pub async fn sign_up(
    exec: &Executor<'_>,
    user_id: Uuid,
    email: &str,
    password_hash: &str,
) -> Result<Result<UserRegistered, Rejection<AccountRejection>>, AppError> {
    let models = exec.models();
    let claim = email_stream(email);
    let meta = Metadata::actor(format!("user:{user_id}"));
    let mut registered = None;
    let outcome = exec
        .execute(
            SIGN_UP_RETRY,
            || {
                let claim = claim.clone();
                async move {
                    let version = models.at_stream(exec.store(), &claim).await?;
                    Ok(version > 0 || models.user_by_email(email).is_some())
                }
            },
            |taken: &bool, now| {
                let (user, claimed) =
                    accounts::decide_sign_up(*taken, user_id, email, password_hash, now)?;
                registered = Some(user.clone());
                Ok(vec![
                    append_at(
                        user_stream(user_id),
                        0,
                        [DomainEvent::Account(AccountEvent::UserRegistered(user))],
                        &meta,
                    ),
                    append_at(
                        claim.clone(),
                        0,
                        [DomainEvent::Account(AccountEvent::EmailClaimed(claimed))],
                        &meta,
                    ),
                ])
            },
        )
        .await?;
    Ok(outcome.and_then(|_| registered.ok_or(Rejection::Rule(AccountRejection::EmailTaken))))
}

/// Attempts at a staff role change: a second after another change of the same person landed
/// first (it is decided again on what that one wrote).
pub const STAFF_ROLE_ATTEMPTS: usize = 3;

/// Why a staff role change was not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StaffRoleRefusal {
    #[error("no account has this email")]
    UnknownAccount,
    #[error("the person's roles kept changing; try again")]
    Contended,
}

/// What a staff role change found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaffRoleChange {
    pub user_id: Uuid,
    /// The roles the person holds after it.
    pub roles: std::collections::BTreeSet<accounts::StaffRole>,
    /// Whether an event was appended (a grant of a role held, or a revocation of one not held,
    /// changes nothing).
    pub changed: bool,
}

/// Grants or revokes a staff role of the person with `email`, from the log itself (the person's
/// stream), so it needs no read models: the command line's bootstrap of the first reviewer runs
/// it before any server does. Appended at the person's stream version.
pub async fn change_staff_role(
    store: &gpunex_store::Store,
    email: &str,
    command: accounts::GrantCommand,
) -> Result<Result<StaffRoleChange, StaffRoleRefusal>, AppError> {
    let claim = store
        .read_stream(&email_stream(email), 0, 1)
        .await?
        .into_iter()
        .next();
    let user_id = match claim.map(|event| decoded(&event)).transpose()? {
        Some(DomainEvent::Account(AccountEvent::EmailClaimed(claimed))) => claimed.user_id,
        Some(_) | None => return Ok(Err(StaffRoleRefusal::UnknownAccount)),
    };
    let stream = user_stream(user_id);
    for _attempt in 0..STAFF_ROLE_ATTEMPTS {
        let (held, version) = staff_roles_at(store, &stream).await?;
        let now = store.clock().now();
        let events = accounts::decide_grant(user_id, &held, command.clone(), now);
        if events.is_empty() {
            return Ok(Ok(StaffRoleChange {
                user_id,
                roles: held,
                changed: false,
            }));
        }
        let actor = match &command {
            accounts::GrantCommand::Grant { by, .. }
            | accounts::GrantCommand::Revoke { by, .. } => by.clone(),
        };
        let append = append_at(
            stream.clone(),
            version,
            events.into_iter().map(DomainEvent::Account),
            &Metadata::actor(actor),
        );
        match store.append_streams(vec![append]).await {
            Ok(_) => {
                let (roles, _) = staff_roles_at(store, &stream).await?;
                return Ok(Ok(StaffRoleChange {
                    user_id,
                    roles,
                    changed: true,
                }));
            }
            Err(gpunex_store::AppendError::WrongExpectedVersion { .. }) => continue,
            Err(gpunex_store::AppendError::Store(error)) => return Err(error.into()),
            Err(other) => return Err(AppError::Append(other)),
        }
    }
    Ok(Err(StaffRoleRefusal::Contended))
}

/// The staff roles a person's stream grants, folded from the stream, and its version.
async fn staff_roles_at(
    store: &gpunex_store::Store,
    stream: &StreamId,
) -> Result<(std::collections::BTreeSet<accounts::StaffRole>, u64), AppError> {
    let mut held = std::collections::BTreeSet::new();
    let mut version = 0;
    loop {
        let page = store
            .read_stream(stream, version, gpunex_store::READ_BATCH_EVENTS_MAX)
            .await?;
        let Some(last) = page.last() else {
            return Ok((held, version));
        };
        version = last.stream_version;
        for event in &page {
            match decoded(event)? {
                DomainEvent::Account(AccountEvent::RoleGranted(granted)) => {
                    held.insert(granted.role);
                }
                DomainEvent::Account(AccountEvent::RoleRevoked(revoked)) => {
                    held.remove(&revoked.role);
                }
                _ => {}
            }
        }
    }
}

fn decoded(event: &gpunex_store::RecordedEvent) -> Result<DomainEvent, AppError> {
    event.decode().map_err(|e| {
        AppError::Store(gpunex_store::StoreError::CorruptRow {
            position: event.position,
            reason: e.to_string(),
        })
    })
}
