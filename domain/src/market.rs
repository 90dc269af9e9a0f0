//! The marketplace rules: hourly prices, availability schedules in the provider's time zone,
//! announced maintenance, delisting, which GPUs are listed at an instant, and the rank formula.
//!
//! Visibility is a function of the events and an instant: nothing runs at window boundaries.

use crate::codes::ErrorCode;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::money::{MoneyError, Usdc};
use crate::onboarding::{Availability, Tier, WeeklyWindow};
use crate::time::{MICROS_PER_DAY, Timestamp, Weekday};

/// Lowest hourly price per GPU: 0.01 USDC.
pub const PRICE_MICRO_USDC_MIN: i64 = 10_000;
/// Highest hourly price per GPU: 100 USDC (an H100 rents for about 2 to 4).
pub const PRICE_MICRO_USDC_MAX: i64 = 100_000_000;
/// A price may take effect at most this far in the future.
pub const PRICE_EFFECTIVE_AHEAD_MAX_DAYS: i64 = 90;
/// Announced maintenance lasts at most this long, and starts at most this far ahead.
pub const MAINTENANCE_DAYS_MAX: i64 = 14;
pub const MAINTENANCE_AHEAD_MAX_DAYS: i64 = 180;
pub const REASON_CHARS_MAX: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarketRejection {
    #[error("the price must be a decimal number of USDC with at most 6 decimals: {0}")]
    PriceNotANumber(String),
    #[error("the price must be more than zero")]
    PriceNotPositive,
    #[error("the price must be from 0.010000 to 100.000000 USDC per GPU per hour")]
    PriceOutOfRange,
    #[error(
        "the price may take effect at most {PRICE_EFFECTIVE_AHEAD_MAX_DAYS} days ahead, and not in the past"
    )]
    EffectiveOutOfRange,
    #[error(
        "`{0}` is not a model this provider offers (declared in its application or registered)"
    )]
    ModelNotOffered(String),
    #[error("`{0}` is not an IANA time zone")]
    UnknownTimeZone(String),
    #[error("the schedule is invalid: {0}")]
    InvalidSchedule(String),
    #[error(
        "maintenance must end after it starts, last at most {MAINTENANCE_DAYS_MAX} days and start within {MAINTENANCE_AHEAD_MAX_DAYS} days"
    )]
    InvalidMaintenance,
    #[error("the reason must be 1 to {REASON_CHARS_MAX} characters")]
    InvalidReason,
    #[error("no such maintenance, or it already ended or was cancelled")]
    NoSuchMaintenance,
    #[error("not a machine of this provider")]
    UnknownMachine,
    #[error("GPU {0} is already delisted")]
    AlreadyDelisted(String),
    #[error("GPU {0} is not delisted")]
    NotDelisted(String),
}

impl MarketRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            MarketRejection::PriceNotANumber(_) => ErrorCode::InvalidPrice,
            MarketRejection::PriceNotPositive => ErrorCode::PriceNotPositive,
            MarketRejection::PriceOutOfRange => ErrorCode::PriceOutOfRange,
            MarketRejection::EffectiveOutOfRange => ErrorCode::InvalidEffectiveAt,
            MarketRejection::ModelNotOffered(_) => ErrorCode::ModelNotOffered,
            MarketRejection::UnknownTimeZone(_) => ErrorCode::UnknownTimeZone,
            MarketRejection::InvalidSchedule(_) => ErrorCode::InvalidSchedule,
            MarketRejection::InvalidMaintenance => ErrorCode::InvalidMaintenance,
            MarketRejection::InvalidReason => ErrorCode::InvalidReason,
            MarketRejection::NoSuchMaintenance => ErrorCode::NoSuchMaintenance,
            MarketRejection::UnknownMachine => ErrorCode::UnknownMachine,
            MarketRejection::AlreadyDelisted(_) => ErrorCode::AlreadyDelisted,
            MarketRejection::NotDelisted(_) => ErrorCode::NotDelisted,
        }
    }
}

/// Parses an hourly price in USDC (`"2.5"`, `"2.500000"`): positive, at most 6 decimals, within
/// the bounds. Never rounds.
pub fn parse_price(text: &str) -> Result<Usdc, MarketRejection> {
    let price: Usdc = text
        .trim()
        .parse()
        .map_err(|e: MoneyError| MarketRejection::PriceNotANumber(e.to_string()))?;
    if !price.is_positive() {
        return Err(MarketRejection::PriceNotPositive);
    }
    if !(PRICE_MICRO_USDC_MIN..=PRICE_MICRO_USDC_MAX).contains(&price.micros()) {
        return Err(MarketRejection::PriceOutOfRange);
    }
    Ok(price)
}

/// `market.price_set`: from `effective_at` on, the provider rents GPUs of `model_id` at
/// `price_micro_usdc` per GPU per hour. A rental keeps the price in force when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSet {
    pub provider_id: Uuid,
    pub model_id: String,
    pub price_micro_usdc: Usdc,
    pub effective_at: Timestamp,
    pub set_at: Timestamp,
    pub set_by: String,
}

