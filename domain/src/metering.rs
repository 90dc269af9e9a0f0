//! Usage metering and the platform fee, exact to the micro-USDC.
//!
//! An agent reports each rental's usage as a cumulative counter of GPU-seconds. The charge of a
//! report is the difference between the rounded cumulative totals:
//!
//! `charge_k = round(rate x S_k / 3600) - round(rate x S_(k-1) / 3600)`
//!
//! with `round` half-even to the micro-USDC. Summed over any sequence of reports the charges
//! telescope to `round(rate x S_last / 3600)`: rounding never drifts, however the reports fall.
//! Duplicates and out-of-order reports are harmless: only a counter above the highest seen
//! charges anything. The fee is `floor(gross x rate)`, and the provider's net is the rest, so
//! `gross = fee + net` exactly.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ledger::{Account, JournalEntry, JournalError, Posting};
use crate::money::{MoneyError, Rounding, Usdc};
use crate::onboarding::Tier;

pub const SECONDS_PER_HOUR: i64 = 3_600;

/// The whole amount billed for `gpu_seconds` at `rate_per_gpu_hour`: `round_half_even(rate x
/// seconds / 3600)`.
pub fn cumulative_charge(rate_per_gpu_hour: Usdc, gpu_seconds: u64) -> Result<Usdc, MoneyError> {
    let seconds = i64::try_from(gpu_seconds).map_err(|_| MoneyError::Overflow)?;
    rate_per_gpu_hour.mul_ratio(seconds, SECONDS_PER_HOUR, Rounding::HalfEven)
}

/// One rental's meter: the highest cumulative counter reported, and what it has been charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Meter {
    pub gpu_seconds: u64,
    pub charged: Usdc,
}

/// What one report adds: the seconds and the amount beyond what was already charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub amount: Usdc,
}

impl Meter {
    /// Applies a cumulative report. `None` when it adds nothing (a duplicate, or older than the
    /// highest counter seen).
    pub fn report(
        &mut self,
        rate_per_gpu_hour: Usdc,
        gpu_seconds: u64,
    ) -> Result<Option<Charge>, MoneyError> {
        if gpu_seconds <= self.gpu_seconds {
            return Ok(None);
        }
        let total = cumulative_charge(rate_per_gpu_hour, gpu_seconds)?;
        let amount = total.checked_sub(self.charged)?;
        let charge = Charge {
            from_gpu_seconds: self.gpu_seconds,
            to_gpu_seconds: gpu_seconds,
            amount,
        };
        self.gpu_seconds = gpu_seconds;
        self.charged = total;
        Ok(Some(charge))
    }
}

/// Platform fee rates per tier, in basis points of the gross charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeeSchedule {
    pub community_bp: u32,
    pub enterprise_bp: u32,
}

impl Default for FeeSchedule {
    /// Community 20%, Enterprise 15% (Enterprise hosts bring committed capacity).
    fn default() -> Self {
        FeeSchedule {
            community_bp: 2_000,
            enterprise_bp: 1_500,
        }
    }
}

impl FeeSchedule {
    pub fn rate_bp(&self, tier: Tier) -> u32 {
        match tier {
            Tier::Community => self.community_bp,
            Tier::Enterprise => self.enterprise_bp,
        }
    }

    /// `(fee, net)`: `fee = floor(gross x rate)`, `net = gross - fee`. Refuses a negative gross or
    /// a rate above 100%.
    pub fn split(&self, gross: Usdc, tier: Tier) -> Result<(Usdc, Usdc), MoneyError> {
        let rate = self.rate_bp(tier);
        if gross.is_negative() {
            return Err(MoneyError::Negative { amount: gross });
        }
        if rate > 10_000 {
            return Err(MoneyError::Overflow);
        }
        let fee = gross.mul_ratio(i64::from(rate), 10_000, Rounding::Floor)?;
        Ok((fee, gross.checked_sub(fee)?))
    }
}

