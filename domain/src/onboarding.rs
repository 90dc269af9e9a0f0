//! Provider onboarding: the application form, its validation, the tier rules, and the
//! application's life cycle as `decide` / `evolve`.
//!
//! An application is submitted by a signed-in user, reviewed, possibly sent back for more
//! information, and finally approved with a tier, rejected, or withdrawn by the applicant. Every
//! step is an event; [`decide`] checks a command against the current state and returns the events
//! it produces, [`evolve`] folds an event into the state. Both are pure. The rules are documented
//! in `docs/onboarding.md`.

use crate::codes::ErrorCode;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::gpu::Catalog;
use crate::time::{Timestamp, Weekday};

/// Most GPU entries (groups of identical GPUs) one application may list.
pub const GPU_ENTRIES_MAX: usize = 32;
/// Most GPUs in one entry.
pub const GPU_QUANTITY_MAX: u32 = 512;
/// Largest host RAM one entry may declare: 16 TiB in GB.
pub const SYSTEM_RAM_GB_MAX: u32 = 16_384;
/// Fastest declared link, each direction: 400 Gbps.
pub const NETWORK_MBPS_MAX: u32 = 400_000;
/// Longest commitment: five years.
pub const COMMITMENT_MONTHS_MAX: u32 = 60;
/// Longest names (legal name, company), in characters.
pub const NAME_CHARS_MAX: usize = 200;
/// Longest city or region of a GPU entry, in characters. With every other limit, the largest form
/// fits one event (`store`'s test `the_largest_application_fits_one_event`).
pub const LOCATION_CHARS_MAX: usize = 100;
/// Longest free text (maintenance notes, messages, reasons), in characters.
pub const TEXT_CHARS_MAX: usize = 4_000;
/// Most weekly availability windows per entry.
pub const WEEKLY_WINDOWS_MAX: usize = 28;
/// Longest unlisted model name, in characters.
pub const MODEL_NAME_CHARS_MAX: usize = 100;
/// Review target: applicants are told 1-3 business days.
pub const REVIEW_BUSINESS_DAYS_TARGET: u32 = 3;

/// A field that failed validation: a JSON pointer into the submitted form, a stable code and a
/// message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub code: ErrorCode,
    pub message: String,
}

/// The form as submitted, before validation. Speeds are decimal Gbps (`"2.5"` or `2.5`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "schema", schema(examples(json!({
    "full_legal_name": "Grace Hopper",
    "email": "grace@example.com",
    "company_name": "Hopper Compute SL",
    "gpus": [{
        "model": "H100", "quantity": 8, "system_ram_gb": 1024, "upload_gbps": "10",
        "download_gbps": "10", "availability": {"kind": "always_on"},
        "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}
    }],
    "ups_protected": true,
    "commitment_months": 12,
    "maintenance_notes": "first Sunday of each month, 02:00 to 04:00 CET"
}))))]
pub struct ApplicationInput {
    pub full_legal_name: String,
    #[cfg_attr(
        feature = "schema",
        schema(
            max_length = 254,
            pattern = "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z]{2,63}$"
        )
    )]
    pub email: String,
    #[serde(default)]
    pub company_name: Option<String>,
    pub gpus: Vec<GpuEntryInput>,
    pub ups_protected: bool,
    pub commitment_months: u32,
    #[serde(default)]
    pub maintenance_notes: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct GpuEntryInput {
    /// A catalog id (`h100-80gb`) or, for a model not in the catalog, its name.
    pub model: String,
    pub quantity: u32,
    pub system_ram_gb: u32,
    #[cfg_attr(feature = "schema", schema(value_type = String))]
    pub upload_gbps: GbpsInput,
    #[cfg_attr(feature = "schema", schema(value_type = String))]
    pub download_gbps: GbpsInput,
    pub availability: Availability,
    pub location: LocationInput,
}

/// A speed in Gbps as a form sends it: a decimal string (`"2.5"`) or a JSON number (`2.5`),
/// kept as written so that text which is no number (an empty field) is reported with the
/// form's other field errors rather than stopping the whole body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct GbpsInput(pub String);

impl<'de> Deserialize<'de> for GbpsInput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Number(serde_json::Number),
        }
        Ok(GbpsInput(match Written::deserialize(deserializer)? {
            Written::Text(text) => text,
            Written::Number(number) => number.to_string(),
        }))
    }
}

impl From<Decimal> for GbpsInput {
    fn from(gbps: Decimal) -> Self {
        GbpsInput(gbps.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct LocationInput {
    pub city: String,
    /// ISO 3166-1 alpha-2, e.g. `DE`.
    pub country: String,
    pub region: String,
}

/// A validated application form: what `provider.application_submitted` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationForm {
    pub full_legal_name: String,
    pub email: String,
    pub company_name: Option<String>,
    pub gpus: Vec<GpuEntry>,
    pub ups_protected: bool,
    pub commitment_months: u32,
    pub maintenance_notes: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    pub model: GpuModelChoice,
    pub quantity: u32,
    pub system_ram_gb: u32,
    pub upload_mbps: u32,
    pub download_mbps: u32,
    pub availability: Availability,
    pub location: Location,
}

/// A catalog model, or one offered by name for case-by-case evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuModelChoice {
    Catalog(String),
    Unlisted(String),
}

/// When the hardware is offered: always, or in weekly windows of the provider's time zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Availability {
    AlwaysOn,
    Weekly {
        /// IANA name, e.g. `Europe/Madrid`.
        time_zone: String,
        windows: Vec<WeeklyWindow>,
    },
}

impl Availability {
    /// Always on, or weekly windows that cover every minute of all seven days.
    pub fn covers_whole_week(&self) -> bool {
        match self {
            Availability::AlwaysOn => true,
            Availability::Weekly { windows, .. } => Weekday::ALL.iter().all(|day| {
                let mut day_windows: Vec<&WeeklyWindow> =
                    windows.iter().filter(|w| w.day == *day).collect();
                day_windows.sort_by_key(|w| w.start_minute);
                let mut covered_until = 0;
                for window in day_windows {
                    if window.start_minute > covered_until {
                        return false;
                    }
                    covered_until = covered_until.max(window.end_minute);
                }
                covered_until >= 1_440
            }),
        }
    }
}

