//! Who an agent is: the provider and machine its token is bound to (checked against the fleet),
//! and one delivered event's identity (its id and the fingerprint of its content).

use gpunex_domain::codes::ErrorCode;
use gpunex_domain::credentials::Role;
use gpunex_store::Metadata;
use gpunex_wire::fleet as wf;
use sha2::Digest;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The provider and machine an agent token is bound to. The binding alone is not trusted: a
/// machine already registered to another provider is refused whatever the token says.
pub(crate) fn agent_of(state: &AppState, caller: &Caller) -> Result<(Uuid, Uuid), ApiError> {
    let Role::Agent {
        provider_id,
        machine_id,
    } = caller.role
    else {
        return Err(ApiError::Forbidden);
    };
    let owner = state
        .credentials
        .with_fleet(|f| f.machine(&machine_id).map(|m| m.provider_id));
    if owner.is_some_and(|owner| owner != provider_id) {
        return Err(ApiError::Refused {
            code: ErrorCode::MachineNotOwned,
            detail: format!("machine {machine_id} is registered to another provider"),
        });
    }
    Ok((provider_id, machine_id))
}

pub(crate) fn not_owned(named: Uuid) -> ApiError {
    ApiError::Refused {
        code: ErrorCode::MachineNotOwned,
        detail: format!(
            "this agent token belongs to another machine than {named}; use the token issued for this machine"
        ),
    }
}

/// The metadata of what an agent's delivery causes: the agent, the delivery, and the
/// fingerprint of its content.
pub(crate) fn agent_metadata(machine_id: Uuid, delivery: &Delivery) -> Metadata {
    Metadata {
        actor: format!("agent:{machine_id}"),
        correlation_id: Some(delivery.event_id),
        causation_id: None,
        content_sha256: Some(delivery.content_sha256.clone()),
    }
}

/// One event an agent delivered: the id it chose (its idempotency key) and the SHA-256 of its
/// content (the canonical JSON of `occurred_at`, `kind` and `body`).
pub struct Delivery {
    pub event_id: Uuid,
    pub content_sha256: String,
}

impl Delivery {
    pub(crate) fn of(event: &wf::AgentEvent) -> Delivery {
        let content = serde_json::to_value(event).map(|mut value| {
            if let Some(object) = value.as_object_mut() {
                object.remove("event_id");
            }
            gpunex_store::envelope::canonical_json(&value)
        });
        Delivery {
            event_id: event.event_id,
            content_sha256: hex::encode(sha2::Sha256::digest(
                content.unwrap_or_default().as_bytes(),
            )),
        }
    }

    /// The metadata of an event this delivery causes on `machine_id`.
    pub fn metadata(&self, machine_id: Uuid) -> Metadata {
        agent_metadata(machine_id, self)
    }
}
