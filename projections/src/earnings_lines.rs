//! The stored earnings projection: one row per metered usage line, with its provider's running
//! sums through that line, and one row per rental a line refers to (ADR 0007).
//!
//! A total over any date range is then two indexed lookups and a subtraction (the running sums
//! of the last line before each end), whatever the length of the history; the lines of a range
//! are one index range. The rules are those of the in-memory [`crate::earnings`] model it
//! replaces: a line is dated when it was metered (`metered_at`; for events from before that
//! field, when it was recorded), and within a provider dates never go backwards (a line dated
//! "earlier" than the one before it, which two servers' clocks could produce, takes the previous
//! date), so date ranges and position ranges are both contiguous.
//!
//! The fold is pure: what it needs from before its batch (the rentals its lines refer to and the
//! providers' running sums) is passed in ([`Before`], loaded by the store for [`needs`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::rental::RentalEvent;
use uuid::Uuid;

use crate::earnings::{RentalRef, Sums};
use crate::{FoldError, ProjectedEvent};

/// The projection's name, and its checkpoint's.
pub const EARNINGS: &str = "earnings";

/// A provider's place in the fold: the date of its last line and its sums through it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub last_at_us: i64,
    pub through: Sums,
}

/// One stored usage line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineRow {
    pub position: u64,
    pub provider_id: Uuid,
    pub at_us: i64,
    pub entry_id: Uuid,
    pub report_id: Uuid,
    pub rental_id: Uuid,
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub price_per_gpu_hour: i64,
    pub gross: i64,
    pub fee: i64,
    pub net: i64,
    pub fee_bp: u32,
    /// The provider's sums through this line (this line included).
    pub through: Sums,
}

/// What one batch adds: rentals (inserted once), lines, and each touched provider's new cursor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EarningsBatch {
    pub rentals: Vec<RentalRef>,
    pub lines: Vec<LineRow>,
    pub cursors: BTreeMap<Uuid, Cursor>,
}

/// What a batch's fold needs from before the batch.
#[derive(Debug, Clone, Default)]
pub struct Before {
    pub rentals: HashMap<Uuid, RentalRef>,
    pub cursors: HashMap<Uuid, Cursor>,
}

/// The rentals (started before the batch) and providers a batch's lines concern.
pub fn needs(events: &[ProjectedEvent]) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut started = BTreeSet::new();
    let mut rentals = BTreeSet::new();
    let mut providers = BTreeSet::new();
    for projected in events {
        match &projected.event {
            DomainEvent::Rental(RentalEvent::Started(s)) => {
                started.insert(s.rental_id);
            }
            DomainEvent::Rental(RentalEvent::UsageMetered(m)) => {
                if !started.contains(&m.rental_id) {
                    rentals.insert(m.rental_id);
                }
                providers.insert(m.provider_id);
            }
            _ => {}
        }
    }
    (
        rentals.into_iter().collect(),
        providers.into_iter().collect(),
    )
}

fn overflow(provider: Uuid, position: u64) -> FoldError {
    FoldError::BalanceOverflow {
        account: format!("earnings of provider {provider}"),
        position,
    }
}

/// Adds one line to running sums, refusing overflow.
fn add(sums: Sums, row: &LineRow) -> Option<Sums> {
    Some(Sums {
        gross: sums.gross.checked_add(row.gross)?,
        fee: sums.fee.checked_add(row.fee)?,
        net: sums.net.checked_add(row.net)?,
        gpu_seconds: sums
            .gpu_seconds
            .checked_add(row.to_gpu_seconds.saturating_sub(row.from_gpu_seconds))?,
        lines: sums.lines.checked_add(1)?,
    })
}

