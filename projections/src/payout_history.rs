//! The stored payouts projection (ADR 0007): every payout with its whole life, and every batch
//! with its rolled-forward balances and bank files, so memory keeps only what is open.
//!
//! The in-memory [`PayoutBook`](crate::payouts::PayoutBook) keeps open payouts (scheduled or
//! submitted), each provider's sums and the batch heads a run or a filing decides from; a payout
//! that is confirmed or failed leaves memory and is read from the table, as is every batch's list
//! of payouts, rolled-forward balances and files. Both folds apply the same rules
//! ([`PayoutRecord`]'s and [`StoredBatch`]'s methods), so a stored row is what memory held.
//!
//! A batch's payouts are the payouts whose `batch_id` is the batch's, in the order they were
//! scheduled (the log position of their `payout.scheduled`, kept beside each row).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::NaiveDate;
use gpunex_domain::DomainEvent;
use gpunex_domain::payouts::{
    BankFileCreated, BatchCreated, PayoutEvent, PayoutScheduled, RolledForward,
    RolledForwardRecorded,
};
use uuid::Uuid;

use crate::payouts::PayoutRecord;
use crate::{FoldError, ProjectedEvent};

/// The projection's name, and its checkpoint's.
pub const PAYOUTS: &str = "payouts";

/// A payout as stored: its record and the log position of its `payout.scheduled` (a batch's
/// payouts are listed in that order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPayout {
    pub scheduled_position: u64,
    pub record: PayoutRecord,
}

/// A batch as stored, from its first event on the batch stream: the balances rolled forward,
/// then its creation, then its bank files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredBatch {
    pub batch_id: Uuid,
    pub payout_date: NaiveDate,
    /// `None` while the run that forms it has not created it (an interrupted run).
    pub created: Option<BatchCreated>,
    /// The providers whose balance rolled forward: the creation's own list (v1 events), then
    /// those of `payout.rolled_forward`.
    pub rolled_forward: Vec<RolledForward>,
    /// How many `payout.rolled_forward` events formed it.
    pub rolled_events: u64,
    pub files: Vec<BankFileCreated>,
    /// The version of the batch's stream (`payout_batch-<date>`) as this batch has seen it.
    pub version: u64,
    /// The log position of its creation (0 before): its payouts are those of its id scheduled
    /// before it, as memory lists them (a payout naming a batch already created is not in it).
    pub created_position: u64,
}

impl StoredBatch {
    fn forming(batch_id: Uuid, payout_date: NaiveDate) -> StoredBatch {
        StoredBatch {
            batch_id,
            payout_date,
            created: None,
            rolled_forward: Vec::new(),
            rolled_events: 0,
            files: Vec::new(),
            version: 0,
            created_position: 0,
        }
    }

    /// A `payout.rolled_forward` of this batch: before its creation, part of it; after, ignored
    /// (the creation closed its list).
    pub fn rolled_forward(&mut self, event: &RolledForwardRecorded) {
        if self.created.is_none() {
            self.rolled_forward.extend(event.providers.iter().cloned());
            self.rolled_events += 1;
        }
    }

    /// Its `payout.batch_created`, at `position`.
    pub fn create(&mut self, position: u64, event: &BatchCreated) {
        self.created_position = position;
        let mut rolled_forward = event.rolled_forward.clone();
        rolled_forward.append(&mut self.rolled_forward);
        self.rolled_forward = rolled_forward;
        let mut created = event.clone();
        created.rolled_forward = Vec::new();
        self.created = Some(created);
        self.version = self.rolled_events + 1;
    }

    /// A bank file made from it.
    pub fn file(&mut self, event: &BankFileCreated) {
        self.files.push(event.clone());
        self.version += 1;
    }
}

/// What a batch of events needs loaded from before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Payouts touched (and those scheduled: a second `payout.scheduled` is ignored).
    pub payouts: Vec<Uuid>,
    /// Batches touched, by id.
    pub batches: Vec<Uuid>,
    /// Dates of batches created in it: a date that has a created batch keeps it.
    pub dates: Vec<NaiveDate>,
}

