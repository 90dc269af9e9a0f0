//! One API error type, one table from code to HTTP status ([`status_of`]). Every non-2xx answer
//! is an RFC 9457 problem document with a code from the closed list
//! ([`gpunex_domain::codes::ErrorCode`], explained in `docs/errors.md`). Internal errors are
//! logged once here and never leaked to clients.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
pub use gpunex_domain::codes::ErrorCode;
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
    code: ErrorCode,
    message: impl Into<String>,
) -> FieldError {
    FieldError {
        field: field.to_owned(),
        location: location.name().to_owned(),
        code: code.as_str().to_owned(),
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
    #[error("the body must be XML: send Content-Type: application/xml")]
    UnsupportedMediaTypeXml,
    #[error("the body is larger than {bytes_max} bytes")]
    BodyTooLarge { bytes_max: usize },
    #[error("the body could not be read to its end")]
    BodyUnreadable,
    #[error("the body did not arrive within {seconds} seconds")]
    BodyTimeout { seconds: u64 },
    #[error("this token has {max} requests in flight; wait for one to finish")]
    TokenBusy { max: usize },
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
    #[error("no such {0}")]
    NotFound(&'static str),
    /// A refusal with its own code: the code decides the status ([`status_of`]).
    #[error("{detail}")]
    Refused { code: ErrorCode, detail: String },
    #[error("credentials cannot be checked right now; retry shortly")]
    CredentialsUnavailable,
    #[error("too many failed attempts; retry in {retry_after_seconds} seconds")]
    TooManyRequests { retry_after_seconds: u64 },
    #[error(
        "the database could not be reached or dropped the connection; retry (with the same Idempotency-Key, a retry acts once)"
    )]
    Unavailable(#[source] StoreError),
    #[error("internal error")]
    Internal(#[source] StoreError),
}

impl ApiError {
    /// A field of the request body, named by its JSON Pointer (`/gpus/0/model`; `""` is the
    /// whole body).
    pub fn body(pointer: &str, code: ErrorCode, message: impl Into<String>) -> ApiError {
        debug_assert!(pointer.is_empty() || pointer.starts_with('/'), "{pointer}");
        ApiError::invalid_in(Location::Body, pointer, code, message)
    }

    /// A query parameter, by name.
    pub fn query(name: &str, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError::invalid_in(Location::Query, name, code, message)
    }

    /// A path parameter, by name.
    pub fn path(name: &str, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError::invalid_in(Location::Path, name, code, message)
    }

    pub fn invalid_in(
        location: Location,
        field: &str,
        code: ErrorCode,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError::InvalidRequest(vec![field_error(location, field, code, message)])
    }

    /// A refusal with `code` (its status is the code's).
    pub fn refused(code: ErrorCode, detail: impl Into<String>) -> ApiError {
        ApiError::Refused {
            code,
            detail: detail.into(),
        }
    }

    /// The stable code clients and operators match on.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            ApiError::MalformedJson(_) => ErrorCode::MalformedJson,
            ApiError::UnsupportedMediaType | ApiError::UnsupportedMediaTypeXml => {
                ErrorCode::UnsupportedMediaType
            }
            ApiError::BodyTooLarge { .. } => ErrorCode::BodyTooLarge,
            ApiError::BodyUnreadable => ErrorCode::BodyUnreadable,
            ApiError::BodyTimeout { .. } => ErrorCode::RequestTimeout,
            ApiError::TokenBusy { .. } => ErrorCode::TooManyRequests,
            ApiError::NoRoute | ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::Forbidden | ApiError::RoleNotAdmitted { .. } => ErrorCode::Forbidden,
            ApiError::OtherProvider => ErrorCode::OtherProvider,
            ApiError::Refused { code, .. } => *code,
            ApiError::CredentialsUnavailable => ErrorCode::CredentialsUnavailable,
            ApiError::TooManyRequests { .. } => ErrorCode::TooManyAttempts,
            ApiError::Unavailable(_) => ErrorCode::DatabaseUnavailable,
            ApiError::Internal(_) => ErrorCode::Internal,
        }
    }
}

