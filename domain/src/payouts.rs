//! Payouts, the rules without the rails: when a provider is paid, how much, under which id, and
//! the double entry of each step, and the events of a payout's life.
//!
//! - Weekly payouts run every Monday; monthly ones on the first business day of the month
//!   (weekends and the configured holidays skipped).
//! - What is payable on a payout date: the provider's balance from earnings settled before the
//!   cutoff (the payout date's midnight UTC minus the hold period), less what is already in
//!   flight. Below the schedule's minimum nothing is paid and the balance rolls forward.
//! - Solana pays the exact micro-USDC; a bank transfer pays whole cents and the sub-cent remainder
//!   stays in the provider's balance for the next payout.
//! - A payout's id is derived from the provider and the period, so planning the same date twice
//!   yields the same ids (and the store refuses the second append).
//! - Double entry: scheduling moves the amount from the provider's payable to payout clearing;
//!   confirmation moves it from clearing to the treasury; a failure moves it back to the payable.

use std::collections::BTreeSet;

use chrono::{Datelike, Days, NaiveDate, Weekday};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ledger::{Account, JournalEntry, JournalError, Posting};
use crate::money::{MoneyError, Usdc};
use crate::time::{MICROS_PER_DAY, Timestamp};

/// A bank account as a SEPA transfer needs it (validated at the edge by `gpunex-payouts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct BankDetails {
    /// Normalized: upper case, no spaces.
    pub iban: String,
    pub bic: String,
    pub account_holder: String,
    pub address: BankAddress,
}

/// A structured postal address (required in SEPA files from November 2026).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct BankAddress {
    pub street: String,
    #[serde(default)]
    pub building_number: Option<String>,
    pub post_code: String,
    pub town: String,
    /// ISO 3166-1 alpha-2.
    pub country: String,
}

/// Where a provider is paid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum PayoutMethod {
    /// USDC to this Solana wallet (base58, an ed25519 public key): paid to its associated token
    /// account.
    Solana { wallet: String },
    /// A SEPA credit transfer.
    Bank(BankDetails),
}

impl PayoutMethod {
    pub fn rail(&self) -> Rail {
        match self {
            PayoutMethod::Solana { .. } => Rail::Solana,
            PayoutMethod::Bank(_) => Rail::Bank,
        }
    }
}

/// `payout.settings_changed`: a provider's schedule and method from now on. A payout already
/// submitted keeps the method it was submitted with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutSettingsChanged {
    pub provider_id: Uuid,
    pub schedule: Schedule,
    pub method: PayoutMethod,
    pub changed_at: Timestamp,
    /// Who changed it: `token:<id>`.
    pub changed_by: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayoutEvent {
    SettingsChanged(PayoutSettingsChanged),
    BatchStarted(BatchStarted),
    BatchCreated(BatchCreated),
    RolledForward(RolledForwardRecorded),
    Scheduled(PayoutScheduled),
    Submitted(PayoutSubmitted),
    BankFileCreated(BankFileCreated),
    Confirmed(PayoutConfirmed),
    Failed(PayoutFailed),
}

/// The earnings lines a payout settles: the provider's lines at log positions in
/// `(after_position, through_position]` (the lines dated before the cutoff that no earlier payout
/// settled), how many there are and their net sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettledLines {
    pub after_position: u64,
    pub through_position: u64,
    pub count: u64,
    pub net: Usdc,
}

/// `payout.scheduled` (stream `payout-<payout_id>`): a provider is paid `amount` in a batch.
/// `lines.net + brought_forward = amount + carried`, where `brought_forward` is what earlier
/// payouts carried, failed payouts returned and adjustments moved, and `carried` is the sub-cent
/// remainder a bank transfer leaves in the balance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutScheduled {
    pub payout_id: Uuid,
    pub batch_id: Uuid,
    pub provider_id: Uuid,
    pub payout_date: NaiveDate,
    pub period: String,
    pub schedule: Schedule,
    /// The method in force when the payout was scheduled: it is paid there even if the provider
    /// changes it later.
    pub method: PayoutMethod,
    pub cutoff: Timestamp,
    pub lines: SettledLines,
    pub brought_forward: Usdc,
    pub amount: Usdc,
    pub carried: Usdc,
    /// Payable to payout clearing.
    pub postings: JournalEntry,
    pub scheduled_at: Timestamp,
}

