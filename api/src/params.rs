//! Path and query parameters, parsed at the edge into field errors named by the parameter
//! (`"in": "path"` or `"query"`), never the framework's plain-text rejections.

use gpunex_domain::codes::ErrorCode;
use std::collections::HashMap;

use axum::extract::FromRequestParts;
use axum::extract::path::ErrorKind;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, Location};

/// Longest parameter value echoed back in an error message, in characters.
const ECHO_CHARS_MAX: usize = 40;

/// Path parameters (`{id}` in the route) as `T`.
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Path<T>, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(axum::extract::rejection::PathRejection::FailedToDeserializePathParams(error)) => {
                Err(path_error(error.into_kind()))
            }
            Err(_) => Err(ApiError::NoRoute),
        }
    }
}

fn path_error(kind: ErrorKind) -> ApiError {
    let (key, value, expected) = match kind {
        ErrorKind::ParseErrorAtKey {
            key,
            value,
            expected_type,
        } => (key, value, expected_type),
        ErrorKind::ParseError {
            value,
            expected_type,
        } => (String::new(), value, expected_type),
        ErrorKind::ParseErrorAtIndex {
            index,
            value,
            expected_type,
        } => (index.to_string(), value, expected_type),
        // A type's own parser refused the value: every typed path parameter of this API is a
        // UUID (the others are strings, which cannot fail).
        ErrorKind::DeserializeError { key, value, .. } => {
            return ApiError::invalid_in(
                Location::Path,
                &key,
                ErrorCode::InvalidPathParameter,
                format!("`{}` is not a UUID", echo(&value)),
            );
        }
        ErrorKind::InvalidUtf8InPathParam { key } => {
            return ApiError::invalid_in(
                Location::Path,
                &key,
                ErrorCode::InvalidPathParameter,
                "must be valid UTF-8",
            );
        }
        _ => return ApiError::NoRoute,
    };
    ApiError::invalid_in(
        Location::Path,
        &key,
        ErrorCode::InvalidPathParameter,
        format!("`{}` is not {}", echo(&value), type_in_words(expected)),
    )
}

/// A parameter value as echoed back in a message: at most [`ECHO_CHARS_MAX`] characters, none
/// of them a control character.
pub fn echo(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_control())
        .take(ECHO_CHARS_MAX)
        .collect()
}

fn type_in_words(rust: &str) -> &'static str {
    match rust.rsplit("::").next().unwrap_or(rust) {
        "Uuid" => "a UUID",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number",
        "NaiveDate" => "a date (YYYY-MM-DD)",
        _ => "a valid value",
    }
}

/// The query string as names and values; a name given twice is refused (no last-wins).
#[derive(Debug, Clone, Default)]
pub struct Query(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Query {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Query, ApiError> {
        let text = parts.uri.query().unwrap_or("");
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(text).map_err(|_| {
            ApiError::invalid_in(
                Location::Query,
                "",
                ErrorCode::InvalidQuery,
                "the query string is not valid percent-encoded UTF-8",
            )
        })?;
        let mut map = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if map.contains_key(&name) {
                return Err(ApiError::invalid_in(
                    Location::Query,
                    &echo(&name),
                    ErrorCode::DuplicateParameter,
                    "is given more than once",
                ));
            }
            map.insert(name, value);
        }
        Ok(Query(map))
    }
}
