//! Price recommendations per model and region, from what the market shows: supply (GPUs listed
//! now), demand (the share of available GPU-time rented over the last 7 days), and the prices of
//! rented and of idle GPUs.
//!
//! The rule (documented in `docs/marketplace.md`):
//! - With at least [`MIN_RENTALS`] rentals priced in the region over the window: the range is the
//!   rented prices' first to third quartile; the recommendation is the third quartile when demand
//!   is high (at least 80%), the first when it is low (under 30%), else the median.
//! - Else, with at least [`MIN_PRICES`] prices (rented and idle together) in the region: the
//!   range is their quartiles and the recommendation their median (a fallback: no rental signal).
//! - Else the same two rules over every region of the model (a fallback).
//! - Else a reference price: the model's datasheet FP16 figure times the median price per FP16
//!   TFLOPS of every GPU listed on the platform, range ±20% (a fallback); with no listing at all,
//!   no recommendation.
//!
//! Quartiles are nearest-rank (`Q(p) = x[ceil(p n) - 1]` of the sorted prices), so every figure
//! is a price someone actually set; a rental counts once per GPU it holds.

use serde::{Deserialize, Serialize};

use crate::money::{Rounding, Usdc};

/// Rentals needed for a recommendation from rented prices.
pub const MIN_RENTALS: usize = 3;
/// Prices needed for a recommendation from listed prices.
pub const MIN_PRICES: usize = 3;
/// Demand at or above this (basis points) recommends the upper quartile.
pub const HIGH_DEMAND_BP: u32 = 8_000;
/// Demand below this recommends the lower quartile.
pub const LOW_DEMAND_BP: u32 = 3_000;
/// The window demand and rented prices are measured over.
pub const WINDOW_DAYS: i64 = 7;

/// What the market shows for one model in one region (or all regions).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarketSample {
    /// GPUs listed now.
    pub supply: u32,
    /// Prices of rentals that started in the window, one entry per rented GPU (micro-USDC).
    pub rented_prices: Vec<i64>,
    /// Rentals that started in the window.
    pub rentals: u32,
    /// Current prices of GPUs listed and not rented (micro-USDC).
    pub idle_prices: Vec<i64>,
    /// GPU-seconds rented in the window, and GPU-seconds the GPUs were online in it.
    pub rented_gpu_seconds: u64,
    pub available_gpu_seconds: u64,
}

impl MarketSample {
    /// Rented share of the available GPU-time, in basis points (0 with no available time).
    pub fn demand_bp(&self) -> u32 {
        if self.available_gpu_seconds == 0 {
            return 0;
        }
        let share = u128::from(self.rented_gpu_seconds.min(self.available_gpu_seconds)) * 10_000
            / u128::from(self.available_gpu_seconds);
        u32::try_from(share).unwrap_or(10_000)
    }
}

/// Nearest-rank quartiles `[Q1, median, Q3]` of `values` (sorted in place).
pub fn quartiles(values: &mut [i64]) -> Option<[i64; 3]> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let n = values.len();
    let rank = |numerator: usize| (numerator * n).div_ceil(4).max(1) - 1;
    Some([values[rank(1)], values[rank(2)], values[rank(3)]])
}

/// Where a recommendation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Rented prices in the region.
    RegionRentals,
    /// Listed prices in the region (too few rentals).
    RegionListings,
    /// Rented prices of the model in every region.
    ModelRentals,
    /// Listed prices of the model in every region.
    ModelListings,
    /// The datasheet FP16 figure at the platform's median price per TFLOPS.
    Reference,
    /// No market data at all.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recommendation {
    pub basis: Basis,
    /// Anything but the region's own rentals.
    pub fallback: bool,
    pub recommended: Option<Usdc>,
    pub low: Option<Usdc>,
    pub high: Option<Usdc>,
    /// The demand the choice within the range used (the region's, or the model's).
    pub demand_bp: u32,
}

fn from_sample(sample: &MarketSample, rentals: Basis, listings: Basis) -> Option<Recommendation> {
    let demand_bp = sample.demand_bp();
    if sample.rentals as usize >= MIN_RENTALS {
        let [q1, median, q3] = quartiles(&mut sample.rented_prices.clone())?;
        let pick = if demand_bp >= HIGH_DEMAND_BP {
            q3
        } else if demand_bp < LOW_DEMAND_BP {
            q1
        } else {
            median
        };
        return Some(Recommendation {
            basis: rentals,
            fallback: rentals != Basis::RegionRentals,
            recommended: Some(Usdc::from_micros(pick)),
            low: Some(Usdc::from_micros(q1)),
            high: Some(Usdc::from_micros(q3)),
            demand_bp,
        });
    }
    let mut all: Vec<i64> = sample
        .rented_prices
        .iter()
        .chain(&sample.idle_prices)
        .copied()
        .collect();
    if all.len() < MIN_PRICES {
        return None;
    }
    let [q1, median, q3] = quartiles(&mut all)?;
    Some(Recommendation {
        basis: listings,
        fallback: true,
        recommended: Some(Usdc::from_micros(median)),
        low: Some(Usdc::from_micros(q1)),
        high: Some(Usdc::from_micros(q3)),
        demand_bp,
    })
}

