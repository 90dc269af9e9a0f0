//! The credential registry: every token that can still authenticate, with its role and whether
//! it is revoked.
//!
//! Small and read on every request, so it is kept in memory by the API (folded from the log at
//! start, then kept current by a subscription). `apply` is idempotent and tolerates seeing an
//! event twice.
//!
//! A token that expires (a console session, 12 hours) is forgotten [`FORGET_EXPIRED_AFTER_MICROS`]
//! after its expiry, once a later credential event is folded: it can never authenticate again,
//! and every sign-in issues one, so keeping them would grow memory with history. The log keeps
//! its issue and revocation for ever. Tokens without an expiry (API and agent tokens) are issued
//! by hand and stay.

use std::collections::{BTreeSet, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::credentials::{CredentialEvent, Role};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use uuid::Uuid;

/// How long after its expiry a token is forgotten: a day, so that no process whose clock lags
/// the one that recorded the event could still have accepted it.
pub const FORGET_EXPIRED_AFTER_MICROS: i64 = MICROS_PER_DAY;

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
    /// The tokens with an expiry, by when they expire: the next to forget come first.
    expiring: BTreeSet<(Timestamp, Uuid)>,
}

impl Credentials {
    /// Applies one event of the log, recorded at `recorded_at_us`.
    pub fn apply(&mut self, recorded_at_us: i64, event: &DomainEvent) {
        let DomainEvent::Credential(event) = event else {
            return;
        };
        // Whatever expired long enough before this event is forgotten first.
        let forget_before = recorded_at_us.saturating_sub(FORGET_EXPIRED_AFTER_MICROS);
        while let Some(&(expires_at, token_id)) = self.expiring.first()
            && expires_at.unix_micros() < forget_before
        {
            self.expiring.pop_first();
            self.tokens.remove(&token_id);
        }
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
                if let Some(expires_at) = issued.expires_at {
                    if expires_at.unix_micros() < forget_before {
                        // Seen again after it was forgotten: it stays forgotten.
                        return;
                    }
                    self.expiring.insert((expires_at, issued.token_id));
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
            credentials.apply(60, event);
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

    #[test]
    fn expired_tokens_are_forgotten_a_day_after_their_expiry() {
        let hour = 3_600 * 1_000_000;
        let session = |id: u128, issued_at: i64| {
            DomainEvent::Credential(CredentialEvent::Issued(TokenIssued {
                token_id: Uuid::from_u128(id),
                role: Role::User {
                    user_id: Uuid::from_u128(7),
                },
                label: "session".to_owned(),
                secret_sha256: "0".repeat(64),
                issued_at: Timestamp::from_unix_micros(issued_at),
                issued_by: "user".to_owned(),
                replaces: None,
                expires_at: Some(Timestamp::from_unix_micros(issued_at + 12 * hour)),
            }))
        };
        let mut credentials = Credentials::default();
        credentials.apply(0, &issued(1, Role::Admin));
        credentials.apply(0, &session(2, 0));
        // Expired, but less than a day ago: still known (and refused by its expiry).
        credentials.apply(30 * hour, &session(3, 30 * hour));
        assert!(credentials.get(&Uuid::from_u128(2)).is_some());
        // A day and more after it expired: forgotten at the next credential event.
        credentials.apply(37 * hour, &session(4, 37 * hour));
        assert!(credentials.get(&Uuid::from_u128(2)).is_none());
        assert!(credentials.get(&Uuid::from_u128(3)).is_some());
        assert!(
            credentials.get(&Uuid::from_u128(1)).is_some(),
            "no expiry: kept"
        );
        assert_eq!(credentials.expiring.len(), 2);
        // Its issue seen again does not bring it back.
        credentials.apply(37 * hour, &session(2, 0));
        assert!(credentials.get(&Uuid::from_u128(2)).is_none());
        assert_eq!(credentials.list(None).len(), 3);
        // Events of other kinds forget nothing.
        credentials.apply(
            1_000 * hour,
            &DomainEvent::ModelAdded(gpunex_domain::gpu::ModelAdded {
                model_id: "m".to_owned(),
                name: "M".to_owned(),
                vram_gb: 1,
                added_at: Timestamp::from_unix_micros(0),
                added_by: "admin".to_owned(),
            }),
        );
        assert_eq!(credentials.list(None).len(), 3);
    }
}
