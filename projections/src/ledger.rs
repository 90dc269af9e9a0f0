//! The ledger read model: one journal line per posting, and a balance per account.
//!
//! Finance audits a payout by walking journal lines back to the event (and so the usage) that
//! produced them; `position` and `event_id` on every line make that walk possible.

use std::collections::BTreeMap;

use gpunex_domain::ledger::JournalEntry;
use gpunex_domain::{Account, Side, Usdc};
use uuid::Uuid;

use crate::{FoldError, ProjectedEvent};

pub const LEDGER: &str = "ledger";

/// One posting of one journal entry, as `ledger_journal` stores it (one row per entry, ADR 0012).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerLine {
    pub position: u64,
    pub line_index: u32,
    pub event_id: Uuid,
    pub entry_id: Uuid,
    pub account: Account,
    pub side: Side,
    pub amount: Usdc,
    pub recorded_at_us: i64,
}

/// Running totals of one account, as stored in `ledger_balances`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountTotals {
    pub debits: Usdc,
    pub credits: Usdc,
    pub last_position: u64,
}

impl AccountTotals {
    pub const EMPTY: AccountTotals = AccountTotals {
        debits: Usdc::ZERO,
        credits: Usdc::ZERO,
        last_position: 0,
    };

    /// The balance on the account's normal side (what a payable owes, what a receivable is owed).
    pub fn balance(&self, account: Account) -> Result<Usdc, gpunex_domain::MoneyError> {
        match account.normal_side() {
            Side::Debit => self.debits.checked_sub(self.credits),
            Side::Credit => self.credits.checked_sub(self.debits),
        }
    }

    fn add(
        &mut self,
        side: Side,
        amount: Usdc,
        position: u64,
    ) -> Result<(), gpunex_domain::MoneyError> {
        match side {
            Side::Debit => self.debits = self.debits.checked_add(amount)?,
            Side::Credit => self.credits = self.credits.checked_add(amount)?,
        }
        self.last_position = position;
        Ok(())
    }
}

/// What one batch of events adds to the ledger read model. Applied by the backend as inserts of
/// `lines` and increments of each account's totals by `deltas`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerBatch {
    pub lines: Vec<LedgerLine>,
    pub deltas: BTreeMap<Account, AccountTotals>,
}

impl LedgerBatch {
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// An event the ledger folds: a whole decoded event ([`ProjectedEvent`], as the live runner,
/// `audit verify` and the tests give it) or only its journal entry ([`JournalEvent`], as the
/// rebuild decodes it). Both fold to the same lines.
pub trait JournalInput {
    fn position(&self) -> u64;
    fn event_id(&self) -> Uuid;
    fn recorded_at_us(&self) -> i64;
    /// The journal entry the event posts, with the entry's id (`None`: it posts none).
    fn entry(&self) -> Option<(Uuid, &JournalEntry)>;
}

impl JournalInput for ProjectedEvent {
    fn position(&self) -> u64 {
        self.position
    }
    fn event_id(&self) -> Uuid {
        self.event_id
    }
    fn recorded_at_us(&self) -> i64 {
        self.recorded_at_us
    }
    fn entry(&self) -> Option<(Uuid, &JournalEntry)> {
        self.event.journal_entry()
    }
}

/// An event that posts a journal entry, as the ledger's rebuild decodes it: its place in the
/// log and its entry, nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEvent {
    pub position: u64,
    pub event_id: Uuid,
    pub recorded_at_us: i64,
    pub entry_id: Uuid,
    pub entry: JournalEntry,
}

impl JournalInput for JournalEvent {
    fn position(&self) -> u64 {
        self.position
    }
    fn event_id(&self) -> Uuid {
        self.event_id
    }
    fn recorded_at_us(&self) -> i64 {
        self.recorded_at_us
    }
    fn entry(&self) -> Option<(Uuid, &JournalEntry)> {
        Some((self.entry_id, &self.entry))
    }
}

/// Where a fold puts what it makes: the running totals of each account it posts to, and its
/// lines. [`LedgerBatch`] keeps both as they are; the store's rebuild encodes them straight
/// into its stored rows, without a batch between.
pub trait LedgerSink {
    type Error: From<FoldError>;

    /// The totals a posting to `account` adds to (empty before its first posting).
    fn totals(&mut self, account: Account) -> &mut AccountTotals;

    /// The next line, in position and line order: its posting is already in its account's
    /// totals.
    fn line(&mut self, line: LedgerLine) -> Result<(), Self::Error>;
}

impl LedgerSink for LedgerBatch {
    type Error = FoldError;

    fn totals(&mut self, account: Account) -> &mut AccountTotals {
        self.deltas.entry(account).or_insert(AccountTotals::EMPTY)
    }

    fn line(&mut self, line: LedgerLine) -> Result<(), FoldError> {
        self.lines.push(line);
        Ok(())
    }
}

/// Folds a batch of events (in increasing position) into the lines and deltas it produces.
pub fn fold_batch<E: JournalInput>(events: &[E]) -> Result<LedgerBatch, FoldError> {
    let mut batch = LedgerBatch::default();
    fold_into(events, &mut batch)?;
    Ok(batch)
}

