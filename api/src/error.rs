//! One API error type, one table from error to HTTP status and stable code. Internal errors are
//! logged once here and never leaked to clients.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gpunex_store::StoreError;
use gpunex_wire::{FieldError, Problem};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("the request has invalid parameters")]
    InvalidRequest(Vec<FieldError>),
    #[error("no route for this path")]
    NoRoute,
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("this role may not call this endpoint")]
    Forbidden,
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
        ApiError::InvalidRequest(vec![FieldError {
            field: field.to_owned(),
            code: code.to_owned(),
            message: message.into(),
        }])
    }

    /// The stable code clients and operators match on.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            ApiError::NoRoute | ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, "forbidden"),
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
        let problem = Problem {
            type_uri: format!("https://docs.gpunex.dev/errors/{code}"),
            title: status.canonical_reason().unwrap_or("error").to_lowercase(),
            status: status.as_u16(),
            detail,
            code: code.to_owned(),
            errors,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response();
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