impl PayoutScheduled {
    /// The event's own arithmetic: the amount is positive, the lines and what was brought
    /// forward equal what is paid and carried, the carry is what a bank transfer cannot pay, and
    /// the postings move exactly the amount from payable to clearing.
    pub fn check(&self) -> Result<(), String> {
        if !self.amount.is_positive() {
            return Err("amount must be positive".to_owned());
        }
        let settled = self
            .lines
            .net
            .checked_add(self.brought_forward)
            .map_err(|e| e.to_string())?;
        let paid = self
            .amount
            .checked_add(self.carried)
            .map_err(|e| e.to_string())?;
        if settled != paid {
            return Err(format!(
                "lines ({}) + brought forward ({}) must equal amount ({}) + carried ({})",
                self.lines.net, self.brought_forward, self.amount, self.carried
            ));
        }
        let expected_carry = match self.method.rail() {
            Rail::Solana => Usdc::ZERO,
            Rail::Bank => {
                self.amount
                    .checked_add(self.carried)
                    .and_then(Usdc::split_cents)
                    .map_err(|e| e.to_string())?
                    .1
            }
        };
        if self.carried != expected_carry {
            return Err(format!("carried must be {expected_carry} on this rail"));
        }
        if self.lines.through_position < self.lines.after_position {
            return Err("lines: through_position is before after_position".to_owned());
        }
        let postings = schedule_entry(self.provider_id, self.amount).map_err(|e| e.to_string())?;
        if postings != self.postings {
            return Err("postings must move the amount from payable to clearing".to_owned());
        }
        Ok(())
    }

    /// This payout's confirmation: its own provider and amount, clearing to treasury.
    pub fn confirmed(
        &self,
        confirmation: Confirmation,
        confirmed_at: Timestamp,
    ) -> Result<PayoutConfirmed, JournalError> {
        Ok(PayoutConfirmed {
            payout_id: self.payout_id,
            provider_id: self.provider_id,
            amount: self.amount,
            confirmation,
            postings: confirm_entry(self.provider_id, self.amount)?,
            confirmed_at,
        })
    }

    /// This payout's failure: its own amount returns to the provider's balance.
    pub fn failed(
        &self,
        reason_code: &str,
        reason: String,
        failed_by: String,
        failed_at: Timestamp,
    ) -> Result<PayoutFailed, JournalError> {
        Ok(PayoutFailed {
            payout_id: self.payout_id,
            provider_id: self.provider_id,
            amount: self.amount,
            reason_code: reason_code.to_owned(),
            reason,
            postings: fail_entry(self.provider_id, self.amount)?,
            failed_at,
            failed_by,
        })
    }
}

/// A provider below its schedule's minimum on a payout date: its balance rolls forward.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolledForward {
    pub provider_id: Uuid,
    pub schedule: Schedule,
    pub available: Usdc,
    pub minimum: Usdc,
}

/// Most providers in one `payout.rolled_forward` event (each entry is about 170 bytes of JSON:
/// 200 stay far under the payload limit).
pub const ROLLED_FORWARD_PER_EVENT: usize = 200;

/// `payout.batch_created` v2 (stream `payout_batch-<date>`): a date's batch, appended last, after
/// its payouts' `payout.scheduled` events (each names its batch) and its `payout.rolled_forward`
/// events. Counts and totals only, so a batch of any size fits one event. Its existence is what
/// makes a rerun create nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchCreated {
    pub batch_id: Uuid,
    pub payout_date: NaiveDate,
    pub cutoff: Timestamp,
    pub payout_count: u64,
    pub total: Usdc,
    pub rolled_forward_count: u64,
    /// Only in batches recorded as v1, which listed them here; v2 records them in
    /// `payout.rolled_forward` events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rolled_forward: Vec<RolledForward>,
    pub created_at: Timestamp,
}