/// The HTTP status of each code: one table, so a code always answers with the same status.
/// Codes that only name a field (inside `invalid_request`) are `400`.
pub const fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::Forbidden
        | C::CsrfTokenInvalid
        | C::OtherProvider
        | C::MachineNotOwned
        | C::RoleNotIssuable
        | C::RoleNotHeld
        | C::NotTheApplicant
        | C::SamePerson => StatusCode::FORBIDDEN,
        C::NotFound => StatusCode::NOT_FOUND,
        C::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        C::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        C::AlreadyDecided
        | C::AlreadyDelisted
        | C::AlreadyEnded
        | C::AlreadyIssued
        | C::AlreadyListed
        | C::AlreadyRevoked
        | C::AlreadySignedOut
        | C::AlreadySubmitted
        | C::BankFileChanged
        | C::BatchInProgress
        | C::ConcurrentChange
        | C::DatedBeforeSubmission
        | C::EmailTaken
        | C::GpuNotAvailable
        | C::GpuRegisteredElsewhere
        | C::IdempotencyConflict
        | C::InvalidTransition
        | C::MachineNotRegistered
        | C::MachineRegisteredElsewhere
        | C::NoMatch
        | C::NoOverride
        | C::NoSuchMaintenance
        | C::NotABankPayout
        | C::NotApproved
        | C::NotDelisted
        | C::NotPaused
        | C::NothingToFile
        | C::NothingToOverride
        | C::PayoutNotSubmitted
        | C::ReportContradictsPayout
        | C::RequestCommitted
        | C::RequestInProgress
        | C::ResponseTooLarge
        | C::RetestPending
        | C::SelfReview
        | C::TierRulesBroken
        | C::TooManyTokens
        | C::WrongExpectedVersion => StatusCode::CONFLICT,
        C::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        C::AccountNotAdjustable
        | C::AmountOutOfRange
        | C::BankFileInvalid
        | C::BankRailNotConfigured
        | C::DateInFuture
        | C::IdempotencyKeyReused
        | C::InvalidAppend
        | C::MachineIdUnknown
        | C::NotAPayoutDate
        | C::NotBenchmarkable
        | C::ReportAmountMismatch
        | C::ReportTransactionUnknown
        | C::UndecodableEvent
        | C::UsageOutOfRange => StatusCode::UNPROCESSABLE_ENTITY,
        C::RetestTooSoon | C::TooManyAttempts | C::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        C::DatabaseUnavailable
        | C::CredentialsUnavailable
        | C::StoreUnavailable
        | C::ServerBusy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    }
}

impl From<gpunex_app::AppError> for ApiError {
    fn from(error: gpunex_app::AppError) -> Self {
        match error {
            gpunex_app::AppError::ReadModelsBehind => ApiError::CredentialsUnavailable,
            gpunex_app::AppError::Store(error) => ApiError::from(error),
            gpunex_app::AppError::Append(error) => append_failure(error),
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
        let code = self.code();
        let status = status_of(code);
        let retry_after = match &self {
            ApiError::TooManyRequests {
                retry_after_seconds,
            } => Some(*retry_after_seconds),
            _ if status == StatusCode::SERVICE_UNAVAILABLE
                || status == StatusCode::TOO_MANY_REQUESTS =>
            {
                Some(RETRY_AFTER_SECONDS)
            }
            _ => None,
        };
        let detail = match &self {
            ApiError::Unavailable(source) | ApiError::Internal(source) => {
                tracing::error!(error = %source, code = code.as_str(), "request failed");
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
        let mut response = problem(code, detail, errors);
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

/// The problem document (`application/problem+json`) of a code, with the code's status.
pub fn problem(code: ErrorCode, detail: String, errors: Vec<FieldError>) -> Response {
    let status = status_of(code);
    let problem = Problem {
        type_uri: format!("{ERROR_TYPE_BASE}{code}"),
        title: status.canonical_reason().unwrap_or("error").to_lowercase(),
        status: status.as_u16(),
        detail,
        code: code.as_str().to_owned(),
        errors,
    };
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, PROBLEM_CONTENT_TYPE)], body).into_response()
}

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// `Retry-After` of a `503` or a `429` that has no better estimate, in seconds.
pub const RETRY_AFTER_SECONDS: u64 = 1;

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
                ErrorCode::MethodNotAllowed,
                format!("this path does not accept {method}; it accepts {allowed}"),
            )
        }
        StatusCode::PAYLOAD_TOO_LARGE => {
            (ErrorCode::BodyTooLarge, "the body is too large".to_owned())
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            ErrorCode::UnsupportedMediaType,
            "the body must be JSON: send Content-Type: application/json".to_owned(),
        ),
        StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no route for this path".to_owned()),
        StatusCode::REQUEST_TIMEOUT => (
            ErrorCode::RequestTimeout,
            "the request was not received in time".to_owned(),
        ),
        status if status.is_server_error() => {
            tracing::error!(
                status = status.as_u16(),
                "an error answer without a problem document"
            );
            (ErrorCode::Internal, "internal error".to_owned())
        }
        _ => {
            tracing::warn!(
                status = status.as_u16(),
                "an error answer without a problem document"
            );
            (
                ErrorCode::InvalidRequest,
                "the request is not valid".to_owned(),
            )
        }
    };
    let mut fixed = problem(code, detail, Vec::new());
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            fixed.headers_mut().insert(name.clone(), value.clone());
        }
    }
    fixed
}

