//! People's accounts: registration with an email and a password, as events.
//!
//! The domain checks the email and the password policy and builds the events; hashing the
//! password (Argon2id) happens at the edge, and only the hash is recorded. An email is claimed
//! by its own stream (`user_email-<sha256 of the address>`), appended atomically with the user,
//! so two registrations of one address cannot both succeed.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::onboarding::validate_email;
use crate::time::Timestamp;

/// Shortest password accepted, in characters (NIST SP 800-63B recommends at least 8; we ask 12).
pub const PASSWORD_CHARS_MIN: usize = 12;
/// Longest password accepted, in characters: bounds the hashing work a request can cause.
pub const PASSWORD_CHARS_MAX: usize = 128;

/// `account.user_registered`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserRegistered {
    pub user_id: Uuid,
    pub email: String,
    /// PHC string of the Argon2id hash.
    pub password_hash: String,
    pub registered_at: Timestamp,
}

/// `account.email_claimed`: the only event of an email's claim stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailClaimed {
    pub user_id: Uuid,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountEvent {
    UserRegistered(UserRegistered),
    EmailClaimed(EmailClaimed),
}

/// Why a sign-up is refused. Nothing is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountRejection {
    #[error("an account with this email already exists")]
    EmailTaken,
}

impl AccountRejection {
    pub fn code(&self) -> crate::codes::ErrorCode {
        match self {
            AccountRejection::EmailTaken => crate::codes::ErrorCode::EmailTaken,
        }
    }
}

/// Decides a sign-up of the (normalized) `email` with an Argon2id `password_hash`: refused when
/// the address is taken (`taken`: its claim stream exists, or the users know it), else the user
/// and the address's claim.
pub fn decide_sign_up(
    taken: bool,
    user_id: Uuid,
    email: &str,
    password_hash: &str,
    at: Timestamp,
) -> Result<(UserRegistered, EmailClaimed), AccountRejection> {
    if taken {
        return Err(AccountRejection::EmailTaken);
    }
    Ok((
        UserRegistered {
            user_id,
            email: email.to_owned(),
            password_hash: password_hash.to_owned(),
            registered_at: at,
        },
        EmailClaimed { user_id },
    ))
}

/// Normalizes an email for sign-up and sign-in; the error is a message for the `email` field.
pub fn normalize_email(email: &str) -> Result<String, &'static str> {
    validate_email(email)
}

/// The password policy; the error is a message for the `password` field.
pub fn check_password(password: &str) -> Result<(), String> {
    let chars = password.chars().count();
    if !(PASSWORD_CHARS_MIN..=PASSWORD_CHARS_MAX).contains(&chars) {
        return Err(format!(
            "{PASSWORD_CHARS_MIN} to {PASSWORD_CHARS_MAX} characters"
        ));
    }
    if password.trim().is_empty() {
        return Err("must not be only spaces".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_policy() {
        assert!(check_password("correct horse battery").is_ok());
        assert!(check_password("short").is_err());
        assert!(check_password(&" ".repeat(20)).is_err());
        assert!(check_password(&"x".repeat(129)).is_err());
        assert_eq!(
            normalize_email("Ada@Example.ORG").unwrap(),
            "Ada@example.org"
        );
    }
}