/// `payout.batch_created` v1: listed every payout id and every balance rolled forward inline (a
/// batch of more than about 1,600 payouts did not fit the payload limit). Upcast to v2.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchCreatedV1 {
    pub batch_id: Uuid,
    pub payout_date: NaiveDate,
    pub cutoff: Timestamp,
    pub payouts: Vec<Uuid>,
    pub total: Usdc,
    pub rolled_forward: Vec<RolledForward>,
    pub created_at: Timestamp,
}

impl From<BatchCreatedV1> for BatchCreated {
    fn from(v1: BatchCreatedV1) -> BatchCreated {
        BatchCreated {
            batch_id: v1.batch_id,
            payout_date: v1.payout_date,
            cutoff: v1.cutoff,
            payout_count: v1.payouts.len() as u64,
            total: v1.total,
            rolled_forward_count: v1.rolled_forward.len() as u64,
            rolled_forward: v1.rolled_forward,
            created_at: v1.created_at,
        }
    }
}

/// `payout.batch_started` (stream `payout_runs`, at the version the run planned from, in the
/// same append as its first payouts): a run claims the right to write a date's batch. Until that
/// batch's `payout.batch_created`, no other date's batch may start, so two runs can never plan
/// from the same balances and pay the same earnings twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchStarted {
    pub batch_id: Uuid,
    pub payout_date: NaiveDate,
    pub cutoff: Timestamp,
    pub started_at: Timestamp,
}

/// `payout.rolled_forward` (stream `payout_batch-<date>`, before `payout.batch_created`): up to
/// [`ROLLED_FORWARD_PER_EVENT`] providers whose balance was below their minimum on the date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolledForwardRecorded {
    pub batch_id: Uuid,
    pub payout_date: NaiveDate,
    pub providers: Vec<RolledForward>,
}

/// How a payout was handed to its rail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rail", rename_all = "snake_case", deny_unknown_fields)]
pub enum Submission {
    /// A signed Solana transaction, recorded before it is first sent.
    Solana {
        /// Base58 of the first signature: the transaction's id.
        signature: String,
        /// The transaction's blockhash is valid up to this block height.
        last_valid_block_height: u64,
        /// The signed transaction (bincode, base64): rebroadcast byte for byte.
        transaction: String,
        /// The associated token account paid.
        destination: String,
        /// The attempt: 1, then one more for each re-signing after the blockhash expired.
        attempt: u32,
    },
}

/// `payout.submitted` (stream `payout-<payout_id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutSubmitted {
    pub payout_id: Uuid,
    pub submission: Submission,
    pub submitted_at: Timestamp,
}

/// One transfer in a bank file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankTransfer {
    pub payout_id: Uuid,
    /// The payout's amount in USDC cents (whole cents by construction).
    pub usdc_cents: i64,
    /// What the file orders, in cents of `currency`: `floor(usdc_cents x rate)`.
    pub amount_cents: i64,
}

/// `payout.bank_file_created` (stream `payout_batch-<date>`): a pain.001.001.09 credit transfer
/// file for some of a batch's bank payouts, which are submitted from then on. The file is rebuilt
/// byte for byte from this event and the payouts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BankFileCreated {
    pub batch_id: Uuid,
    /// The group header's `MsgId`, unique per bank: `GPUNEX-<date>-<nn>`.
    pub message_id: String,
    pub currency: String,
    /// Units of `currency` per USDC (at most 6 decimals), stated by finance.
    pub rate: rust_decimal::Decimal,
    pub execution_date: NaiveDate,
    /// The platform's account the transfers leave from, as written in the file.
    pub debtor: BankDetails,
    pub transfers: Vec<BankTransfer>,
    /// The control sum of the file, in cents of `currency`.
    pub control_sum_cents: i64,
    /// SHA-256 of the file as built.
    pub sha256: String,
    pub created_at: Timestamp,
    pub created_by: String,
}