/// The rows a batch of events reads from before it.
pub fn needs(events: &[ProjectedEvent]) -> Needs {
    let mut payouts = BTreeSet::new();
    let mut batches = BTreeSet::new();
    let mut dates = BTreeSet::new();
    for projected in events {
        let DomainEvent::Payout(event) = &projected.event else {
            continue;
        };
        match event {
            PayoutEvent::Scheduled(e) => {
                payouts.insert(e.payout_id);
            }
            PayoutEvent::Submitted(e) => {
                payouts.insert(e.payout_id);
            }
            PayoutEvent::Confirmed(e) => {
                payouts.insert(e.payout_id);
            }
            PayoutEvent::Failed(e) => {
                payouts.insert(e.payout_id);
            }
            PayoutEvent::BankFileCreated(e) => {
                batches.insert(e.batch_id);
                payouts.extend(e.transfers.iter().map(|t| t.payout_id));
            }
            PayoutEvent::RolledForward(e) => {
                batches.insert(e.batch_id);
            }
            PayoutEvent::BatchCreated(e) => {
                batches.insert(e.batch_id);
                dates.insert(e.payout_date);
            }
            PayoutEvent::SettingsChanged(_) | PayoutEvent::BatchStarted(_) => {}
        }
    }
    Needs {
        payouts: payouts.into_iter().collect(),
        batches: batches.into_iter().collect(),
        dates: dates.into_iter().collect(),
    }
}

/// The rows a batch of events read, as stored before it.
#[derive(Debug, Clone, Default)]
pub struct Before {
    pub payouts: HashMap<Uuid, StoredPayout>,
    /// Batches by id: those touched, and the created batches of the dates created in it.
    pub batches: HashMap<Uuid, StoredBatch>,
}

/// Every row a batch of events changed, in its new state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changed {
    pub payouts: BTreeMap<Uuid, StoredPayout>,
    pub batches: BTreeMap<Uuid, StoredBatch>,
}

/// The working set of one fold: the rows loaded, overlaid with the rows changed.
struct Working<'b> {
    before: &'b Before,
    changed: Changed,
}

