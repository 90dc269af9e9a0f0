//! Payouts as memory keeps them: the open ones (scheduled or submitted) with their whole life so
//! far, each date's batch head, the runs in progress, and per provider what was paid, what is in
//! flight and which earnings lines are settled. Folded by [`crate::earnings::Earnings`], which
//! owns the lines a payout settles. What is over (confirmed or failed payouts, each batch's
//! payouts, rolled-forward balances and files) is the stored projection
//! [`crate::payout_history`], folded by the same rules.

use std::collections::{BTreeMap, HashMap};

use chrono::NaiveDate;
use gpunex_domain::payouts::{
    BankFileCreated, BankTransfer, BatchCreated, BatchStarted, PayoutConfirmed, PayoutFailed,
    PayoutScheduled, PayoutSubmitted, RolledForwardRecorded,
};
use uuid::Uuid;

/// Where a payout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
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

    /// A payout as its `payout.scheduled` starts it (its stream at version 1).
    pub fn scheduled(event: &PayoutScheduled) -> PayoutRecord {
        PayoutRecord {
            scheduled: event.clone(),
            submissions: Vec::new(),
            bank_file: None,
            confirmed: None,
            failed: None,
            version: 1,
        }
    }

    pub fn submitted(&mut self, event: &PayoutSubmitted) {
        self.submissions.push(event.clone());
        self.version += 1;
    }

    /// Carried by a bank file (an event of the batch's stream, not the payout's).
    pub fn filed(&mut self, file: &BankFileCreated, transfer: &BankTransfer) {
        self.bank_file = Some(BankFileRef {
            message_id: file.message_id.clone(),
            amount_cents: transfer.amount_cents,
            currency: file.currency.clone(),
            created_at: file.created_at,
        });
    }

    pub fn confirmed(&mut self, event: &PayoutConfirmed) {
        self.confirmed = Some(event.clone());
        self.version += 1;
    }

    pub fn failed(&mut self, event: &PayoutFailed) {
        self.failed = Some(event.clone());
        self.version += 1;
    }

    pub fn is_open(&self) -> bool {
        matches!(
            self.status(),
            PayoutStatus::Scheduled | PayoutStatus::Submitted
        )
    }
}

/// A date's batch as memory keeps it: what a run, a filing or a status report decides from.
/// Its payouts, rolled-forward balances and files are read from the stored projection
/// ([`crate::payout_history`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchHead {
    /// Its creation (without a v1 event's list of rolled-forward balances).
    pub created: BatchCreated,
    /// The message ids of its bank files, in the order they were made.
    pub files: Vec<String>,
    /// The version of the batch's stream (`payout_batch-<date>`).
    pub version: u64,
    /// The log position of its creation: its payouts are those of its id scheduled before.
    pub created_position: u64,
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

/// What memory keeps of payouts: the open ones, each provider's sums, the batch heads and the
/// runs in progress. Bounded by open payouts, providers and payout dates, not by history: a
/// payout that is confirmed or failed leaves memory and is read from the stored projection.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PayoutBook {
    /// Open payouts (scheduled or submitted), each with the log position of its scheduling.
    pub(crate) open: HashMap<Uuid, (u64, PayoutRecord)>,
    pub(crate) providers: HashMap<Uuid, ProviderPayouts>,
    pub(crate) batches: BTreeMap<NaiveDate, BatchHead>,
    /// Per batch id, until its `payout.batch_created`: the payouts scheduled in it (with their
    /// amounts) and how many `payout.rolled_forward` events it has.
    pub(crate) forming: HashMap<Uuid, Forming>,
    /// The version of the stream `payout_runs` and the batches started there and not created
    /// yet (by id, with their dates).
    pub(crate) runs_version: u64,
    pub(crate) started: HashMap<Uuid, NaiveDate>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Forming {
    payouts: Vec<Uuid>,
    total: i64,
    rolled_events: u64,
}

impl PayoutBook {
    /// A `payout.scheduled` at `position`, the `stream_version`-th event of its stream. A payout
    /// is scheduled by the first event of its stream (`payout-<id>`, appended at no stream); a
    /// later one is ignored, here and in the stored projection.
    pub(crate) fn scheduled(
        &mut self,
        position: u64,
        stream_version: u64,
        event: &PayoutScheduled,
    ) {
        if stream_version != 1 || self.open.contains_key(&event.payout_id) {
            return;
        }
        let provider = self.providers.entry(event.provider_id).or_default();
        provider.scheduled += event.amount.micros();
        provider.settled_through = provider.settled_through.max(event.lines.through_position);
        let forming = self.forming.entry(event.batch_id).or_default();
        forming.payouts.push(event.payout_id);
        forming.total = forming.total.saturating_add(event.amount.micros());
        self.open
            .insert(event.payout_id, (position, PayoutRecord::scheduled(event)));
    }