impl BankFileCreated {
    /// The file's own arithmetic: a message id a bank accepts, a rate with at most 6 decimals,
    /// each transfer's amount `floor(usdc_cents x rate)`, and the control sum.
    pub fn check(&self) -> Result<(), String> {
        if self.message_id.is_empty() || self.message_id.len() > 35 {
            return Err("message_id must have 1 to 35 characters".to_owned());
        }
        if self.rate <= rust_decimal::Decimal::ZERO || self.rate.scale() > 6 {
            return Err("rate must be positive with at most 6 decimals".to_owned());
        }
        if self.transfers.is_empty() {
            return Err("a bank file carries at least one transfer".to_owned());
        }
        let mut sum: i64 = 0;
        for transfer in &self.transfers {
            if convert_cents(transfer.usdc_cents, self.rate) != Some(transfer.amount_cents)
                || transfer.amount_cents <= 0
            {
                return Err(format!(
                    "transfer {}: amount_cents must be floor(usdc_cents x rate) and positive",
                    transfer.payout_id
                ));
            }
            sum = sum
                .checked_add(transfer.amount_cents)
                .ok_or("control sum overflows")?;
        }
        if sum != self.control_sum_cents {
            return Err("control_sum_cents must be the sum of the transfers".to_owned());
        }
        Ok(())
    }
}

/// `floor(cents x rate)`: what a bank file orders in its currency for a payout of `cents` USDC
/// cents. `None` when out of range.
pub fn convert_cents(cents: i64, rate: rust_decimal::Decimal) -> Option<i64> {
    use rust_decimal::prelude::ToPrimitive;
    rust_decimal::Decimal::from(cents)
        .checked_mul(rate)?
        .floor()
        .to_i64()
}

/// The id of the journal entry a payout's step posts (`confirmed`, `failed`): derived, so the
/// same step of the same payout always has the same entry id.
pub fn entry_id(payout_id: Uuid, step: &str) -> Uuid {
    Uuid::new_v5(&payout_id, step.as_bytes())
}

/// Where a confirmation came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rail", rename_all = "snake_case", deny_unknown_fields)]
pub enum Confirmation {
    /// The transaction is `finalized` in this slot.
    Solana { signature: String, slot: u64 },
    /// Finance saw the transfer settle.
    Bank {
        bank_reference: String,
        confirmed_by: String,
    },
}

/// `payout.confirmed`: the money left the treasury (clearing to treasury).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutConfirmed {
    pub payout_id: Uuid,
    pub provider_id: Uuid,
    pub amount: Usdc,
    pub confirmation: Confirmation,
    pub postings: JournalEntry,
    pub confirmed_at: Timestamp,
}

/// `payout.failed`: the payout did not happen (a failed transaction, a returned transfer); the
/// amount returns to the provider's balance (clearing to payable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutFailed {
    pub payout_id: Uuid,
    pub provider_id: Uuid,
    pub amount: Usdc,
    /// A stable code: `transaction_failed`, `bank_returned`, `bank_rejected`.
    pub reason_code: String,
    pub reason: String,
    pub postings: JournalEntry,
    pub failed_at: Timestamp,
    pub failed_by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Schedule {
    Weekly,
    Monthly,
}

/// How a payout travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Rail {
    /// USDC on Solana: exact micro-USDC.
    Solana,
    /// SEPA credit transfer: whole cents.
    Bank,
}

/// The payout rules in force (configurable per deployment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutPolicy {
    /// Weekly payouts need at least this much available.
    pub weekly_minimum: Usdc,
    /// Monthly payouts need at least this much available.
    pub monthly_minimum: Usdc,
    /// Earnings wait this many days before they can be paid (the window for disputes).
    pub hold_days: u32,
    /// Days that are not business days besides weekends.
    pub holidays: BTreeSet<NaiveDate>,
}

impl Default for PayoutPolicy {
    /// Weekly minimum 20 USDC, monthly minimum 5 USDC, a 3-day hold, no holidays.
    fn default() -> Self {
        PayoutPolicy {
            weekly_minimum: Usdc::from_micros(20_000_000),
            monthly_minimum: Usdc::from_micros(5_000_000),
            hold_days: 3,
            holidays: BTreeSet::new(),
        }
    }
}

