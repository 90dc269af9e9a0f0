//! Calendar periods in a provider's time zone: days, the week (Monday first) and the month,
//! each as the instants they start at. Earnings are summed over these.

use chrono::{Datelike, Days, LocalResult, NaiveDate, TimeZone};
use chrono_tz::Tz;

use crate::time::Timestamp;

/// Longest range of days one request may ask for.
pub const DAYS_MAX: i64 = 366;

/// Dates and instants accepted from outside are in these years (inclusive): nothing the platform
/// records is older, and no schedule reaches further.
pub const YEAR_MIN: i32 = 2000;
pub const YEAR_MAX: i32 = 2099;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    #[error("unknown time zone `{0}` (an IANA name such as Europe/Madrid)")]
    UnknownZone(String),
    #[error("`{0}` is not a date YYYY-MM-DD from {YEAR_MIN}-01-01 to {YEAR_MAX}-12-31")]
    BadDate(String),
    #[error(
        "`{0}` is not an RFC 3339 instant (2026-12-01T09:00:00Z) in the years {YEAR_MIN} to {YEAR_MAX}"
    )]
    BadInstant(String),
    #[error("the range must run forwards and span at most {DAYS_MAX} days")]
    BadRange,
}

pub fn zone(name: &str) -> Result<Tz, CalendarError> {
    name.parse::<Tz>()
        .map_err(|_| CalendarError::UnknownZone(name.chars().take(64).collect()))
}

/// A calendar date written `YYYY-MM-DD` (exactly: four-digit year, no sign), from
/// [`YEAR_MIN`] to [`YEAR_MAX`].
pub fn date(text: &str) -> Result<NaiveDate, CalendarError> {
    let bad = || CalendarError::BadDate(text.chars().take(32).collect());
    let shaped = text.len() == 10
        && text.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    if !shaped {
        return Err(bad());
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .filter(|d| (YEAR_MIN..=YEAR_MAX).contains(&d.year()))
        .ok_or_else(bad)
}

/// An RFC 3339 instant (`2026-12-01T09:00:00Z`, any offset) from [`YEAR_MIN`] to [`YEAR_MAX`].
pub fn instant(text: &str) -> Result<Timestamp, CalendarError> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .filter(|t| (YEAR_MIN..=YEAR_MAX).contains(&t.naive_utc().year()))
        .map(|t| Timestamp::from_unix_micros(t.timestamp_micros()))
        .ok_or_else(|| CalendarError::BadInstant(text.chars().take(40).collect()))
}

/// The first instant of `day` in `zone`. Where the day starts inside a daylight-saving gap (some
/// zones change at midnight), the first instant that exists.
pub fn day_start(zone: Tz, day: NaiveDate) -> Timestamp {
    let mut minutes = 0_u32;
    loop {
        let local = day.and_hms_opt(minutes / 60, minutes % 60, 0);
        let found = local.map(|l| zone.from_local_datetime(&l));
        match found {
            Some(LocalResult::Single(t)) | Some(LocalResult::Ambiguous(t, _)) => {
                return Timestamp::from_unix_micros(t.timestamp_micros());
            }
            Some(LocalResult::None) if minutes < 24 * 60 - 15 => minutes += 15,
            // Unreachable with real zones (no gap lasts a day); the UTC midnight then.
            _ => {
                return Timestamp::from_unix_micros(
                    day.and_hms_opt(0, 0, 0)
                        .map_or(0, |d| d.and_utc().timestamp_micros()),
                );
            }
        }
    }
}

/// The local date of an instant.
pub fn local_date(zone: Tz, at: Timestamp) -> NaiveDate {
    chrono::DateTime::from_timestamp_micros(at.unix_micros())
        .unwrap_or_default()
        .with_timezone(&zone)
        .date_naive()
}

/// The Monday of the week holding `at`, locally.
pub fn week_of(zone: Tz, at: Timestamp) -> NaiveDate {
    let today = local_date(zone, at);
    today - Days::new(u64::from(today.weekday().num_days_from_monday()))
}

/// The first day of the month holding `at`, locally.
pub fn month_of(zone: Tz, at: Timestamp) -> NaiveDate {
    let today = local_date(zone, at);
    today.with_day(1).unwrap_or(today)
}

/// The first day of the next month.
pub fn next_month(first: NaiveDate) -> NaiveDate {
    first
        .checked_add_months(chrono::Months::new(1))
        .unwrap_or(first)
}

/// The days `from..=to`, checked: forwards and at most [`DAYS_MAX`].
pub fn days(from: NaiveDate, to: NaiveDate) -> Result<Vec<NaiveDate>, CalendarError> {
    let span = (to - from).num_days();
    if !(0..DAYS_MAX).contains(&span) {
        return Err(CalendarError::BadRange);
    }
    Ok(from.iter_days().take(span as usize + 1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::from_unix_micros(
            chrono::DateTime::parse_from_rfc3339(text)
                .unwrap()
                .timestamp_micros(),
        )
    }

    #[test]
    fn periods_follow_the_local_calendar() {
        let madrid = zone("Europe/Madrid").unwrap();
        // 2026-03-29 is the spring change in Madrid: 23 hours long.
        let day = date("2026-03-29").unwrap();
        let next = date("2026-03-30").unwrap();
        assert_eq!(day_start(madrid, day), at("2026-03-28T23:00:00Z"));
        assert_eq!(
            day_start(madrid, next).unix_micros() - day_start(madrid, day).unix_micros(),
            23 * 3_600 * 1_000_000
        );
        // Sunday 23:30 UTC is already Monday in Madrid.
        let late = at("2026-11-29T23:30:00Z");
        assert_eq!(week_of(madrid, late), date("2026-11-30").unwrap());
        assert_eq!(
            week_of(zone("UTC").unwrap(), late),
            date("2026-11-23").unwrap()
        );
        assert_eq!(
            month_of(madrid, at("2026-11-30T23:30:00Z")),
            date("2026-12-01").unwrap()
        );
        assert_eq!(
            next_month(date("2026-12-01").unwrap()),
            date("2027-01-01").unwrap()
        );
        // A zone whose day starts in a gap: Santiago skipped 2022-09-11T00:00.
        let santiago = zone("America/Santiago").unwrap();
        assert_eq!(
            day_start(santiago, date("2022-09-11").unwrap()),
            at("2022-09-11T01:00:00-03:00")
        );
        assert_eq!(days(day, next).unwrap().len(), 2);
        assert_eq!(days(next, day), Err(CalendarError::BadRange));
        assert!(zone("Mars/Olympus").is_err());
        assert!(date("2026-02-30").is_err());
    }
}
