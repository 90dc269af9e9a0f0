//! One API error type, one table from error to HTTP status and stable code. Internal errors are
//! logged once here and never leaked to clients.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpunex_store::StoreError;
use gpunex_wire::{FieldError, Problem};

/// Where an invalid field is: the body (named by a JSON Pointer), a query or path parameter,
/// or a header (named by their names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Body,
    Query,
    Path,
    Header,
}

impl Location {
    pub fn name(self) -> &'static str {
        match self {
            Location::Body => "body",
            Location::Query => "query",
            Location::Path => "path",
            Location::Header => "header",
        }
    }
}

/// One invalid field.
pub fn field_error(
    location: Location,
    field: &str,
    code: &str,
    message: impl Into<String>,
) -> FieldError {
    FieldError {
        field: field.to_owned(),
        location: location.name().to_owned(),
        code: code.to_owned(),
        message: message.into(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the request has invalid parameters")]
    InvalidRequest(Vec<FieldError>),
    #[error("the body is not valid JSON: {0}")]
    MalformedJson(String),
    #[error("the body must be JSON: send Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("the body is larger than {bytes_max} bytes")]
    BodyTooLarge { bytes_max: usize },
    #[error("the body could not be read to its end")]
    BodyUnreadable,
    #[error("no route for this path")]
    NoRoute,
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("this role may not call this endpoint")]
    Forbidden,
    #[error("a {role} token may not call this endpoint; it admits {admitted}")]
    RoleNotAdmitted {
        role: &'static str,
        admitted: String,
    },
    #[error("this token acts for another provider")]
    OtherProvider,
    #[error("{detail}")]
    Denied { code: &'static str, detail: String },
    #[error("no such {0}")]
    NotFound(&'static str),
    #[error("{detail}")]
    Conflict { code: &'static str, detail: String },
    #[error("{detail}")]
    Unprocessable { code: &'static str, detail: String },
    #[error("credentials cannot be checked right now; retry shortly")]
    CredentialsUnavailable,
    #[error("too many failed attempts; retry in {retry_after_seconds} seconds")]
    TooManyRequests { retry_after_seconds: u64 },
    #[error("the database is unavailable")]
    Unavailable(#[source] StoreError),
    #[error("internal error")]
    Internal(#[source] StoreError),
}

impl ApiError {
    pub fn invalid(field: &str, code: &str, message: impl Into<String>) -> ApiError {
        let location = if field.is_empty() || field.starts_with('/') {
            Location::Body
        } else {
            Location::Query
        };
        ApiError::invalid_in(location, field, code, message)
    }

    pub fn invalid_in(
        location: Location,
        field: &str,
        code: &str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError::InvalidRequest(vec![field_error(location, field, code, message)])
    }

    /// The stable code clients and operators match on.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::MalformedJson(_) => (StatusCode::BAD_REQUEST, "malformed_json"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            ApiError::BodyUnreadable => (StatusCode::BAD_REQUEST, "body_unreadable"),
            ApiError::NoRoute | ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden | ApiError::RoleNotAdmitted { .. } => {
                (StatusCode::FORBIDDEN, "forbidden")
            }
            ApiError::OtherProvider => (StatusCode::FORBIDDEN, "other_provider"),
            ApiError::Denied { code, .. } => (StatusCode::FORBIDDEN, code),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable"),
            ApiError::CredentialsUnavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "credentials_unavailable")
            }
            ApiError::TooManyRequests { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_attempts")
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        if error.is_unavailable() {
            ApiError::Unavailable(error)
        } else {
            ApiError::Internal(error)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let retry_after = match &self {
            ApiError::TooManyRequests {
                retry_after_seconds,
            } => Some(*retry_after_seconds),
            _ => None,
        };
        let detail = match &self {
            ApiError::Unavailable(source) | ApiError::Internal(source) => {
                tracing::error!(error = %source, code, "request failed");
                self.to_string()
            }
            ApiError::InvalidRequest(errors) => errors
                .iter()
                .map(|e| format!("{}: {}", e.field, e.message))
                .collect::<Vec<_>>()
                .join("; "),
            _ => self.to_string(),
        };
        let errors = match self {
            ApiError::InvalidRequest(errors) => errors,
            _ => Vec::new(),
        };
        let mut response = problem(status, code, detail, errors);
        if let Some(seconds) = retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The problem document (`application/problem+json`) of a status and code.
pub fn problem(
    status: StatusCode,
    code: &str,
    detail: String,
    errors: Vec<FieldError>,
) -> Response {
    let problem = Problem {
        type_uri: format!("{ERROR_TYPE_BASE}{code}"),
        title: status.canonical_reason().unwrap_or("error").to_lowercase(),
        status: status.as_u16(),
        detail,
        code: code.to_owned(),
        errors,
    };
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)], body).into_response()
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// Where each code is explained: the `type` of a problem is this followed by its code, an
/// anchor of the error table this server serves at `/docs/errors`.
pub const ERROR_TYPE_BASE: &str = "/docs/errors#";

/// The last layer of the router: any error answer that is not yet a problem document (the
/// framework's own: 405, a body the server refused before any extractor ran) becomes one, with
/// the code of its status, its headers (`Allow`) kept.
pub async fn problem_bodies(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_CONTENT_TYPE.as_bytes()));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let (parts, _) = response.into_parts();
    let (code, detail) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            (
                "method_not_allowed",
                format!("this path does not accept {method}; it accepts {allowed}"),
            )
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("body_too_large", "the body is too large".to_owned()),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            "the body must be JSON: send Content-Type: application/json".to_owned(),
        ),
        StatusCode::NOT_FOUND => ("not_found", "no route for this path".to_owned()),
        StatusCode::REQUEST_TIMEOUT => (
            "request_timeout",
            "the request was not received in time".to_owned(),
        ),
        status if status.is_server_error() => {
            tracing::error!(
                status = status.as_u16(),
                "an error answer without a problem document"
            );
            ("internal", "internal error".to_owned())
        }
        _ => {
            tracing::warn!(
                status = status.as_u16(),
                "an error answer without a problem document"
            );
            ("invalid_request", "the request is not valid".to_owned())
        }
    };
    let mut fixed = problem(status, code, detail, Vec::new());
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            fixed.headers_mut().insert(name.clone(), value.clone());
        }
    }
    fixed
}

/// An append the store refused: its own failure, or a conflict with its stable code.
pub(crate) fn append_failure(error: gpunex_store::AppendError) -> ApiError {
    match error {
        gpunex_store::AppendError::Store(error) => error.into(),
        other => ApiError::Conflict {
            code: other.code(),
            detail: other.to_string(),
        },
    }
}