impl PayoutPolicy {
    pub fn minimum(&self, schedule: Schedule) -> Usdc {
        match schedule {
            Schedule::Weekly => self.weekly_minimum,
            Schedule::Monthly => self.monthly_minimum,
        }
    }

    pub fn is_business_day(&self, date: NaiveDate) -> bool {
        !matches!(date.weekday(), Weekday::Sat | Weekday::Sun) && !self.holidays.contains(&date)
    }

    /// The first business day of `date`'s month.
    pub fn first_business_day(&self, date: NaiveDate) -> NaiveDate {
        let mut day = date.with_day(1).unwrap_or(date);
        while !self.is_business_day(day) {
            day = day + Days::new(1);
        }
        day
    }

    /// Whether a schedule pays on `date`: weekly on Mondays, monthly on the month's first
    /// business day.
    pub fn is_payout_date(&self, schedule: Schedule, date: NaiveDate) -> bool {
        match schedule {
            Schedule::Weekly => date.weekday() == Weekday::Mon,
            Schedule::Monthly => self.first_business_day(date) == date,
        }
    }

    /// Earnings dated before this instant may be paid on `date`: its midnight (UTC) less the hold.
    pub fn cutoff(&self, date: NaiveDate) -> Timestamp {
        let midnight = date
            .and_hms_opt(0, 0, 0)
            .map_or(0, |d| d.and_utc().timestamp_micros());
        Timestamp::from_unix_micros(midnight - i64::from(self.hold_days) * MICROS_PER_DAY)
    }
}

/// The period a payout date pays: `weekly-2026-11-30` (the Monday) or `monthly-2026-12`.
pub fn period_key(schedule: Schedule, date: NaiveDate) -> String {
    match schedule {
        Schedule::Weekly => {
            let monday = date - Days::new(u64::from(date.weekday().num_days_from_monday()));
            format!("weekly-{monday}")
        }
        Schedule::Monthly => format!("monthly-{:04}-{:02}", date.year(), date.month()),
    }
}

/// The namespace of payout ids (a fixed random UUID).
const PAYOUT_NAMESPACE: Uuid = Uuid::from_u128(0x6b1f_3c2e_9a4d_4e7b_8c55_2f90_d1a3_e6c4);

/// A payout's id: the same provider and period always give the same id (UUIDv5).
pub fn payout_id(provider_id: Uuid, period: &str) -> Uuid {
    Uuid::new_v5(
        &PAYOUT_NAMESPACE,
        format!("{provider_id}/{period}").as_bytes(),
    )
}

/// What one provider is paid: the amount sent and the remainder left in the balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutAmount {
    pub paid: Usdc,
    /// The sub-cent remainder a bank transfer cannot carry; it stays payable.
    pub carried: Usdc,
}

/// Plans one provider's payout from what is available (settled and not in flight). `None` when
/// below the minimum (the balance rolls forward) or nothing would be paid.
pub fn plan(
    available: Usdc,
    minimum: Usdc,
    rail: Rail,
) -> Result<Option<PayoutAmount>, MoneyError> {
    if available < minimum || !available.is_positive() {
        return Ok(None);
    }
    let (paid, carried) = match rail {
        Rail::Solana => (available, Usdc::ZERO),
        Rail::Bank => available.split_cents()?,
    };
    Ok(paid.is_positive().then_some(PayoutAmount { paid, carried }))
}

/// A provider as a batch sees it on its date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderBalance {
    pub provider_id: Uuid,
    pub schedule: Schedule,
    pub rail: Rail,
    /// Earned before the cutoff, plus adjustments, less what was paid or is in flight.
    pub available: Usdc,
}

/// What a batch decides for one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Paid now.
    Pay {
        payout_id: Uuid,
        amount: PayoutAmount,
    },
    /// Below the schedule's minimum: the balance rolls forward.
    RollForward { available: Usdc, minimum: Usdc },
    /// Not this provider's payout date.
    NotDue,
}