/// `[start_minute, end_minute)` of one day, in minutes after local midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct WeeklyWindow {
    pub day: Weekday,
    #[cfg_attr(feature = "schema", schema(maximum = 1439))]
    pub start_minute: u16,
    #[cfg_attr(feature = "schema", schema(minimum = 1, maximum = 1440))]
    pub end_minute: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Location {
    pub city: String,
    pub country: String,
    pub region: String,
}

/// Validates a submitted form. Returns every problem at once, each with its field.
/// `catalog` is where GPU models are looked up: the built-in models and those admins added.
pub fn validate_application(
    input: &ApplicationInput,
    catalog: &Catalog<'_>,
) -> Result<ApplicationForm, Vec<FieldError>> {
    let mut errors = Vec::new();
    let full_legal_name = name(&mut errors, "/full_legal_name", &input.full_legal_name);
    let email = validate_email(&input.email).unwrap_or_else(|message| {
        errors.push(error("/email", ErrorCode::InvalidEmail, message));
        String::new()
    });
    let company_name = input
        .company_name
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty());
    let company_name = company_name.map(|c| name(&mut errors, "/company_name", c));
    if input.gpus.is_empty() || input.gpus.len() > GPU_ENTRIES_MAX {
        errors.push(error(
            "/gpus",
            ErrorCode::OutOfRange,
            format!(
                "list 1 to {GPU_ENTRIES_MAX} GPU entries, got {}",
                input.gpus.len()
            ),
        ));
    }
    let gpus = input
        .gpus
        .iter()
        .take(GPU_ENTRIES_MAX)
        .enumerate()
        .map(|(i, entry)| validate_entry(&mut errors, &format!("/gpus/{i}"), entry, catalog))
        .collect();
    if !(1..=COMMITMENT_MONTHS_MAX).contains(&input.commitment_months) {
        errors.push(error(
            "/commitment_months",
            ErrorCode::OutOfRange,
            format!("a whole number of months from 1 to {COMMITMENT_MONTHS_MAX}"),
        ));
    }
    let maintenance_notes = text(
        &mut errors,
        "/maintenance_notes",
        &input.maintenance_notes,
        true,
    );
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ApplicationForm {
        full_legal_name,
        email,
        company_name,
        gpus,
        ups_protected: input.ups_protected,
        commitment_months: input.commitment_months,
        maintenance_notes,
    })
}

fn error(field: &str, code: ErrorCode, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.to_owned(),
        code,
        message: message.into(),
    }
}

/// A trimmed, non-empty name of at most [`NAME_CHARS_MAX`] characters: one line, no control or
/// bidirectional-override characters.
fn name(errors: &mut Vec<FieldError>, field: &str, value: &str) -> String {
    bounded(errors, field, value, NAME_CHARS_MAX, false, false)
}

fn text(errors: &mut Vec<FieldError>, field: &str, value: &str, may_be_empty: bool) -> String {
    bounded(errors, field, value, TEXT_CHARS_MAX, may_be_empty, true)
}

/// Characters that reorder how text is displayed: refused everywhere, they can disguise text.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// Whether `text` has characters it must not: controls (newlines and tabs only in multi-line
/// text) and bidirectional overrides.
pub fn has_forbidden_characters(text: &str, multiline: bool) -> bool {
    text.chars()
        .any(|c| is_bidi_control(c) || (c.is_control() && !(multiline && (c == '\n' || c == '\t'))))
}

fn bounded(
    errors: &mut Vec<FieldError>,
    field: &str,
    value: &str,
    max: usize,
    may_be_empty: bool,
    multiline: bool,
) -> String {
    let trimmed = value.trim();
    if trimmed.is_empty() && !may_be_empty {
        errors.push(error(field, ErrorCode::Required, "must not be blank"));
    } else if trimmed.chars().count() > max {
        errors.push(error(
            field,
            ErrorCode::TooLong,
            format!("at most {max} characters"),
        ));
    } else if has_forbidden_characters(trimmed, multiline) {
        errors.push(error(
            field,
            ErrorCode::InvalidCharacters,
            "contains control or text-direction characters",
        ));
    }
    trimmed.to_owned()
}

fn validate_entry(
    errors: &mut Vec<FieldError>,
    at: &str,
    entry: &GpuEntryInput,
    catalog: &Catalog<'_>,
) -> GpuEntry {
    let model_name = entry.model.trim();
    let model = match catalog.resolve(model_name) {
        crate::gpu::Resolution::Found(id) => GpuModelChoice::Catalog(id.to_owned()),
        crate::gpu::Resolution::Ambiguous(ids) => {
            errors.push(error(
                &format!("{at}/model"),
                ErrorCode::AmbiguousModel,
                format!("`{model_name}` could be {}: name one", ids.join(" or ")),
            ));
            GpuModelChoice::Unlisted(model_name.to_owned())
        }
        crate::gpu::Resolution::Unknown => {
            if model_name.is_empty()
                || model_name.chars().count() > MODEL_NAME_CHARS_MAX
                || has_forbidden_characters(model_name, false)
            {
                errors.push(error(
                    &format!("{at}/model"),
                    ErrorCode::InvalidModel,
                    format!(
                        "a catalog id or a model name of 1 to {MODEL_NAME_CHARS_MAX} characters"
                    ),
                ));
            }
            GpuModelChoice::Unlisted(model_name.to_owned())
        }
    };
    if !(1..=GPU_QUANTITY_MAX).contains(&entry.quantity) {
        errors.push(error(
            &format!("{at}/quantity"),
            ErrorCode::OutOfRange,
            format!("from 1 to {GPU_QUANTITY_MAX}"),
        ));
    }
    if !(1..=SYSTEM_RAM_GB_MAX).contains(&entry.system_ram_gb) {
        errors.push(error(
            &format!("{at}/system_ram_gb"),
            ErrorCode::OutOfRange,
            format!("from 1 to {SYSTEM_RAM_GB_MAX} GB"),
        ));
    }
    let upload_mbps = speed(errors, &format!("{at}/upload_gbps"), &entry.upload_gbps);
    let download_mbps = speed(errors, &format!("{at}/download_gbps"), &entry.download_gbps);
    validate_availability(errors, &format!("{at}/availability"), &entry.availability);
    let location = Location {
        city: bounded(
            errors,
            &format!("{at}/location/city"),
            &entry.location.city,
            LOCATION_CHARS_MAX,
            false,
            false,
        ),
        country: entry.location.country.trim().to_ascii_uppercase(),
        region: bounded(
            errors,
            &format!("{at}/location/region"),
            &entry.location.region,
            LOCATION_CHARS_MAX,
            false,
            false,
        ),
    };
    if COUNTRY_CODES
        .binary_search(&location.country.as_str())
        .is_err()
    {
        errors.push(error(
            &format!("{at}/location/country"),
            ErrorCode::InvalidCountry,
            "an ISO 3166-1 alpha-2 country code such as `DE` or `US`",
        ));
    }
    GpuEntry {
        model,
        quantity: entry.quantity,
        system_ram_gb: entry.system_ram_gb,
        upload_mbps,
        download_mbps,
        availability: entry.availability.clone(),
        location,
    }
}