/// Checks a price change: the price, and an effective time from `now` to 90 days ahead.
pub fn set_price(
    provider_id: Uuid,
    model_id: &str,
    price: &str,
    effective_at: Option<Timestamp>,
    now: Timestamp,
    set_by: &str,
) -> Result<PriceSet, MarketRejection> {
    let price = parse_price(price)?;
    let effective_at = effective_at.unwrap_or(now);
    // A second of slack for clocks between a client and the server.
    if effective_at.unix_micros() < now.unix_micros() - 1_000_000
        || effective_at.unix_micros()
            > now.unix_micros() + PRICE_EFFECTIVE_AHEAD_MAX_DAYS * MICROS_PER_DAY
    {
        return Err(MarketRejection::EffectiveOutOfRange);
    }
    Ok(PriceSet {
        provider_id,
        model_id: model_id.to_owned(),
        price_micro_usdc: price,
        effective_at: effective_at.max(now),
        set_at: now,
        set_by: set_by.to_owned(),
    })
}

/// One model's price history, in log order; the price in force at `t` is the last one set that
/// took effect at or before `t`.
pub fn price_at<'a>(history: impl IntoIterator<Item = &'a PriceSet>, t: Timestamp) -> Option<Usdc> {
    history
        .into_iter()
        .filter(|p| p.effective_at <= t)
        .max_by_key(|p| p.effective_at)
        .map(|p| p.price_micro_usdc)
}

/// `market.availability_set`: when the provider's GPUs may be listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvailabilitySet {
    pub provider_id: Uuid,
    pub availability: Availability,
    pub set_at: Timestamp,
}

/// Most windows in a weekly schedule.
pub const WEEKLY_WINDOWS_MAX: usize = 50;

/// Checks a schedule: a known IANA zone, 1 to 50 windows, each inside one day with its start
/// before its end, none overlapping another on the same day.
pub fn validate_availability(availability: &Availability) -> Result<(), MarketRejection> {
    let Availability::Weekly { time_zone, windows } = availability else {
        return Ok(());
    };
    if time_zone.parse::<chrono_tz::Tz>().is_err() {
        return Err(MarketRejection::UnknownTimeZone(
            time_zone.chars().take(64).collect(),
        ));
    }
    if windows.is_empty() || windows.len() > WEEKLY_WINDOWS_MAX {
        return Err(MarketRejection::InvalidSchedule(format!(
            "1 to {WEEKLY_WINDOWS_MAX} windows (or always_on)"
        )));
    }
    for (i, window) in windows.iter().enumerate() {
        if window.start_minute >= window.end_minute || window.end_minute > 1_440 {
            return Err(MarketRejection::InvalidSchedule(format!(
                "window {i} is inverted or leaves the day: start before end, minutes 0 to 1440"
            )));
        }
        if windows[..i].iter().any(|other| {
            other.day == window.day
                && other.start_minute < window.end_minute
                && window.start_minute < other.end_minute
        }) {
            return Err(MarketRejection::InvalidSchedule(format!(
                "window {i} overlaps an earlier window on the same day"
            )));
        }
    }
    Ok(())
}

/// Whether the schedule lists GPUs at instant `t`: the local wall-clock time at `t` in the
/// schedule's zone falls inside a window of that local weekday. Across daylight-saving changes
/// this follows the wall clock: on a spring-forward day the skipped hour does not exist, so a
/// window spanning it is an hour shorter in real time; on a fall-back day the repeated hour is
/// inside a window both times it occurs. An unknown zone (which validation refuses) lists nothing.
pub fn available_at(availability: &Availability, t: Timestamp) -> bool {
    let Availability::Weekly { time_zone, windows } = availability else {
        return true;
    };
    let Ok(zone) = time_zone.parse::<chrono_tz::Tz>() else {
        return false;
    };
    let (weekday, minute) = local_weekday_minute(zone, t);
    windows.iter().any(|w: &WeeklyWindow| {
        w.day == weekday && w.start_minute <= minute && minute < w.end_minute
    })
}

/// The first instant after `now`, within eight days, at which [`available_at`] changes, if any.
/// Candidates are the windows' local starts and ends over the coming days (a local time that a
/// daylight-saving gap skips is taken an hour later, a repeated one at its first occurrence);
/// back-to-back windows that do not change anything are skipped.
pub fn next_availability_change(availability: &Availability, now: Timestamp) -> Option<Timestamp> {
    use chrono::TimeZone;
    let Availability::Weekly { time_zone, windows } = availability else {
        return None;
    };
    let zone: chrono_tz::Tz = time_zone.parse().ok()?;
    let utc = chrono::DateTime::from_timestamp_micros(now.unix_micros())?;
    let today = utc.with_timezone(&zone).date_naive();
    let mut candidates: Vec<Timestamp> = Vec::new();
    for offset in -1..8 {
        let date = today + chrono::Duration::days(offset);
        let weekday =
            Weekday::ALL[chrono::Datelike::weekday(&date).num_days_from_monday() as usize];
        for window in windows.iter().filter(|w| w.day == weekday) {
            for minute in [window.start_minute, window.end_minute] {
                let local =
                    date.and_hms_opt(0, 0, 0)? + chrono::Duration::minutes(i64::from(minute));
                let instant = zone.from_local_datetime(&local).earliest().or_else(|| {
                    zone.from_local_datetime(&(local + chrono::Duration::hours(1)))
                        .earliest()
                })?;
                let t = Timestamp::from_unix_micros(instant.timestamp_micros());
                if t > now {
                    candidates.push(t);
                }
            }
        }
    }
    candidates.sort();
    candidates.dedup();
    candidates.into_iter().find(|t| {
        available_at(
            availability,
            Timestamp::from_unix_micros(t.unix_micros() - 1),
        ) != available_at(availability, *t)
    })
}