/// Folds a batch of events (in increasing position) into `sink`: the one fold of the ledger,
/// whatever keeps its result.
pub fn fold_into<E: JournalInput, S: LedgerSink>(
    events: &[E],
    sink: &mut S,
) -> Result<(), S::Error> {
    let mut previous = 0;
    for event in events {
        let position = event.position();
        if position <= previous {
            return Err(FoldError::OutOfOrder { position, previous }.into());
        }
        previous = position;
        let Some((entry_id, journal)) = event.entry() else {
            continue;
        };
        for (index, posting) in journal.lines().iter().enumerate() {
            sink.totals(posting.account)
                .add(posting.side, posting.amount_micro_usdc, position)
                .map_err(|_| FoldError::BalanceOverflow {
                    account: posting.account.to_string(),
                    position,
                })?;
            sink.line(LedgerLine {
                position,
                // Bounded by JOURNAL_LINES_MAX (64), so the conversion cannot truncate.
                line_index: u32::try_from(index).unwrap_or(u32::MAX),
                event_id: event.event_id(),
                entry_id,
                account: posting.account,
                side: posting.side,
                amount: posting.amount_micro_usdc,
                recorded_at_us: event.recorded_at_us(),
            })?;
        }
    }
    Ok(())
}

/// Adds a batch's deltas to running totals (the in-memory form of what the backend does in SQL).
pub fn merge_totals(
    totals: &mut BTreeMap<Account, AccountTotals>,
    deltas: &BTreeMap<Account, AccountTotals>,
) -> Result<(), FoldError> {
    for (account, delta) in deltas {
        let current = totals.entry(*account).or_insert(AccountTotals::EMPTY);
        let overflow = || FoldError::BalanceOverflow {
            account: account.to_string(),
            position: delta.last_position,
        };
        current.debits = current
            .debits
            .checked_add(delta.debits)
            .map_err(|_| overflow())?;
        current.credits = current
            .credits
            .checked_add(delta.credits)
            .map_err(|_| overflow())?;
        current.last_position = current.last_position.max(delta.last_position);
    }
    Ok(())
}

/// Sum of debits and sum of credits over every account: equal in a sound ledger.
/// Summed in 128 bits, so no number of accounts can overflow it.
pub fn trial_balance(totals: &BTreeMap<Account, AccountTotals>) -> (i128, i128) {
    let debits = totals.values().map(|t| i128::from(t.debits.micros())).sum();
    let credits = totals
        .values()
        .map(|t| i128::from(t.credits.micros()))
        .sum();
    (debits, credits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::events::AdjustmentPosted;
    use gpunex_domain::{DomainEvent, JournalEntry, Posting, StreamId};

    const PROVIDER: Uuid = Uuid::from_u128(1);

    fn adjustment(position: u64, amount: i64) -> ProjectedEvent {
        let amount = Usdc::from_micros(amount);
        ProjectedEvent {
            position,
            event_id: Uuid::from_u128(u128::from(position)),
            stream_id: StreamId::parse("ledger-test").unwrap(),
            stream_version: position,
            recorded_at_us: 0,
            event: DomainEvent::AdjustmentPosted(AdjustmentPosted {
                entry_id: Uuid::from_u128(1000 + u128::from(position)),
                reason: "test".to_owned(),
                postings: JournalEntry::new(vec![
                    Posting::debit(Account::PlatformAdjustments, amount),
                    Posting::credit(Account::ProviderPayable(PROVIDER), amount),
                ])
                .unwrap(),
            }),
        }
    }

    #[test]
    fn folds_lines_and_totals() {
        let batch = fold_batch(&[adjustment(1, 5), adjustment(2, 7)]).unwrap();
        assert_eq!(batch.lines.len(), 4);
        let payable = batch.deltas[&Account::ProviderPayable(PROVIDER)];
        assert_eq!(payable.credits, Usdc::from_micros(12));
        assert_eq!(payable.last_position, 2);
        assert_eq!(
            payable
                .balance(Account::ProviderPayable(PROVIDER))
                .unwrap()
                .micros(),
            12
        );
        let (debits, credits) = trial_balance(&batch.deltas);
        assert_eq!(debits, credits);
    }

    #[test]
    fn batches_compose_like_one_fold() {
        let events: Vec<_> = (1..=10)
            .map(|p| adjustment(p, i64::try_from(p).unwrap() * 3))
            .collect();
        let whole = fold_batch(&events).unwrap();
        let mut merged = BTreeMap::new();
        for chunk in events.chunks(3) {
            merge_totals(&mut merged, &fold_batch(chunk).unwrap().deltas).unwrap();
        }
        assert_eq!(merged, whole.deltas);
    }

    #[test]
    fn rejects_out_of_order_input() {
        assert_eq!(
            fold_batch(&[adjustment(2, 1), adjustment(2, 1)]),
            Err(FoldError::OutOfOrder {
                position: 2,
                previous: 2
            })
        );
    }
}
