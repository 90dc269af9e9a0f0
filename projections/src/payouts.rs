//! Payouts as the log tells them: each payout's life (scheduled, submitted, confirmed or failed),
//! each date's batch and its bank files, and per provider what was paid, what is in flight and
//! which earnings lines are settled. Folded by [`crate::earnings::Earnings`], which owns the
//! lines a payout settles.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use gpunex_domain::payouts::{
    BankFileCreated, BatchCreated, BatchStarted, PayoutConfirmed, PayoutFailed, PayoutScheduled,
    PayoutSubmitted, RolledForward, RolledForwardRecorded,
};
use uuid::Uuid;

/// Where a payout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutStatus {
    /// In a batch, not yet handed to its rail.
    Scheduled,
    /// Handed to its rail (a signed transaction sent, a bank file issued), not yet settled.
    Submitted,
    /// Settled: finalized on chain, or confirmed by finance.
    Confirmed,
    /// Did not happen; the amount is back in the provider's balance.
    Failed,
}

/// One payout and everything that happened to it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PayoutRecord {
    pub scheduled: PayoutScheduled,
    /// Solana attempts, oldest first.
    pub submissions: Vec<PayoutSubmitted>,
    /// The bank file that carries it: message id, cents ordered and currency.
    pub bank_file: Option<BankFileRef>,
    pub confirmed: Option<PayoutConfirmed>,
    pub failed: Option<PayoutFailed>,
    /// The version of the payout's stream (`payout-<id>`): the next append expects it.
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BankFileRef {
    pub message_id: String,
    pub amount_cents: i64,
    pub currency: String,
    pub created_at: gpunex_domain::time::Timestamp,
}

impl PayoutRecord {
    pub fn status(&self) -> PayoutStatus {
        if self.confirmed.is_some() {
            PayoutStatus::Confirmed
        } else if self.failed.is_some() {
            PayoutStatus::Failed
        } else if !self.submissions.is_empty() || self.bank_file.is_some() {
            PayoutStatus::Submitted
        } else {
            PayoutStatus::Scheduled
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(
            self.status(),
            PayoutStatus::Scheduled | PayoutStatus::Submitted
        )
    }
}

/// A date's batch and the bank files made from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchRecord {
    pub created: BatchCreated,
    /// Its payouts, in the order they were scheduled.
    pub payouts: Vec<Uuid>,
    /// The providers whose balance rolled forward.
    pub rolled_forward: Vec<RolledForward>,
    pub files: Vec<BankFileCreated>,
    /// The version of the batch's stream (`payout_batch-<date>`).
    pub version: u64,
}

/// Per provider: the money that left the payable account and where it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProviderPayouts {
    /// Sum of every scheduled payout.
    pub scheduled: i64,
    /// Sum of the confirmed ones: paid.
    pub confirmed: i64,
    /// Sum of the failed ones: returned to the balance.
    pub failed: i64,
    /// The last earnings line (log position) settled by a payout; 0 when none.
    pub settled_through: u64,
}

impl ProviderPayouts {
    /// Scheduled or submitted, not yet confirmed or failed.
    pub fn in_flight(&self) -> i64 {
        self.scheduled - self.confirmed - self.failed
    }
}

/// Every payout and batch.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PayoutBook {
    pub(crate) payouts: HashMap<Uuid, PayoutRecord>,
    pub(crate) by_provider: HashMap<Uuid, Vec<Uuid>>,
    pub(crate) providers: HashMap<Uuid, ProviderPayouts>,
    pub(crate) batches: BTreeMap<NaiveDate, BatchRecord>,
    /// Per batch id, until its `payout.batch_created`: the payouts scheduled in it, the
    /// providers rolled forward and how many `payout.rolled_forward` events said so.
    pub(crate) forming: HashMap<Uuid, Forming>,
    /// The version of the stream `payout_runs` and the batches started there and not created
    /// yet (by id, with their dates).
    pub(crate) runs_version: u64,
    pub(crate) started: HashMap<Uuid, NaiveDate>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Forming {
    payouts: Vec<Uuid>,
    rolled_forward: Vec<RolledForward>,
    rolled_events: u64,
}

impl PayoutBook {
    pub(crate) fn scheduled(&mut self, event: &PayoutScheduled) {
        if self.payouts.contains_key(&event.payout_id) {
            return;
        }
        self.forming
            .entry(event.batch_id)
            .or_default()
            .payouts
            .push(event.payout_id);
        let provider = self.providers.entry(event.provider_id).or_default();
        provider.scheduled += event.amount.micros();
        provider.settled_through = provider.settled_through.max(event.lines.through_position);
        self.by_provider
            .entry(event.provider_id)
            .or_default()
            .push(event.payout_id);
        self.payouts.insert(
            event.payout_id,
            PayoutRecord {
                scheduled: event.clone(),
                submissions: Vec::new(),
                bank_file: None,
                confirmed: None,
                failed: None,
                version: 1,
            },
        );
    }

    pub(crate) fn batch_started(&mut self, event: &BatchStarted) {
        self.runs_version += 1;
        if !self.batches.contains_key(&event.payout_date) {
            self.started.insert(event.batch_id, event.payout_date);
        }
    }

    pub(crate) fn rolled_forward(&mut self, event: &RolledForwardRecorded) {
        let forming = self.forming.entry(event.batch_id).or_default();
        forming
            .rolled_forward
            .extend(event.providers.iter().cloned());
        forming.rolled_events += 1;
    }

