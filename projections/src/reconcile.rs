//! `audit reconcile`: the money of usage, checked to the micro-USDC against the events that
//! produced it, independently of the projections that serve it.
//!
//! A [`Reconciler`] folds the log (rentals, usage, presence) and [`Reconciler::check`] reports
//! every mismatch:
//! - each usage line: its gross is the difference of the rounded cumulative charges, its fee is
//!   `floor(gross x fee_bp / 10,000)`, `gross = fee + net`, and its postings debit the rental's
//!   renter `gross` and credit the rental's provider `net` and the platform `fee`;
//! - in total: renter charges = provider earnings + platform fees;
//! - per rental: the lines are contiguous (each starts where the last ended), so billed
//!   GPU-seconds (the highest counter) = earned GPU-seconds (the sum of the lines), the total
//!   charged is `round(rate x billed / 3600)`, and billed <= the rental's GPUs x the seconds its
//!   machine was online during the rental;
//! - each payout: its own arithmetic (`lines + brought forward = amount + carried`, the carry a
//!   bank transfer cannot pay), the lines it claims are the provider's next unsettled lines (same
//!   count and net sum, none settled twice or skipped), it brings forward no more than the
//!   balance holds besides those lines, and its confirmation or failure moves its own amount,
//!   once;
//! - per provider: the payable account, as posted by every event, equals earned - paid - in
//!   flight, as told by the payouts' statuses;
//! - optionally, a live earnings projection agrees with the replay.