/// Gbps to whole Mbps: positive, at most three decimals (no rounding), at most 400 Gbps.
fn speed(errors: &mut Vec<FieldError>, field: &str, gbps: &GbpsInput) -> u32 {
    let Ok(gbps) = gbps.0.trim().parse::<Decimal>() else {
        errors.push(error(
            field,
            ErrorCode::InvalidValue,
            "a speed in Gbps, such as 1 or 2.5".to_owned(),
        ));
        return 0;
    };
    let mbps = gbps.checked_mul(Decimal::from(1_000));
    match mbps {
        Some(mbps) if mbps.fract().is_zero() && mbps > Decimal::ZERO => match u32::try_from(mbps) {
            Ok(mbps) if mbps <= NETWORK_MBPS_MAX => return mbps,
            _ => {}
        },
        _ => {}
    }
    errors.push(error(
        field,
        ErrorCode::OutOfRange,
        format!(
            "a speed in Gbps above 0 and at most {}, with at most 3 decimals",
            NETWORK_MBPS_MAX / 1_000
        ),
    ));
    0
}

fn validate_availability(errors: &mut Vec<FieldError>, at: &str, availability: &Availability) {
    let Availability::Weekly { time_zone, windows } = availability else {
        return;
    };
    let zone_ok = !time_zone.is_empty()
        && time_zone.len() <= 64
        && time_zone.contains('/')
        && time_zone
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'));
    if !zone_ok && time_zone != "UTC" {
        errors.push(error(
            &format!("{at}/time_zone"),
            ErrorCode::InvalidTimeZone,
            "an IANA time zone such as `Europe/Madrid`",
        ));
    }
    if windows.is_empty() || windows.len() > WEEKLY_WINDOWS_MAX {
        errors.push(error(
            &format!("{at}/windows"),
            ErrorCode::OutOfRange,
            format!("1 to {WEEKLY_WINDOWS_MAX} weekly windows"),
        ));
        // Checking an oversized list pair by pair would cost quadratic time: stop here.
        return;
    }
    for (i, window) in windows.iter().enumerate() {
        if window.start_minute >= window.end_minute || window.end_minute > 1_440 {
            errors.push(error(
                &format!("{at}/windows/{i}"),
                ErrorCode::InvalidWindow,
                "start before end, within one day (minutes 0 to 1440)",
            ));
        } else if windows[..i].iter().any(|other| {
            other.day == window.day
                && other.start_minute < window.end_minute
                && window.start_minute < other.end_minute
        }) {
            errors.push(error(
                &format!("{at}/windows/{i}"),
                ErrorCode::OverlappingWindow,
                "overlaps an earlier window",
            ));
        }
    }
}

/// A pragmatic address check: one `@`, a local part of allowed characters, a domain of at least
/// two labels with an alphabetic top-level label. Returns the address with its domain lowercased.
pub fn validate_email(email: &str) -> Result<String, &'static str> {
    let email = email.trim();
    if email.len() > 254 {
        return Err("at most 254 characters");
    }
    let Some((local, domain)) = email.split_once('@') else {
        return Err("an address such as name@example.com");
    };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..")
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~.-".contains(c));
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        && labels
            .last()
            .is_some_and(|tld| tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic()));
    if !local_ok || !domain_ok {
        return Err("an address such as name@example.com");
    }
    Ok(format!("{local}@{}", domain.to_ascii_lowercase()))
}

/// ISO 3166-1 alpha-2 codes, officially assigned, sorted.
pub const COUNTRY_CODES: [&str; 249] = [
    "AD", "AE", "AF", "AG", "AI", "AL", "AM", "AO", "AQ", "AR", "AS", "AT", "AU", "AW", "AX", "AZ",
    "BA", "BB", "BD", "BE", "BF", "BG", "BH", "BI", "BJ", "BL", "BM", "BN", "BO", "BQ", "BR", "BS",
    "BT", "BV", "BW", "BY", "BZ", "CA", "CC", "CD", "CF", "CG", "CH", "CI", "CK", "CL", "CM", "CN",
    "CO", "CR", "CU", "CV", "CW", "CX", "CY", "CZ", "DE", "DJ", "DK", "DM", "DO", "DZ", "EC", "EE",
    "EG", "EH", "ER", "ES", "ET", "FI", "FJ", "FK", "FM", "FO", "FR", "GA", "GB", "GD", "GE", "GF",
    "GG", "GH", "GI", "GL", "GM", "GN", "GP", "GQ", "GR", "GS", "GT", "GU", "GW", "GY", "HK", "HM",
    "HN", "HR", "HT", "HU", "ID", "IE", "IL", "IM", "IN", "IO", "IQ", "IR", "IS", "IT", "JE", "JM",
    "JO", "JP", "KE", "KG", "KH", "KI", "KM", "KN", "KP", "KR", "KW", "KY", "KZ", "LA", "LB", "LC",
    "LI", "LK", "LR", "LS", "LT", "LU", "LV", "LY", "MA", "MC", "MD", "ME", "MF", "MG", "MH", "MK",
    "ML", "MM", "MN", "MO", "MP", "MQ", "MR", "MS", "MT", "MU", "MV", "MW", "MX", "MY", "MZ", "NA",
    "NC", "NE", "NF", "NG", "NI", "NL", "NO", "NP", "NR", "NU", "NZ", "OM", "PA", "PE", "PF", "PG",
    "PH", "PK", "PL", "PM", "PN", "PR", "PS", "PT", "PW", "PY", "QA", "RE", "RO", "RS", "RU", "RW",
    "SA", "SB", "SC", "SD", "SE", "SG", "SH", "SI", "SJ", "SK", "SL", "SM", "SN", "SO", "SR", "SS",
    "ST", "SV", "SX", "SY", "SZ", "TC", "TD", "TF", "TG", "TH", "TJ", "TK", "TL", "TM", "TN", "TO",
    "TR", "TT", "TV", "TW", "TZ", "UA", "UG", "UM", "US", "UY", "UZ", "VA", "VC", "VE", "VG", "VI",
    "VN", "VU", "WF", "WS", "YE", "YT", "ZA", "ZM", "ZW",
];