/// The intervals `[from, until)` within `[start, end)` in which the schedule lists GPUs, as
/// instants: each real boundary found by [`next_availability_change`], so a window across a
/// daylight-saving change is as long in real time as the wall clock makes it. Always on (or a
/// schedule open every minute) is one interval; at most `intervals_max` are answered.
pub fn open_intervals(
    availability: &Availability,
    start: Timestamp,
    end: Timestamp,
    intervals_max: usize,
) -> Vec<(Timestamp, Timestamp)> {
    let mut intervals = Vec::new();
    let mut at = start;
    let mut open = available_at(availability, start);
    while at < end && intervals.len() < intervals_max {
        let change = next_availability_change(availability, at).map_or(end, |t| t.min(end));
        if open {
            intervals.push((at, change));
        }
        at = change;
        open = !open;
    }
    intervals
}

fn local_weekday_minute(zone: chrono_tz::Tz, t: Timestamp) -> (Weekday, u16) {
    use chrono::{Datelike, Timelike};
    let utc = chrono::DateTime::from_timestamp_micros(t.unix_micros()).unwrap_or_default();
    let local = utc.with_timezone(&zone);
    let weekday = Weekday::ALL[local.weekday().num_days_from_monday() as usize];
    let minute = u16::try_from(local.hour() * 60 + local.minute()).unwrap_or(0);
    (weekday, minute)
}

/// `market.maintenance_announced`: the provider's GPUs (all, or one machine's) are hidden from
/// `from` to `until`, with a reason. Separate from the weekly schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceAnnounced {
    pub maintenance_id: Uuid,
    pub provider_id: Uuid,
    /// `None`: every machine of the provider.
    pub machine_id: Option<Uuid>,
    pub from: Timestamp,
    pub until: Timestamp,
    pub reason: String,
    pub announced_at: Timestamp,
}

/// `market.maintenance_cancelled`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceCancelled {
    pub maintenance_id: Uuid,
    pub provider_id: Uuid,
    pub cancelled_at: Timestamp,
}

fn clean_reason(reason: &str) -> Result<String, MarketRejection> {
    let reason = reason.trim();
    if reason.is_empty()
        || reason.chars().count() > REASON_CHARS_MAX
        || reason.chars().any(|c| c.is_control() && c != '\n')
    {
        return Err(MarketRejection::InvalidReason);
    }
    Ok(reason.to_owned())
}

/// Checks an announcement: it ends after it starts and after `now`, lasts at most 14 days and
/// starts within 180 days.
pub fn announce_maintenance(
    maintenance_id: Uuid,
    provider_id: Uuid,
    machine_id: Option<Uuid>,
    from: Timestamp,
    until: Timestamp,
    reason: &str,
    now: Timestamp,
) -> Result<MaintenanceAnnounced, MarketRejection> {
    let length = until.unix_micros() - from.unix_micros();
    if length <= 0
        || until <= now
        || length > MAINTENANCE_DAYS_MAX * MICROS_PER_DAY
        || from.unix_micros() > now.unix_micros() + MAINTENANCE_AHEAD_MAX_DAYS * MICROS_PER_DAY
    {
        return Err(MarketRejection::InvalidMaintenance);
    }
    Ok(MaintenanceAnnounced {
        maintenance_id,
        provider_id,
        machine_id,
        from,
        until,
        reason: clean_reason(reason)?,
        announced_at: now,
    })
}

/// `market.gpu_delisted` / `market.gpu_relisted`: an operator (later, the benchmark rules) takes
/// a GPU off the marketplace, or puts it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuListingChanged {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub reason: String,
    pub at: Timestamp,
    pub by: String,
}