use std::collections::{BTreeMap, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{FleetEvent, Span, online_micros};
use gpunex_domain::ledger::{Account, Side};
use gpunex_domain::metering::cumulative_charge;
use gpunex_domain::money::Rounding;
use gpunex_domain::payouts::PayoutEvent;
use gpunex_domain::rental::{RentalEvent, RentalStarted, UsageMetered};
use gpunex_domain::time::Timestamp;
use serde::Serialize;
use uuid::Uuid;

use crate::earnings::Sums;

#[derive(Debug, Clone, Default)]
struct RentalUsage {
    started: Option<RentalStarted>,
    ended_at: Option<Timestamp>,
    /// Highest counter metered, and the sum of the lines' seconds.
    billed: u64,
    earned: u64,
    gross: i64,
    lines: u64,
    /// A line that did not start where the previous one ended.
    gaps: Vec<String>,
}

/// One disagreement, with what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Mismatch {
    /// `line_charge`, `line_fee`, `line_split`, `line_postings`, `totals`, `rental_gap`,
    /// `rental_billed_vs_earned`, `rental_charge`, `rental_beyond_online`, `unknown_rental`,
    /// `payout_arithmetic`, `payout_twice`, `payout_lines`, `payout_brought_forward`,
    /// `payout_unknown`, `payout_settled_twice`, `payout_amount`, `payable`, `projection_drift`.
    pub kind: &'static str,
    pub rental_id: Option<Uuid>,
    pub provider_id: Option<Uuid>,
    pub position: Option<u64>,
    pub expected: String,
    pub found: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ReconcileTotals {
    pub renter_charges_micro_usdc: i64,
    pub provider_earnings_micro_usdc: i64,
    pub platform_fees_micro_usdc: i64,
    pub gpu_seconds: u64,
    pub usage_lines: u64,
    pub rentals: u64,
    pub providers: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ReconcileReport {
    pub as_of_position: u64,
    pub totals: ReconcileTotals,
    pub mismatches: Vec<Mismatch>,
}

impl ReconcileReport {
    pub fn is_clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// Per provider: the payable account as posted, and what the payouts say.
#[derive(Debug, Clone, Default)]
struct ProviderMoney {
    /// Net of every posting to the provider's payable account (credits positive).
    payable_posted: i64,
    /// Earned: usage nets and adjustments.
    earned: i64,
    paid: i64,
    in_flight: i64,
    /// Each usage line's log position and net, in order.
    lines: Vec<(u64, i64)>,
    /// The last line a payout settled.
    settled_through: u64,
}

/// A payout as the replay saw it.
#[derive(Debug, Clone)]
struct PayoutState {
    provider_id: Uuid,
    amount: i64,
    settled: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Reconciler {
    money: BTreeMap<Uuid, ProviderMoney>,
    payouts: HashMap<Uuid, PayoutState>,
    position: u64,
    rentals: HashMap<Uuid, RentalUsage>,
    /// Every presence transition per machine (never trimmed).
    presence: HashMap<Uuid, Vec<(bool, Timestamp)>>,
    per_provider: BTreeMap<Uuid, Sums>,
    totals: Sums,
    mismatches: Vec<Mismatch>,
}

impl Reconciler {
    pub fn apply(&mut self, position: u64, event: &DomainEvent) {
        self.position = self.position.max(position);
        match event {
            DomainEvent::Fleet(FleetEvent::MachineOnline(online)) => self
                .presence
                .entry(online.machine_id)
                .or_default()
                .push((true, online.at)),
            DomainEvent::Fleet(FleetEvent::MachineOffline(offline)) => self
                .presence
                .entry(offline.machine_id)
                .or_default()
                .push((false, offline.last_heartbeat_at)),
            DomainEvent::Rental(RentalEvent::Started(started)) => {
                self.rentals.entry(started.rental_id).or_default().started = Some(started.clone());
            }
            DomainEvent::Rental(RentalEvent::Ended(ended)) => {
                self.rentals.entry(ended.rental_id).or_default().ended_at = Some(ended.ended_at);
            }
            DomainEvent::Rental(RentalEvent::UsageMetered(metered)) => {
                self.line(position, metered);
                let money = self.money.entry(metered.provider_id).or_default();
                money.earned += metered.net.micros();
                money.lines.push((position, metered.net.micros()));
            }
            DomainEvent::AdjustmentPosted(adjustment) => {
                for posting in adjustment.postings.lines() {
                    if let Account::ProviderPayable(provider) = posting.account {
                        let amount = posting.amount_micro_usdc.micros();
                        self.money.entry(provider).or_default().earned += match posting.side {
                            Side::Credit => amount,
                            Side::Debit => -amount,
                        };
                    }
                }
            }
            DomainEvent::Payout(payout) => self.payout(position, payout),
            _ => {}
        }
        if let Some(journal) = event.journal() {
            for posting in journal.lines() {
                if let Account::ProviderPayable(provider) = posting.account {
                    let amount = posting.amount_micro_usdc.micros();
                    self.money.entry(provider).or_default().payable_posted += match posting.side {
                        Side::Credit => amount,
                        Side::Debit => -amount,
                    };
                }
            }
        }
    }

    fn payout_mismatch(
        &mut self,
        kind: &'static str,
        provider_id: Uuid,
        position: u64,
        expected: impl ToString,
        found: impl ToString,
    ) {
        self.mismatches.push(Mismatch {
            kind,
            rental_id: None,
            provider_id: Some(provider_id),
            position: Some(position),
            expected: expected.to_string(),
            found: found.to_string(),
        });
    }

    fn payout(&mut self, position: u64, event: &PayoutEvent) {
        match event {
            PayoutEvent::Scheduled(s) => {
                if let Err(reason) = s.check() {
                    self.payout_mismatch(
                        "payout_arithmetic",
                        s.provider_id,
                        position,
                        "a balanced payout",
                        reason,
                    );
                }
                if self.payouts.contains_key(&s.payout_id) {
                    self.payout_mismatch(
                        "payout_twice",
                        s.provider_id,
                        position,
                        "one payout per id",
                        s.payout_id,
                    );
                    return;
                }
                let money = self.money.entry(s.provider_id).or_default();
                // What the balance holds besides the unsettled lines: earlier lines, adjustments
                // and failed payouts, less what was paid or is in flight. A payout may bring
                // forward at most that.
                let first_unsettled = money
                    .lines
                    .partition_point(|(p, _)| *p <= money.settled_through);
                let unsettled: i64 = money.lines[first_unsettled..]
                    .iter()
                    .map(|(_, net)| net)
                    .sum();
                let beyond_lines = money.earned - unsettled - money.paid - money.in_flight;
                let brought_forward = s.brought_forward.micros();
                let claimed = (s.lines.after_position, s.lines.count, s.lines.net.micros());
                let next: Vec<&(u64, i64)> = money
                    .lines
                    .iter()
                    .filter(|(p, _)| *p > s.lines.after_position && *p <= s.lines.through_position)
                    .collect();
                let found = (
                    money.settled_through,
                    next.len() as u64,
                    next.iter().map(|(_, net)| net).sum::<i64>(),
                );
                money.settled_through = money.settled_through.max(s.lines.through_position);
                money.in_flight += s.amount.micros();
                self.payouts.insert(
                    s.payout_id,
                    PayoutState {
                        provider_id: s.provider_id,
                        amount: s.amount.micros(),
                        settled: false,
                    },
                );
                if brought_forward > beyond_lines {
                    self.payout_mismatch(
                        "payout_brought_forward",
                        s.provider_id,
                        position,
                        format!("at most {beyond_lines}"),
                        brought_forward,
                    );
                }
                if claimed != found {
                    self.payout_mismatch(
                        "payout_lines",
                        s.provider_id,
                        position,
                        format!("after {}, {} lines, net {}", found.0, found.1, found.2),
                        format!(
                            "after {}, {} lines, net {}",
                            claimed.0, claimed.1, claimed.2
                        ),
                    );
                }
            }
            PayoutEvent::Confirmed(c) => self.settle(
                position,
                c.payout_id,
                c.provider_id,
                c.amount.micros(),
                true,
            ),
            PayoutEvent::Failed(f) => self.settle(
                position,
                f.payout_id,
                f.provider_id,
                f.amount.micros(),
                false,
            ),
            PayoutEvent::SettingsChanged(_)
            | PayoutEvent::BatchCreated(_)
            | PayoutEvent::RolledForward(_)
            | PayoutEvent::BatchStarted(_)
            | PayoutEvent::Submitted(_)
            | PayoutEvent::BankFileCreated(_) => {}
        }
    }

    fn settle(
        &mut self,
        position: u64,
        payout_id: Uuid,
        provider_id: Uuid,
        amount: i64,
        paid: bool,
    ) {
        let Some(state) = self.payouts.get_mut(&payout_id) else {
            self.payout_mismatch(
                "payout_unknown",
                provider_id,
                position,
                "a scheduled payout",
                payout_id,
            );
            return;
        };
        let (expected, was_settled) = ((state.provider_id, state.amount), state.settled);
        state.settled = true;
        if was_settled {
            self.payout_mismatch(
                "payout_settled_twice",
                provider_id,
                position,
                "one confirmation or failure",
                payout_id,
            );
            return;
        }
        if expected != (provider_id, amount) {
            self.payout_mismatch(
                "payout_amount",
                provider_id,
                position,
                format!("{expected:?}"),
                format!("{:?}", (provider_id, amount)),
            );
        }
        let money = self.money.entry(provider_id).or_default();
        money.in_flight -= amount;
        if paid {
            money.paid += amount;
        }
    }

    fn mismatch(
        &mut self,
        kind: &'static str,
        metered: &UsageMetered,
        position: u64,
        expected: impl ToString,
        found: impl ToString,
    ) {
        self.mismatches.push(Mismatch {
            kind,
            rental_id: Some(metered.rental_id),
            provider_id: Some(metered.provider_id),
            position: Some(position),
            expected: expected.to_string(),
            found: found.to_string(),
        });
    }

    fn line(&mut self, position: u64, m: &UsageMetered) {
        let (gross, fee, net) = (m.gross.micros(), m.fee.micros(), m.net.micros());
        // The charge: the difference of the rounded cumulative totals.
        let expected = cumulative_charge(m.price_per_gpu_hour, m.to_gpu_seconds)
            .and_then(|to| {
                cumulative_charge(m.price_per_gpu_hour, m.from_gpu_seconds)
                    .and_then(|from| to.checked_sub(from))
            })
            .map(|c| c.micros());
        if expected != Ok(gross) {
            self.mismatch("line_charge", m, position, format!("{expected:?}"), gross);
        }
        let expected_fee = m
            .gross
            .mul_ratio(i64::from(m.fee_bp), 10_000, Rounding::Floor)
            .map(|f| f.micros());
        if expected_fee != Ok(fee) {
            self.mismatch("line_fee", m, position, format!("{expected_fee:?}"), fee);
        }
        if fee + net != gross {
            self.mismatch("line_split", m, position, gross, fee + net);
        }
        // The postings: exactly these accounts, these amounts.
        let mut posted: BTreeMap<(String, bool), i64> = BTreeMap::new();
        for posting in m.postings.lines() {
            *posted
                .entry((posting.account.to_string(), posting.side == Side::Debit))
                .or_default() += posting.amount_micro_usdc.micros();
        }
        let mut wanted: BTreeMap<(String, bool), i64> = BTreeMap::new();
        wanted.insert(
            (Account::RenterReceivable(m.renter_id).to_string(), true),
            gross,
        );
        if net != 0 {
            wanted.insert(
                (Account::ProviderPayable(m.provider_id).to_string(), false),
                net,
            );
        }
        if fee != 0 {
            wanted.insert((Account::PlatformRevenue.to_string(), false), fee);
        }
        if posted != wanted {
            self.mismatch(
                "line_postings",
                m,
                position,
                format!("{wanted:?}"),
                format!("{posted:?}"),
            );
        }
        let Some(rental) = self.rentals.get_mut(&m.rental_id) else {
            self.mismatch("unknown_rental", m, position, "a started rental", "none");
            return;
        };
        let parties = rental
            .started
            .as_ref()
            .map(|s| (s.renter_id, s.provider_id));
        if m.from_gpu_seconds != rental.billed {
            rental.gaps.push(format!(
                "position {position}: line from {} after {}",
                m.from_gpu_seconds, rental.billed
            ));
        }
        rental.billed = rental.billed.max(m.to_gpu_seconds);
        rental.earned += m.to_gpu_seconds.saturating_sub(m.from_gpu_seconds);
        rental.gross += gross;
        rental.lines += 1;
        if parties != Some((m.renter_id, m.provider_id)) {
            self.mismatch(
                "line_postings",
                m,
                position,
                format!("the rental's renter and provider {parties:?}"),
                format!("{:?}", (m.renter_id, m.provider_id)),
            );
        }
        let seconds = m.to_gpu_seconds.saturating_sub(m.from_gpu_seconds);
        self.per_provider
            .entry(m.provider_id)
            .or_default()
            .add_line(gross, fee, net, seconds);
        self.totals.add_line(gross, fee, net, seconds);
    }

    /// Every mismatch as of `now` (the end of rentals still active), and the totals. With
    /// `live`, also compares what the served earnings projections say over the same log
    /// positions.
    pub fn check(&self, now: Timestamp, live: Option<&Served>) -> ReconcileReport {
        let mut mismatches = self.mismatches.clone();
        let t = self.totals;
        if t.gross != t.fee + t.net {
            mismatches.push(Mismatch {
                kind: "totals",
                rental_id: None,
                provider_id: None,
                position: None,
                expected: format!("renter charges {} = earnings + fees", t.gross),
                found: format!("{} + {}", t.net, t.fee),
            });
        }
        let mut ids: Vec<&Uuid> = self.rentals.keys().collect();
        ids.sort();
        for id in ids {
            let rental = &self.rentals[id];
            let Some(started) = &rental.started else {
                continue;
            };
            let push = |mismatches: &mut Vec<Mismatch>, kind, expected: String, found: String| {
                mismatches.push(Mismatch {
                    kind,
                    rental_id: Some(*id),
                    provider_id: Some(started.provider_id),
                    position: None,
                    expected,
                    found,
                });
            };
            for gap in &rental.gaps {
                push(
                    &mut mismatches,
                    "rental_gap",
                    "contiguous lines".to_owned(),
                    gap.clone(),
                );
            }
            if rental.billed != rental.earned {
                push(
                    &mut mismatches,
                    "rental_billed_vs_earned",
                    format!("earned {} GPU-seconds", rental.billed),
                    format!("{} GPU-seconds in the lines", rental.earned),
                );
            }
            let charged =
                cumulative_charge(started.price_per_gpu_hour, rental.billed).map(|c| c.micros());
            if charged != Ok(rental.gross) {
                push(
                    &mut mismatches,
                    "rental_charge",
                    format!("{charged:?}"),
                    rental.gross.to_string(),
                );
            }
            let until = rental.ended_at.unwrap_or(now).min(now);
            let window = Span {
                from: started.started_at,
                until,
            };
            let transitions = self
                .presence
                .get(&started.machine_id)
                .map_or(&[][..], Vec::as_slice);
            let online_seconds =
                u64::try_from(online_micros(transitions, window) / 1_000_000).unwrap_or(0);
            let online = online_seconds.saturating_mul(started.gpu_uuids.len() as u64);
            if rental.billed > online {
                push(
                    &mut mismatches,
                    "rental_beyond_online",
                    format!("at most {online} online GPU-seconds"),
                    format!("{} billed", rental.billed),
                );
            }
        }
        for (provider_id, money) in &self.money {
            let expected = money.earned - money.paid - money.in_flight;
            if money.payable_posted != expected {
                mismatches.push(Mismatch {
                    kind: "payable",
                    rental_id: None,
                    provider_id: Some(*provider_id),
                    position: None,
                    expected: format!(
                        "earned {} - paid {} - in flight {} = {expected}",
                        money.earned, money.paid, money.in_flight
                    ),
                    found: format!("payable account {}", money.payable_posted),
                });
            }
            if let Some(live) = live {
                let served = live.pending_balance.get(provider_id).copied().unwrap_or(0);
                if live.position <= self.position && served != money.payable_posted {
                    mismatches.push(Mismatch {
                        kind: "projection_drift",
                        rental_id: None,
                        provider_id: Some(*provider_id),
                        position: None,
                        expected: format!("balance {}", money.payable_posted),
                        found: format!("served balance {served}"),
                    });
                }
            }
        }
        if let Some(live) = live {
            let mut live_total = Sums::default();
            for sums in live.lines_upto.values() {
                live_total.add_sums(*sums);
            }
            for (provider_id, sums) in &self.per_provider {
                let found = live
                    .lines_upto
                    .get(provider_id)
                    .copied()
                    .unwrap_or_default();
                if found != *sums {
                    mismatches.push(Mismatch {
                        kind: "projection_drift",
                        rental_id: None,
                        provider_id: Some(*provider_id),
                        position: None,
                        expected: format!("{sums:?}"),
                        found: format!("{found:?}"),
                    });
                }
            }
            if live_total != self.totals {
                mismatches.push(Mismatch {
                    kind: "projection_drift",
                    rental_id: None,
                    provider_id: None,
                    position: None,
                    expected: format!("{:?}", self.totals),
                    found: format!("{live_total:?}"),
                });
            }
        }
        ReconcileReport {
            as_of_position: self.position,
            totals: ReconcileTotals {
                renter_charges_micro_usdc: t.gross,
                provider_earnings_micro_usdc: t.net,
                platform_fees_micro_usdc: t.fee,
                gpu_seconds: t.gpu_seconds,
                usage_lines: t.lines,
                rentals: self
                    .rentals
                    .values()
                    .filter(|r| r.started.is_some())
                    .count() as u64,
                providers: self.per_provider.len() as u64,
            },
            mismatches,
        }
    }
}

/// What the served earnings projections say, for [`Reconciler::check`] to compare with the
/// replay: each provider's pending balance (in memory, at `position`) and the sums of its stored
/// lines up to the replay's position. Balances are compared only when `position` is not past the
/// replay's (a projection ahead of it is compared on line sums only).
#[derive(Debug, Clone, Default)]
pub struct Served {
    pub position: u64,
    pub pending_balance: BTreeMap<Uuid, i64>,
    pub lines_upto: BTreeMap<Uuid, Sums>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::fleet::MachineOnline;
    use gpunex_domain::metering::{FeeSchedule, Meter};
    use gpunex_domain::money::Usdc;
    use gpunex_domain::onboarding::Tier;
    use gpunex_domain::payouts::{
        self as rules, Confirmation, PayoutConfirmed, PayoutFailed, PayoutMethod, PayoutScheduled,
        Schedule, SettledLines,
    };
    use gpunex_domain::rental::{UsageInput, meter_usage};

    const PROVIDER: Uuid = Uuid::from_u128(7);
    const HOUR: i64 = 3_600_000_000;

    fn at(micros: i64) -> Timestamp {
        Timestamp::from_unix_micros(micros)
    }

    /// Positions 1-6: two rentals of one GPU at 3.60 USDC an hour, each metered once for 1,000
    /// seconds (Community fee 20%: 800,000 micro-USDC earned each), lines at 3 and 6.
    fn earned() -> Vec<(u64, DomainEvent)> {
        let mut events = Vec::new();
        for n in 0..2u128 {
            let base = 3 * n as u64;
            let machine_id = Uuid::from_u128(100 + n);
            let rental = RentalStarted {
                rental_id: Uuid::from_u128(200 + n),
                renter_id: Uuid::from_u128(300),
                provider_id: PROVIDER,
                machine_id,
                gpu_uuids: vec![format!("GPU-{n}")],
                model_id: "h100-80gb".to_owned(),
                price_per_gpu_hour: Usdc::from_micros(3_600_000),
                started_at: at(0),
                workload: None,
            };
            let line = meter_usage(&UsageInput {
                rental: &rental,
                meter: Meter::default(),
                tier: Tier::Community,
                fees: FeeSchedule::default(),
                reported_gpu_seconds: 1_000,
                online_gpu_seconds: 3_600,
                report_id: Uuid::from_u128(400 + n),
                at: at(HOUR),
            })
            .unwrap()
            .unwrap();
            assert_eq!(line.net.micros(), 800_000);
            events.push((
                base + 1,
                DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
                    machine_id,
                    provider_id: PROVIDER,
                    at: at(0),
                })),
            ));
            events.push((base + 2, DomainEvent::Rental(RentalEvent::Started(rental))));
            events.push((
                base + 3,
                DomainEvent::Rental(RentalEvent::UsageMetered(line)),
            ));
        }
        events
    }

    fn scheduled(id: u128, after: u64, through: u64, count: u64, net: i64) -> PayoutScheduled {
        let amount = Usdc::from_micros(net);
        PayoutScheduled {
            payout_id: Uuid::from_u128(id),
            batch_id: Uuid::from_u128(900),
            provider_id: PROVIDER,
            payout_date: chrono::NaiveDate::from_ymd_opt(2026, 11, 2).unwrap(),
            period: "weekly-2026-11-02".to_owned(),
            schedule: Schedule::Weekly,
            method: PayoutMethod::Solana {
                wallet: "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH".to_owned(),
            },
            cutoff: at(2 * HOUR),
            lines: SettledLines {
                after_position: after,
                through_position: through,
                count,
                net: amount,
            },
            brought_forward: Usdc::ZERO,
            amount,
            carried: Usdc::ZERO,
            postings: rules::schedule_entry(PROVIDER, amount).unwrap(),
            scheduled_at: at(2 * HOUR),
        }
    }

    fn confirmed(id: u128, amount: i64) -> PayoutEvent {
        PayoutEvent::Confirmed(PayoutConfirmed {
            payout_id: Uuid::from_u128(id),
            provider_id: PROVIDER,
            amount: Usdc::from_micros(amount),
            confirmation: Confirmation::Solana {
                signature: "sig".to_owned(),
                slot: 1,
            },
            postings: rules::confirm_entry(PROVIDER, Usdc::from_micros(amount)).unwrap(),
            confirmed_at: at(3 * HOUR),
        })
    }

    fn failed(id: u128, amount: i64, returned: i64) -> PayoutEvent {
        PayoutEvent::Failed(PayoutFailed {
            payout_id: Uuid::from_u128(id),
            provider_id: PROVIDER,
            amount: Usdc::from_micros(amount),
            reason_code: "transaction_failed".to_owned(),
            reason: "insufficient funds".to_owned(),
            postings: rules::fail_entry(PROVIDER, Usdc::from_micros(returned)).unwrap(),
            failed_at: at(3 * HOUR),
            failed_by: "test".to_owned(),
        })
    }

    /// An adjustment of the provider's balance: positive credits it (goodwill), negative
    /// debits it (a chargeback).
    fn adjustment(micros: i64) -> DomainEvent {
        use gpunex_domain::ledger::{JournalEntry, Posting};
        let amount = Usdc::from_micros(micros.abs());
        let (provider, platform) = (
            Account::ProviderPayable(PROVIDER),
            Account::PlatformAdjustments,
        );
        let postings = if micros > 0 {
            vec![
                Posting::debit(platform, amount),
                Posting::credit(provider, amount),
            ]
        } else {
            vec![
                Posting::debit(provider, amount),
                Posting::credit(platform, amount),
            ]
        };
        DomainEvent::AdjustmentPosted(gpunex_domain::events::AdjustmentPosted {
            entry_id: Uuid::from_u128(500),
            reason: "test".to_owned(),
            postings: JournalEntry::new(postings).unwrap(),
        })
    }

    /// The kinds of mismatch after the earnings and then `events`, in order.
    fn kinds_after(events_after: Vec<DomainEvent>) -> Vec<&'static str> {
        let mut reconciler = Reconciler::default();
        let events = earned();
        let after = events.len() as u64;
        for (position, event) in events {
            reconciler.apply(position, &event);
        }
        for (n, event) in events_after.into_iter().enumerate() {
            reconciler.apply(after + 1 + n as u64, &event);
        }
        reconciler
            .check(at(4 * HOUR), None)
            .mismatches
            .iter()
            .map(|m| m.kind)
            .collect()
    }

    /// The kinds of mismatch after the earnings and then `payouts`, in order.
    fn kinds(payouts: Vec<PayoutEvent>) -> Vec<&'static str> {
        kinds_after(payouts.into_iter().map(DomainEvent::Payout).collect())
    }

    #[test]
    fn payouts_as_the_platform_writes_them_reconcile() {
        assert_eq!(kinds(vec![]), Vec::<&str>::new());
        // Both lines paid and confirmed.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 6, 2, 1_600_000)),
                confirmed(1, 1_600_000),
            ]),
            Vec::<&str>::new()
        );
        // One line paid, the next failed and back in the balance.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 3, 1, 800_000)),
                PayoutEvent::Scheduled(scheduled(2, 3, 6, 1, 800_000)),
                confirmed(1, 800_000),
                failed(2, 800_000, 800_000),
            ]),
            Vec::<&str>::new()
        );
        // The failed amount is brought forward by the next payout, with no new line.
        let mut again = scheduled(3, 6, 6, 0, 800_000);
        again.lines.net = Usdc::ZERO;
        again.brought_forward = Usdc::from_micros(800_000);
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 3, 1, 800_000)),
                PayoutEvent::Scheduled(scheduled(2, 3, 6, 1, 800_000)),
                failed(2, 800_000, 800_000),
                PayoutEvent::Scheduled(again),
            ]),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn adjustments_are_brought_forward_up_to_the_balance() {
        // A 0.5 USDC credit is paid with both lines.
        let mut credited = scheduled(1, 0, 6, 2, 1_600_000);
        credited.brought_forward = Usdc::from_micros(500_000);
        credited.amount = Usdc::from_micros(2_100_000);
        credited.postings = rules::schedule_entry(PROVIDER, credited.amount).unwrap();
        assert_eq!(
            kinds_after(vec![
                adjustment(500_000),
                DomainEvent::Payout(PayoutEvent::Scheduled(credited.clone())),
            ]),
            Vec::<&str>::new()
        );
        // A 0.3 USDC debit is taken from what the lines pay.
        let mut debited = scheduled(1, 0, 6, 2, 1_600_000);
        debited.brought_forward = Usdc::from_micros(-300_000);
        debited.amount = Usdc::from_micros(1_300_000);
        debited.postings = rules::schedule_entry(PROVIDER, debited.amount).unwrap();
        assert_eq!(
            kinds_after(vec![
                adjustment(-300_000),
                DomainEvent::Payout(PayoutEvent::Scheduled(debited)),
            ]),
            Vec::<&str>::new()
        );
        // A payout that still brings the credit forward after a debit took it back.
        assert_eq!(
            kinds_after(vec![
                adjustment(500_000),
                adjustment(-500_000),
                DomainEvent::Payout(PayoutEvent::Scheduled(credited)),
            ]),
            ["payout_brought_forward"]
        );
    }

    #[test]
    fn each_payout_fault_is_reported() {
        // Lines settled twice: the second payout claims the first line again.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 3, 1, 800_000)),
                PayoutEvent::Scheduled(scheduled(2, 0, 6, 2, 1_600_000)),
            ]),
            ["payout_lines"]
        );
        // A line claimed that is not there (count and net beyond the log).
        assert_eq!(
            kinds(vec![PayoutEvent::Scheduled(scheduled(
                1, 0, 6, 3, 2_400_000
            ))]),
            ["payout_lines"]
        );
        // The same payout id twice.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 3, 1, 800_000)),
                PayoutEvent::Scheduled(scheduled(1, 3, 6, 1, 800_000)),
            ]),
            ["payout_twice", "payable"]
        );
        // More brought forward than the balance holds besides the lines: the first line is
        // settled, so only the second is there to pay.
        let mut inflated = scheduled(2, 3, 6, 1, 800_000);
        inflated.brought_forward = Usdc::from_micros(1);
        inflated.amount = Usdc::from_micros(800_001);
        inflated.postings = rules::schedule_entry(PROVIDER, inflated.amount).unwrap();
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 3, 1, 800_000)),
                PayoutEvent::Scheduled(inflated),
            ]),
            ["payout_brought_forward"]
        );
        // Its own arithmetic: more paid than the lines settle.
        let mut greedy = scheduled(1, 0, 6, 2, 1_600_000);
        greedy.amount = Usdc::from_micros(1_700_000);
        greedy.postings = rules::schedule_entry(PROVIDER, greedy.amount).unwrap();
        assert_eq!(
            kinds(vec![PayoutEvent::Scheduled(greedy)]),
            ["payout_arithmetic"]
        );
        // Confirmed for another amount; confirmed twice; an unknown payout.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 6, 2, 1_600_000)),
                confirmed(1, 1_500_000),
            ]),
            ["payout_amount"]
        );
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 6, 2, 1_600_000)),
                confirmed(1, 1_600_000),
                confirmed(1, 1_600_000),
            ]),
            ["payout_settled_twice"]
        );
        assert_eq!(
            kinds(vec![failed(5, 800_000, 800_000)]),
            ["payout_unknown", "payable"]
        );
        // A failure that returns more to the balance than the payout took.
        assert_eq!(
            kinds(vec![
                PayoutEvent::Scheduled(scheduled(1, 0, 6, 2, 1_600_000)),
                failed(1, 1_600_000, 1_600_001),
            ]),
            ["payable"]
        );
    }
}
