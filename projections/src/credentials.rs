//! The credential registry: every token ever issued, with its role and whether it is revoked.
//!
//! Small and read on every request, so it is kept in memory by the API (folded from the log at
//! start, then kept current by a subscription). `apply` is idempotent and tolerates seeing an
//! event twice (the API applies its own writes at once, and the subscription delivers them again).

use std::collections::HashMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::credentials::{CredentialEvent, Role};
use gpunex_domain::time::Timestamp;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CredentialRecord {
    pub token_id: Uuid,
    pub role: Role,
    pub label: String,
    pub secret_sha256: String,
    pub issued_at: Timestamp,
    pub issued_by: String,
    pub replaces: Option<Uuid>,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    tokens: HashMap<Uuid, CredentialRecord>,
    /// Each machine id an agent token was ever bound to, and the provider of the first such
    /// token: the id's holder, whatever later tokens say.
    machine_holders: HashMap<Uuid, Uuid>,
}

impl Credentials {
    pub fn apply(&mut self, event: &DomainEvent) {
        let DomainEvent::Credential(event) = event else {
            return;
        };
        match event {
            CredentialEvent::Issued(issued) => {
                if let Role::Agent {
                    provider_id,
                    machine_id,
                } = issued.role
                {
                    self.machine_holders
                        .entry(machine_id)
                        .or_insert(provider_id);
                }
                self.tokens
                    .entry(issued.token_id)
                    .or_insert_with(|| CredentialRecord {
                        token_id: issued.token_id,
                        role: issued.role,
                        label: issued.label.clone(),
                        secret_sha256: issued.secret_sha256.clone(),
                        issued_at: issued.issued_at,
                        issued_by: issued.issued_by.clone(),
                        replaces: issued.replaces,
                        expires_at: issued.expires_at,
                        revoked_at: None,
                    });
            }
            CredentialEvent::ProviderTokenClaimed(_) => {}
            CredentialEvent::Revoked(revoked) => {
                if let Some(record) = self.tokens.get_mut(&revoked.token_id) {
                    record.revoked_at.get_or_insert(revoked.revoked_at);
                }
            }
        }
    }

    pub fn get(&self, token_id: &Uuid) -> Option<&CredentialRecord> {
        self.tokens.get(token_id)
    }

    /// The provider that holds `machine_id`: the one its first agent token was bound to.
    pub fn machine_holder(&self, machine_id: &Uuid) -> Option<Uuid> {
        self.machine_holders.get(machine_id).copied()
    }

    /// The renter tokens of one person, oldest first.
    pub fn list_of_user(&self, user_id: Uuid) -> Vec<&CredentialRecord> {
        let mut tokens: Vec<&CredentialRecord> = self
            .tokens
            .values()
            .filter(|record| record.role == Role::Renter { user_id })
            .collect();
        tokens.sort_by_key(|record| (record.issued_at, record.token_id));
        tokens
    }

    /// Every token, oldest first; `provider` limits the list to tokens bound to that provider.
    pub fn list(&self, provider: Option<Uuid>) -> Vec<&CredentialRecord> {
        let mut tokens: Vec<&CredentialRecord> = self
            .tokens
            .values()
            .filter(|record| provider.is_none() || record.role.provider_id() == provider)
            .collect();
        tokens.sort_by_key(|record| (record.issued_at, record.token_id));
        tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::credentials::{TokenIssued, TokenRevoked};

    fn issued(id: u128, role: Role) -> DomainEvent {
        DomainEvent::Credential(CredentialEvent::Issued(TokenIssued {
            token_id: Uuid::from_u128(id),
            role,
            label: "t".to_owned(),
            secret_sha256: "0".repeat(64),
            issued_at: Timestamp::from_unix_micros(i64::try_from(id).unwrap()),
            issued_by: "cli".to_owned(),
            replaces: None,
            expires_at: None,
        }))
    }

    #[test]
    fn folds_issues_and_revocations_idempotently() {
        let provider = Uuid::from_u128(9);
        let mut credentials = Credentials::default();
        let events = [
            issued(1, Role::Admin),
            issued(
                2,
                Role::Provider {
                    provider_id: provider,
                },
            ),
            DomainEvent::Credential(CredentialEvent::Revoked(TokenRevoked {
                token_id: Uuid::from_u128(2),
                revoked_at: Timestamp::from_unix_micros(50),
                revoked_by: "cli".to_owned(),
                reason: String::new(),
            })),
        ];
        for event in events.iter().chain(events.iter()) {
            credentials.apply(event);
        }
        assert_eq!(credentials.list(None).len(), 2);
        assert_eq!(credentials.list(Some(provider)).len(), 1);
        assert_eq!(
            credentials.get(&Uuid::from_u128(2)).unwrap().revoked_at,
            Some(Timestamp::from_unix_micros(50))
        );
        assert!(
            credentials
                .get(&Uuid::from_u128(1))
                .unwrap()
                .revoked_at
                .is_none()
        );
    }
}