/// The provider tier a reviewer grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Tier {
    Enterprise,
    Community,
}

/// Shortest commitment the Enterprise tier accepts.
pub const ENTERPRISE_COMMITMENT_MONTHS_MIN: u32 = 6;
/// Slowest link (each direction, each entry) the Enterprise tier accepts: 1 Gbps.
pub const ENTERPRISE_NETWORK_MBPS_MIN: u32 = 1_000;

/// A tier requirement an application does not meet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum TierViolation {
    /// Enterprise requires UPS protection (the provider guide says so).
    UpsRequired,
    /// Enterprise hardware is available around the clock.
    AlwaysOnRequired {
        entry: usize,
    },
    CommitmentTooShort {
        months: u32,
        minimum: u32,
    },
    NetworkTooSlow {
        entry: usize,
        minimum_mbps: u32,
    },
    /// Enterprise lists only catalog models; unlisted ones are evaluated as Community first.
    UnlistedModel {
        entry: usize,
    },
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Enterprise => "enterprise",
            Tier::Community => "community",
        })
    }
}

impl std::fmt::Display for TierViolation {
    /// The rule in words, GPU entries counted from 1 as on the form.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TierViolation::UpsRequired => f.write_str("the hardware must be UPS-protected"),
            TierViolation::AlwaysOnRequired { entry } => write!(
                f,
                "GPU entry {} must be available around the clock",
                entry + 1
            ),
            TierViolation::CommitmentTooShort { months, minimum } => write!(
                f,
                "the commitment must be at least {minimum} months (it is {months})"
            ),
            TierViolation::NetworkTooSlow {
                entry,
                minimum_mbps,
            } => write!(
                f,
                "GPU entry {} needs at least {minimum_mbps} Mbps each way",
                entry + 1
            ),
            TierViolation::UnlistedModel { entry } => write!(
                f,
                "GPU entry {} is not a catalog model (unlisted models start as Community)",
                entry + 1
            ),
        }
    }
}

/// The violations in words, separated by semicolons.
pub struct Violations<'a>(pub &'a [TierViolation]);

impl std::fmt::Display for Violations<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, violation) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{violation}")?;
        }
        Ok(())
    }
}

/// Every rule of `tier` that `form` breaks; empty when the tier may be granted.
pub fn tier_violations(form: &ApplicationForm, tier: Tier) -> Vec<TierViolation> {
    if tier == Tier::Community {
        return Vec::new();
    }
    let mut violations = Vec::new();
    if !form.ups_protected {
        violations.push(TierViolation::UpsRequired);
    }
    if form.commitment_months < ENTERPRISE_COMMITMENT_MONTHS_MIN {
        violations.push(TierViolation::CommitmentTooShort {
            months: form.commitment_months,
            minimum: ENTERPRISE_COMMITMENT_MONTHS_MIN,
        });
    }
    for (entry, gpu) in form.gpus.iter().enumerate() {
        if !gpu.availability.covers_whole_week() {
            violations.push(TierViolation::AlwaysOnRequired { entry });
        }
        if gpu.upload_mbps.min(gpu.download_mbps) < ENTERPRISE_NETWORK_MBPS_MIN {
            violations.push(TierViolation::NetworkTooSlow {
                entry,
                minimum_mbps: ENTERPRISE_NETWORK_MBPS_MIN,
            });
        }
        if matches!(gpu.model, GpuModelChoice::Unlisted(_)) {
            violations.push(TierViolation::UnlistedModel { entry });
        }
    }
    violations
}

/// Where an application stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplicationStatus {
    UnderReview,
    InformationRequested,
    Approved,
    Rejected,
    Withdrawn,
}

impl ApplicationStatus {
    /// The status as the API names it.
    pub fn name(self) -> &'static str {
        match self {
            ApplicationStatus::UnderReview => "under review",
            ApplicationStatus::InformationRequested => "waiting for information",
            ApplicationStatus::Approved => "approved",
            ApplicationStatus::Rejected => "rejected",
            ApplicationStatus::Withdrawn => "withdrawn",
        }
    }

    pub fn is_decided(self) -> bool {
        matches!(
            self,
            ApplicationStatus::Approved
                | ApplicationStatus::Rejected
                | ApplicationStatus::Withdrawn
        )
    }
}

/// The state of one application, folded from its events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Application {
    pub application_id: Uuid,
    pub applicant_user_id: Uuid,
    pub form: ApplicationForm,
    pub status: ApplicationStatus,
    pub submitted_at: Timestamp,
    pub decided_at: Option<Timestamp>,
    pub tier: Option<Tier>,
    pub provider_id: Option<Uuid>,
    pub information_requests: u32,
}

impl Application {
    /// Whether the application waits on reviewers beyond the promised 3 business days at `now`.
    /// While it waits on the applicant (information requested) it is not overdue.
    pub fn is_overdue(&self, now: Timestamp) -> bool {
        self.status == ApplicationStatus::UnderReview
            && self
                .submitted_at
                .add_business_days(REVIEW_BUSINESS_DAYS_TARGET)
                < now
    }
}

/// What someone asks of an application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplicationCommand {
    Submit {
        application_id: Uuid,
        applicant_user_id: Uuid,
        form: ApplicationForm,
        at: Timestamp,
    },
    RequestInformation {
        reviewer_user_id: Uuid,
        message: String,
        at: Timestamp,
    },
    ProvideInformation {
        applicant_user_id: Uuid,
        answer: String,
        at: Timestamp,
    },
    Approve {
        reviewer_user_id: Uuid,
        tier: Tier,
        provider_id: Uuid,
        at: Timestamp,
    },
    Reject {
        reviewer_user_id: Uuid,
        reason: String,
        at: Timestamp,
    },
    Withdraw {
        applicant_user_id: Uuid,
        at: Timestamp,
    },
}

impl ApplicationCommand {
    fn name(&self) -> &'static str {
        match self {
            ApplicationCommand::Submit { .. } => "submit",
            ApplicationCommand::RequestInformation { .. } => "request_information",
            ApplicationCommand::ProvideInformation { .. } => "provide_information",
            ApplicationCommand::Approve { .. } => "approve",
            ApplicationCommand::Reject { .. } => "reject",
            ApplicationCommand::Withdraw { .. } => "withdraw",
        }
    }
}

