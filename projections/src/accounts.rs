//! The user registry: who can sign in with which email, folded from `account.*` events.
//! Kept in memory by the API next to the credential registry; `apply` is idempotent.

use std::collections::HashMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::accounts::AccountEvent;
use gpunex_domain::time::Timestamp;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UserRecord {
    pub user_id: Uuid,
    pub email: String,
    pub password_hash: String,
    pub registered_at: Timestamp,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Users {
    by_id: HashMap<Uuid, UserRecord>,
    /// Keyed by the lowercased address: sign-in ignores case.
    by_email: HashMap<String, Uuid>,
}

impl Users {
    pub fn apply(&mut self, event: &DomainEvent) {
        let DomainEvent::Account(AccountEvent::UserRegistered(registered)) = event else {
            return;
        };
        self.by_email
            .entry(registered.email.to_lowercase())
            .or_insert(registered.user_id);
        self.by_id
            .entry(registered.user_id)
            .or_insert_with(|| UserRecord {
                user_id: registered.user_id,
                email: registered.email.clone(),
                password_hash: registered.password_hash.clone(),
                registered_at: registered.registered_at,
            });
    }

    pub fn get(&self, user_id: &Uuid) -> Option<&UserRecord> {
        self.by_id.get(user_id)
    }

    pub fn by_email(&self, email: &str) -> Option<&UserRecord> {
        self.by_email
            .get(&email.to_lowercase())
            .and_then(|id| self.by_id.get(id))
    }
}