impl Working<'_> {
    fn payout(&mut self, id: Uuid) -> Option<&mut StoredPayout> {
        if !self.changed.payouts.contains_key(&id) {
            let stored = self.before.payouts.get(&id)?;
            self.changed.payouts.insert(id, stored.clone());
        }
        self.changed.payouts.get_mut(&id)
    }

    fn batch(&mut self, id: Uuid) -> Option<&mut StoredBatch> {
        if !self.changed.batches.contains_key(&id) {
            let stored = self.before.batches.get(&id)?;
            self.changed.batches.insert(id, stored.clone());
        }
        self.changed.batches.get_mut(&id)
    }

    /// Whether a batch other than `batch_id` was created on `date`.
    fn date_taken(&self, date: NaiveDate, batch_id: Uuid) -> bool {
        let created_on = |b: &StoredBatch| {
            b.batch_id != batch_id && b.payout_date == date && b.created.is_some()
        };
        self.changed.batches.values().any(created_on)
            || self
                .before
                .batches
                .values()
                .filter(|b| !self.changed.batches.contains_key(&b.batch_id))
                .any(created_on)
    }

    /// The rule memory keeps (`PayoutBook::scheduled`): a payout is scheduled by the first
    /// event of its stream, once.
    fn scheduled(&mut self, position: u64, stream_version: u64, event: &PayoutScheduled) {
        if stream_version != 1 || self.payout(event.payout_id).is_some() {
            return;
        }
        self.changed.payouts.insert(
            event.payout_id,
            StoredPayout {
                scheduled_position: position,
                record: PayoutRecord::scheduled(event),
            },
        );
    }

    fn apply(&mut self, position: u64, stream_version: u64, event: &PayoutEvent) {
        match event {
            PayoutEvent::Scheduled(e) => self.scheduled(position, stream_version, e),
            PayoutEvent::Submitted(e) => {
                if let Some(stored) = self.payout(e.payout_id) {
                    stored.record.submitted(e);
                }
            }
            PayoutEvent::Confirmed(e) => {
                if let Some(stored) = self.payout(e.payout_id) {
                    stored.record.confirmed(e);
                }
            }
            PayoutEvent::Failed(e) => {
                if let Some(stored) = self.payout(e.payout_id) {
                    stored.record.failed(e);
                }
            }
            PayoutEvent::RolledForward(e) => match self.batch(e.batch_id) {
                Some(batch) => batch.rolled_forward(e),
                None => {
                    let mut batch = StoredBatch::forming(e.batch_id, e.payout_date);
                    batch.rolled_forward(e);
                    self.changed.batches.insert(e.batch_id, batch);
                }
            },
            PayoutEvent::BatchCreated(e) => {
                if self.date_taken(e.payout_date, e.batch_id) {
                    return;
                }
                match self.batch(e.batch_id) {
                    Some(batch) if batch.created.is_some() => {}
                    Some(batch) => batch.create(position, e),
                    None => {
                        let mut batch = StoredBatch::forming(e.batch_id, e.payout_date);
                        batch.create(position, e);
                        self.changed.batches.insert(e.batch_id, batch);
                    }
                }
            }
            PayoutEvent::BankFileCreated(e) => {
                let Some(batch) = self.batch(e.batch_id).filter(|b| b.created.is_some()) else {
                    return;
                };
                batch.file(e);
                for transfer in &e.transfers {
                    if let Some(stored) = self.payout(transfer.payout_id) {
                        stored.record.filed(e, transfer);
                    }
                }
            }
            PayoutEvent::SettingsChanged(_) | PayoutEvent::BatchStarted(_) => {}
        }
    }
}

/// Folds a batch of events (in increasing position) over the rows it reads (`before`, as
/// stored) and returns every row it changed.
pub fn fold_batch(events: &[ProjectedEvent], before: &Before) -> Result<Changed, FoldError> {
    let mut working = Working {
        before,
        changed: Changed::default(),
    };
    let mut previous = 0;
    for projected in events {
        if projected.position <= previous {
            return Err(FoldError::OutOfOrder {
                position: projected.position,
                previous,
            });
        }
        previous = projected.position;
        if let DomainEvent::Payout(event) = &projected.event {
            working.apply(projected.position, projected.stream_version, event);
        }
    }
    Ok(working.changed)
}

/// The fold of a whole log kept in memory, for `audit verify` and tests.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    rows: Before,
}

impl Replay {
    /// Folds the next batch; returns the rows it changed.
    pub fn fold(&mut self, events: &[ProjectedEvent]) -> Result<Changed, FoldError> {
        let changed = fold_batch(events, &self.rows)?;
        for (id, stored) in &changed.payouts {
            self.rows.payouts.insert(*id, stored.clone());
        }
        for (id, batch) in &changed.batches {
            self.rows.batches.insert(*id, batch.clone());
        }
        Ok(changed)
    }

    /// Every payout so far.
    pub fn payouts(&self) -> &HashMap<Uuid, StoredPayout> {
        &self.rows.payouts
    }

