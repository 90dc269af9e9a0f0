//! The stored rentals projection: one row per rental with its whole folded state (ADR 0007).
//!
//! The in-memory market keeps only open rentals (active, or ended while their job runs); this
//! projection keeps every rental, so a rental that is over is read from a table rather than from
//! memory that grows with history. A rental's state is the fold of its own stream
//! ([`RentalState::apply`], the rule the market uses), so the fold of a batch needs from before
//! it only the rentals the batch touches ([`needs`], loaded by the store).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::metered_line::MeteredLine;
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

/// What the fold reads of one event: a rental event whole, or of a usage event only its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<'a> {
    Event(&'a RentalEvent),
    Metered(&'a MeteredLine),
}

impl Read<'_> {
    /// The rental the event is about (lease events are not: they live on GPU streams).
    fn rental(&self) -> Option<Uuid> {
        match self {
            Read::Event(event) => rental_of(event),
            Read::Metered(line) => Some(line.rental_id),
        }
    }
}

/// An event the fold takes: a whole decoded event ([`ProjectedEvent`], as `audit verify` and the
/// tests give it) or only what the fold reads of it ([`RentalsEvent`], as the catch-up decodes
/// it). Both fold to the same rows.
pub trait RentalsInput {
    fn position(&self) -> u64;
    fn stream_version(&self) -> u64;
    /// What the fold reads of it (`None`: not a rental event).
    fn read(&self) -> Option<Read<'_>>;
}

impl RentalsInput for ProjectedEvent {
    fn position(&self) -> u64 {
        self.position
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn read(&self) -> Option<Read<'_>> {
        match &self.event {
            DomainEvent::Rental(event) => Some(Read::Event(event)),
            _ => None,
        }
    }
}

/// A rental event as the catch-up decodes it: whole, but a usage event only as its line
/// ([`MeteredLine::decode_json`]: the postings are the ledger's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RentalsEvent {
    pub position: u64,
    pub stream_version: u64,
    pub event: RentalsEventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RentalsEventKind {
    Rental(RentalEvent),
    Metered(MeteredLine),
}

impl RentalsInput for RentalsEvent {
    fn position(&self) -> u64 {
        self.position
    }
    fn stream_version(&self) -> u64 {
        self.stream_version
    }
    fn read(&self) -> Option<Read<'_>> {
        Some(match &self.event {
            RentalsEventKind::Rental(event) => Read::Event(event),
            RentalsEventKind::Metered(line) => Read::Metered(line),
        })
    }
}

/// The rentals a batch changes that started before it (their rows must be loaded).
pub fn needs<E: RentalsInput>(events: &[E]) -> Vec<Uuid> {
    let mut started = BTreeSet::new();
    let mut before = BTreeSet::new();
    for event in events {
        match event.read() {
            Some(Read::Event(RentalEvent::Started(s))) => {
                started.insert(s.rental_id);
            }
            Some(other) => {
                if let Some(id) = other.rental().filter(|id| !started.contains(id)) {
                    before.insert(id);
                }
            }
            None => {}
        }
    }
    before.into_iter().collect()
}

/// Folds a batch (in increasing position) over the rentals it touches (`before`, as stored) and
/// returns every rental it changed, in its new state. An event about a rental that never started
/// is ignored, as the market ignores it.
pub fn fold_batch<E: RentalsInput>(
    events: &[E],
    before: &HashMap<Uuid, RentalState>,
) -> Result<BTreeMap<Uuid, RentalState>, FoldError> {
    let mut changed: BTreeMap<Uuid, RentalState> = BTreeMap::new();
    let mut previous = 0;
    for event in events {
        let position = event.position();
        if position <= previous {
            return Err(FoldError::OutOfOrder { position, previous });
        }
        previous = position;
        let Some(read) = event.read() else {
            continue;
        };
        if let Read::Event(RentalEvent::Started(started)) = read {
            let mut state = RentalState::started(started.clone());
            state.stream_version = event.stream_version();
            changed.insert(started.rental_id, state);
            continue;
        }
        let Some(id) = read.rental() else {
            continue;
        };
        let state = match changed.get_mut(&id) {
            Some(state) => state,
            None => match before.get(&id) {
                Some(state) => changed.entry(id).or_insert_with(|| state.clone()),
                None => continue,
            },
        };
        match read {
            Read::Event(other) => state.apply(event.stream_version(), other),
            Read::Metered(line) => {
                state.meter(event.stream_version(), line.to_gpu_seconds, line.gross);
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

    fn metered(rental: u128, to_gpu_seconds: u64, gross: i64) -> RentalEvent {
        use gpunex_domain::ledger::{Account, JournalEntry, Posting};
        let gross = Usdc::from_micros(gross);
        RentalEvent::UsageMetered(gpunex_domain::rental::UsageMetered {
            entry_id: id(u128::from(to_gpu_seconds) + 90_000),
            rental_id: id(rental),
            renter_id: id(2),
            provider_id: id(3),
            report_id: id(u128::from(to_gpu_seconds) + 80_000),
            from_gpu_seconds: 0,
            to_gpu_seconds,
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            gross,
            fee: Usdc::ZERO,
            fee_bp: 0,
            net: gross,
            postings: JournalEntry::new(vec![
                Posting::debit(Account::RenterReceivable(id(2)), gross),
                Posting::credit(Account::ProviderPayable(id(3)), gross),
            ])
            .unwrap(),
            reported_gpu_seconds: None,
            metered_at: None,
        })
    }

    /// The catch-up folds a usage event from its line alone: the same rows as from the whole
    /// event, batch by batch, and the same rentals needed from before.
    #[test]
    fn a_usage_line_folds_as_its_whole_event() {
        let log = vec![
            projected(1, 1, started(1)),
            projected(2, 2, metered(1, 600, 333)),
            projected(3, 3, metered(1, 1_200, 334)),
            projected(4, 4, ended(1)),
            projected(5, 1, metered(9, 60, 1)),
        ];
        let light: Vec<RentalsEvent> = log
            .iter()
            .map(|event| RentalsEvent {
                position: event.position,
                stream_version: event.stream_version,
                event: match &event.event {
                    DomainEvent::Rental(RentalEvent::UsageMetered(m)) => {
                        RentalsEventKind::Metered(MeteredLine::from(m))
                    }
                    DomainEvent::Rental(other) => RentalsEventKind::Rental(other.clone()),
                    _ => unreachable!("a rental log"),
                },
            })
            .collect();
        let whole = fold_batch(&log, &HashMap::new()).unwrap();
        assert_eq!(fold_batch(&light, &HashMap::new()).unwrap(), whole);
        let one = &whole[&id(1)];
        assert_eq!(
            (one.meter.gpu_seconds, one.meter.charged.micros()),
            (1_200, 667)
        );
        assert_eq!(one.stream_version, 4);
        for split in 1..log.len() {
            let before: HashMap<Uuid, RentalState> = fold_batch(&log[..split], &HashMap::new())
                .unwrap()
                .into_iter()
                .collect();
            assert_eq!(
                fold_batch(&light[split..], &before).unwrap(),
                fold_batch(&log[split..], &before).unwrap(),
                "split at {split}"
            );
            assert_eq!(
                needs(&light[split..]),
                needs(&log[split..]),
                "split at {split}"
            );
        }
    }
}