/// A command the executor refused: the rule's own answer (`rule`), `concurrent_change` with
/// `contended` when the streams kept moving, or an event id stored with other content.
pub(crate) fn command_refused<R>(
    refusal: gpunex_app::command::Rejection<R>,
    rule: impl FnOnce(R) -> ApiError,
    contended: &str,
) -> ApiError {
    use gpunex_app::command::Rejection;
    match refusal {
        Rejection::Rule(error) => rule(error),
        Rejection::Contended { .. } => ApiError::Refused {
            code: ErrorCode::ConcurrentChange,
            detail: contended.to_owned(),
        },
        Rejection::IdTaken { event_id, reason } => {
            append_failure(gpunex_store::AppendError::IdempotencyConflict { event_id, reason })
        }
    }
}

/// An append the store refused: its own failure, or a refusal in words for the caller (no
/// internal event id, stream name or limit constant in the message).
pub(crate) fn append_failure(error: gpunex_store::AppendError) -> ApiError {
    use gpunex_store::{AppendError, ConflictReason, InvalidAppend};
    match error {
        AppendError::Store(error) => error.into(),
        AppendError::ReservationLost => ApiError::refused(
            ErrorCode::RequestInProgress,
            "another server took over this request's Idempotency-Key while it ran; nothing was written: retry",
        ),
        AppendError::WrongExpectedVersion { .. } => ApiError::refused(
            ErrorCode::ConcurrentChange,
            "the resource changed while this request ran; read it again and retry",
        ),
        AppendError::IdempotencyConflict { event_id, reason } => ApiError::refused(
            ErrorCode::IdempotencyConflict,
            match reason {
                ConflictReason::DifferentContent => format!(
                    "event {event_id} was already recorded with other content; a retry must resend exactly the same event, a new event needs a new id"
                ),
                ConflictReason::PartiallyStored => format!(
                    "event {event_id} was already recorded as part of another request; send new events with new ids"
                ),
            },
        ),
        AppendError::Invalid(invalid) => {
            // Requests are checked before they reach the store: this is a check missing here.
            tracing::error!(error = %invalid, "an accepted request could not be recorded");
            let what = match invalid {
                InvalidAppend::PayloadTooLarge { .. } => {
                    "the request holds more than one record can"
                }
                InvalidAppend::TooManyEvents { .. } | InvalidAppend::TooManyStreams { .. } => {
                    "the request changes more at once than can be recorded together"
                }
                _ => "the request could not be recorded as it is",
            };
            ApiError::refused(
                ErrorCode::InvalidAppend,
                format!("{what}; nothing was recorded: make it smaller"),
            )
        }
    }
}

impl From<gpunex_store::AppendError> for ApiError {
    fn from(error: gpunex_store::AppendError) -> ApiError {
        append_failure(error)
    }
}