    /// Every batch so far, by id.
    pub fn batches(&self) -> &HashMap<Uuid, StoredBatch> {
        &self.rows.batches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::StreamId;
    use gpunex_domain::money::Usdc;
    use gpunex_domain::payouts::{
        self as rules, Confirmation, PayoutConfirmed, PayoutFailed, PayoutMethod, PayoutSubmitted,
        Schedule, SettledLines, Submission,
    };
    use gpunex_domain::time::Timestamp;

    use crate::earnings::Earnings;
    use crate::payouts::PayoutStatus;

    const PROVIDER: Uuid = Uuid::from_u128(7);
    const BATCH: Uuid = Uuid::from_u128(900);

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn date() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, 2).unwrap()
    }

    fn projected(position: u64, stream_version: u64, event: PayoutEvent) -> ProjectedEvent {
        ProjectedEvent {
            position,
            event_id: id(u128::from(position) + 50_000),
            stream_id: StreamId::parse("payout-x").unwrap(),
            stream_version,
            recorded_at_us: 0,
            event: DomainEvent::Payout(event),
        }
    }

    fn scheduled(payout: u128, amount: i64) -> PayoutEvent {
        let amount = Usdc::from_micros(amount);
        PayoutEvent::Scheduled(PayoutScheduled {
            payout_id: id(payout),
            batch_id: BATCH,
            provider_id: PROVIDER,
            payout_date: date(),
            period: "weekly-2026-11-02".to_owned(),
            schedule: Schedule::Weekly,
            method: PayoutMethod::Solana {
                wallet: "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH".to_owned(),
            },
            cutoff: Timestamp::from_unix_micros(0),
            lines: SettledLines {
                after_position: 0,
                through_position: 0,
                count: 0,
                net: amount,
            },
            brought_forward: Usdc::ZERO,
            amount,
            carried: Usdc::ZERO,
            postings: rules::schedule_entry(PROVIDER, amount).unwrap(),
            scheduled_at: Timestamp::from_unix_micros(0),
        })
    }

    fn created(batch: Uuid, count: u64, total: i64) -> PayoutEvent {
        PayoutEvent::BatchCreated(BatchCreated {
            batch_id: batch,
            payout_date: date(),
            cutoff: Timestamp::from_unix_micros(0),
            payout_count: count,
            total: Usdc::from_micros(total),
            rolled_forward_count: 1,
            rolled_forward: Vec::new(),
            created_at: Timestamp::from_unix_micros(1),
        })
    }

    fn rolled() -> PayoutEvent {
        PayoutEvent::RolledForward(RolledForwardRecorded {
            batch_id: BATCH,
            payout_date: date(),
            providers: vec![RolledForward {
                provider_id: id(8),
                schedule: Schedule::Weekly,
                available: Usdc::from_micros(10),
                minimum: Usdc::from_micros(10_000_000),
            }],
        })
    }

    fn submitted(payout: u128) -> PayoutEvent {
        PayoutEvent::Submitted(PayoutSubmitted {
            payout_id: id(payout),
            submission: Submission::Solana {
                signature: "sig".to_owned(),
                last_valid_block_height: 10,
                transaction: "tx".to_owned(),
                destination: "ata".to_owned(),
                attempt: 1,
            },
            submitted_at: Timestamp::from_unix_micros(2),
        })
    }

    fn confirmed(payout: u128, amount: i64) -> PayoutEvent {
        PayoutEvent::Confirmed(PayoutConfirmed {
            payout_id: id(payout),
            provider_id: PROVIDER,
            amount: Usdc::from_micros(amount),
            confirmation: Confirmation::Solana {
                signature: "sig".to_owned(),
                slot: 1,
            },
            postings: rules::confirm_entry(PROVIDER, Usdc::from_micros(amount)).unwrap(),
            confirmed_at: Timestamp::from_unix_micros(3),
        })
    }

    fn failed(payout: u128, amount: i64) -> PayoutEvent {
        PayoutEvent::Failed(PayoutFailed {
            payout_id: id(payout),
            provider_id: PROVIDER,
            amount: Usdc::from_micros(amount),
            reason_code: "transaction_failed".to_owned(),
            reason: "insufficient funds".to_owned(),
            postings: rules::fail_entry(PROVIDER, Usdc::from_micros(amount)).unwrap(),
            failed_at: Timestamp::from_unix_micros(3),
            failed_by: "test".to_owned(),
        })
    }

    /// Batches split anywhere give the rows one fold of the whole log gives; the open payouts
    /// memory keeps are the stored open rows, the batch heads agree with the stored batches,
    /// and a payout that is over leaves memory but stays in the table.
    #[test]
    fn stored_rows_are_memorys_fold_and_outlive_it() {
        let log = vec![
            projected(1, 1, scheduled(1, 5_000_000)),
            projected(2, 1, scheduled(2, 7_000_000)),
            // Not the first event of its stream: ignored, in memory and in the table.
            projected(3, 2, scheduled(1, 9_000_000)),
            projected(4, 1, rolled()),
            projected(5, 2, created(BATCH, 2, 12_000_000)),
            projected(6, 2, submitted(1)),
            projected(7, 3, confirmed(1, 5_000_000)),
            projected(8, 2, failed(2, 7_000_000)),
            // Scheduled after its batch was created: not one of the batch's payouts.
            projected(9, 1, scheduled(3, 1_000_000)),
            projected(10, 2, submitted(3)),
            // A second batch for a date that has one: ignored.
            projected(11, 1, created(id(901), 0, 0)),
            // About a payout that was never scheduled: changes nothing.
            projected(12, 1, confirmed(99, 1)),
        ];
        let mut whole = Replay::default();
        whole.fold(&log).unwrap();
        for split in 1..log.len() {
            let mut parts = Replay::default();
            parts.fold(&log[..split]).unwrap();
            parts.fold(&log[split..]).unwrap();
            assert_eq!(parts.payouts(), whole.payouts(), "split at {split}");
            assert_eq!(parts.batches(), whole.batches(), "split at {split}");
        }
        let mut earnings = Earnings::default();
        for event in &log {
            earnings.apply(event.position, event.stream_version, &event.event);
        }
        let book = earnings.payouts();

        let rows = whole.payouts();
        assert_eq!(rows.len(), 3);
        let one = &rows[&id(1)];
        assert_eq!(one.record.status(), PayoutStatus::Confirmed);
        assert_eq!((one.record.version, one.scheduled_position), (3, 1));
        assert_eq!(one.record.scheduled.amount.micros(), 5_000_000);
        assert_eq!(rows[&id(2)].record.status(), PayoutStatus::Failed);
        // Memory holds exactly the open rows, in the same state.
        let open: Vec<&PayoutRecord> = rows
            .values()
            .filter(|s| s.record.is_open())
            .map(|s| &s.record)
            .collect();
        assert_eq!(book.open(), open);
        assert!(book.open_payout(id(1)).is_none() && book.open_payout(id(2)).is_none());
        assert_eq!(book.open_payout(id(3)), Some(&rows[&id(3)].record));
        let sums = book.provider(PROVIDER);
        assert_eq!(
            (sums.scheduled, sums.confirmed, sums.failed),
            (13_000_000, 5_000_000, 7_000_000)
        );

        assert_eq!(whole.batches().len(), 1, "the second creation is ignored");
        let batch = &whole.batches()[&BATCH];
        let head = book.batch_on(date()).unwrap();
        assert_eq!(Some(&head.created), batch.created.as_ref());
        assert_eq!(
            (head.version, head.created_position),
            (batch.version, batch.created_position)
        );
        assert_eq!((batch.version, batch.rolled_forward.len()), (2, 1));
        // The batch's payouts are those of its id scheduled before its creation.
        let mut in_batch: Vec<&StoredPayout> = rows
            .values()
            .filter(|s| {
                s.record.scheduled.batch_id == BATCH
                    && s.scheduled_position < batch.created_position
            })
            .collect();
        in_batch.sort_by_key(|s| s.scheduled_position);
        let ids: Vec<Uuid> = in_batch
            .iter()
            .map(|s| s.record.scheduled.payout_id)
            .collect();
        assert_eq!(ids, vec![id(1), id(2)]);
        assert!(book.open_in_batch(head).is_empty());

        let needs = needs(&log[4..]);
        assert_eq!(needs.payouts, vec![id(1), id(2), id(3), id(99)]);
        assert_eq!(needs.batches, vec![BATCH, id(901)]);
        assert_eq!(needs.dates, vec![date()]);
        assert!(
            fold_batch(&[log[1].clone(), log[0].clone()], &Before::default()).is_err(),
            "out of order"
        );
    }
}
