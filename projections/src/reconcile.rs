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
//! - optionally, a live earnings projection agrees with the replay.

use std::collections::{BTreeMap, HashMap};

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::{FleetEvent, Span, online_micros};
use gpunex_domain::ledger::{Account, Side};
use gpunex_domain::metering::cumulative_charge;
use gpunex_domain::money::Rounding;
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
pub struct Mismatch {
    /// `line_charge`, `line_fee`, `line_split`, `line_postings`, `totals`, `rental_gap`,
    /// `rental_billed_vs_earned`, `rental_charge`, `rental_beyond_online`, `unknown_rental`,
    /// `projection_drift`.
    pub kind: &'static str,
    pub rental_id: Option<Uuid>,
    pub provider_id: Option<Uuid>,
    pub position: Option<u64>,
    pub expected: String,
    pub found: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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

#[derive(Debug, Clone, Default)]
pub struct Reconciler {
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
            }
            _ => {}
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
    /// `live`, also compares a live earnings projection's sums over the same log positions.
    pub fn check(
        &self,
        now: Timestamp,
        live: Option<&crate::earnings::Earnings>,
    ) -> ReconcileReport {
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
        if let Some(live) = live {
            let mut live_total = Sums::default();
            for provider_id in live.providers() {
                let sums = live.lifetime_upto(provider_id, self.position);
                live_total.add_sums(sums);
            }
            for (provider_id, sums) in &self.per_provider {
                let found = live.lifetime_upto(*provider_id, self.position);
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
