//! The fleet: every registered machine with its GPUs, presence and GPU conditions, the latest
//! declaration comparison per provider, and the platform's recorded outages. Kept in memory by
//! the API (folded from `fleet.*` and `platform.*` events in log order).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{
    self, DeclarationCompared, FleetEvent, GpuCondition, GpuDetected, HostInfo, Span,
};
use gpunex_domain::time::{MICROS_PER_DAY, Timestamp};
use uuid::Uuid;

/// Presence transitions older than this many days before a machine's newest one are forgotten
/// here (the stored presence history keeps them all, `crate::presence_history`). The widest
/// window the live models read is 30 days back from now (the listings' and the console's
/// uptime), so a day's margin keeps every one of them exact.
pub const PRESENCE_MEMORY_DAYS: i64 = 31;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MachineState {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub host: HostInfo,
    pub agent_version: String,
    pub simulated: bool,
    /// When the first registration was recorded (server clock).
    pub registered_at: Timestamp,
    /// When the latest registration was recorded.
    pub inventory_at: Timestamp,
    pub registrations: u32,
    /// The GPUs of the latest registration, by index.
    pub gpus: Vec<GpuDetected>,
    pub online: bool,
    /// When the current state began: the online event's time, or the last heartbeat before
    /// going offline. `None` before the first heartbeat.
    pub since: Option<Timestamp>,
    /// `(online, at)` transitions in log order, for downtime accounting: those of the last
    /// [`PRESENCE_MEMORY_DAYS`], and the one before them (the state a window starts in).
    pub transitions: Vec<(bool, Timestamp)>,
    /// `None` while `transitions` holds every transition of the machine; once older ones are
    /// forgotten, the instant of the first one kept: `transitions` is exact for a window that
    /// starts then or later, and the stored presence history answers for an earlier one.
    pub transitions_from: Option<Timestamp>,
    /// Conditions active now, per GPU, with when they were observed to start.
    pub conditions: BTreeMap<String, BTreeMap<GpuCondition, Timestamp>>,
    /// The machine stream's version: the expected version of the next watchdog append.
    pub stream_version: u64,
}

impl MachineState {
    /// Whether `transitions` answers for a window that starts at `from`.
    pub fn transitions_cover(&self, from: Timestamp) -> bool {
        self.transitions_from.is_none_or(|first| first <= from)
    }

