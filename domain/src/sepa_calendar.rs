//! When a SEPA credit transfer can be executed: on a TARGET2 business day, at or after the next
//! cut-off.
//!
//! - TARGET2 (the euro area's settlement system, which SEPA credit transfers settle through) is
//!   closed on Saturdays and Sundays, 1 January, Good Friday, Easter Monday, 1 May, 25 December
//!   and 26 December (the ECB's TARGET2 calendar). A bank executes no euro transfer on those
//!   days.
//! - A file handed to the bank before the cut-off ([`CUTOFF_HOUR_UTC`]:00 UTC) of a TARGET2
//!   business day can be executed that day; after it, or on a closing day, the earliest
//!   execution date is the next TARGET2 business day. Banks' own cut-offs for SEPA credit
//!   transfers fall in the early afternoon CET; 12:00 UTC is before all the common ones.

use chrono::{Datelike, Days, NaiveDate, Timelike, Weekday};

use crate::time::Timestamp;

/// The hour (UTC) after which a file is too late for execution the same day.
pub const CUTOFF_HOUR_UTC: u32 = 12;

/// Easter Sunday of `year` (Gregorian, the anonymous algorithm of Meeus, Jones and Butcher).
pub fn easter_sunday(year: i32) -> Option<NaiveDate> {
    let a = year.rem_euclid(19);
    let b = year.div_euclid(100);
    let c = year.rem_euclid(100);
    let d = b.div_euclid(4);
    let e = b.rem_euclid(4);
    let f = (b + 8).div_euclid(25);
    let g = (b - f + 1).div_euclid(3);
    let h = (19 * a + b - d - g + 15).rem_euclid(30);
    let i = c.div_euclid(4);
    let k = c.rem_euclid(4);
    let l = (32 + 2 * e + 2 * i - h - k).rem_euclid(7);
    let m = (a + 11 * h + 22 * l).div_euclid(451);
    let month = (h + l - 7 * m + 114).div_euclid(31);
    let day = (h + l - 7 * m + 114).rem_euclid(31) + 1;
    NaiveDate::from_ymd_opt(year, u32::try_from(month).ok()?, u32::try_from(day).ok()?)
}

/// Whether TARGET2 is open on `date`.
pub fn is_target2_business_day(date: NaiveDate) -> bool {
    if matches!(date.weekday(), Weekday::Sat | Weekday::Sun) {
        return false;
    }
    let fixed = matches!(
        (date.month(), date.day()),
        (1, 1) | (5, 1) | (12, 25) | (12, 26)
    );
    let easter = easter_sunday(date.year())
        .is_some_and(|sunday| date == sunday - Days::new(2) || date == sunday + Days::new(1));
    !fixed && !easter
}

/// The first TARGET2 business day on or after `date`.
pub fn next_target2_business_day(date: NaiveDate) -> NaiveDate {
    let mut day = date;
    // At most four closing days run together (Good Friday to Easter Monday).
    for _ in 0..7 {
        if is_target2_business_day(day) {
            return day;
        }
        day = day + Days::new(1);
    }
    day
}

/// The earliest execution date of a file handed to the bank at `now`.
pub fn earliest_execution(now: Timestamp) -> NaiveDate {
    let at = chrono::DateTime::from_timestamp_micros(now.unix_micros()).unwrap_or_default();
    let today = at.date_naive();
    if is_target2_business_day(today) && at.hour() < CUTOFF_HOUR_UTC {
        today
    } else {
        next_target2_business_day(today + Days::new(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDate {
        text.parse().unwrap()
    }

    fn at(text: &str) -> Timestamp {
        Timestamp::from_unix_micros(
            chrono::DateTime::parse_from_rfc3339(text)
                .unwrap()
                .timestamp_micros(),
        )
    }

    #[test]
    fn easter_falls_where_the_calendars_say() {
        for (year, sunday) in [
            (2024, "2024-03-31"),
            (2025, "2025-04-20"),
            (2026, "2026-04-05"),
            (2027, "2027-03-28"),
            (2038, "2038-04-25"),
            (2008, "2008-03-23"),
        ] {
            assert_eq!(easter_sunday(year), Some(day(sunday)), "{year}");
        }
    }

    #[test]
    fn target2_closes_on_weekends_and_its_six_holidays() {
        for closed in [
            "2026-12-05", // a Saturday
            "2026-12-25",
            "2026-12-26",
            "2027-01-01",
            "2026-04-03", // Good Friday
            "2026-04-06", // Easter Monday
            "2026-05-01",
        ] {
            assert!(!is_target2_business_day(day(closed)), "{closed}");
        }
        for open in [
            "2026-12-04",
            "2026-12-24",
            "2026-12-28",
            "2026-04-07",
            "2026-11-02",
        ] {
            assert!(is_target2_business_day(day(open)), "{open}");
        }
    }

    #[test]
    fn the_earliest_execution_respects_the_cutoff() {
        // Friday before the cut-off: the same day; after it: Monday.
        assert_eq!(
            earliest_execution(at("2026-12-04T11:59:00Z")),
            day("2026-12-04")
        );
        assert_eq!(
            earliest_execution(at("2026-12-04T12:00:00Z")),
            day("2026-12-07")
        );
        // Christmas Eve after the cut-off: past Christmas, Boxing Day and the weekend.
        assert_eq!(
            earliest_execution(at("2026-12-24T15:00:00Z")),
            day("2026-12-28")
        );
        // A Saturday morning: Monday.
        assert_eq!(
            earliest_execution(at("2026-12-05T08:00:00Z")),
            day("2026-12-07")
        );
        // Thursday before Easter, late: past Good Friday to Easter Monday.
        assert_eq!(
            earliest_execution(at("2026-04-02T18:00:00Z")),
            day("2026-04-07")
        );
    }
}