/// Why a command is refused. Nothing is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplicationRejection {
    #[error("the application was already submitted")]
    AlreadySubmitted,
    #[error("there is no such application")]
    NotFound,
    #[error("cannot {command} an application that is {}", status.name())]
    InvalidTransition {
        command: &'static str,
        status: ApplicationStatus,
    },
    #[error("only the applicant can do this")]
    NotTheApplicant,
    #[error(
        "the application does not meet the {tier} tier rules: {}",
        Violations(violations)
    )]
    TierRulesBroken {
        tier: Tier,
        violations: Vec<TierViolation>,
    },
    #[error(
        "{field} must be 1 to {TEXT_CHARS_MAX} characters without control or text-direction characters"
    )]
    InvalidText { field: &'static str },
    #[error("a decision cannot be dated before the application was submitted")]
    DatedBeforeSubmission,
    #[error("an applicant cannot review their own application")]
    SelfReview,
}

impl ApplicationRejection {
    /// A stable machine code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApplicationRejection::AlreadySubmitted => ErrorCode::AlreadySubmitted,
            ApplicationRejection::NotFound => ErrorCode::NotFound,
            ApplicationRejection::InvalidTransition { .. } => ErrorCode::InvalidTransition,
            ApplicationRejection::NotTheApplicant => ErrorCode::NotTheApplicant,
            ApplicationRejection::TierRulesBroken { .. } => ErrorCode::TierRulesBroken,
            ApplicationRejection::InvalidText { .. } => ErrorCode::InvalidText,
            ApplicationRejection::DatedBeforeSubmission => ErrorCode::DatedBeforeSubmission,
            ApplicationRejection::SelfReview => ErrorCode::SelfReview,
        }
    }
}

/// `provider.application_submitted`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationSubmitted {
    pub application_id: Uuid,
    pub applicant_user_id: Uuid,
    pub form: ApplicationForm,
    pub submitted_at: Timestamp,
}

/// `provider.application_information_requested`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InformationRequested {
    pub application_id: Uuid,
    pub reviewer_user_id: Uuid,
    pub message: String,
    pub requested_at: Timestamp,
}

/// `provider.application_information_provided`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InformationProvided {
    pub application_id: Uuid,
    pub answer: String,
    pub provided_at: Timestamp,
}

/// `provider.application_approved`: also creates provider `provider_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationApproved {
    pub application_id: Uuid,
    pub reviewer_user_id: Uuid,
    pub tier: Tier,
    pub provider_id: Uuid,
    pub decided_at: Timestamp,
    /// Submitted to decided, in seconds.
    pub review_seconds: i64,
}

/// `provider.application_rejected`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationRejected {
    pub application_id: Uuid,
    pub reviewer_user_id: Uuid,
    pub reason: String,
    pub decided_at: Timestamp,
    pub review_seconds: i64,
}

/// `provider.application_withdrawn`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationWithdrawn {
    pub application_id: Uuid,
    pub withdrawn_at: Timestamp,
}

/// The events of an application's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplicationEvent {
    Submitted(ApplicationSubmitted),
    InformationRequested(InformationRequested),
    InformationProvided(InformationProvided),
    Approved(ApplicationApproved),
    Rejected(ApplicationRejected),
    Withdrawn(ApplicationWithdrawn),
}

impl ApplicationEvent {
    /// The application this event belongs to.
    pub fn application_id(&self) -> Uuid {
        match self {
            ApplicationEvent::Submitted(e) => e.application_id,
            ApplicationEvent::InformationRequested(e) => e.application_id,
            ApplicationEvent::InformationProvided(e) => e.application_id,
            ApplicationEvent::Approved(e) => e.application_id,
            ApplicationEvent::Rejected(e) => e.application_id,
            ApplicationEvent::Withdrawn(e) => e.application_id,
        }
    }
}

fn checked_text(field: &'static str, value: &str) -> Result<String, ApplicationRejection> {
    let trimmed = value.trim();
    let chars = trimmed.chars().count();
    if chars == 0 || chars > TEXT_CHARS_MAX || has_forbidden_characters(trimmed, true) {
        return Err(ApplicationRejection::InvalidText { field });
    }
    Ok(trimmed.to_owned())
}

