//! Exact USDC amounts in integer micro-USDC (6 decimals).
//!
//! Every amount the platform computes or stores is an `i64` count of micro-USDC. `rust_decimal`
//! appears only at the edges: parsing what a person typed and displaying an amount. Rounding is
//! never implicit: the one operation that can produce a fraction, [`Usdc::mul_ratio`], takes the
//! rounding rule as an argument. The rules are written down in `docs/money.md`.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Micro-USDC per USDC: USDC has 6 decimals on every chain we pay out on.
pub const MICROS_PER_USDC: i64 = 1_000_000;
/// Decimal places of a USDC amount.
pub const USDC_DECIMALS: u32 = 6;
/// Micro-USDC per US cent, for rails that pay in cents (bank transfers).
pub const MICROS_PER_CENT: i64 = 10_000;

/// An exact amount of USDC, stored as micro-USDC.
///
/// Serialized as a bare integer of micro-USDC; fields that hold one are named `*_micro_usdc`.
/// The API layer renders amounts as decimal strings with [`Usdc::to_decimal`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Usdc {
    micros: i64,
}

/// How a fractional micro-USDC is resolved. See `docs/money.md` for where each one is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Toward negative infinity. Used for platform fees, so the fraction stays with the provider.
    Floor,
    /// To the nearest micro-USDC, ties to the even neighbour (banker's rounding). Used for
    /// metered charges, so that rounding errors do not drift in one direction.
    HalfEven,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("amount overflows the representable range of micro-USDC")]
    Overflow,
    #[error("amount has more than 6 decimal places: {text}")]
    TooPrecise { text: String },
    #[error("amount is not a decimal number: {text}")]
    NotANumber { text: String },
    #[error("amount {amount} is negative")]
    Negative { amount: Usdc },
    #[error("ratio denominator must be positive, got {denominator}")]
    NonPositiveDenominator { denominator: i64 },
}

impl Usdc {
    pub const ZERO: Usdc = Usdc { micros: 0 };
    /// The largest amount any single value may hold: about 9.2 trillion USDC.
    pub const MAX: Usdc = Usdc { micros: i64::MAX };

    pub const fn from_micros(micros: i64) -> Usdc {
        Usdc { micros }
    }

    pub const fn micros(self) -> i64 {
        self.micros
    }

    pub const fn is_positive(self) -> bool {
        self.micros > 0
    }

    pub const fn is_negative(self) -> bool {
        self.micros < 0
    }

    pub fn checked_add(self, other: Usdc) -> Result<Usdc, MoneyError> {
        self.micros
            .checked_add(other.micros)
            .map(Usdc::from_micros)
            .ok_or(MoneyError::Overflow)
    }

    pub fn checked_sub(self, other: Usdc) -> Result<Usdc, MoneyError> {
        self.micros
            .checked_sub(other.micros)
            .map(Usdc::from_micros)
            .ok_or(MoneyError::Overflow)
    }

    pub fn checked_neg(self) -> Result<Usdc, MoneyError> {
        self.micros
            .checked_neg()
            .map(Usdc::from_micros)
            .ok_or(MoneyError::Overflow)
    }

    /// `self × numerator / denominator`, computed exactly in 128 bits and rounded once by `rounding`.
    pub fn mul_ratio(
        self,
        numerator: i64,
        denominator: i64,
        rounding: Rounding,
    ) -> Result<Usdc, MoneyError> {
        if denominator <= 0 {
            return Err(MoneyError::NonPositiveDenominator { denominator });
        }
        let product = i128::from(self.micros) * i128::from(numerator);
        let den = i128::from(denominator);
        let quotient = product.div_euclid(den); // floor, since den > 0
        let remainder = product.rem_euclid(den); // 0 <= remainder < den
        let rounded = match rounding {
            Rounding::Floor => quotient,
            Rounding::HalfEven => {
                let twice = remainder * 2;
                if twice > den || (twice == den && quotient % 2 != 0) {
                    quotient + 1
                } else {
                    quotient
                }
            }
        };
        i64::try_from(rounded)
            .map(Usdc::from_micros)
            .map_err(|_| MoneyError::Overflow)
    }

    /// Splits a non-negative amount into whole cents and the sub-cent remainder, which the caller
    /// must keep (it stays in the provider's balance): `cents + remainder == self` always.
    /// A negative amount has nothing to pay out: it is an error.
    pub fn split_cents(self) -> Result<(Usdc, Usdc), MoneyError> {
        if self.micros < 0 {
            return Err(MoneyError::Negative { amount: self });
        }
        let remainder = self.micros % MICROS_PER_CENT;
        Ok((
            Usdc::from_micros(self.micros - remainder),
            Usdc::from_micros(remainder),
        ))
    }

    /// The amount as a decimal number of USDC, exactly.
    pub fn to_decimal(self) -> Decimal {
        Decimal::new(self.micros, USDC_DECIMALS)
    }

    /// Converts a decimal number of USDC; fails rather than round if it has more than 6 decimals.
    pub fn from_decimal(value: Decimal) -> Result<Usdc, MoneyError> {
        let normalized = value.normalize();
        if normalized.scale() > USDC_DECIMALS {
            return Err(MoneyError::TooPrecise {
                text: value.to_string(),
            });
        }
        let micros = normalized
            .checked_mul(Decimal::from(MICROS_PER_USDC))
            .ok_or(MoneyError::Overflow)?;
        let micros = micros.trunc();
        let micros: i64 = micros.try_into().map_err(|_| MoneyError::Overflow)?;
        Ok(Usdc::from_micros(micros))
    }
}

impl FromStr for Usdc {
    type Err = MoneyError;