/// The recommendation for a model in a region (`region`), falling back to the model in every
/// region (`model`), then to `reference` (the model's FP16 tenths of TFLOPS, and the platform's
/// listed prices each with its GPU's FP16 tenths).
pub fn recommend(
    region: &MarketSample,
    model: &MarketSample,
    reference: (u32, &[(i64, u32)]),
) -> Recommendation {
    if let Some(found) = from_sample(region, Basis::RegionRentals, Basis::RegionListings) {
        return found;
    }
    if let Some(found) = from_sample(model, Basis::ModelRentals, Basis::ModelListings) {
        return found;
    }
    let (model_tenths, listed) = reference;
    // The platform's median price per FP16 tenth-TFLOPS, applied to this model (half-even).
    let mut per_tenth: Vec<(i64, u32)> = listed
        .iter()
        .filter(|(_, tenths)| *tenths > 0)
        .copied()
        .collect();
    per_tenth.sort_by(|a, b| {
        // Compare a.price / a.tenths with b.price / b.tenths exactly.
        (i128::from(a.0) * i128::from(b.1)).cmp(&(i128::from(b.0) * i128::from(a.1)))
    });
    let median = per_tenth
        .get(per_tenth.len().saturating_sub(1) / 2)
        .copied();
    let price = match median {
        Some((price, tenths)) if model_tenths > 0 => Usdc::from_micros(price)
            .mul_ratio(
                i64::from(model_tenths),
                i64::from(tenths),
                Rounding::HalfEven,
            )
            .ok(),
        _ => None,
    };
    let band =
        |numerator: i64| price.and_then(|p| p.mul_ratio(numerator, 100, Rounding::HalfEven).ok());
    Recommendation {
        basis: if price.is_some() {
            Basis::Reference
        } else {
            Basis::None
        },
        fallback: true,
        recommended: price,
        low: band(80),
        high: band(120),
        demand_bp: region.demand_bp(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rented: &[i64], idle: &[i64], rented_s: u64, available_s: u64) -> MarketSample {
        MarketSample {
            supply: idle.len() as u32,
            rented_prices: rented.to_vec(),
            rentals: rented.len() as u32,
            idle_prices: idle.to_vec(),
            rented_gpu_seconds: rented_s,
            available_gpu_seconds: available_s,
        }
    }

    #[test]
    fn quartiles_are_prices_someone_set() {
        assert_eq!(quartiles(&mut []), None);
        assert_eq!(quartiles(&mut [5]), Some([5, 5, 5]));
        assert_eq!(quartiles(&mut [4, 1, 3, 2]), Some([1, 2, 3]));
        assert_eq!(quartiles(&mut [1, 2, 3, 4, 5, 6, 7, 8, 9]), Some([3, 5, 7]));
    }

    #[test]
    fn demand_moves_the_pick_and_thin_markets_fall_back() {
        let rented = [1_800_000, 2_000_000, 2_200_000, 2_400_000];
        let empty = MarketSample::default();
        let busy = recommend(&sample(&rented, &[], 90, 100), &empty, (0, &[]));
        assert_eq!(busy.basis, Basis::RegionRentals);
        assert!(!busy.fallback);
        assert_eq!(busy.recommended, Some(Usdc::from_micros(2_200_000)));
        assert_eq!(
            (busy.low, busy.high),
            (
                Some(Usdc::from_micros(1_800_000)),
                Some(Usdc::from_micros(2_200_000))
            )
        );
        assert_eq!(busy.demand_bp, 9_000);
        let slack = recommend(&sample(&rented, &[], 10, 100), &empty, (0, &[]));
        assert_eq!(slack.recommended, Some(Usdc::from_micros(1_800_000)));
        let middling = recommend(&sample(&rented, &[], 50, 100), &empty, (0, &[]));
        assert_eq!(middling.recommended, Some(Usdc::from_micros(2_000_000)));
        // Two rentals and two idle prices: listed prices, a fallback.
        let thin = recommend(
            &sample(&[2_000_000, 3_000_000], &[2_500_000, 1_000_000], 0, 0),
            &empty,
            (0, &[]),
        );
        assert_eq!((thin.basis, thin.fallback), (Basis::RegionListings, true));
        assert_eq!(thin.recommended, Some(Usdc::from_micros(2_000_000)));
        // Nothing in the region: the model elsewhere.
        let elsewhere = recommend(&empty, &sample(&rented, &[], 50, 100), (0, &[]));
        assert_eq!(
            (elsewhere.basis, elsewhere.fallback),
            (Basis::ModelRentals, true)
        );
        // Nothing for the model: the reference, from price per TFLOPS of what is listed. An
        // L4 (1,210 tenths) at 1.00/h and an H100 (9,890) at 2.00/h: the median ratio is the
        // H100's (lower), so an A100 (3,120 tenths) is 2.00 x 3,120 / 9,890 = 0.630940...
        let reference = recommend(
            &empty,
            &empty,
            (3_120, &[(1_000_000, 1_210), (2_000_000, 9_890)]),
        );
        assert_eq!(reference.basis, Basis::Reference);
        assert_eq!(reference.recommended, Some(Usdc::from_micros(630_940)));
        assert_eq!(reference.low, Some(Usdc::from_micros(504_752)));
        let nothing = recommend(&empty, &empty, (3_120, &[]));
        assert_eq!((nothing.basis, nothing.recommended), (Basis::None, None));
    }
}