/// Folds a batch of events (in increasing position) into the rows it adds.
pub fn fold_batch(events: &[ProjectedEvent], before: &Before) -> Result<EarningsBatch, FoldError> {
    let mut batch = EarningsBatch::default();
    let mut new_rentals: Vec<RentalRef> = Vec::new();
    let mut started: BTreeSet<Uuid> = BTreeSet::new();
    let mut previous = 0;
    for projected in events {
        if projected.position <= previous {
            return Err(FoldError::OutOfOrder {
                position: projected.position,
                previous,
            });
        }
        previous = projected.position;
        match &projected.event {
            DomainEvent::Rental(RentalEvent::Started(s)) => {
                started.insert(s.rental_id);
                let started = s;
                new_rentals.push(RentalRef {
                    rental_id: started.rental_id,
                    renter_id: started.renter_id,
                    provider_id: started.provider_id,
                    machine_id: started.machine_id,
                    model_id: started.model_id.clone(),
                    gpu_uuids: started.gpu_uuids.clone(),
                });
            }
            DomainEvent::Rental(RentalEvent::UsageMetered(metered)) => {
                let known = started.contains(&metered.rental_id)
                    || before.rentals.contains_key(&metered.rental_id);
                if !known {
                    // The in-memory model ignored lines of unknown rentals; so does this one.
                    continue;
                }
                let cursor = batch
                    .cursors
                    .get(&metered.provider_id)
                    .or_else(|| before.cursors.get(&metered.provider_id))
                    .copied();
                let dated = metered
                    .metered_at
                    .map_or(projected.recorded_at_us, |t| t.unix_micros());
                let at_us = cursor.map_or(dated, |c| {
                    if c.through.lines == 0 {
                        dated
                    } else {
                        c.last_at_us.max(dated)
                    }
                });
                let mut row = LineRow {
                    position: projected.position,
                    provider_id: metered.provider_id,
                    at_us,
                    entry_id: metered.entry_id,
                    report_id: metered.report_id,
                    rental_id: metered.rental_id,
                    from_gpu_seconds: metered.from_gpu_seconds,
                    to_gpu_seconds: metered.to_gpu_seconds,
                    price_per_gpu_hour: metered.price_per_gpu_hour.micros(),
                    gross: metered.gross.micros(),
                    fee: metered.fee.micros(),
                    net: metered.net.micros(),
                    fee_bp: metered.fee_bp,
                    through: Sums::default(),
                };
                row.through = add(cursor.unwrap_or_default().through, &row)
                    .ok_or_else(|| overflow(metered.provider_id, projected.position))?;
                batch.cursors.insert(
                    metered.provider_id,
                    Cursor {
                        last_at_us: at_us,
                        through: row.through,
                    },
                );
                batch.lines.push(row);
            }
            _ => {}
        }
    }
    batch.rentals = new_rentals;
    Ok(batch)
}

/// The fold of a whole log kept in memory, for `audit verify` and tests: every batch folded in
/// order with the state the store would have loaded.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    before: Before,
}

impl Replay {
    /// Folds the next batch and remembers what later batches need.
    pub fn fold(&mut self, events: &[ProjectedEvent]) -> Result<EarningsBatch, FoldError> {
        let batch = fold_batch(events, &self.before)?;
        for rental in &batch.rentals {
            self.before.rentals.insert(rental.rental_id, rental.clone());
        }
        self.before
            .cursors
            .extend(batch.cursors.iter().map(|(k, v)| (*k, *v)));
        Ok(batch)
    }