pub fn change_listing(
    gpu_uuid: &str,
    provider_id: Uuid,
    reason: &str,
    at: Timestamp,
    by: &str,
) -> Result<GpuListingChanged, MarketRejection> {
    Ok(GpuListingChanged {
        gpu_uuid: gpu_uuid.to_owned(),
        provider_id,
        reason: clean_reason(reason)?,
        at,
        by: by.to_owned(),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarketEvent {
    PriceSet(PriceSet),
    AvailabilitySet(AvailabilitySet),
    MaintenanceAnnounced(MaintenanceAnnounced),
    MaintenanceCancelled(MaintenanceCancelled),
    GpuDelisted(GpuListingChanged),
    GpuRelisted(GpuListingChanged),
}

impl MarketEvent {
    /// The provider whose market stream (`provider_market-{provider_id}`) holds the event.
    pub fn provider_id(&self) -> Uuid {
        match self {
            MarketEvent::PriceSet(e) => e.provider_id,
            MarketEvent::AvailabilitySet(e) => e.provider_id,
            MarketEvent::MaintenanceAnnounced(e) => e.provider_id,
            MarketEvent::MaintenanceCancelled(e) => e.provider_id,
            MarketEvent::GpuDelisted(e) | MarketEvent::GpuRelisted(e) => e.provider_id,
        }
    }
}

/// What a decision on one provider's market needs to know, as of its stream's version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderMarket {
    pub provider_id: Uuid,
    /// Models the provider may price: catalog models its approved application declares or its
    /// machines have.
    pub offered_models: Vec<String>,
    /// The provider's machines.
    pub machines: Vec<Uuid>,
    /// Announced maintenance that is neither cancelled nor over.
    pub maintenance: Vec<MaintenanceAnnounced>,
    /// The provider's GPUs that are delisted now.
    pub delisted: Vec<String>,
}

/// A change to one provider's market. The caller has checked who may ask; `by` is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarketCommand {
    SetPrice {
        model_id: String,
        /// As the provider wrote it (parsed here, never rounded).
        price: String,
        effective_at: Option<Timestamp>,
        by: String,
    },
    SetAvailability {
        availability: Availability,
    },
    AnnounceMaintenance {
        maintenance_id: Uuid,
        machine_id: Option<Uuid>,
        from: Timestamp,
        until: Timestamp,
        reason: String,
    },
    CancelMaintenance {
        maintenance_id: Uuid,
    },
    /// Take a GPU of this provider off the marketplace (`delist: true`) or put it back.
    ChangeListing {
        gpu_uuid: String,
        delist: bool,
        reason: String,
        by: String,
    },
}

/// Decides a market command against the provider's market at `now`: the events to append to
/// its stream, or why not. Pure: the same state, command and instant give the same answer.
pub fn decide(
    state: &ProviderMarket,
    command: MarketCommand,
    now: Timestamp,
) -> Result<Vec<MarketEvent>, MarketRejection> {
    let provider_id = state.provider_id;
    let event = match command {
        MarketCommand::SetPrice {
            model_id,
            price,
            effective_at,
            by,
        } => {
            if !state.offered_models.contains(&model_id) {
                return Err(MarketRejection::ModelNotOffered(
                    model_id.chars().take(64).collect(),
                ));
            }
            MarketEvent::PriceSet(set_price(
                provider_id,
                &model_id,
                &price,
                effective_at,
                now,
                &by,
            )?)
        }
        MarketCommand::SetAvailability { availability } => {
            validate_availability(&availability)?;
            MarketEvent::AvailabilitySet(AvailabilitySet {
                provider_id,
                availability,
                set_at: now,
            })
        }
        MarketCommand::AnnounceMaintenance {
            maintenance_id,
            machine_id,
            from,
            until,
            reason,
        } => {
            if machine_id.is_some_and(|m| !state.machines.contains(&m)) {
                return Err(MarketRejection::UnknownMachine);
            }
            MarketEvent::MaintenanceAnnounced(announce_maintenance(
                maintenance_id,
                provider_id,
                machine_id,
                from,
                until,
                &reason,
                now,
            )?)
        }
        MarketCommand::CancelMaintenance { maintenance_id } => {
            if !state
                .maintenance
                .iter()
                .any(|m| m.maintenance_id == maintenance_id && m.until > now)
            {
                return Err(MarketRejection::NoSuchMaintenance);
            }
            MarketEvent::MaintenanceCancelled(MaintenanceCancelled {
                maintenance_id,
                provider_id,
                cancelled_at: now,
            })
        }
        MarketCommand::ChangeListing {
            gpu_uuid,
            delist,
            reason,
            by,
        } => {
            let delisted = state.delisted.contains(&gpu_uuid);
            match (delist, delisted) {
                (true, true) => return Err(MarketRejection::AlreadyDelisted(gpu_uuid)),
                (false, false) => return Err(MarketRejection::NotDelisted(gpu_uuid)),
                _ => {}
            }
            let changed = change_listing(&gpu_uuid, provider_id, &reason, now, &by)?;
            if delist {
                MarketEvent::GpuDelisted(changed)
            } else {
                MarketEvent::GpuRelisted(changed)
            }
        }
    };
    Ok(vec![event])
}

/// Why a GPU is not listed at an instant (all that apply, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Hidden {
    /// The provider has no approved application.
    ProviderNotApproved,
    /// Simulated GPUs are listed only by a server in development mode.
    Simulated,
    Offline,
    /// NVML no longer answers for the GPU.
    GpuLost,
    OutsideAvailability,
    Maintenance,
    Delisted,
    /// Its latest benchmark verdict failed: off the marketplace until a re-test passes (or an
    /// admin overrides it).
    BenchmarkFailed,
    /// A renter has it.
    Rented,
    /// The GPU is not a catalog model, so it has no market and no price.
    NotACatalogModel,
    NoPrice,
}