/// Decides a command against the application's current state (`None`: not submitted yet).
pub fn decide(
    state: Option<&Application>,
    command: ApplicationCommand,
) -> Result<Vec<ApplicationEvent>, ApplicationRejection> {
    let application = match (state, &command) {
        (
            None,
            ApplicationCommand::Submit {
                application_id,
                applicant_user_id,
                form,
                at,
            },
        ) => {
            return Ok(vec![ApplicationEvent::Submitted(ApplicationSubmitted {
                application_id: *application_id,
                applicant_user_id: *applicant_user_id,
                form: form.clone(),
                submitted_at: *at,
            })]);
        }
        (Some(_), ApplicationCommand::Submit { .. }) => {
            return Err(ApplicationRejection::AlreadySubmitted);
        }
        (None, _) => return Err(ApplicationRejection::NotFound),
        (Some(application), _) => application,
    };
    use ApplicationStatus::{InformationRequested as Waiting, UnderReview};
    let status = application.status;
    let command_name = command.name();
    let invalid = || ApplicationRejection::InvalidTransition {
        command: command_name,
        status,
    };
    let id = application.application_id;
    let reviewer = match &command {
        ApplicationCommand::RequestInformation {
            reviewer_user_id,
            at,
            ..
        }
        | ApplicationCommand::Approve {
            reviewer_user_id,
            at,
            ..
        }
        | ApplicationCommand::Reject {
            reviewer_user_id,
            at,
            ..
        } => Some((*reviewer_user_id, *at)),
        _ => None,
    };
    if let Some((reviewer_user_id, at)) = reviewer {
        if reviewer_user_id == application.applicant_user_id {
            return Err(ApplicationRejection::SelfReview);
        }
        if at < application.submitted_at {
            return Err(ApplicationRejection::DatedBeforeSubmission);
        }
    }
    let event = match command {
        ApplicationCommand::Submit { .. } => return Err(ApplicationRejection::AlreadySubmitted),
        ApplicationCommand::RequestInformation {
            reviewer_user_id,
            message,
            at,
        } => {
            if status != UnderReview {
                return Err(invalid());
            }
            ApplicationEvent::InformationRequested(InformationRequested {
                application_id: id,
                reviewer_user_id,
                message: checked_text("message", &message)?,
                requested_at: at,
            })
        }
        ApplicationCommand::ProvideInformation {
            applicant_user_id,
            answer,
            at,
        } => {
            if applicant_user_id != application.applicant_user_id {
                return Err(ApplicationRejection::NotTheApplicant);
            }
            if status != Waiting {
                return Err(invalid());
            }
            ApplicationEvent::InformationProvided(InformationProvided {
                application_id: id,
                answer: checked_text("answer", &answer)?,
                provided_at: at,
            })
        }
        ApplicationCommand::Approve {
            reviewer_user_id,
            tier,
            provider_id,
            at,
        } => {
            if !matches!(status, UnderReview | Waiting) {
                return Err(invalid());
            }
            let violations = tier_violations(&application.form, tier);
            if !violations.is_empty() {
                return Err(ApplicationRejection::TierRulesBroken { tier, violations });
            }
            ApplicationEvent::Approved(ApplicationApproved {
                application_id: id,
                reviewer_user_id,
                tier,
                provider_id,
                decided_at: at,
                review_seconds: application.submitted_at.seconds_until(at),
            })
        }
        ApplicationCommand::Reject {
            reviewer_user_id,
            reason,
            at,
        } => {
            if !matches!(status, UnderReview | Waiting) {
                return Err(invalid());
            }
            ApplicationEvent::Rejected(ApplicationRejected {
                application_id: id,
                reviewer_user_id,
                reason: checked_text("reason", &reason)?,
                decided_at: at,
                review_seconds: application.submitted_at.seconds_until(at),
            })
        }
        ApplicationCommand::Withdraw {
            applicant_user_id,
            at,
        } => {
            if applicant_user_id != application.applicant_user_id {
                return Err(ApplicationRejection::NotTheApplicant);
            }
            if !matches!(status, UnderReview | Waiting) {
                return Err(invalid());
            }
            ApplicationEvent::Withdrawn(ApplicationWithdrawn {
                application_id: id,
                withdrawn_at: at,
            })
        }
    };
    Ok(vec![event])
}