    /// Every provider's cursor so far.
    pub fn cursors(&self) -> &HashMap<Uuid, Cursor> {
        &self.before.cursors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::StreamId;
    use gpunex_domain::ledger::{Account, JournalEntry, Posting};
    use gpunex_domain::money::Usdc;
    use gpunex_domain::rental::{RentalStarted, UsageMetered};
    use gpunex_domain::time::Timestamp;

    use crate::earnings::Earnings;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn projected(position: u64, recorded_at_us: i64, event: DomainEvent) -> ProjectedEvent {
        ProjectedEvent {
            position,
            event_id: id(u128::from(position) + 50_000),
            stream_id: StreamId::parse("rental-x").unwrap(),
            stream_version: position,
            recorded_at_us,
            event,
        }
    }

    fn started(rental: u128, provider: Uuid) -> RentalStarted {
        RentalStarted {
            rental_id: id(rental),
            renter_id: id(2),
            provider_id: provider,
            machine_id: id(3),
            gpu_uuids: vec!["GPU-a".to_owned(), "GPU-b".to_owned()],
            model_id: "h100-80gb".to_owned(),
            price_per_gpu_hour: Usdc::from_micros(2_000_000),
            started_at: Timestamp::from_unix_micros(0),
            workload: None,
        }
    }

    fn metered(rental: &RentalStarted, to: u64, gross: i64, fee: i64) -> DomainEvent {
        let postings = JournalEntry::new(vec![
            Posting::debit(
                Account::RenterReceivable(rental.renter_id),
                Usdc::from_micros(gross),
            ),
            Posting::credit(
                Account::ProviderPayable(rental.provider_id),
                Usdc::from_micros(gross - fee),
            ),
            Posting::credit(Account::PlatformRevenue, Usdc::from_micros(fee)),
        ])
        .unwrap();
        DomainEvent::Rental(RentalEvent::UsageMetered(UsageMetered {
            entry_id: id(u128::from(to)),
            rental_id: rental.rental_id,
            renter_id: rental.renter_id,
            provider_id: rental.provider_id,
            report_id: id(u128::from(to) + 1_000),
            from_gpu_seconds: to - 10,
            to_gpu_seconds: to,
            price_per_gpu_hour: rental.price_per_gpu_hour,
            gross: Usdc::from_micros(gross),
            fee: Usdc::from_micros(fee),
            net: Usdc::from_micros(gross - fee),
            fee_bp: 2_000,
            postings,
            reported_gpu_seconds: None,
            metered_at: None,
        }))
    }

    /// Split into batches anywhere, the stored fold dates and sums every line as the in-memory
    /// model does.
    #[test]
    fn batches_fold_like_the_in_memory_model() {
        let provider = id(4);
        let first = started(1, provider);
        let second = started(5, provider);
        let events = vec![
            projected(
                1,
                0,
                DomainEvent::Rental(RentalEvent::Started(first.clone())),
            ),
            projected(2, 100, metered(&first, 10, 1_001, 200)),
            projected(3, 200, metered(&first, 20, 2_000, 400)),
            // Recorded "before" the previous line (another server's clock): dated at 200.
            projected(4, 150, metered(&first, 30, 3_000, 600)),
            projected(
                5,
                300,
                DomainEvent::Rental(RentalEvent::Started(second.clone())),
            ),
            projected(6, 400, metered(&second, 10, 500, 100)),
        ];
        let mut memory = Earnings::default();
        for e in &events {
            memory.apply(e.position, e.stream_version, &e.event);
        }
        for split in 0..=events.len() {
            let mut replay = Replay::default();
            let (a, b) = events.split_at(split);
            let mut rows = replay.fold(a).unwrap().lines;
            let (rentals, providers) = needs(b);
            assert!(rentals.iter().all(|r| a.iter().any(|e| matches!(&e.event,
                DomainEvent::Rental(RentalEvent::Started(s)) if s.rental_id == *r))));
            assert!(providers.iter().all(|p| *p == provider));
            rows.extend(replay.fold(b).unwrap().lines);
            assert_eq!(rows.len(), 4, "split at {split}");
            let dates: Vec<i64> = rows.iter().map(|r| r.at_us).collect();
            assert_eq!(dates, vec![100, 200, 200, 400]);
            let last = rows.last().unwrap().through;
            assert_eq!(last, memory.lifetime(provider));
            assert_eq!(replay.cursors()[&provider].through, last);
            assert_eq!(replay.cursors()[&provider].last_at_us, 400);
        }
    }

    #[test]
    fn a_line_of_an_unknown_rental_is_ignored_and_order_is_checked() {
        let provider = id(4);
        let rental = started(1, provider);
        let lone = [projected(7, 0, metered(&rental, 10, 100, 20))];
        assert!(
            fold_batch(&lone, &Before::default())
                .unwrap()
                .lines
                .is_empty()
        );
        let backwards = [
            projected(
                3,
                0,
                DomainEvent::Rental(RentalEvent::Started(rental.clone())),
            ),
            projected(2, 0, metered(&rental, 10, 100, 20)),
        ];
        assert!(matches!(
            fold_batch(&backwards, &Before::default()),
            Err(FoldError::OutOfOrder { position: 2, .. })
        ));
    }

    #[test]
    fn sums_that_would_overflow_are_refused() {
        let provider = id(4);
        let rental = started(1, provider);
        let mut before = Before::default();
        before.rentals.insert(
            rental.rental_id,
            RentalRef {
                rental_id: rental.rental_id,
                renter_id: rental.renter_id,
                provider_id: provider,
                machine_id: rental.machine_id,
                model_id: rental.model_id.clone(),
                gpu_uuids: rental.gpu_uuids.clone(),
            },
        );
        before.cursors.insert(
            provider,
            Cursor {
                last_at_us: 0,
                through: Sums {
                    gross: i64::MAX - 10,
                    lines: 1,
                    ..Sums::default()
                },
            },
        );
        let events = [projected(9, 0, metered(&rental, 10, 100, 20))];
        assert!(matches!(
            fold_batch(&events, &before),
            Err(FoldError::BalanceOverflow { position: 9, .. })
        ));
    }
}
