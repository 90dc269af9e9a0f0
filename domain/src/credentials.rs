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
    #[error("the provider's first token was already issued; manage tokens with it")]
    FirstTokenClaimed,
    #[error("the token making this request was revoked")]
    CallerRevoked,
}

impl CredentialRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            CredentialRejection::InvalidLabel => ErrorCode::InvalidLabel,
            CredentialRejection::InvalidSecretHash => ErrorCode::InvalidSecretHash,
            CredentialRejection::AlreadyRevoked => ErrorCode::AlreadyRevoked,
            CredentialRejection::FirstTokenClaimed => ErrorCode::AlreadyIssued,
            CredentialRejection::CallerRevoked => ErrorCode::Unauthorized,
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

/// Issuing a token, with what the decision reads: whether the token it replaces and the token
/// asking are revoked, and whether the provider's first token was claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueCommand<'a> {
    pub token_id: Uuid,
    pub role: Role,
    pub label: &'a str,
    pub secret_sha256: &'a str,
    /// `user:<id>`, `token:<id>` or `cli`.
    pub issued_by: &'a str,
    /// Sessions expire; API tokens do not.
    pub expires_at: Option<Timestamp>,
    /// A rotation: the token it retires, and whether that one is revoked already.
    pub replaces: Option<(Uuid, bool)>,
    /// Whether the token making the request is revoked (`None`: no token asks, as on the
    /// command line).
    pub caller_revoked: Option<bool>,
    /// The provider's first token: `(provider_id, application_id, claimed already)`.
    pub first_for_provider: Option<(Uuid, Uuid, bool)>,
}

/// What issuing decided: the new token, the one it retires, and the first-token claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueDecision {
    pub issued: TokenIssued,
    pub revoked: Option<TokenRevoked>,
    pub claimed: Option<ProviderTokenClaimed>,
}

/// Decides an issue (or a rotation) at `at`: the label and secret are checked, a revoked token
/// cannot be rotated, a revoked caller issues nothing, and a provider's first token is claimed
/// once.
pub fn decide_issue(
    command: &IssueCommand<'_>,
    at: Timestamp,
) -> Result<IssueDecision, CredentialRejection> {
    if command.caller_revoked == Some(true) {
        return Err(CredentialRejection::CallerRevoked);
    }
    if command
        .first_for_provider
        .is_some_and(|(_, _, claimed)| claimed)
    {
        return Err(CredentialRejection::FirstTokenClaimed);
    }
    let mut issued = issue(
        command.token_id,
        command.role,
        command.label,
        command.secret_sha256,
        command.issued_by,
        command.replaces.map(|(id, _)| id),
        at,
    )?;
    issued.expires_at = command.expires_at;
    let revoked = command
        .replaces
        .map(|(id, revoked)| revoke(revoked, id, command.issued_by, "rotated", at))
        .transpose()?;
    let claimed = command
        .first_for_provider
        .map(|(provider_id, application_id, _)| ProviderTokenClaimed {
            provider_id,
            application_id,
            token_id: command.token_id,
            claimed_at: at,
        });
    Ok(IssueDecision {
        issued,
        revoked,
        claimed,
    })
}

/// Decides revoking `token_id` (`revoked`: whether it is already) for `revoked_by`, whose own
/// token is revoked or not (`caller_revoked`; a token revoking itself reads the same).
pub fn decide_revoke(
    token_id: Uuid,
    revoked: bool,
    caller_revoked: Option<bool>,
    revoked_by: &str,
    reason: &str,
    at: Timestamp,
) -> Result<TokenRevoked, CredentialRejection> {
    if caller_revoked == Some(true) && !revoked {
        return Err(CredentialRejection::CallerRevoked);
    }
    revoke(revoked, token_id, revoked_by, reason, at)
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
    fn an_issue_retires_what_it_replaces_and_claims_a_first_token_once() {
        let at = Timestamp::from_unix_micros(5);
        let (provider, application) = (Uuid::from_u128(7), Uuid::from_u128(8));
        let command = IssueCommand {
            token_id: Uuid::from_u128(1),
            role: Role::Provider {
                provider_id: provider,
            },
            label: "first",
            secret_sha256: HASH,
            issued_by: "token:x",
            expires_at: None,
            replaces: Some((Uuid::from_u128(2), false)),
            caller_revoked: Some(false),
            first_for_provider: Some((provider, application, false)),
        };
        let decided = decide_issue(&command, at).unwrap();
        assert_eq!(decided.issued.replaces, Some(Uuid::from_u128(2)));
        assert_eq!(decided.revoked.unwrap().token_id, Uuid::from_u128(2));
        assert_eq!(decided.claimed.unwrap().token_id, Uuid::from_u128(1));
        for (command, refusal) in [
            (
                IssueCommand {
                    replaces: Some((Uuid::from_u128(2), true)),
                    ..command.clone()
                },
                CredentialRejection::AlreadyRevoked,
            ),
            (
                IssueCommand {
                    caller_revoked: Some(true),
                    ..command.clone()
                },
                CredentialRejection::CallerRevoked,
            ),
            (
                IssueCommand {
                    first_for_provider: Some((provider, application, true)),
                    ..command.clone()
                },
                CredentialRejection::FirstTokenClaimed,
            ),
        ] {
            assert_eq!(decide_issue(&command, at), Err(refusal));
        }
        assert_eq!(
            decide_revoke(Uuid::from_u128(2), false, Some(true), "token:x", "", at),
            Err(CredentialRejection::CallerRevoked)
        );
        assert!(decide_revoke(Uuid::from_u128(2), false, Some(false), "token:x", "", at).is_ok());
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
