//! People's accounts: registration with an email and a password, and the staff roles a person
//! is granted (reviewer and operator, finance, treasury), as events.
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

/// A duty the platform's staff hold as people: signed in with their own account and session,
/// they act in it by naming it (`X-GPUnex-Act-As`), so every action is one person's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaffRole {
    /// Operators and reviewers: everything (the `admin` role).
    Admin,
    /// Audits: reads every provider's earnings, payouts and the ledger; writes nothing.
    Finance,
    /// Operates payouts.
    Treasury,
}

impl StaffRole {
    pub const ALL: [StaffRole; 3] = [StaffRole::Admin, StaffRole::Finance, StaffRole::Treasury];

    pub fn name(self) -> &'static str {
        match self {
            StaffRole::Admin => "admin",
            StaffRole::Finance => "finance",
            StaffRole::Treasury => "treasury",
        }
    }

    pub fn parse(name: &str) -> Option<StaffRole> {
        StaffRole::ALL.into_iter().find(|role| role.name() == name)
    }
}

/// `account.role_granted`: a person now holds a staff role. On the person's stream
/// (`user-<user_id>`), appended at its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleGranted {
    pub user_id: Uuid,
    pub role: StaffRole,
    pub granted_at: Timestamp,
    /// Who granted it: `token:<id>` or `operator` (the command line).
    pub granted_by: String,
}

/// `account.role_revoked`: a person no longer holds a staff role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRevoked {
    pub user_id: Uuid,
    pub role: StaffRole,
    pub revoked_at: Timestamp,
    pub revoked_by: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountEvent {
    UserRegistered(UserRegistered),
    EmailClaimed(EmailClaimed),
    RoleGranted(RoleGranted),
    RoleRevoked(RoleRevoked),
}

/// A change of a person's staff roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantCommand {
    Grant { role: StaffRole, by: String },
    Revoke { role: StaffRole, by: String },
}

/// Decides a change of the staff roles of `user_id`, who holds `held`: granting a role held, or
/// revoking one not held, changes nothing (no event), so a repeated command is harmless.
pub fn decide_grant(
    user_id: Uuid,
    held: &std::collections::BTreeSet<StaffRole>,
    command: GrantCommand,
    at: Timestamp,
) -> Vec<AccountEvent> {
    match command {
        GrantCommand::Grant { role, by } if !held.contains(&role) => {
            vec![AccountEvent::RoleGranted(RoleGranted {
                user_id,
                role,
                granted_at: at,
                granted_by: by,
            })]
        }
        GrantCommand::Revoke { role, by } if held.contains(&role) => {
            vec![AccountEvent::RoleRevoked(RoleRevoked {
                user_id,
                role,
                revoked_at: at,
                revoked_by: by,
            })]
        }
        GrantCommand::Grant { .. } | GrantCommand::Revoke { .. } => Vec::new(),
    }
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
    fn a_grant_is_recorded_once_and_a_revocation_only_of_what_is_held() {
        let user = Uuid::from_u128(7);
        let at = Timestamp::from_unix_micros(1);
        let grant = |role| GrantCommand::Grant {
            role,
            by: "operator".to_owned(),
        };
        let revoke = |role| GrantCommand::Revoke {
            role,
            by: "operator".to_owned(),
        };
        let none = std::collections::BTreeSet::new();
        let admin = std::collections::BTreeSet::from([StaffRole::Admin]);
        assert!(matches!(
            decide_grant(user, &none, grant(StaffRole::Admin), at).as_slice(),
            [AccountEvent::RoleGranted(RoleGranted {
                role: StaffRole::Admin,
                ..
            })]
        ));
        assert!(decide_grant(user, &admin, grant(StaffRole::Admin), at).is_empty());
        assert!(decide_grant(user, &none, revoke(StaffRole::Finance), at).is_empty());
        assert!(matches!(
            decide_grant(user, &admin, revoke(StaffRole::Admin), at).as_slice(),
            [AccountEvent::RoleRevoked(RoleRevoked {
                role: StaffRole::Admin,
                ..
            })]
        ));
        for role in StaffRole::ALL {
            assert_eq!(StaffRole::parse(role.name()), Some(role));
        }
        assert_eq!(StaffRole::parse("provider"), None);
    }

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