/// The batch id of a date: the same date always gives the same id.
pub fn batch_id(date: NaiveDate) -> Uuid {
    Uuid::new_v5(&PAYOUT_NAMESPACE, format!("batch/{date}").as_bytes())
}

/// Decides a date's batch: for each provider whose schedule pays on `date`, pay what is
/// available (above the minimum; bank transfers in whole cents) under the id of its period, or
/// roll it forward.
pub fn plan_batch(
    policy: &PayoutPolicy,
    date: NaiveDate,
    providers: &[ProviderBalance],
) -> Result<Vec<(Uuid, Decision)>, MoneyError> {
    providers
        .iter()
        .map(|p| {
            if !policy.is_payout_date(p.schedule, date) {
                return Ok((p.provider_id, Decision::NotDue));
            }
            let minimum = policy.minimum(p.schedule);
            let decision = match plan(p.available, minimum, p.rail)? {
                Some(amount) => Decision::Pay {
                    payout_id: payout_id(p.provider_id, &period_key(p.schedule, date)),
                    amount,
                },
                None => Decision::RollForward {
                    available: p.available,
                    minimum,
                },
            };
            Ok((p.provider_id, decision))
        })
        .collect()
}

/// Scheduling a payout: the provider's payable to payout clearing.
pub fn schedule_entry(provider_id: Uuid, amount: Usdc) -> Result<JournalEntry, JournalError> {
    JournalEntry::new(vec![
        Posting::debit(Account::ProviderPayable(provider_id), amount),
        Posting::credit(Account::PayoutClearing(provider_id), amount),
    ])
}

/// A confirmed payout: clearing to the treasury (the money left it).
pub fn confirm_entry(provider_id: Uuid, amount: Usdc) -> Result<JournalEntry, JournalError> {
    JournalEntry::new(vec![
        Posting::debit(Account::PayoutClearing(provider_id), amount),
        Posting::credit(Account::Treasury, amount),
    ])
}

