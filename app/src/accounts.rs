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