/// The rank of a listing, in points (integers; higher ranks first), with every input shown.
///
/// `rank = uptime + price + tier + commitment + reliability + performance`, at most 10,000:
/// - uptime, up to 4,000: `4,000 x uptime over the last 30 days` (platform outages excluded);
/// - price, up to 3,000: `3,000 x clamp(1.5 - price / median, 0, 1)`, where the median is over
///   the listed GPUs of the same model and region; at the median 1,500, at half of it or less
///   3,000, at 1.5 times it or more 0;
/// - tier: Enterprise 1,500 (premium placement), Community 0;
/// - commitment, up to 1,500: `1,500 x min(months, 24) / 24`;
/// - reliability and performance: 0 until those scores exist; the breakdown says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RankBreakdown {
    pub uptime_bp: u32,
    pub uptime_points: u32,
    pub price_micro_usdc: i64,
    pub median_price_micro_usdc: i64,
    pub price_points: u32,
    pub tier_points: u32,
    pub commitment_months: u32,
    pub commitment_points: u32,
    pub reliability_points: u32,
    pub performance_points: u32,
    pub total: u32,
}

pub const RANK_UPTIME_MAX: u32 = 4_000;
pub const RANK_PRICE_MAX: u32 = 3_000;
pub const RANK_ENTERPRISE: u32 = 1_500;
pub const RANK_COMMITMENT_MAX: u32 = 1_500;
pub const COMMITMENT_MONTHS_FULL: u32 = 24;

/// Ranks one listing. `uptime_bp` is uptime in basis points (10,000 = always up). Integer
/// arithmetic, rounding down at each step (documented in `docs/marketplace.md`).
pub fn rank(
    uptime_bp: u32,
    price: Usdc,
    median: Usdc,
    tier: Tier,
    commitment_months: u32,
) -> RankBreakdown {
    let uptime_bp = uptime_bp.min(10_000);
    let uptime_points = RANK_UPTIME_MAX * uptime_bp / 10_000;
    // 3,000 x (1.5 - p/m) = 4,500 - 3,000 p / m, clamped to [0, 3,000].
    let price_points = if median.micros() <= 0 {
        RANK_PRICE_MAX / 2
    } else {
        let scaled =
            i128::from(RANK_PRICE_MAX) * i128::from(price.micros()) / i128::from(median.micros());
        let points = i128::from(RANK_PRICE_MAX) * 3 / 2 - scaled;
        u32::try_from(points.clamp(0, i128::from(RANK_PRICE_MAX))).unwrap_or(0)
    };
    let tier_points = match tier {
        Tier::Enterprise => RANK_ENTERPRISE,
        Tier::Community => 0,
    };
    let commitment_points = RANK_COMMITMENT_MAX * commitment_months.min(COMMITMENT_MONTHS_FULL)
        / COMMITMENT_MONTHS_FULL;
    RankBreakdown {
        uptime_bp,
        uptime_points,
        price_micro_usdc: price.micros(),
        median_price_micro_usdc: median.micros(),
        price_points,
        tier_points,
        commitment_months,
        commitment_points,
        reliability_points: 0,
        performance_points: 0,
        total: uptime_points + price_points + tier_points + commitment_points,
    }
}