/// Folds one event into the state. Events come from the log, already decided: no checks here.
pub fn evolve(state: Option<Application>, event: &ApplicationEvent) -> Option<Application> {
    if let ApplicationEvent::Submitted(submitted) = event {
        return Some(Application {
            application_id: submitted.application_id,
            applicant_user_id: submitted.applicant_user_id,
            form: submitted.form.clone(),
            status: ApplicationStatus::UnderReview,
            submitted_at: submitted.submitted_at,
            decided_at: None,
            tier: None,
            provider_id: None,
            information_requests: 0,
        });
    }
    let mut application = state?;
    match event {
        ApplicationEvent::Submitted(_) => {}
        ApplicationEvent::InformationRequested(_) => {
            application.status = ApplicationStatus::InformationRequested;
            application.information_requests += 1;
        }
        ApplicationEvent::InformationProvided(_) => {
            application.status = ApplicationStatus::UnderReview
        }
        ApplicationEvent::Approved(approved) => {
            application.status = ApplicationStatus::Approved;
            application.tier = Some(approved.tier);
            application.provider_id = Some(approved.provider_id);
            application.decided_at = Some(approved.decided_at);
        }
        ApplicationEvent::Rejected(rejected) => {
            application.status = ApplicationStatus::Rejected;
            application.decided_at = Some(rejected.decided_at);
        }
        ApplicationEvent::Withdrawn(withdrawn) => {
            application.status = ApplicationStatus::Withdrawn;
            application.decided_at = Some(withdrawn.withdrawn_at);
        }
    }
    Some(application)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::DomainEvent;
    use serde_json::json;

    const APPLICANT: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0001);
    const REVIEWER: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0002);
    const APPLICATION: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0003);
    const PROVIDER: Uuid = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0004);

    fn input() -> ApplicationInput {
        serde_json::from_value(json!({
            "full_legal_name": "Ada Lovelace",
            "email": "ada@Example.COM",
            "company_name": "Analytical Compute GmbH",
            "gpus": [{
                "model": "h100-80gb",
                "quantity": 8,
                "system_ram_gb": 2048,
                "upload_gbps": "10",
                "download_gbps": 10,
                "availability": {"kind": "always_on"},
                "location": {"city": "Frankfurt", "country": "de", "region": "Hesse"}
            }],
            "ups_protected": true,
            "commitment_months": 12,
            "maintenance_notes": "2-hour window the first Sunday of each month"
        }))
        .unwrap()
    }

    fn form() -> ApplicationForm {
        validate_application(&input(), &Catalog::BUILT_IN).unwrap()
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_micros(seconds * 1_000_000)
    }

    #[test]
    fn a_valid_form_is_normalized() {
        let form = form();
        assert_eq!(form.email, "ada@example.com");
        assert_eq!(
            form.gpus[0].model,
            GpuModelChoice::Catalog("h100-80gb".to_owned())
        );
        assert_eq!(
            (form.gpus[0].upload_mbps, form.gpus[0].download_mbps),
            (10_000, 10_000)
        );
        assert_eq!(form.gpus[0].location.country, "DE");
        let mut unlisted = input();
        unlisted.gpus[0].model = "H200 141GB".to_owned();
        assert_eq!(
            validate_application(&unlisted, &Catalog::BUILT_IN)
                .unwrap()
                .gpus[0]
                .model,
            GpuModelChoice::Unlisted("H200 141GB".to_owned())
        );
    }

    #[test]
    fn a_speed_that_is_no_number_is_reported_with_the_other_fields() {
        let mut bad: ApplicationInput = serde_json::from_value(json!({
            "full_legal_name": "", "email": "ada@example.com", "ups_protected": false,
            "commitment_months": 12,
            "gpus": [{"model": "h100-80gb", "quantity": 1, "system_ram_gb": 64, "upload_gbps": "",
                      "download_gbps": 2.5, "availability": {"kind": "always_on"},
                      "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}}]
        }))
        .expect("a speed may be text or a number");
        let errors = validate_application(&bad, &Catalog::BUILT_IN).unwrap_err();
        let fields: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.code.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("/full_legal_name", "required"),
                ("/gpus/0/upload_gbps", "invalid_value")
            ]
        );
        bad.full_legal_name = "Ada".to_owned();
        bad.gpus[0].upload_gbps = GbpsInput(" 10 ".to_owned());
        let form = validate_application(&bad, &Catalog::BUILT_IN).expect("valid");
        assert_eq!(
            (form.gpus[0].upload_mbps, form.gpus[0].download_mbps),
            (10_000, 2_500)
        );
    }

    #[test]
    fn every_invalid_field_is_reported_with_its_pointer() {
        let mut bad = input();
        bad.full_legal_name = "  ".to_owned();
        bad.email = "ada@localhost".to_owned();
        bad.commitment_months = 0;
        bad.gpus[0].quantity = 0;
        bad.gpus[0].system_ram_gb = SYSTEM_RAM_GB_MAX + 1;
        bad.gpus[0].upload_gbps = Decimal::new(-1, 0).into();
        bad.gpus[0].download_gbps = Decimal::new(12_345, 4).into(); // more than Mbps precision
        bad.gpus[0].location.country = "XX".to_owned();
        bad.gpus[0].availability = Availability::Weekly {
            time_zone: "Mars".to_owned(),
            windows: vec![
                WeeklyWindow {
                    day: Weekday::Monday,
                    start_minute: 480,
                    end_minute: 1_200,
                },
                WeeklyWindow {
                    day: Weekday::Monday,
                    start_minute: 600,
                    end_minute: 700,
                },
                WeeklyWindow {
                    day: Weekday::Tuesday,
                    start_minute: 700,
                    end_minute: 600,
                },
            ],
        };
        let errors = validate_application(&bad, &Catalog::BUILT_IN).unwrap_err();
        let fields: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.code.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                ("/full_legal_name", "required"),
                ("/email", "invalid_email"),
                ("/gpus/0/quantity", "out_of_range"),
                ("/gpus/0/system_ram_gb", "out_of_range"),
                ("/gpus/0/upload_gbps", "out_of_range"),
                ("/gpus/0/download_gbps", "out_of_range"),
                ("/gpus/0/availability/time_zone", "invalid_time_zone"),
                ("/gpus/0/availability/windows/1", "overlapping_window"),
                ("/gpus/0/availability/windows/2", "invalid_window"),
                ("/gpus/0/location/country", "invalid_country"),
                ("/commitment_months", "out_of_range"),
            ]
        );
        let mut none = input();
        none.gpus.clear();
        assert_eq!(
            validate_application(&none, &Catalog::BUILT_IN).unwrap_err()[0].field,
            "/gpus"
        );
    }

    #[test]
    fn names_are_one_line_and_undisguised() {
        for bad in ["Ada\nLovelace", "Ada \u{202E}ecalevoL"] {
            let mut input = input();
            input.full_legal_name = bad.to_owned();
            let errors = validate_application(&input, &Catalog::BUILT_IN).unwrap_err();
            assert_eq!(
                (errors[0].field.as_str(), errors[0].code.as_str()),
                ("/full_legal_name", "invalid_characters")
            );
        }
        let mut notes = input();
        notes.maintenance_notes = "line one\nline two".to_owned();
        assert!(
            validate_application(&notes, &Catalog::BUILT_IN).is_ok(),
            "free text may span lines"
        );
        let mut many = input();
        many.gpus[0].availability = Availability::Weekly {
            time_zone: "UTC".to_owned(),
            windows: vec![
                WeeklyWindow {
                    day: Weekday::Monday,
                    start_minute: 0,
                    end_minute: 10
                };
                10_000
            ],
        };
        let errors = validate_application(&many, &Catalog::BUILT_IN).unwrap_err();
        assert_eq!(
            errors.len(),
            1,
            "one error for an oversized list, not one per window"
        );
    }

    #[test]
    fn a_weekly_schedule_covering_every_minute_is_around_the_clock() {
        let mut whole_week = form();
        whole_week.gpus[0].availability = Availability::Weekly {
            time_zone: "Europe/Madrid".to_owned(),
            windows: Weekday::ALL
                .iter()
                .flat_map(|day| {
                    [
                        WeeklyWindow {
                            day: *day,
                            start_minute: 0,
                            end_minute: 720,
                        },
                        WeeklyWindow {
                            day: *day,
                            start_minute: 720,
                            end_minute: 1_440,
                        },
                    ]
                })
                .collect(),
        };
        assert!(tier_violations(&whole_week, Tier::Enterprise).is_empty());
        if let Availability::Weekly { windows, .. } = &mut whole_week.gpus[0].availability {
            windows[13].end_minute = 1_439; // Sunday ends a minute early
        }
        assert_eq!(
            tier_violations(&whole_week, Tier::Enterprise),
            [TierViolation::AlwaysOnRequired { entry: 0 }]
        );
    }

    #[test]
    fn email_checks() {
        for good in [
            "a@b.co",
            "first.last+tag@sub.example.org",
            "x_y@ex-ample.io",
        ] {
            assert!(validate_email(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "plain",
            "@example.com",
            "a@",
            "a@b",
            "a..b@example.com",
            ".a@example.com",
            "a@-x.com",
            "a b@example.com",
            "a@example.c0m",
        ] {
            assert!(validate_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn enterprise_rules() {
        assert!(tier_violations(&form(), Tier::Enterprise).is_empty());
        let mut weak = form();
        weak.ups_protected = false;
        weak.commitment_months = 3;
        weak.gpus[0].upload_mbps = 500;
        weak.gpus[0].availability = Availability::Weekly {
            time_zone: "UTC".to_owned(),
            windows: vec![],
        };
        weak.gpus[0].model = GpuModelChoice::Unlisted("H200".to_owned());
        assert_eq!(
            tier_violations(&weak, Tier::Enterprise),
            [
                TierViolation::UpsRequired,
                TierViolation::CommitmentTooShort {
                    months: 3,
                    minimum: 6
                },
                TierViolation::AlwaysOnRequired { entry: 0 },
                TierViolation::NetworkTooSlow {
                    entry: 0,
                    minimum_mbps: 1_000
                },
                TierViolation::UnlistedModel { entry: 0 },
            ]
        );
        assert!(tier_violations(&weak, Tier::Community).is_empty());
    }

    /// Given the events so far, when a command arrives, then these events or this rejection.
    fn check(given: &[ApplicationCommand], when: ApplicationCommand, then: Result<&str, &str>) {
        let mut state = None;
        for command in given {
            for event in decide(state.as_ref(), command.clone()).unwrap() {
                state = evolve(state, &event);
            }
        }
        let outcome = decide(state.as_ref(), when);
        let summary = match &outcome {
            Ok(events) => Ok(DomainEvent::Application(events[0].clone()).event_type()),
            Err(rejection) => Err(rejection.code().as_str()),
        };
        assert_eq!(summary, then, "given {given:?}");
    }

    fn submit(form: ApplicationForm) -> ApplicationCommand {
        ApplicationCommand::Submit {
            application_id: APPLICATION,
            applicant_user_id: APPLICANT,
            form,
            at: at(0),
        }
    }
    fn request() -> ApplicationCommand {
        ApplicationCommand::RequestInformation {
            reviewer_user_id: REVIEWER,
            message: "Photo of the UPS?".into(),
            at: at(10),
        }
    }
    fn answer() -> ApplicationCommand {
        ApplicationCommand::ProvideInformation {
            applicant_user_id: APPLICANT,
            answer: "Attached.".into(),
            at: at(20),
        }
    }
    fn approve(tier: Tier) -> ApplicationCommand {
        ApplicationCommand::Approve {
            reviewer_user_id: REVIEWER,
            tier,
            provider_id: PROVIDER,
            at: at(30),
        }
    }
    fn reject() -> ApplicationCommand {
        ApplicationCommand::Reject {
            reviewer_user_id: REVIEWER,
            reason: "Residential power only.".into(),
            at: at(30),
        }
    }
    fn withdraw(by: Uuid) -> ApplicationCommand {
        ApplicationCommand::Withdraw {
            applicant_user_id: by,
            at: at(40),
        }
    }

    #[test]
    fn life_cycle() {
        let ok = Ok;
        let no_ups = {
            let mut form = form();
            form.ups_protected = false;
            form
        };
        check(&[], submit(form()), ok("provider.application_submitted"));
        check(&[submit(form())], submit(form()), Err("already_submitted"));
        check(&[], approve(Tier::Community), Err("not_found"));
        check(
            &[submit(form())],
            request(),
            ok("provider.application_information_requested"),
        );
        check(
            &[submit(form()), request()],
            request(),
            Err("invalid_transition"),
        );
        check(
            &[submit(form()), request()],
            answer(),
            ok("provider.application_information_provided"),
        );
        check(&[submit(form())], answer(), Err("invalid_transition"));
        check(
            &[submit(form()), request(), answer()],
            approve(Tier::Enterprise),
            ok("provider.application_approved"),
        );
        check(
            &[submit(no_ups.clone())],
            approve(Tier::Enterprise),
            Err("tier_rules_broken"),
        );
        check(
            &[submit(no_ups)],
            approve(Tier::Community),
            ok("provider.application_approved"),
        );
        check(
            &[submit(form()), approve(Tier::Community)],
            approve(Tier::Community),
            Err("invalid_transition"),
        );
        check(
            &[submit(form()), reject()],
            approve(Tier::Community),
            Err("invalid_transition"),
        );
        check(
            &[submit(form()), withdraw(APPLICANT)],
            approve(Tier::Community),
            Err("invalid_transition"),
        );
        check(
            &[submit(form())],
            reject(),
            ok("provider.application_rejected"),
        );
        check(
            &[submit(form()), request()],
            reject(),
            ok("provider.application_rejected"),
        );
        check(
            &[submit(form())],
            withdraw(REVIEWER),
            Err("not_the_applicant"),
        );
        check(
            &[submit(form()), approve(Tier::Community)],
            withdraw(APPLICANT),
            Err("invalid_transition"),
        );
        check(
            &[submit(form())],
            withdraw(APPLICANT),
            ok("provider.application_withdrawn"),
        );
        let self_review = ApplicationCommand::Approve {
            reviewer_user_id: APPLICANT,
            tier: Tier::Community,
            provider_id: PROVIDER,
            at: at(30),
        };
        check(&[submit(form())], self_review, Err("self_review"));
        let backdated = ApplicationCommand::Reject {
            reviewer_user_id: REVIEWER,
            reason: "no".into(),
            at: at(-1),
        };
        check(&[submit(form())], backdated, Err("dated_before_submission"));
        let escape = ApplicationCommand::Reject {
            reviewer_user_id: REVIEWER,
            reason: "ok\u{1b}[31m".into(),
            at: at(30),
        };
        check(&[submit(form())], escape, Err("invalid_text"));
    }

    #[test]
    fn state_records_the_decision_and_review_time() {
        let mut state = None;
        for command in [
            submit(form()),
            request(),
            answer(),
            approve(Tier::Enterprise),
        ] {
            for event in decide(state.as_ref(), command).unwrap() {
                if let ApplicationEvent::Approved(approved) = &event {
                    assert_eq!(approved.review_seconds, 30);
                }
                state = evolve(state, &event);
            }
        }
        let application = state.unwrap();
        assert_eq!(application.status, ApplicationStatus::Approved);
        assert_eq!(
            (application.tier, application.provider_id),
            (Some(Tier::Enterprise), Some(PROVIDER))
        );
        assert_eq!(application.information_requests, 1);
        assert!(!application.is_overdue(at(10 * 86_400)));
    }

    #[test]
    fn overdue_after_three_business_days() {
        // 2026-11-27 (a Friday) 12:00 UTC: due by Wednesday 12:00.
        let friday_noon = 20_784 * 86_400 + 12 * 3_600;
        let events = decide(
            None,
            ApplicationCommand::Submit {
                application_id: APPLICATION,
                applicant_user_id: APPLICANT,
                form: form(),
                at: at(friday_noon),
            },
        )
        .unwrap();
        let application = evolve(None, &events[0]).unwrap();
        assert!(!application.is_overdue(at(friday_noon + 5 * 86_400)));
        assert!(application.is_overdue(at(friday_noon + 5 * 86_400 + 1)));
    }

    #[test]
    fn application_events_round_trip_through_the_catalog() {
        let mut state = None;
        for command in [
            submit(form()),
            request(),
            answer(),
            approve(Tier::Enterprise),
        ] {
            for event in decide(state.as_ref(), command).unwrap() {
                let domain = DomainEvent::Application(event.clone());
                let text = domain.to_payload().to_string();
                let decoded =
                    DomainEvent::decode_json(domain.event_type(), domain.schema_version(), &text)
                        .unwrap();
                assert_eq!(decoded, domain);
                assert!(decoded.journal().is_none());
                state = evolve(state, &event);
            }
        }
    }
}
