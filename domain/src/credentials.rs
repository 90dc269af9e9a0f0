//! API credentials: bearer tokens with a role, issued and revoked as events.
//!
//! A token is shown once, when issued; the log keeps only the SHA-256 of its secret (the secret
//! is 244 random bits, so a fast hash is enough: there is nothing to brute-force). Which role may
//! call which endpoint is declared with each route in the API crate.

use crate::codes::ErrorCode;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::time::Timestamp;

/// Who a credential acts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Role {
    /// Operators and reviewers: everything.
    Admin,
    /// Audits: reads every provider's earnings, payouts and the ledger; writes nothing.
    Finance,
    /// Operates payouts: runs batches, files bank transfers, records the bank's confirmations,
    /// returns and status reports. A duty apart from auditing them (`docs/access.md`).
    Treasury,
    /// One provider's own data.
    Provider { provider_id: Uuid },
    /// One machine of one provider: may report only for that provider's machines.
    Agent { provider_id: Uuid, machine_id: Uuid },
    /// A customer renting GPUs.
    Renter { user_id: Uuid },
    /// A signed-in person (a session from email and password); what else they may do follows
    /// from their account (the Roles page).
    User { user_id: Uuid },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Finance => "finance",
            Role::Treasury => "treasury",
            Role::Provider { .. } => "provider",
            Role::Agent { .. } => "agent",
            Role::Renter { .. } => "renter",
            Role::User { .. } => "user",
        }
    }

    /// The provider this role is bound to, if any.
    pub fn provider_id(&self) -> Option<Uuid> {
        match self {
            Role::Provider { provider_id } | Role::Agent { provider_id, .. } => Some(*provider_id),
            Role::Admin
            | Role::Finance
            | Role::Treasury
            | Role::Renter { .. }
            | Role::User { .. } => None,
        }
    }
}

/// Longest label of a token, in characters.
pub const TOKEN_LABEL_CHARS_MAX: usize = 100;

/// `credential.token_issued`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenIssued {
    pub token_id: Uuid,
    pub role: Role,
    /// What the holder calls it, e.g. "rack 3, node 7".
    pub label: String,
    /// Hex SHA-256 of the secret part of the token.
    pub secret_sha256: String,
    pub issued_at: Timestamp,
    /// `user:<id>`, `token:<id>` or `cli` for tokens created on the command line.
    pub issued_by: String,
    /// When this token replaces another (rotation), that token's id.
    pub replaces: Option<Uuid>,
    /// Sessions expire; API tokens do not (`None`).
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
}

/// `credential.token_revoked`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRevoked {
    pub token_id: Uuid,
    pub revoked_at: Timestamp,
    pub revoked_by: String,
    pub reason: String,
}

/// `credential.provider_token_claimed`: the approved applicant took the provider's first
/// token. The only event of stream `provider_token_claim-<provider_id>`, appended with the token
/// and expecting no stream: a provider's first token can be claimed once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderTokenClaimed {
    pub provider_id: Uuid,
    pub application_id: Uuid,
    pub token_id: Uuid,
    pub claimed_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialEvent {
    Issued(TokenIssued),
    Revoked(TokenRevoked),
    ProviderTokenClaimed(ProviderTokenClaimed),
}

/// Why a credential command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialRejection {
    #[error("the label must be 1 to {TOKEN_LABEL_CHARS_MAX} characters")]
    InvalidLabel,
    #[error("the secret hash must be 64 lowercase hex digits")]
    InvalidSecretHash,
    #[error("the token is already revoked")]
    AlreadyRevoked,
}

impl CredentialRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            CredentialRejection::InvalidLabel => ErrorCode::InvalidLabel,
            CredentialRejection::InvalidSecretHash => ErrorCode::InvalidSecretHash,
            CredentialRejection::AlreadyRevoked => ErrorCode::AlreadyRevoked,
        }
    }
}

/// Checks and builds a `token_issued` event.
pub fn issue(
    token_id: Uuid,
    role: Role,
    label: &str,
    secret_sha256: &str,
    issued_by: &str,
    replaces: Option<Uuid>,
    at: Timestamp,
) -> Result<TokenIssued, CredentialRejection> {
    let label = label.trim();
    if label.is_empty()
        || label.chars().count() > TOKEN_LABEL_CHARS_MAX
        || label.chars().any(char::is_control)
    {
        return Err(CredentialRejection::InvalidLabel);
    }
    if secret_sha256.len() != 64
        || !secret_sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(CredentialRejection::InvalidSecretHash);
    }
    Ok(TokenIssued {
        token_id,
        role,
        label: label.to_owned(),
        secret_sha256: secret_sha256.to_owned(),
        issued_at: at,
        issued_by: issued_by.to_owned(),
        replaces,
        expires_at: None,
    })
}

/// Checks and builds a `token_revoked` event for a token that is still active.
pub fn revoke(
    already_revoked: bool,
    token_id: Uuid,
    revoked_by: &str,
    reason: &str,
    at: Timestamp,
) -> Result<TokenRevoked, CredentialRejection> {
    if already_revoked {
        return Err(CredentialRejection::AlreadyRevoked);
    }
    Ok(TokenRevoked {
        token_id,
        revoked_at: at,
        revoked_by: revoked_by.to_owned(),
        // Free text for people: control characters are dropped, not stored.
        reason: reason
            .trim()
            .chars()
            .filter(|c| !c.is_control())
            .take(500)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn issuing_checks_label_and_hash() {
        let at = Timestamp::from_unix_micros(0);
        let id = Uuid::from_u128(1);
        assert!(issue(id, Role::Finance, "books", HASH, "cli", None, at).is_ok());
        assert_eq!(
            issue(id, Role::Finance, " ", HASH, "cli", None, at),
            Err(CredentialRejection::InvalidLabel)
        );
        assert_eq!(
            issue(
                id,
                Role::Finance,
                "books",
                &HASH.to_uppercase(),
                "cli",
                None,
                at
            ),
            Err(CredentialRejection::InvalidSecretHash)
        );
        assert_eq!(
            revoke(true, id, "cli", "", at),
            Err(CredentialRejection::AlreadyRevoked)
        );
    }

    #[test]
    fn roles_serialize_with_their_binding() {
        let provider = Uuid::from_u128(7);
        let role = Role::Agent {
            provider_id: provider,
            machine_id: Uuid::from_u128(8),
        };
        let json = serde_json::to_value(role).unwrap();
        assert_eq!(json["kind"], "agent");
        assert_eq!(serde_json::from_value::<Role>(json).unwrap(), role);
        assert_eq!(role.provider_id(), Some(provider));
        assert_eq!(Role::Finance.provider_id(), None);
    }
}
