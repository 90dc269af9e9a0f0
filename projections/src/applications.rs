//! Provider applications, folded with the domain's own `evolve`: the state reviewers list and
//! applicants read. Kept in memory by the API; events must arrive in log order.

use std::collections::HashMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::onboarding::{Application, ApplicationEvent, evolve};
use uuid::Uuid;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Applications {
    by_id: HashMap<Uuid, Application>,
    /// Log position of each application's submission: the order reviewers page in (commit
    /// order, so a later submission can never sort before a page already read).
    submitted_position: HashMap<Uuid, u64>,
    /// The application that made each provider (approved applications carry a provider id).
    by_provider: HashMap<Uuid, Uuid>,
}

impl Applications {
    pub fn apply(&mut self, position: u64, event: &DomainEvent) {
        let DomainEvent::Application(event) = event else {
            return;
        };
        let id = event.application_id();
        if matches!(event, ApplicationEvent::Submitted(_)) {
            self.submitted_position.entry(id).or_insert(position);
        }
        let current = self.by_id.remove(&id);
        if let Some(next) = evolve(current, event) {
            if let Some(provider_id) = next.provider_id {
                self.by_provider.insert(provider_id, id);
            }
            self.by_id.insert(id, next);
        }
    }

    pub fn get(&self, application_id: &Uuid) -> Option<&Application> {
        self.by_id.get(application_id)
    }

    /// The application that made a provider.
    pub fn of_provider(&self, provider_id: &Uuid) -> Option<&Application> {
        self.by_id.get(self.by_provider.get(provider_id)?)
    }

    /// Every application with the log position of its submission, in that order.
    pub fn all(&self) -> Vec<(u64, &Application)> {
        let mut all: Vec<(u64, &Application)> = self
            .by_id
            .values()
            .map(|a| {
                (
                    self.submitted_position
                        .get(&a.application_id)
                        .copied()
                        .unwrap_or(0),
                    a,
                )
            })
            .collect();
        all.sort_by_key(|(position, _)| *position);
        all
    }
}