/// The median of `prices` (the lower middle one for an even count); `None` when empty.
pub fn median(prices: &mut [i64]) -> Option<i64> {
    if prices.is_empty() {
        return None;
    }
    prices.sort_unstable();
    Some(prices[(prices.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> Timestamp {
        Timestamp::from_unix_micros(
            chrono::DateTime::parse_from_rfc3339(text)
                .unwrap()
                .timestamp_micros(),
        )
    }

    fn weekly(zone: &str, windows: &[(Weekday, u16, u16)]) -> Availability {
        Availability::Weekly {
            time_zone: zone.to_owned(),
            windows: windows
                .iter()
                .map(|&(day, start_minute, end_minute)| WeeklyWindow {
                    day,
                    start_minute,
                    end_minute,
                })
                .collect(),
        }
    }

    #[test]
    fn prices_are_exact_positive_and_bounded() {
        assert_eq!(parse_price("2.5").unwrap().micros(), 2_500_000);
        assert_eq!(parse_price("0.01").unwrap().micros(), 10_000);
        assert_eq!(parse_price("100").unwrap().micros(), 100_000_000);
        for bad in ["0", "-1", "0.009999", "100.000001", "1e3", "abc", ""] {
            assert!(parse_price(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            parse_price("2.1234567"),
            Err(MarketRejection::PriceNotANumber(_))
        ));
    }

    #[test]
    fn the_price_in_force_is_the_last_that_took_effect() {
        let now = utc("2026-03-01T12:00:00Z");
        let p = Uuid::nil();
        let first = set_price(p, "h100-80gb", "2.00", None, now, "t").unwrap();
        let later = set_price(
            p,
            "h100-80gb",
            "3.00",
            Some(utc("2026-03-02T00:00:00Z")),
            now,
            "t",
        )
        .unwrap();
        let history = [first, later];
        assert_eq!(price_at(&history, utc("2026-03-01T11:59:59Z")), None);
        assert_eq!(price_at(&history, now).unwrap().micros(), 2_000_000);
        assert_eq!(
            price_at(&history, utc("2026-03-01T23:59:59Z"))
                .unwrap()
                .micros(),
            2_000_000
        );
        assert_eq!(
            price_at(&history, utc("2026-03-02T00:00:00Z"))
                .unwrap()
                .micros(),
            3_000_000
        );
        assert_eq!(
            set_price(
                p,
                "h100-80gb",
                "2",
                Some(utc("2026-02-28T00:00:00Z")),
                now,
                "t"
            ),
            Err(MarketRejection::EffectiveOutOfRange)
        );
    }

    #[test]
    fn schedules_refuse_unknown_zones_and_bad_windows() {
        use Weekday::*;
        assert!(validate_availability(&weekly("Europe/Madrid", &[(Monday, 480, 1200)])).is_ok());
        assert_eq!(
            validate_availability(&weekly("Europe/Atlantis", &[(Monday, 480, 1200)])),
            Err(MarketRejection::UnknownTimeZone(
                "Europe/Atlantis".to_owned()
            ))
        );
        for bad in [
            weekly("UTC", &[(Monday, 600, 600)]),
            weekly("UTC", &[(Monday, 700, 600)]),
            weekly("UTC", &[(Monday, 0, 1441)]),
            weekly("UTC", &[(Monday, 0, 600), (Monday, 599, 700)]),
            weekly("UTC", &[]),
        ] {
            assert!(
                matches!(
                    validate_availability(&bad),
                    Err(MarketRejection::InvalidSchedule(_))
                ),
                "{bad:?}"
            );
        }
        // Back to back is not overlapping.
        assert!(
            validate_availability(&weekly("UTC", &[(Monday, 0, 600), (Monday, 600, 700)])).is_ok()
        );
    }

    #[test]
    fn windows_follow_the_wall_clock_across_daylight_saving_changes() {
        use Weekday::*;
        // Madrid: CET (UTC+1) until 2026-03-29 02:00 local, then CEST (UTC+2); back on
        // 2026-10-25 03:00 local. Both are Sundays.
        let s = weekly(
            "Europe/Madrid",
            &[(Sunday, 0, 360), (Saturday, 480, 1200), (Monday, 480, 1200)],
        );
        // Saturday before the change: 08:00 local is 07:00 UTC.
        assert!(!available_at(&s, utc("2026-03-28T06:59:59Z")));
        assert!(available_at(&s, utc("2026-03-28T07:00:00Z")));
        assert!(available_at(&s, utc("2026-03-28T18:59:59Z")));
        assert!(!available_at(&s, utc("2026-03-28T19:00:00Z")));
        // Sunday 00:00-06:00 local on the spring-forward day: 23:00 UTC to 04:00 UTC, five real
        // hours (02:00-03:00 local does not exist).
        assert!(!available_at(&s, utc("2026-03-28T22:59:59Z")));
        assert!(available_at(&s, utc("2026-03-28T23:00:00Z")));
        assert!(available_at(&s, utc("2026-03-29T00:59:59Z"))); // 01:59:59 CET
        assert!(available_at(&s, utc("2026-03-29T01:00:00Z"))); // 03:00:00 CEST
        assert!(available_at(&s, utc("2026-03-29T03:59:59Z"))); // 05:59:59 CEST
        assert!(!available_at(&s, utc("2026-03-29T04:00:00Z"))); // 06:00 CEST
        // Monday after: 08:00 CEST is 06:00 UTC.
        assert!(!available_at(&s, utc("2026-03-30T05:59:59Z")));
        assert!(available_at(&s, utc("2026-03-30T06:00:00Z")));
        // Fall back: Sunday 00:00-06:00 local is 22:00 UTC Saturday to 05:00 UTC, seven real
        // hours; the repeated 02:00-03:00 is inside both times.
        assert!(!available_at(&s, utc("2026-10-24T21:59:59Z")));
        assert!(available_at(&s, utc("2026-10-24T22:00:00Z")));
        assert!(available_at(&s, utc("2026-10-25T00:30:00Z"))); // 02:30 CEST
        assert!(available_at(&s, utc("2026-10-25T01:30:00Z"))); // 02:30 CET
        assert!(available_at(&s, utc("2026-10-25T04:59:59Z")));
        assert!(!available_at(&s, utc("2026-10-25T05:00:00Z")));
        // Always on is always on.
        assert!(available_at(
            &Availability::AlwaysOn,
            utc("2026-10-25T01:30:00Z")
        ));
    }

    #[test]
    fn the_next_change_is_the_next_real_boundary() {
        use Weekday::*;
        let s = weekly(
            "Europe/Madrid",
            &[(Saturday, 480, 1440), (Sunday, 0, 360), (Monday, 480, 1200)],
        );
        // Saturday 08:00 CET opens; Saturday 24:00 runs into Sunday 00:00 (no change); Sunday
        // 06:00 CEST (after the spring-forward) closes.
        assert_eq!(
            next_availability_change(&s, utc("2026-03-28T06:00:00Z")),
            Some(utc("2026-03-28T07:00:00Z"))
        );
        assert_eq!(
            next_availability_change(&s, utc("2026-03-28T07:00:00Z")),
            Some(utc("2026-03-29T04:00:00Z"))
        );
        assert_eq!(
            next_availability_change(&s, utc("2026-03-29T04:00:00Z")),
            Some(utc("2026-03-30T06:00:00Z"))
        );
        // Every minute of the week: never changes.
        let always = weekly("UTC", &Weekday::ALL.map(|d| (d, 0, 1440)));
        assert_eq!(
            next_availability_change(&always, utc("2026-03-28T06:00:00Z")),
            None
        );
        assert_eq!(
            next_availability_change(&Availability::AlwaysOn, utc("2026-03-28T06:00:00Z")),
            None
        );
        // It agrees with a minute-by-minute scan over a week around the change.
        let mut t = utc("2026-03-27T00:00:00Z");
        let end = utc("2026-04-03T00:00:00Z");
        while t < end {
            let next = next_availability_change(&s, t).unwrap();
            let mut scan =
                Timestamp::from_unix_micros((t.unix_micros() / 60_000_000 + 1) * 60_000_000);
            while available_at(&s, scan) == available_at(&s, t) {
                scan = Timestamp::from_unix_micros(scan.unix_micros() + 60_000_000);
            }
            assert_eq!(next, scan, "from {t:?}");
            t = next;
        }
    }

    #[test]
    fn open_intervals_follow_the_wall_clock_across_daylight_saving() {
        use Weekday::*;
        let s = weekly(
            "Europe/Madrid",
            &[(Saturday, 480, 1440), (Sunday, 0, 360), (Monday, 480, 1200)],
        );
        // Saturday 08:00 CET to Sunday 06:00 CEST is 21 real hours (the night loses one);
        // Monday 08:00-20:00 CEST.
        assert_eq!(
            open_intervals(
                &s,
                utc("2026-03-27T00:00:00Z"),
                utc("2026-04-01T00:00:00Z"),
                10
            ),
            vec![
                (utc("2026-03-28T07:00:00Z"), utc("2026-03-29T04:00:00Z")),
                (utc("2026-03-30T06:00:00Z"), utc("2026-03-30T18:00:00Z")),
            ]
        );
        // Starting inside a window, the first interval starts at the start asked for; the
        // bound cuts the answer.
        assert_eq!(
            open_intervals(
                &s,
                utc("2026-03-28T10:00:00Z"),
                utc("2026-04-01T00:00:00Z"),
                1
            ),
            vec![(utc("2026-03-28T10:00:00Z"), utc("2026-03-29T04:00:00Z"))]
        );
        assert_eq!(
            open_intervals(
                &Availability::AlwaysOn,
                utc("2026-03-27T00:00:00Z"),
                utc("2026-04-01T00:00:00Z"),
                10
            ),
            vec![(utc("2026-03-27T00:00:00Z"), utc("2026-04-01T00:00:00Z"))]
        );
    }

    #[test]
    fn a_whole_week_of_minutes_matches_the_schedule() {
        use Weekday::*;
        // New York, across the 2026-03-08 change: every minute of that week is listed exactly
        // when its local time is inside Mon-Fri 09:00-17:00 or Sunday 01:00-04:00.
        let s = weekly(
            "America/New_York",
            &[
                (Monday, 540, 1020),
                (Tuesday, 540, 1020),
                (Wednesday, 540, 1020),
                (Thursday, 540, 1020),
                (Friday, 540, 1020),
                (Sunday, 60, 240),
            ],
        );
        let start = utc("2026-03-07T05:00:00Z").unix_micros();
        let mut listed_minutes = 0;
        for minute in 0..(7 * 1_440) {
            let t = Timestamp::from_unix_micros(start + minute * 60_000_000);
            if available_at(&s, t) {
                listed_minutes += 1;
            }
        }
        // Five 8-hour days, and a Sunday window that lost its 02:00-03:00 hour.
        assert_eq!(listed_minutes, 5 * 480 + 120);
    }

    #[test]
    fn maintenance_must_be_a_real_window_with_a_reason() {
        let now = utc("2026-03-01T00:00:00Z");
        let ok = announce_maintenance(
            Uuid::nil(),
            Uuid::nil(),
            None,
            now,
            utc("2026-03-01T04:00:00Z"),
            "PSU swap",
            now,
        );
        assert!(ok.is_ok());
        for (from, until) in [
            ("2026-03-01T04:00:00Z", "2026-03-01T02:00:00Z"),
            ("2026-02-27T00:00:00Z", "2026-02-28T00:00:00Z"),
            ("2026-03-01T00:00:00Z", "2026-03-16T00:00:01Z"),
        ] {
            assert_eq!(
                announce_maintenance(
                    Uuid::nil(),
                    Uuid::nil(),
                    None,
                    utc(from),
                    utc(until),
                    "x",
                    now
                ),
                Err(MarketRejection::InvalidMaintenance)
            );
        }
        assert_eq!(
            announce_maintenance(
                Uuid::nil(),
                Uuid::nil(),
                None,
                now,
                utc("2026-03-01T04:00:00Z"),
                "  ",
                now
            ),
            Err(MarketRejection::InvalidReason)
        );
    }

    #[test]
    fn rank_points_follow_the_formula() {
        let m = Usdc::from_micros(2_000_000);
        let r = rank(9_900, Usdc::from_micros(2_000_000), m, Tier::Community, 12);
        assert_eq!(
            (
                r.uptime_points,
                r.price_points,
                r.tier_points,
                r.commitment_points
            ),
            (3_960, 1_500, 0, 750)
        );
        assert_eq!(r.total, 6_210);
        let cheap = rank(
            10_000,
            Usdc::from_micros(1_000_000),
            m,
            Tier::Enterprise,
            36,
        );
        assert_eq!(
            (
                cheap.price_points,
                cheap.tier_points,
                cheap.commitment_points,
                cheap.total
            ),
            (3_000, 1_500, 1_500, 10_000)
        );
        let dear = rank(0, Usdc::from_micros(3_500_000), m, Tier::Community, 0);
        assert_eq!(dear.total, 0);
        assert_eq!(median(&mut [5, 1, 3]), Some(3));
        assert_eq!(median(&mut [4, 1, 3, 2]), Some(2));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn market_commands_decide_against_the_providers_market() {
        let now = utc("2026-12-01T10:00:00Z");
        let machine = Uuid::from_u128(7);
        let state = ProviderMarket {
            provider_id: Uuid::from_u128(1),
            offered_models: vec!["h100-sxm".to_owned()],
            machines: vec![machine],
            maintenance: vec![MaintenanceAnnounced {
                maintenance_id: Uuid::from_u128(9),
                provider_id: Uuid::from_u128(1),
                machine_id: None,
                from: utc("2026-12-01T08:00:00Z"),
                until: utc("2026-12-01T12:00:00Z"),
                reason: "fans".to_owned(),
                announced_at: utc("2026-11-30T08:00:00Z"),
            }],
            delisted: vec!["GPU-a".to_owned()],
        };
        let price = |model: &str| MarketCommand::SetPrice {
            model_id: model.to_owned(),
            price: "2.5".to_owned(),
            effective_at: None,
            by: "user:x".to_owned(),
        };
        let decided = decide(&state, price("h100-sxm"), now).unwrap();
        let [MarketEvent::PriceSet(set)] = &decided[..] else {
            panic!("one price")
        };
        assert_eq!(
            (set.price_micro_usdc.micros(), set.set_at),
            (2_500_000, now)
        );
        assert_eq!(
            decide(&state, price("a100-80gb"), now),
            Err(MarketRejection::ModelNotOffered("a100-80gb".to_owned()))
        );
        let announce = |machine_id| MarketCommand::AnnounceMaintenance {
            maintenance_id: Uuid::from_u128(10),
            machine_id,
            from: utc("2026-12-02T00:00:00Z"),
            until: utc("2026-12-02T04:00:00Z"),
            reason: "drivers".to_owned(),
        };
        assert!(decide(&state, announce(Some(machine)), now).is_ok());
        assert_eq!(
            decide(&state, announce(Some(Uuid::from_u128(8))), now),
            Err(MarketRejection::UnknownMachine)
        );
        let cancel = |id| MarketCommand::CancelMaintenance { maintenance_id: id };
        assert!(decide(&state, cancel(Uuid::from_u128(9)), now).is_ok());
        assert_eq!(
            decide(
                &state,
                cancel(Uuid::from_u128(9)),
                utc("2026-12-01T12:00:00Z")
            ),
            Err(MarketRejection::NoSuchMaintenance),
            "over by then"
        );
        assert_eq!(
            decide(&state, cancel(Uuid::from_u128(11)), now),
            Err(MarketRejection::NoSuchMaintenance)
        );
        let listing = |gpu: &str, delist| MarketCommand::ChangeListing {
            gpu_uuid: gpu.to_owned(),
            delist,
            reason: "overheats".to_owned(),
            by: "user:admin".to_owned(),
        };
        assert_eq!(
            decide(&state, listing("GPU-a", true), now),
            Err(MarketRejection::AlreadyDelisted("GPU-a".to_owned()))
        );
        assert_eq!(
            decide(&state, listing("GPU-b", false), now),
            Err(MarketRejection::NotDelisted("GPU-b".to_owned()))
        );
        assert!(matches!(
            decide(&state, listing("GPU-a", false), now).unwrap()[..],
            [MarketEvent::GpuRelisted(_)]
        ));
        assert!(matches!(
            decide(&state, listing("GPU-b", true), now).unwrap()[..],
            [MarketEvent::GpuDelisted(_)]
        ));
    }
}