    /// Parses a plain decimal such as `12.5` or `-0.000001`. No exponents, no thousands
    /// separators, no currency signs: a money field is not the place for guessing.
    fn from_str(text: &str) -> Result<Usdc, MoneyError> {
        let plain = !text.is_empty()
            && text.len() <= 40
            && text
                .chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_digit() || c == '.' || (i == 0 && c == '-'));
        if !plain {
            return Err(MoneyError::NotANumber {
                text: text.chars().take(40).collect(),
            });
        }
        let value = Decimal::from_str_exact(text).map_err(|_| MoneyError::NotANumber {
            text: text.to_owned(),
        })?;
        Usdc::from_decimal(value)
    }
}

impl fmt::Display for Usdc {
    /// Always six decimals, e.g. `12.500000`, so amounts line up and never look rounded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.micros < 0 { "-" } else { "" };
        let abs = self.micros.unsigned_abs();
        let whole = abs / MICROS_PER_USDC.unsigned_abs();
        let fraction = abs % MICROS_PER_USDC.unsigned_abs();
        write!(f, "{sign}{whole}.{fraction:06}")
    }
}

impl fmt::Debug for Usdc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Usdc({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn usdc(text: &str) -> Usdc {
        text.parse().unwrap()
    }

    #[test]
    fn parses_and_displays_exactly() {
        let cases = [
            ("0", "0.000000"),
            ("1", "1.000000"),
            ("12.5", "12.500000"),
            ("0.000001", "0.000001"),
            ("-3.25", "-3.250000"),
            ("9223372036854.775807", "9223372036854.775807"),
        ];
        for (input, shown) in cases {
            assert_eq!(usdc(input).to_string(), shown, "input {input}");
        }
        assert_eq!(usdc("1.000001").micros(), 1_000_001);
    }

    #[test]
    fn rejects_rather_than_rounds() {
        assert!(matches!(
            "0.0000001".parse::<Usdc>(),
            Err(MoneyError::TooPrecise { .. })
        ));
        assert!(matches!(
            "9223372036854.775808".parse::<Usdc>(),
            Err(MoneyError::Overflow)
        ));
        for bad in ["", "1e3", "1,5", "$1", " 1", "1.2.3", "--1", "NaN", "+1"] {
            assert!(
                matches!(bad.parse::<Usdc>(), Err(MoneyError::NotANumber { .. })),
                "{bad:?} should be rejected"
            );
        }
        // Trailing zeros beyond six places carry no precision and are accepted.
        assert_eq!(usdc("1.50000000").micros(), 1_500_000);
    }

    #[test]
    fn negative_amounts_have_no_cents_to_pay() {
        assert!(matches!(
            Usdc::from_micros(-1).split_cents(),
            Err(MoneyError::Negative { .. })
        ));
        assert!(Usdc::from_micros(i64::MIN).split_cents().is_err());
    }

    #[test]
    fn checked_arithmetic_reports_overflow() {
        assert_eq!(
            Usdc::MAX.checked_add(Usdc::from_micros(1)),
            Err(MoneyError::Overflow)
        );
        assert_eq!(
            Usdc::from_micros(i64::MIN).checked_neg(),
            Err(MoneyError::Overflow)
        );
        assert_eq!(
            Usdc::MAX.mul_ratio(2, 1, Rounding::Floor),
            Err(MoneyError::Overflow)
        );
    }

    #[test]
    fn ratio_rounding_rules() {
        // (amount, num, den, floor, half_even)
        let cases = [
            (10, 1, 4, 2, 2),    // 2.5 -> floor 2, even 2
            (14, 1, 4, 3, 4),    // 3.5 -> floor 3, even 4
            (7, 1, 3, 2, 2),     // 2.33
            (8, 1, 3, 2, 3),     // 2.67
            (-10, 1, 4, -3, -2), // -2.5 -> floor -3, even -2
            (-14, 1, 4, -4, -4), // -3.5
        ];
        for (amount, num, den, floor, even) in cases {
            let a = Usdc::from_micros(amount);
            assert_eq!(
                a.mul_ratio(num, den, Rounding::Floor).unwrap().micros(),
                floor
            );
            assert_eq!(
                a.mul_ratio(num, den, Rounding::HalfEven).unwrap().micros(),
                even
            );
        }
        assert!(matches!(
            Usdc::ZERO.mul_ratio(1, 0, Rounding::Floor),
            Err(MoneyError::NonPositiveDenominator { .. })
        ));
    }

    proptest! {
        #[test]
        fn display_parse_round_trips(micros in any::<i64>()) {
            let amount = Usdc::from_micros(micros);
            prop_assert_eq!(amount.to_string().parse::<Usdc>().unwrap(), amount);
            prop_assert_eq!(Usdc::from_decimal(amount.to_decimal()).unwrap(), amount);
        }

        #[test]
        fn cents_split_loses_nothing(micros in 0i64..i64::MAX) {
            let (cents, rest) = Usdc::from_micros(micros).split_cents().unwrap();
            prop_assert_eq!(cents.micros() + rest.micros(), micros);
            prop_assert_eq!(cents.micros() % MICROS_PER_CENT, 0);
            prop_assert!(rest.micros() < MICROS_PER_CENT);
        }

        #[test]
        fn floor_fee_plus_net_is_gross(gross in 0i64..1_000_000_000_000, rate_ppm in 0i64..=1_000_000) {
            let gross = Usdc::from_micros(gross);
            let fee = gross.mul_ratio(rate_ppm, 1_000_000, Rounding::Floor).unwrap();
            let net = gross.checked_sub(fee).unwrap();
            prop_assert_eq!(fee.checked_add(net).unwrap(), gross);
            prop_assert!(fee <= gross && !net.is_negative());
        }
    }
}
