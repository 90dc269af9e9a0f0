//! `Idempotency-Key` on every POST: the same key with the same request returns the original
//! response; the same key with a different request is `422 idempotency_key_reused`; a retry
//! while the first is still running is `409 request_in_progress`.
//!
//! Keys are scoped to the caller: the SHA-256 of the whole `Authorization` header or of the
//! browser session cookie (so no one can reach another caller's keys without their token), or
//! anonymous for requests with neither. Only
//! settled answers are kept: server errors and authentication refusals release the key so a
//! retry runs again. Responses that carry a secret (`token`) are stored without it: a replay
//! says what happened but cannot show the secret a second time.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpunex_domain::codes::ErrorCode;
use gpunex_store::idempotency::KeyState;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::AppState;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Longest key accepted, in bytes.
pub const KEY_BYTES_MAX: usize = 255;
/// Largest response body stored for replays, in bytes.
const BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

pub async fn idempotency(state: AppState, request: Request, next: Next) -> Response {
    if request.method() != Method::POST && request.method() != Method::PUT {
        return next.run(request).await;
    }
    let Some(key) = request.headers().get(IDEMPOTENCY_KEY).cloned() else {
        return next.run(request).await;
    };
    let key = match key.to_str() {
        Ok(key)
            if !key.is_empty()
                && key.len() <= KEY_BYTES_MAX
                && key.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            key.to_owned()
        }
        _ => {
            return ApiError::invalid_in(
                crate::error::Location::Header,
                "Idempotency-Key",
                ErrorCode::InvalidIdempotencyKey,
                "1 to 255 visible ASCII characters",
            )
            .into_response();
        }
    };
    let caller = key_scope(request.headers());
    let (parts, body) = request.into_parts();
    let bytes = match crate::json::read(Request::from_parts(parts.clone(), body)).await {
        Ok(bytes) => bytes,
        Err(error) => return error.into_response(),
    };
    let mut fingerprint = Sha256::new();
    fingerprint.update(parts.method.as_str().as_bytes());
    fingerprint.update([0]);
    fingerprint.update(parts.uri.path().as_bytes());
    fingerprint.update([0]);
    fingerprint.update(&bytes);
    let fingerprint = hex::encode(fingerprint.finalize());
    match state
        .store
        .reserve_idempotency_key(&caller, &key, &fingerprint)
        .await
    {
        Err(error) => ApiError::from(error).into_response(),
        Ok(KeyState::InProgress { request_sha256 })
        | Ok(KeyState::Done { request_sha256, .. })
        | Ok(KeyState::Committed { request_sha256, .. })
            if request_sha256 != fingerprint =>
        {
            ApiError::Refused {
                code: ErrorCode::IdempotencyKeyReused,
                detail: "this Idempotency-Key was used for a different request".to_owned(),
            }
            .into_response()
        }
        Ok(KeyState::InProgress { .. }) => ApiError::Refused {
            code: ErrorCode::RequestInProgress,
            detail: "a request with this Idempotency-Key is still being handled; retry shortly"
                .to_owned(),
        }
        .into_response(),
        Ok(KeyState::Done { status, body, .. }) => {
            // A stored answer is replayed only to a caller who could still make the request.
            if let Some(token) = crate::presented::presented(&parts.headers).and_then(|p| p.token())
                && state
                    .credentials
                    .authenticate(token, state.clock.now())
                    .is_none()
            {
                return ApiError::Unauthorized.into_response();
            }
            replay(status, body)
        }
        Ok(KeyState::Committed { position, .. }) => ApiError::Refused {
            code: ErrorCode::RequestCommitted,
            detail: format!(
                "a request with this Idempotency-Key was recorded (log position {position}) before the server handling it stopped, and its answer was lost; it is not run again: read the resource it changed"
            ),
        }
        .into_response(),
        Ok(KeyState::Reserved) => {
            // Detached: the handler and the record of its answer finish even if the client
            // goes away, so a committed action is never left behind an open reservation. Every
            // append it makes records its commit on the reservation (`in_request`), and the
            // reservation's lease is renewed while it runs.
            let request = Request::from_parts(parts, Body::from(bytes));
            let task = tokio::spawn(async move {
                let renewing = renew_lease(state.clone(), caller.clone(), key.clone());
                let response = gpunex_store::idempotency::in_request(
                    &state.store,
                    &caller,
                    &key,
                    next.run(request),
                )
                .await;
                renewing.abort();
                settle(&state, &caller, &key, &fingerprint, response).await
            });
            task.await
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// Renews this process's lease on the reservation until aborted.
fn renew_lease(state: AppState, caller: String, key: String) -> tokio::task::JoinHandle<()> {
    let period = std::time::Duration::from_micros(
        gpunex_store::idempotency::IDEMPOTENCY_LEASE_RENEW_US.unsigned_abs(),
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Err(error) = state.store.renew_idempotency_lease(&caller, &key).await {
                tracing::warn!(%error, "cannot renew an Idempotency-Key lease");
            }
        }
    })
}