    pub(crate) fn batch(&mut self, event: &BatchCreated) {
        if self.batches.contains_key(&event.payout_date) {
            return;
        }
        self.started.remove(&event.batch_id);
        let forming = self.forming.remove(&event.batch_id).unwrap_or_default();
        let mut rolled_forward = event.rolled_forward.clone();
        rolled_forward.extend(forming.rolled_forward);
        self.batches.insert(
            event.payout_date,
            BatchRecord {
                created: event.clone(),
                payouts: forming.payouts,
                rolled_forward,
                files: Vec::new(),
                version: forming.rolled_events + 1,
            },
        );
    }

    pub(crate) fn submitted(&mut self, event: &PayoutSubmitted) {
        if let Some(record) = self.payouts.get_mut(&event.payout_id) {
            record.submissions.push(event.clone());
            record.version += 1;
        }
    }

    pub(crate) fn bank_file(&mut self, event: &BankFileCreated) {
        let Some(batch) = self
            .batches
            .values_mut()
            .find(|b| b.created.batch_id == event.batch_id)
        else {
            return;
        };
        batch.files.push(event.clone());
        batch.version += 1;
        for transfer in &event.transfers {
            if let Some(record) = self.payouts.get_mut(&transfer.payout_id) {
                record.bank_file = Some(BankFileRef {
                    message_id: event.message_id.clone(),
                    amount_cents: transfer.amount_cents,
                    currency: event.currency.clone(),
                    created_at: event.created_at,
                });
            }
        }
    }

    pub(crate) fn confirmed(&mut self, event: &PayoutConfirmed) {
        if let Some(record) = self.payouts.get_mut(&event.payout_id) {
            if record.confirmed.is_none() && record.failed.is_none() {
                self.providers
                    .entry(event.provider_id)
                    .or_default()
                    .confirmed += event.amount.micros();
            }
            record.confirmed = Some(event.clone());
            record.version += 1;
        }
    }

    pub(crate) fn failed(&mut self, event: &PayoutFailed) {
        if let Some(record) = self.payouts.get_mut(&event.payout_id) {
            if record.confirmed.is_none() && record.failed.is_none() {
                self.providers.entry(event.provider_id).or_default().failed +=
                    event.amount.micros();
            }
            record.failed = Some(event.clone());
            record.version += 1;
        }
    }

    pub fn payout(&self, payout_id: Uuid) -> Option<&PayoutRecord> {
        self.payouts.get(&payout_id)
    }

    /// A provider's payouts, oldest first.
    pub fn of_provider(&self, provider_id: Uuid) -> Vec<&PayoutRecord> {
        self.by_provider
            .get(&provider_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.payouts.get(id))
            .collect()
    }

    pub fn provider(&self, provider_id: Uuid) -> ProviderPayouts {
        self.providers
            .get(&provider_id)
            .copied()
            .unwrap_or_default()
    }

    pub fn batch_on(&self, date: NaiveDate) -> Option<&BatchRecord> {
        self.batches.get(&date)
    }

    /// The version of the stream `payout_runs`: a run claims it at this version.
    pub fn runs_version(&self) -> u64 {
        self.runs_version
    }

    /// The earliest batch started and not created yet (a run in progress, or one that stopped
    /// part-way): no other date's batch may start until it is finished.
    pub fn unfinished(&self) -> Option<NaiveDate> {
        self.started.values().min().copied()
    }

    /// The payouts already scheduled in a batch not created yet (an interrupted run's).
    pub fn forming_payouts(&self, batch_id: Uuid) -> &[Uuid] {
        self.forming
            .get(&batch_id)
            .map_or(&[][..], |f| f.payouts.as_slice())
    }

    /// The bank file with this `MsgId`, and its batch's date.
    pub fn file_by_message_id(&self, message_id: &str) -> Option<(NaiveDate, &BankFileCreated)> {
        self.batches.iter().find_map(|(date, batch)| {
            batch
                .files
                .iter()
                .find(|f| f.message_id == message_id)
                .map(|f| (*date, f))
        })
    }

    /// Every batch, oldest first.
    pub fn batches(&self) -> impl DoubleEndedIterator<Item = &BatchRecord> {
        self.batches.values()
    }

    /// Every payout not yet confirmed or failed, in id order.
    pub fn open(&self) -> Vec<&PayoutRecord> {
        let mut open: Vec<&PayoutRecord> = self.payouts.values().filter(|r| r.is_open()).collect();
        open.sort_by_key(|r| (r.scheduled.payout_date, r.scheduled.payout_id));
        open
    }

    /// How many payouts, and how much, stand at each status on each rail: the payout queues
    /// (scheduled: waiting for its rail; submitted: waiting to settle).
    pub fn queues(&self) -> Vec<PayoutQueue> {
        let mut queues: BTreeMap<(u8, u8), PayoutQueue> = BTreeMap::new();
        for record in self.payouts.values() {
            let rail = record.scheduled.method.rail();
            let status = record.status();
            let queue = queues
                .entry((rail as u8, status as u8))
                .or_insert(PayoutQueue {
                    rail,
                    status,
                    payouts: 0,
                    micro_usdc: 0,
                });
            queue.payouts += 1;
            queue.micro_usdc = queue
                .micro_usdc
                .saturating_add(record.scheduled.amount.micros());
        }
        queues.into_values().collect()
    }
}

/// The payouts at one status on one rail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayoutQueue {
    pub rail: gpunex_domain::payouts::Rail,
    pub status: PayoutStatus,
    pub payouts: u64,
    pub micro_usdc: i64,
}
