//! Conversions between wire text and domain values that every handler module uses: instants
//! printed as RFC 3339 and parsed from request fields.

use gpunex_domain::codes::ErrorCode;
use gpunex_domain::time::Timestamp;

use crate::error::ApiError;

/// RFC 3339 in UTC with microseconds, from microseconds since the epoch.
pub fn timestamp(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_else(|| us.to_string())
}

/// An RFC 3339 instant from a body field (a JSON Pointer), or a `400 invalid_timestamp` naming it.
pub fn parse_time(field: &str, text: &str) -> Result<Timestamp, ApiError> {
    parse_time_in(crate::error::Location::Body, field, text)
}

/// An RFC 3339 instant from a request field, or a `400 invalid_timestamp` naming it.
pub fn parse_time_in(
    location: crate::error::Location,
    field: &str,
    text: &str,
) -> Result<Timestamp, ApiError> {
    gpunex_domain::calendar::instant(text).map_err(|e| {
        ApiError::invalid_in(location, field, ErrorCode::InvalidTimestamp, e.to_string())
    })
}