    /// The provider's downtime of this machine inside `window`, net of platform outages. Exact
    /// for a window that memory covers ([`MachineState::transitions_cover`]): every window the
    /// live models ask for ends now and starts at most 30 days before.
    pub fn downtime_micros(&self, outages: &[Span], window: Span, now: Timestamp) -> i64 {
        let offline = fleet::offline_spans(&self.transitions, now);
        fleet::provider_downtime_micros(&offline, outages, window)
    }
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Fleet {
    machines: HashMap<Uuid, MachineState>,
    /// Which machine each GPU UUID is registered on now.
    gpu_machine: HashMap<String, Uuid>,
    /// The latest comparison per provider and its stream's version.
    comparisons: HashMap<Uuid, (DeclarationCompared, u64)>,
    outages: Vec<Span>,
    /// Machines per provider, in registration order.
    by_provider: BTreeMap<Uuid, BTreeSet<Uuid>>,
}

impl Fleet {
    /// Applies one event of the log; `stream_version` and `recorded_at_us` are the row's.
    pub fn apply(&mut self, stream_version: u64, recorded_at_us: i64, event: &DomainEvent) {
        let DomainEvent::Fleet(event) = event else {
            return;
        };
        let recorded_at = Timestamp::from_unix_micros(recorded_at_us);
        match event {
            FleetEvent::MachineRegistered(registered) => {
                let previous = self.machines.remove(&registered.machine_id);
                if let Some(previous) = &previous {
                    for gpu in &previous.gpus {
                        self.gpu_machine.remove(&gpu.gpu.gpu_uuid);
                    }
                }
                let (registered_at, registrations, online, since) = match &previous {
                    Some(p) => (p.registered_at, p.registrations + 1, p.online, p.since),
                    None => (recorded_at, 1, false, None),
                };
                let (transitions, transitions_from, conditions) = previous.map_or_else(
                    || (Vec::new(), None, BTreeMap::new()),
                    |p| (p.transitions, p.transitions_from, p.conditions),
                );
                self.by_provider
                    .entry(registered.provider_id)
                    .or_default()
                    .insert(registered.machine_id);
                self.machines.insert(
                    registered.machine_id,
                    MachineState {
                        machine_id: registered.machine_id,
                        provider_id: registered.provider_id,
                        host: registered.host.clone(),
                        agent_version: registered.agent_version.clone(),
                        simulated: registered.simulated,
                        registered_at,
                        inventory_at: recorded_at,
                        registrations,
                        gpus: Vec::new(),
                        online,
                        since,
                        transitions,
                        transitions_from,
                        conditions,
                        stream_version,
                    },
                );
            }
            FleetEvent::GpuDetected(detected) => {
                // A GPU moved from another machine: it is no longer there.
                if let Some(old) = self
                    .gpu_machine
                    .insert(detected.gpu.gpu_uuid.clone(), detected.machine_id)
                    && old != detected.machine_id
                    && let Some(machine) = self.machines.get_mut(&old)
                {
                    machine
                        .gpus
                        .retain(|gpu| gpu.gpu.gpu_uuid != detected.gpu.gpu_uuid);
                }
                if let Some(machine) = self.machines.get_mut(&detected.machine_id) {
                    machine.gpus.push(detected.clone());
                    machine.gpus.sort_by_key(|gpu| gpu.gpu.index);
                    machine.stream_version = stream_version;
                }
            }
            FleetEvent::DeclarationCompared(compared) => {
                self.comparisons
                    .insert(compared.provider_id, (compared.clone(), stream_version));
            }
            FleetEvent::MachineOnline(online) => {
                if let Some(machine) = self.machines.get_mut(&online.machine_id) {
                    machine.online = true;
                    machine.since = Some(online.at);
                    machine.transitions.push((true, online.at));
                    machine.stream_version = stream_version;
                    machine.forget_old(recorded_at);
                }
            }
            FleetEvent::MachineOffline(offline) => {
                if let Some(machine) = self.machines.get_mut(&offline.machine_id) {
                    machine.online = false;
                    machine.since = Some(offline.last_heartbeat_at);
                    machine.transitions.push((false, offline.last_heartbeat_at));
                    machine.stream_version = stream_version;
                    machine.forget_old(recorded_at);
                }
            }
            FleetEvent::GpuConditionChanged(changed) => {
                if let Some(machine) = self.machines.get_mut(&changed.machine_id) {
                    let active = machine
                        .conditions
                        .entry(changed.gpu_uuid.clone())
                        .or_default();
                    if changed.active {
                        active
                            .entry(changed.condition)
                            .or_insert(changed.observed_at);
                    } else {
                        active.remove(&changed.condition);
                    }
                    machine.conditions.retain(|_, active| !active.is_empty());
                    machine.stream_version = stream_version;
                }
            }
            FleetEvent::PlatformOutageRecorded(outage) => {
                self.outages.push(Span {
                    from: outage.from,
                    until: outage.until,
                });
                self.outages = fleet::merge(&self.outages);
            }
        }
    }

    pub fn machine(&self, machine_id: &Uuid) -> Option<&MachineState> {
        self.machines.get(machine_id)
    }

    /// Every machine, in provider then machine id order (v7 ids: registration order).
    pub fn machines(&self) -> Vec<&MachineState> {
        self.by_provider
            .values()
            .flatten()
            .filter_map(|id| self.machines.get(id))
            .collect()
    }

    pub fn machines_of(&self, provider_id: &Uuid) -> Vec<&MachineState> {
        self.by_provider
            .get(provider_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.machines.get(id))
            .collect()
    }

    /// The machine a GPU is registered on now.
    pub fn machine_of_gpu(&self, gpu_uuid: &str) -> Option<&MachineState> {
        self.machines.get(self.gpu_machine.get(gpu_uuid)?)
    }

    /// Every GPU registered on the provider's machines now.
    pub fn gpus_of(&self, provider_id: &Uuid) -> Vec<GpuDetected> {
        self.machines_of(provider_id)
            .into_iter()
            .flat_map(|machine| machine.gpus.iter().cloned())
            .collect()
    }