/// The double entry of one charge: the renter owes the gross; the provider is owed the net; the
/// platform earns the fee. Zero lines are left out (a one-micro charge may carry no fee).
pub fn charge_entry(
    renter_id: Uuid,
    provider_id: Uuid,
    gross: Usdc,
    fee: Usdc,
) -> Result<JournalEntry, JournalError> {
    let net = Usdc::from_micros(gross.micros() - fee.micros());
    let mut lines = vec![Posting::debit(Account::RenterReceivable(renter_id), gross)];
    if net.is_positive() {
        lines.push(Posting::credit(Account::ProviderPayable(provider_id), net));
    }
    if fee.is_positive() {
        lines.push(Posting::credit(Account::PlatformRevenue, fee));
    }
    JournalEntry::new(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn usdc(micros: i64) -> Usdc {
        Usdc::from_micros(micros)
    }

    #[test]
    fn charges_round_half_even_on_the_cumulative_total() {
        // 2.50 USDC/h: one second is 694.444... micro-USDC.
        let rate = usdc(2_500_000);
        assert_eq!(cumulative_charge(rate, 1).unwrap(), usdc(694));
        assert_eq!(cumulative_charge(rate, 3_600).unwrap(), usdc(2_500_000));
        // 0.018 USDC/h: one second is exactly 5 micro; 1.8 USDC/h x 1 s = 500 micro.
        assert_eq!(cumulative_charge(usdc(18_000), 1).unwrap(), usdc(5));
        // A tie: 1 micro/h x 1,800 s = 0.5 micro -> 0 (even); x 5,400 s = 1.5 -> 2.
        assert_eq!(cumulative_charge(usdc(1), 1_800).unwrap(), usdc(0));
        assert_eq!(cumulative_charge(usdc(1), 5_400).unwrap(), usdc(2));
    }

    #[test]
    fn duplicates_and_late_reports_charge_nothing() {
        let rate = usdc(2_500_000);
        let mut meter = Meter::default();
        let first = meter.report(rate, 10).unwrap().unwrap();
        assert_eq!(first.amount, usdc(6_944));
        assert_eq!(meter.report(rate, 10).unwrap(), None);
        assert_eq!(meter.report(rate, 5).unwrap(), None);
        let next = meter.report(rate, 11).unwrap().unwrap();
        assert_eq!((next.from_gpu_seconds, next.to_gpu_seconds), (10, 11));
        assert_eq!(next.amount, usdc(7_639 - 6_944));
    }

    #[test]
    fn fees_floor_and_the_net_takes_the_rest() {
        let fees = FeeSchedule::default();
        assert_eq!(
            fees.split(usdc(1_000_003), Tier::Community).unwrap(),
            (usdc(200_000), usdc(800_003))
        );
        assert_eq!(
            fees.split(usdc(1_000_003), Tier::Enterprise).unwrap(),
            (usdc(150_000), usdc(850_003))
        );
        assert_eq!(
            fees.split(usdc(4), Tier::Community).unwrap(),
            (usdc(0), usdc(4))
        );
        assert!(fees.split(usdc(-1), Tier::Community).is_err());
        let entry = charge_entry(Uuid::nil(), Uuid::nil(), usdc(4), usdc(0)).unwrap();
        assert_eq!(entry.total(), usdc(4));
        assert_eq!(entry.lines().len(), 2, "no zero fee line");
    }

    proptest! {
        /// However reports are duplicated, reordered or split, the charges add up to the rounded
        /// total of the highest counter, and every charge splits into fee + net exactly.
        #[test]
        fn charges_never_drift(
            rate in 10_000_i64..=100_000_000,
            mut counters in proptest::collection::vec(0_u64..2_000_000, 1..60),
            duplicates in proptest::collection::vec(0_usize..60, 0..20),
            community in any::<bool>(),
        ) {
            let rate = usdc(rate);
            for i in duplicates {
                if let Some(&c) = counters.get(i % counters.len()) {
                    counters.push(c);
                }
            }
            let fees = FeeSchedule::default();
            let tier = if community { Tier::Community } else { Tier::Enterprise };
            let mut meter = Meter::default();
            let (mut gross, mut fee_total, mut net_total) = (0_i64, 0_i64, 0_i64);
            for &counter in &counters {
                if let Some(charge) = meter.report(rate, counter).unwrap() {
                    prop_assert!(charge.amount.micros() >= 0);
                    let (fee, net) = fees.split(charge.amount, tier).unwrap();
                    prop_assert_eq!(fee.micros() + net.micros(), charge.amount.micros());
                    gross += charge.amount.micros();
                    fee_total += fee.micros();
                    net_total += net.micros();
                }
            }
            let highest = counters.iter().copied().max().unwrap_or(0);
            prop_assert_eq!(gross, cumulative_charge(rate, highest).unwrap().micros());
            prop_assert_eq!(gross, fee_total + net_total);
            prop_assert_eq!(meter.gpu_seconds, highest);
        }
    }
}
