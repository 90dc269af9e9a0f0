//! The user registry: who can sign in with which email, and the staff roles each person holds,
//! folded from `account.*` events.
//! Kept in memory by the API next to the credential registry; `apply` is idempotent.

use std::collections::HashMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::accounts::{AccountEvent, StaffRole};
use gpunex_domain::time::Timestamp;
use std::collections::BTreeSet;
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
    /// The staff roles each person holds now (absent: none). Snapshots before grants existed
    /// have none, which is what their log held.
    #[serde(default)]
    staff: HashMap<Uuid, BTreeSet<StaffRole>>,
}

impl Users {
    pub fn apply(&mut self, event: &DomainEvent) {
        let registered = match event {
            DomainEvent::Account(AccountEvent::UserRegistered(registered)) => registered,
            DomainEvent::Account(AccountEvent::RoleGranted(granted)) => {
                self.staff
                    .entry(granted.user_id)
                    .or_default()
                    .insert(granted.role);
                return;
            }
            DomainEvent::Account(AccountEvent::RoleRevoked(revoked)) => {
                if let Some(held) = self.staff.get_mut(&revoked.user_id) {
                    held.remove(&revoked.role);
                    if held.is_empty() {
                        self.staff.remove(&revoked.user_id);
                    }
                }
                return;
            }
            _ => return,
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

    /// The staff roles `user_id` holds now.
    pub fn staff_roles(&self, user_id: &Uuid) -> BTreeSet<StaffRole> {
        self.staff.get(user_id).cloned().unwrap_or_default()
    }

    pub fn get(&self, user_id: &Uuid) -> Option<&UserRecord> {
        self.by_id.get(user_id)
    }

    /// The addresses of everyone who holds `role` now, sorted.
    pub fn emails_with(&self, role: StaffRole) -> Vec<String> {
        let mut emails: Vec<String> = self
            .staff
            .iter()
            .filter(|(_, roles)| roles.contains(&role))
            .filter_map(|(id, _)| self.by_id.get(id).map(|u| u.email.clone()))
            .collect();
        emails.sort();
        emails
    }

    pub fn by_email(&self, email: &str) -> Option<&UserRecord> {
        self.by_email
            .get(&email.to_lowercase())
            .and_then(|id| self.by_id.get(id))
    }
}