    pub fn comparison(&self, provider_id: &Uuid) -> Option<&DeclarationCompared> {
        self.comparisons.get(provider_id).map(|(c, _)| c)
    }

    /// The version of the provider's comparison stream (0: none yet).
    pub fn comparison_version(&self, provider_id: &Uuid) -> u64 {
        self.comparisons.get(provider_id).map_or(0, |(_, v)| *v)
    }

    /// Recorded platform outages, merged and sorted.
    pub fn outages(&self) -> &[Span] {
        &self.outages
    }
}

impl MachineState {
    /// Forgets the transitions older than [`PRESENCE_MEMORY_DAYS`] before `newest`, keeping the
    /// last of them: it says what state the window starts in.
    fn forget_old(&mut self, newest: Timestamp) {
        let horizon = newest.unix_micros() - PRESENCE_MEMORY_DAYS * MICROS_PER_DAY;
        let old = self
            .transitions
            .iter()
            .take_while(|(_, at)| at.unix_micros() < horizon)
            .count();
        if old > 1 {
            self.transitions.drain(..old - 1);
            self.transitions_from = self.transitions.first().map(|(_, at)| *at);
        }
    }
}

#[cfg(test)]
mod tests {
    use gpunex_domain::fleet::{MachineOffline, MachineOnline, MachineRegistered};

    use super::*;

    fn day(n: i64) -> Timestamp {
        Timestamp::from_unix_micros(1_800_000_000_000_000 + n * MICROS_PER_DAY)
    }

    #[test]
    fn memory_keeps_a_month_of_transitions_and_says_from_when() {
        let machine_id = Uuid::from_u128(1);
        let provider_id = Uuid::from_u128(2);
        let mut fleet = Fleet::default();
        let registered = FleetEvent::MachineRegistered(MachineRegistered {
            machine_id,
            provider_id,
            host: HostInfo::named("rig"),
            agent_version: "1".to_owned(),
            simulated: false,
            gpu_count: 0,
            detected_at: day(0),
        });
        fleet.apply(1, day(0).unix_micros(), &DomainEvent::Fleet(registered));
        // Online each morning for 12 hours, for 60 days.
        let mut all = Vec::new();
        for n in 0..60 {
            let up = day(n);
            let down = Timestamp::from_unix_micros(up.unix_micros() + MICROS_PER_DAY / 2);
            let online = FleetEvent::MachineOnline(MachineOnline {
                machine_id,
                provider_id,
                at: up,
            });
            fleet.apply(0, up.unix_micros(), &DomainEvent::Fleet(online));
            let offline = FleetEvent::MachineOffline(MachineOffline {
                machine_id,
                provider_id,
                last_heartbeat_at: down,
                detected_at: down,
                grace_seconds: 60,
            });
            fleet.apply(0, down.unix_micros(), &DomainEvent::Fleet(offline));
            all.extend([(true, up), (false, down)]);
            let machine = fleet.machine(&machine_id).unwrap();
            if n < PRESENCE_MEMORY_DAYS {
                assert_eq!(machine.transitions_from, None, "day {n}");
                assert_eq!(machine.transitions, all);
            }
        }
        let machine = fleet.machine(&machine_id).unwrap();
        let first = machine
            .transitions_from
            .expect("older transitions were forgotten");
        assert_eq!(machine.transitions.first().map(|(_, at)| *at), Some(first));
        assert!(machine.transitions.len() < all.len());
        let newest = day(59).unix_micros() + MICROS_PER_DAY / 2;
        assert!(first.unix_micros() < newest - PRESENCE_MEMORY_DAYS * MICROS_PER_DAY);
        // Every 30-day window up to now is exact from memory; a longer one is not covered.
        let now = Timestamp::from_unix_micros(newest + MICROS_PER_DAY / 4);
        for days in [1, 7, 30] {
            let window = Span {
                from: Timestamp::from_unix_micros(now.unix_micros() - days * MICROS_PER_DAY),
                until: now,
            };
            assert!(machine.transitions_cover(window.from));
            assert_eq!(
                fleet::online_micros(&machine.transitions, window),
                fleet::online_micros(&all, window),
                "{days} days"
            );
        }
        assert!(!machine.transitions_cover(day(10)));
        assert!(machine.transitions_cover(first));
    }
}