/// A failed payout: clearing back to the provider's payable.
pub fn fail_entry(provider_id: Uuid, amount: Usdc) -> Result<JournalEntry, JournalError> {
    JournalEntry::new(vec![
        Posting::debit(Account::PayoutClearing(provider_id), amount),
        Posting::credit(Account::ProviderPayable(provider_id), amount),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn payout_dates_follow_the_calendar() {
        let mut policy = PayoutPolicy::default();
        // 2026-11-30 is a Monday; 2026-12-01 a Tuesday.
        assert!(policy.is_payout_date(Schedule::Weekly, day("2026-11-30")));
        assert!(!policy.is_payout_date(Schedule::Weekly, day("2026-12-01")));
        assert!(policy.is_payout_date(Schedule::Monthly, day("2026-12-01")));
        // August 2026 starts on a Saturday: the first business day is Monday the 3rd.
        assert_eq!(
            policy.first_business_day(day("2026-08-20")),
            day("2026-08-03")
        );
        assert!(!policy.is_payout_date(Schedule::Monthly, day("2026-08-01")));
        // January 2027 starts on a Friday, a holiday: then a weekend: Monday the 4th.
        policy.holidays.insert(day("2027-01-01"));
        assert_eq!(
            policy.first_business_day(day("2027-01-15")),
            day("2027-01-04")
        );
        assert!(policy.is_payout_date(Schedule::Monthly, day("2027-01-04")));
        assert_eq!(
            policy.cutoff(day("2026-11-30")),
            Timestamp::from_unix_micros(
                day("2026-11-27")
                    .and_hms_opt(0, 0, 0)
                    .unwrap()
                    .and_utc()
                    .timestamp_micros()
            )
        );
    }

    #[test]
    fn ids_are_derived_and_amounts_planned_exactly() {
        let provider = Uuid::from_u128(7);
        let week = period_key(Schedule::Weekly, day("2026-12-02"));
        assert_eq!(week, "weekly-2026-11-30");
        assert_eq!(
            period_key(Schedule::Monthly, day("2026-12-01")),
            "monthly-2026-12"
        );
        assert_eq!(payout_id(provider, &week), payout_id(provider, &week));
        assert_ne!(
            payout_id(provider, &week),
            payout_id(Uuid::from_u128(8), &week)
        );
        let minimum = Usdc::from_micros(20_000_000);
        // Below the minimum: rolls forward.
        assert_eq!(
            plan(Usdc::from_micros(19_999_999), minimum, Rail::Solana),
            Ok(None)
        );
        // Solana: exact; bank: whole cents, the rest carried.
        let available = Usdc::from_micros(25_123_456);
        assert_eq!(
            plan(available, minimum, Rail::Solana),
            Ok(Some(PayoutAmount {
                paid: available,
                carried: Usdc::ZERO
            }))
        );
        assert_eq!(
            plan(available, minimum, Rail::Bank),
            Ok(Some(PayoutAmount {
                paid: Usdc::from_micros(25_120_000),
                carried: Usdc::from_micros(3_456),
            }))
        );
        assert_eq!(
            plan(Usdc::from_micros(9_999), Usdc::ZERO, Rail::Bank),
            Ok(None)
        );
        for entry in [
            schedule_entry(provider, available).unwrap(),
            confirm_entry(provider, available).unwrap(),
            fail_entry(provider, available).unwrap(),
        ] {
            assert_eq!(entry.total(), available);
        }
        assert!(schedule_entry(provider, Usdc::ZERO).is_err());
    }

    #[test]
    fn a_batch_pays_who_is_due_and_rolls_the_rest_forward() {
        let mut policy = PayoutPolicy::default();
        policy.holidays.insert(day("2027-02-01"));
        let usdc = Usdc::from_micros;
        let balance = |n: u128, schedule, rail, available| ProviderBalance {
            provider_id: Uuid::from_u128(n),
            schedule,
            rail,
            available: usdc(available),
        };
        let providers = [
            balance(1, Schedule::Weekly, Rail::Solana, 20_000_000),
            balance(2, Schedule::Weekly, Rail::Bank, 19_999_999),
            balance(3, Schedule::Weekly, Rail::Bank, 31_415_926),
            balance(4, Schedule::Monthly, Rail::Solana, 50_000_000),
        ];
        // Monday 2027-02-01 is a holiday: weekly payouts still run on Mondays; the monthly
        // one waits for Tuesday the 2nd, the first business day.
        let monday = plan_batch(&policy, day("2027-02-01"), &providers).unwrap();
        let week = "weekly-2027-02-01";
        assert_eq!(
            monday,
            vec![
                (
                    Uuid::from_u128(1),
                    Decision::Pay {
                        payout_id: payout_id(Uuid::from_u128(1), week),
                        amount: PayoutAmount {
                            paid: usdc(20_000_000),
                            carried: Usdc::ZERO
                        },
                    }
                ),
                (
                    Uuid::from_u128(2),
                    Decision::RollForward {
                        available: usdc(19_999_999),
                        minimum: usdc(20_000_000)
                    }
                ),
                (
                    Uuid::from_u128(3),
                    Decision::Pay {
                        payout_id: payout_id(Uuid::from_u128(3), week),
                        amount: PayoutAmount {
                            paid: usdc(31_410_000),
                            carried: usdc(5_926)
                        },
                    }
                ),
                (Uuid::from_u128(4), Decision::NotDue),
            ]
        );
        // The same date again: the same ids (the store refuses them a second time).
        assert_eq!(
            plan_batch(&policy, day("2027-02-01"), &providers).unwrap(),
            monday
        );
        assert_eq!(batch_id(day("2027-02-01")), batch_id(day("2027-02-01")));
        let tuesday = plan_batch(&policy, day("2027-02-02"), &providers).unwrap();
        assert_eq!(tuesday[0].1, Decision::NotDue);
        assert!(matches!(
            tuesday[3].1,
            Decision::Pay { amount: PayoutAmount { paid, .. }, .. } if paid == usdc(50_000_000)
        ));
    }
}
