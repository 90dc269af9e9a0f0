//! Provider applications, folded with the domain's own `evolve`: the state reviewers list and
//! applicants read. Kept in memory by the API; events must arrive in log order.

use std::collections::HashMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::onboarding::{Application, ApplicationEvent, evolve};
use uuid::Uuid;

#[derive(Debug, Clone, Default)]
pub struct Applications {
    by_id: HashMap<Uuid, Application>,
}

fn application_id(event: &ApplicationEvent) -> Uuid {
    match event {
        ApplicationEvent::Submitted(e) => e.application_id,
        ApplicationEvent::InformationRequested(e) => e.application_id,
        ApplicationEvent::InformationProvided(e) => e.application_id,
        ApplicationEvent::Approved(e) => e.application_id,
        ApplicationEvent::Rejected(e) => e.application_id,
        ApplicationEvent::Withdrawn(e) => e.application_id,
    }
}

impl Applications {
    pub fn apply(&mut self, event: &DomainEvent) {
        let DomainEvent::Application(event) = event else {
            return;
        };
        let id = application_id(event);
        let current = self.by_id.remove(&id);
        if let Some(next) = evolve(current, event) {
            self.by_id.insert(id, next);
        }
    }

    pub fn get(&self, application_id: &Uuid) -> Option<&Application> {
        self.by_id.get(application_id)
    }

    /// Every application, oldest submission first.
    pub fn all(&self) -> Vec<&Application> {
        let mut all: Vec<&Application> = self.by_id.values().collect();
        all.sort_by_key(|a| (a.submitted_at, a.application_id));
        all
    }
}
