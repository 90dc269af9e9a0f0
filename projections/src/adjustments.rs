//! Ledger adjustment proposals and their decisions, folded from `ledger.adjustment_*` events.

use std::collections::BTreeMap;

use gpunex_domain::DomainEvent;
use gpunex_domain::adjustments::{AdjustmentDecided, AdjustmentEvent, AdjustmentProposed};
use uuid::Uuid;

/// A proposal as it stands.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Proposal {
    pub proposed: AdjustmentProposed,
    pub decided: Option<AdjustmentDecided>,
    /// The log position of the proposal.
    pub position: u64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Adjustments {
    proposals: BTreeMap<Uuid, Proposal>,
}

impl Adjustments {
    /// Applies one event; idempotent (the API applies its own writes and the log delivers them
    /// again).
    pub fn apply(&mut self, position: u64, event: &DomainEvent) {
        let DomainEvent::Adjustment(event) = event else {
            return;
        };
        match event {
            AdjustmentEvent::Proposed(proposed) => {
                self.proposals
                    .entry(proposed.proposal_id)
                    .or_insert_with(|| Proposal {
                        proposed: proposed.clone(),
                        decided: None,
                        position,
                    });
            }
            AdjustmentEvent::Decided(decided) => {
                if let Some(proposal) = self.proposals.get_mut(&decided.proposal_id) {
                    proposal.decided.get_or_insert_with(|| decided.clone());
                }
            }
        }
    }

    pub fn get(&self, proposal_id: &Uuid) -> Option<&Proposal> {
        self.proposals.get(proposal_id)
    }

    /// Every proposal, oldest first (proposal ids are UUIDv7).
    pub fn all(&self) -> impl Iterator<Item = &Proposal> {
        self.proposals.values()
    }
}