    pub(crate) fn batch_started(&mut self, event: &BatchStarted) {
        self.runs_version += 1;
        if !self.batches.contains_key(&event.payout_date) {
            self.started.insert(event.batch_id, event.payout_date);
        }
    }

    pub(crate) fn rolled_forward(&mut self, event: &RolledForwardRecorded) {
        self.forming
            .entry(event.batch_id)
            .or_default()
            .rolled_events += 1;
    }

    pub(crate) fn batch(&mut self, position: u64, event: &BatchCreated) {
        if self.batches.contains_key(&event.payout_date) {
            return;
        }
        self.started.remove(&event.batch_id);
        let forming = self.forming.remove(&event.batch_id).unwrap_or_default();
        let mut created = event.clone();
        created.rolled_forward = Vec::new();
        self.batches.insert(
            event.payout_date,
            BatchHead {
                created,
                files: Vec::new(),
                version: forming.rolled_events + 1,
                created_position: position,
            },
        );
    }

    pub(crate) fn submitted(&mut self, event: &PayoutSubmitted) {
        if let Some((_, record)) = self.open.get_mut(&event.payout_id) {
            record.submitted(event);
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
        batch.files.push(event.message_id.clone());
        batch.version += 1;
        for transfer in &event.transfers {
            if let Some((_, record)) = self.open.get_mut(&transfer.payout_id) {
                record.filed(event, transfer);
            }
        }
    }

    pub(crate) fn confirmed(&mut self, event: &PayoutConfirmed) {
        if self.open.remove(&event.payout_id).is_some() {
            self.providers
                .entry(event.provider_id)
                .or_default()
                .confirmed += event.amount.micros();
        }
    }

    pub(crate) fn failed(&mut self, event: &PayoutFailed) {
        if self.open.remove(&event.payout_id).is_some() {
            self.providers.entry(event.provider_id).or_default().failed += event.amount.micros();
        }
    }

    /// A payout still open (scheduled or submitted); one that is over is in the stored
    /// projection.
    pub fn open_payout(&self, payout_id: Uuid) -> Option<&PayoutRecord> {
        self.open.get(&payout_id).map(|(_, record)| record)
    }

    pub fn provider(&self, provider_id: Uuid) -> ProviderPayouts {
        self.providers
            .get(&provider_id)
            .copied()
            .unwrap_or_default()
    }

    /// The head of the batch created for `date`.
    pub fn batch_on(&self, date: NaiveDate) -> Option<&BatchHead> {
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

    /// The sum of [`Self::forming_payouts`], micro-USDC.
    pub fn forming_total(&self, batch_id: Uuid) -> i64 {
        self.forming.get(&batch_id).map_or(0, |f| f.total)
    }

    /// The batch with the bank file `message_id`.
    pub fn batch_of_file(&self, message_id: &str) -> Option<&BatchHead> {
        self.batches
            .values()
            .find(|b| b.files.iter().any(|f| f == message_id))
    }

    /// Every batch head, oldest first.
    pub fn batches(&self) -> impl DoubleEndedIterator<Item = &BatchHead> {
        self.batches.values()
    }

    /// Every open payout, by payout date then id.
    pub fn open(&self) -> Vec<&PayoutRecord> {
        let mut open: Vec<&PayoutRecord> = self.open.values().map(|(_, r)| r).collect();
        open.sort_by_key(|r| (r.scheduled.payout_date, r.scheduled.payout_id));
        open
    }

    /// The open payouts of a batch, in the order they were scheduled.
    pub fn open_in_batch(&self, batch: &BatchHead) -> Vec<&PayoutRecord> {
        let mut open: Vec<&(u64, PayoutRecord)> = self
            .open
            .values()
            .filter(|(position, r)| {
                r.scheduled.batch_id == batch.created.batch_id && *position < batch.created_position
            })
            .collect();
        open.sort_by_key(|(position, _)| *position);
        open.into_iter().map(|(_, r)| r).collect()
    }

    /// How many open payouts, and how much, stand at each status on each rail: the payout
    /// queues (scheduled: waiting for its rail; submitted: waiting to settle).
    pub fn queues(&self) -> Vec<PayoutQueue> {
        let mut queues: BTreeMap<(u8, u8), PayoutQueue> = BTreeMap::new();
        for (_, record) in self.open.values() {
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
