//! The stored presence history: one row per machine presence transition, for ever (ADR 0007).
//!
//! The in-memory fleet keeps only the transitions of the last [`crate::fleet::PRESENCE_MEMORY_DAYS`]
//! days per machine, enough for every window the live models read (the 30-day uptime of the
//! listings and the console, the pricing window); a read further back (a rental metered from a
//! start older than that) reads this projection. A transition is one event, so the fold needs no
//! state from before a batch.

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::FleetEvent;
use gpunex_domain::time::Timestamp;
use uuid::Uuid;

/// The projection's name, and its checkpoint's.
pub const PRESENCE: &str = "presence";

/// The event types the fold reads (a page's other events are not decoded).
pub const EVENT_TYPES: [&str; 2] = ["fleet.machine_online", "fleet.machine_offline"];

/// One stored transition: the machine went online (`online`) or offline at `at` (an offline
/// transition is dated at the last heartbeat), recorded at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub position: u64,
    pub machine_id: Uuid,
    pub online: bool,
    pub at: Timestamp,
}

/// The transition an event records, if it records one.
pub fn transition(position: u64, event: &DomainEvent) -> Option<Transition> {
    match event {
        DomainEvent::Fleet(FleetEvent::MachineOnline(online)) => Some(Transition {
            position,
            machine_id: online.machine_id,
            online: true,
            at: online.at,
        }),
        DomainEvent::Fleet(FleetEvent::MachineOffline(offline)) => Some(Transition {
            position,
            machine_id: offline.machine_id,
            online: false,
            at: offline.last_heartbeat_at,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use gpunex_domain::fleet::{MachineOffline, MachineOnline};

    use super::*;

    #[test]
    fn online_and_offline_events_are_transitions_and_nothing_else_is() {
        let machine_id = Uuid::from_u128(1);
        let provider_id = Uuid::from_u128(2);
        let online = DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
            machine_id,
            provider_id,
            at: Timestamp::from_unix_micros(5),
        }));
        let offline = DomainEvent::Fleet(FleetEvent::MachineOffline(MachineOffline {
            machine_id,
            provider_id,
            last_heartbeat_at: Timestamp::from_unix_micros(7),
            detected_at: Timestamp::from_unix_micros(9),
            grace_seconds: 2,
        }));
        assert_eq!(
            transition(3, &online),
            Some(Transition {
                position: 3,
                machine_id,
                online: true,
                at: Timestamp::from_unix_micros(5)
            })
        );
        // Dated at the last heartbeat, not when the watchdog noticed.
        assert_eq!(
            transition(4, &offline).map(|t| (t.online, t.at)),
            Some((false, Timestamp::from_unix_micros(7)))
        );
        for name in EVENT_TYPES {
            assert!(name.starts_with("fleet.machine_"));
        }
        assert_eq!(online.event_type(), EVENT_TYPES[0]);
        assert_eq!(offline.event_type(), EVENT_TYPES[1]);
    }
}
