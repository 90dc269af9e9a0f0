//! The stored rentals projection: one row per rental with its whole folded state (ADR 0007).
//!
//! The in-memory market keeps only open rentals (active, or ended while their job runs); this
//! projection keeps every rental, so a rental that is over is read from a table rather than from
//! memory that grows with history. A rental's state is the fold of its own stream
//! ([`RentalState::apply`], the rule the market uses), so the fold of a batch needs from before
//! it only the rentals the batch touches ([`needs`], loaded by the store).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::rental::RentalEvent;
use uuid::Uuid;

use crate::market::RentalState;
use crate::{FoldError, ProjectedEvent};

/// The projection's name, and its checkpoint's.
pub const RENTALS: &str = "rentals";

/// The rental a rental-stream event is about (lease events are not: they live on GPU streams).
fn rental_of(event: &RentalEvent) -> Option<Uuid> {
    match event {
        RentalEvent::Started(e) => Some(e.rental_id),
        RentalEvent::Ended(e) => Some(e.rental_id),
        RentalEvent::UsageMetered(e) => Some(e.rental_id),
        RentalEvent::JobStarted(e) => Some(e.rental_id),
        RentalEvent::JobEnded(e) => Some(e.rental_id),
        RentalEvent::GpuLeased(_) | RentalEvent::GpuReleased(_) => None,
    }
}

/// The rentals a batch changes that started before it (their rows must be loaded).
pub fn needs(events: &[ProjectedEvent]) -> Vec<Uuid> {
    let mut started = BTreeSet::new();
    let mut before = BTreeSet::new();
    for projected in events {
        let DomainEvent::Rental(event) = &projected.event else {
            continue;
        };
        match event {
            RentalEvent::Started(s) => {
                started.insert(s.rental_id);
            }
            other => {
                if let Some(id) = rental_of(other).filter(|id| !started.contains(id)) {
                    before.insert(id);
                }
            }
        }
    }
    before.into_iter().collect()
}

/// Folds a batch (in increasing position) over the rentals it touches (`before`, as stored) and
/// returns every rental it changed, in its new state. An event about a rental that never started
/// is ignored, as the market ignores it.
pub fn fold_batch(
    events: &[ProjectedEvent],
    before: &HashMap<Uuid, RentalState>,
) -> Result<BTreeMap<Uuid, RentalState>, FoldError> {
    let mut changed: BTreeMap<Uuid, RentalState> = BTreeMap::new();
    let mut previous = 0;
    for projected in events {
        if projected.position <= previous {
            return Err(FoldError::OutOfOrder {
                position: projected.position,
                previous,
            });
        }
        previous = projected.position;
        let DomainEvent::Rental(event) = &projected.event else {
            continue;
        };
        match event {
            RentalEvent::Started(started) => {
                let mut state = RentalState::started(started.clone());
                state.stream_version = projected.stream_version;
                changed.insert(started.rental_id, state);
            }
            other => {
                let Some(id) = rental_of(other) else {
                    continue;
                };
                let state = match changed.get_mut(&id) {
                    Some(state) => state,
                    None => match before.get(&id) {
                        Some(state) => changed.entry(id).or_insert_with(|| state.clone()),
                        None => continue,
                    },
                };
                state.apply(projected.stream_version, other);
            }
        }
    }
    Ok(changed)
}

/// The fold of a whole log kept in memory, for `audit verify` and tests.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    rentals: HashMap<Uuid, RentalState>,
}

impl Replay {
    /// Folds the next batch; returns the rentals it changed.
    pub fn fold(
        &mut self,
        events: &[ProjectedEvent],
    ) -> Result<BTreeMap<Uuid, RentalState>, FoldError> {
        let changed = fold_batch(events, &self.rentals)?;
        for (id, state) in &changed {
            self.rentals.insert(*id, state.clone());
        }
        Ok(changed)
    }

    /// Every rental so far.
    pub fn rentals(&self) -> &HashMap<Uuid, RentalState> {
        &self.rentals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::StreamId;
    use gpunex_domain::money::Usdc;
    use gpunex_domain::rental::{EndCause, JobStarted, RentalEnded, RentalStarted};
    use gpunex_domain::time::Timestamp;

    use crate::market::Market;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn projected(position: u64, stream_version: u64, event: RentalEvent) -> ProjectedEvent {
        ProjectedEvent {
            position,
            event_id: id(u128::from(position) + 50_000),
            stream_id: StreamId::parse("rental-x").unwrap(),
            stream_version,
            recorded_at_us: 0,
            event: DomainEvent::Rental(event),
        }
    }

    fn started(rental: u128) -> RentalEvent {
        RentalEvent::Started(RentalStarted {
            rental_id: id(rental),
            renter_id: id(2),
            provider_id: id(3),
            machine_id: id(4),
            gpu_uuids: vec!["GPU-a".to_owned()],
            model_id: "h100-80gb".to_owned(),
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            started_at: Timestamp::from_unix_micros(0),
            workload: None,
        })
    }

    fn ended(rental: u128) -> RentalEvent {
        RentalEvent::Ended(RentalEnded {
            rental_id: id(rental),
            cause: EndCause::RenterCancelled,
            ended_at: Timestamp::from_unix_micros(5_000_000),
            ended_by: "t".to_owned(),
            evidence: String::new(),
        })
    }

    fn job_started(rental: u128) -> RentalEvent {
        RentalEvent::JobStarted(JobStarted {
            rental_id: id(rental),
            machine_id: id(4),
            runtime: "docker".to_owned(),
            handle: "c1".to_owned(),
            started_at: Timestamp::from_unix_micros(1),
        })
    }

    /// Batches split anywhere give the rows one fold of the whole log gives, and those rows are
    /// the market's own fold; the market forgets a rental once it is over, the store does not.
    #[test]
    fn stored_rows_are_the_markets_fold_and_outlive_it_in_memory() {
        let log = vec![
            projected(1, 1, started(1)),
            projected(2, 1, started(2)),
            projected(3, 2, job_started(2)),
            projected(4, 2, ended(1)),
            projected(5, 3, ended(2)),
            // An event about a rental that never started changes nothing.
            projected(6, 1, ended(9)),
        ];
        let mut whole = Replay::default();
        whole.fold(&log).unwrap();
        for split in 1..log.len() {
            let mut parts = Replay::default();
            parts.fold(&log[..split]).unwrap();
            parts.fold(&log[split..]).unwrap();
            assert_eq!(parts.rentals(), whole.rentals(), "split at {split}");
        }
        assert_eq!(whole.rentals().len(), 2);
        let mut market = Market::default();
        for event in &log {
            market.apply(
                event.position,
                event.stream_version,
                event.recorded_at_us,
                &event.event,
            );
        }
        // Rental 1 is over (ended, no job): gone from memory. Rental 2 ended while its job runs:
        // still open, and the same in both.
        assert!(market.open_rental(&id(1)).is_none());
        assert_eq!(market.open_rental(&id(2)), whole.rentals().get(&id(2)));
        let one = &whole.rentals()[&id(1)];
        assert!(one.ended.is_some() && !one.is_open());
        assert_eq!(one.stream_version, 2);
        assert_eq!(needs(&log[3..]), vec![id(1), id(2), id(9)]);
        assert!(
            fold_batch(&[log[1].clone(), log[0].clone()], &HashMap::new()).is_err(),
            "out of order"
        );
    }
}