/// Prepares the answer of a request with an `Idempotency-Key`, to be recorded with the append
/// that commits it (so a retry after a crash gets it, not a second run). Call right before the
/// request's last append; the body must hold no secret.
pub fn prepare_response<T: serde::Serialize>(status: StatusCode, body: &T) {
    if let Ok(body) = serde_json::to_string(body) {
        gpunex_store::idempotency::prepare_response(status.as_u16(), body);
    }
}

/// Whose keys a request reaches: the SHA-256 of its whole `Authorization` header, or of its
/// session cookie (under a label, so the two never meet), or the anonymous scope.
fn key_scope(headers: &axum::http::HeaderMap) -> String {
    match headers.get(header::AUTHORIZATION) {
        Some(value) => hex::encode(Sha256::digest(value.as_bytes())),
        None => match crate::presented::session_cookie(headers) {
            Some(token) => {
                let mut hash = Sha256::new();
                hash.update(b"cookie\0");
                hash.update(token.as_bytes());
                hex::encode(hash.finalize())
            }
            None => "anonymous".to_owned(),
        },
    }
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let content_type = if status.is_success() {
        "application/json"
    } else {
        "application/problem+json"
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    response
        .headers_mut()
        .insert("idempotency-replayed", HeaderValue::from_static("true"));
    response
}

/// Stores a settled response for later retries (and returns it), or releases the key.
async fn settle(
    state: &AppState,
    caller: &str,
    key: &str,
    fingerprint: &str,
    response: Response,
) -> Response {
    let status = response.status();
    let unsettled = status.is_server_error()
        || status == StatusCode::NOT_FOUND
        || status == StatusCode::METHOD_NOT_ALLOWED
        || status == StatusCode::UNAUTHORIZED
        || status == StatusCode::FORBIDDEN
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::CONFLICT;
    let (parts, body) = response.into_parts();
    let Ok(bytes) = to_bytes(body, BODY_BYTES_MAX).await else {
        let _ = state.store.release_idempotency_key(caller, key).await;
        return ApiError::Refused {
            code: ErrorCode::ResponseTooLarge,
            detail: "the response could not be kept for retries".to_owned(),
        }
        .into_response();
    };
    let outcome = if unsettled {
        state.store.release_idempotency_key(caller, key).await
    } else {
        state
            .store
            .complete_idempotency_key(
                caller,
                key,
                fingerprint,
                status.as_u16(),
                &without_secret(&bytes),
            )
            .await
    };
    if let Err(error) = outcome {
        tracing::warn!(%error, "cannot record an idempotent response");
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// The response body as stored: a top-level `token` (a secret shown once) becomes `null`.
fn without_secret(bytes: &[u8]) -> String {
    const SECRETS: [&str; 2] = ["token", "csrf_token"];
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(mut object))
            if SECRETS.iter().any(|key| object.contains_key(*key)) =>
        {
            for key in SECRETS {
                if object.contains_key(key) {
                    object.insert(key.to_owned(), serde_json::Value::Null);
                }
            }
            serde_json::Value::Object(object).to_string()
        }
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}
