//! Instants as integer microseconds since the Unix epoch (UTC), and business days.
//!
//! The domain never reads a clock: every instant is an argument. Business days are Monday to
//! Friday in UTC; public holidays are not business days for payouts (see the payout rules), but
//! review deadlines count only weekends out.

use std::fmt;

use serde::{Deserialize, Serialize};

pub const MICROS_PER_SECOND: i64 = 1_000_000;
pub const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// An instant, in microseconds since 1970-01-01T00:00:00Z.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp {
    micros: i64,
}

/// Days of the week, Monday first (ISO 8601).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Weekday {
    Monday,
    Tuesday,
    Wednesday,
    Thursday,
    Friday,
    Saturday,
    Sunday,
}

impl Weekday {
    pub const ALL: [Weekday; 7] = [
        Weekday::Monday,
        Weekday::Tuesday,
        Weekday::Wednesday,
        Weekday::Thursday,
        Weekday::Friday,
        Weekday::Saturday,
        Weekday::Sunday,
    ];

    pub fn is_business_day(self) -> bool {
        !matches!(self, Weekday::Saturday | Weekday::Sunday)
    }
}

impl Timestamp {
    pub const fn from_unix_micros(micros: i64) -> Timestamp {
        Timestamp { micros }
    }

    pub const fn unix_micros(self) -> i64 {
        self.micros
    }

    /// Whole days since 1970-01-01 (negative before it).
    pub fn unix_day(self) -> i64 {
        self.micros.div_euclid(MICROS_PER_DAY)
    }

    pub fn weekday(self) -> Weekday {
        // 1970-01-01 was a Thursday: index 3 with Monday = 0.
        let index = (self.unix_day() + 3).rem_euclid(7);
        Weekday::ALL[usize::try_from(index).unwrap_or(0)]
    }

    /// Whole seconds from `self` to `later` (negative if `later` is earlier).
    pub fn seconds_until(self, later: Timestamp) -> i64 {
        later
            .micros
            .saturating_sub(self.micros)
            .div_euclid(MICROS_PER_SECOND)
    }

    /// The instant `days` business days after `self`: each weekday passed counts one, weekends
    /// are skipped. From a weekend instant, counting starts at the next Monday 00:00 UTC.
    pub fn add_business_days(self, days: u32) -> Timestamp {
        let mut day = self.unix_day();
        let mut time_of_day = self.micros.rem_euclid(MICROS_PER_DAY);
        if !self.weekday().is_business_day() {
            while !Timestamp::from_unix_micros(day.saturating_mul(MICROS_PER_DAY))
                .weekday()
                .is_business_day()
            {
                day += 1;
            }
            time_of_day = 0;
        }
        let mut remaining = days;
        while remaining > 0 {
            day += 1;
            if Timestamp::from_unix_micros(day.saturating_mul(MICROS_PER_DAY))
                .weekday()
                .is_business_day()
            {
                remaining -= 1;
            }
        }
        Timestamp::from_unix_micros(
            day.saturating_mul(MICROS_PER_DAY)
                .saturating_add(time_of_day),
        )
    }
}

impl Timestamp {
    /// RFC 3339 in UTC with microseconds (`2026-11-27T12:00:00.000000Z`), as the API writes
    /// instants; the bare microseconds where chrono cannot represent the instant.
    pub fn rfc3339(self) -> String {
        chrono::DateTime::from_timestamp_micros(self.micros)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            .unwrap_or_else(|| self.micros.to_string())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}us)", self.micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-27 was a Friday; 12:00 UTC.
    const FRIDAY_NOON: i64 = (20_784 * 86_400 + 12 * 3_600) * MICROS_PER_SECOND;

    #[test]
    fn weekdays_from_the_epoch() {
        assert_eq!(Timestamp::from_unix_micros(0).weekday(), Weekday::Thursday);
        assert_eq!(
            Timestamp::from_unix_micros(-1).weekday(),
            Weekday::Wednesday
        );
        assert_eq!(
            Timestamp::from_unix_micros(FRIDAY_NOON).weekday(),
            Weekday::Friday
        );
    }

    #[test]
    fn business_days_skip_weekends() {
        let friday = Timestamp::from_unix_micros(FRIDAY_NOON);
        let day = |n: i64| Timestamp::from_unix_micros(FRIDAY_NOON + n * MICROS_PER_DAY);
        assert_eq!(friday.add_business_days(0), friday);
        assert_eq!(friday.add_business_days(1), day(3)); // Monday noon
        assert_eq!(friday.add_business_days(3), day(5)); // Wednesday noon
        let saturday = day(1);
        let monday_midnight =
            Timestamp::from_unix_micros((FRIDAY_NOON / MICROS_PER_DAY + 3) * MICROS_PER_DAY);
        assert_eq!(saturday.add_business_days(0), monday_midnight);
        assert_eq!(saturday.add_business_days(3).weekday(), Weekday::Thursday);
        assert_eq!(friday.seconds_until(day(1)), 86_400);
    }
}
