//! Sign-up, sign-in and sign-out. Passwords are hashed with Argon2id (RustCrypto `argon2`, its
//! default parameters: 19 MiB, 2 passes) on a blocking thread; a session is a bearer token of
//! role `user` that expires after [`SESSION_HOURS`]. Failed sign-ins are rate-limited per address.

use gpunex_domain::codes::ErrorCode;
use std::time::{Duration, Instant};

use crate::json::Json;
use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::accounts;
use gpunex_domain::credentials::Role;
use gpunex_domain::time::{MICROS_PER_SECOND, Timestamp};
use gpunex_wire as wire;
use uuid::Uuid;

use crate::auth::Caller;
use crate::convert::timestamp;
use crate::error::ApiError;
use crate::state::AppState;
use crate::tokens::{TokenRequest, issue_token};

/// How long a session lasts.
pub const SESSION_HOURS: i64 = 12;
pub use crate::login_limit::{LOGIN_FAILURES_MAX, LOGIN_WINDOW, LoginLimiter};

/// Password hashes computed at once: each takes 19 MiB and a core for tens of milliseconds, and
/// sign-up and sign-in are public.
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(HASHING_CONCURRENCY_MAX);
const HASHING_CONCURRENCY_MAX: usize = 4;
/// Longest a request waits for a hashing slot before it is told to retry.
const HASHING_WAIT_MAX: Duration = Duration::from_secs(10);

async fn hashing_slot() -> Result<tokio::sync::SemaphorePermit<'static>, ApiError> {
    match tokio::time::timeout(HASHING_WAIT_MAX, HASHING.acquire()).await {
        Ok(Ok(permit)) => Ok(permit),
        _ => Err(ApiError::CredentialsUnavailable),
    }
}

/// An Argon2id hash of `password` (at most 4 at a time; 19 MiB each).
pub async fn hash_password(password: String) -> Result<String, ApiError> {
    let _slot = hashing_slot().await?;
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::encode_b64(Uuid::new_v4().as_bytes()).map_err(|e| e.to_string())?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::Internal(gpunex_store::StoreError::Unavailable(e.to_string())))?
    .map_err(|e| ApiError::Internal(gpunex_store::StoreError::Unavailable(e)))
}

/// A well-formed Argon2id hash with the default parameters that no password is known to match.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$1l0Y6bEGmqOi8bUqvYt2xuTtX2VqIl0rSC+dFoyTfgY";

/// Verifies `password` against `hash`, or against a fixed dummy hash when there is no such
/// user, so the answer takes the same time either way.
async fn verify_password(password: String, hash: Option<String>) -> bool {
    let Ok(_slot) = hashing_slot().await else {
        return false;
    };
    let known = hash.is_some();
    let hash = hash.unwrap_or_else(|| DUMMY_HASH.to_owned());
    let verified = tokio::task::spawn_blocking(move || {
        PasswordHash::new(&hash)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    })
    .await
    .unwrap_or(false);
    known && verified
}

fn invalid(field: &str, code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::body(field, code, message)
}

/// `POST /v1/accounts`: sign up. Public.
#[utoipa::path(
    post,
    path = "/v1/accounts",
    operation_id = "accounts_sign_up",
    tag = "accounts",
    summary = "sign up with email and password",
    responses((status = 201, description = "sign up with email and password", body = wire::Account)),
)]
pub async fn sign_up(
    State(state): State<AppState>,
    Json(request): Json<wire::Credentials>,
) -> Result<(StatusCode, Json<wire::Account>), ApiError> {
    let email = accounts::normalize_email(&request.email)
        .map_err(|m| invalid("/email", ErrorCode::InvalidEmail, m))?;
    accounts::check_password(&request.password)
        .map_err(|m| invalid("/password", ErrorCode::WeakPassword, m))?;
    let taken = || ApiError::Refused {
        code: ErrorCode::EmailTaken,
        detail: "an account with this email already exists".to_owned(),
    };
    // Checked before the hashing work (the command decides again on what it reads).
    if state.credentials.user_by_email(&email).is_some() {
        return Err(taken());
    }
    let user_id = Uuid::now_v7();
    let password_hash = hash_password(request.password).await?;
    gpunex_app::accounts::sign_up(&state.executor(), user_id, &email, &password_hash)
        .await?
        .map_err(|refusal| {
            crate::error::command_refused(
                refusal,
                |_| taken(),
                "another sign-up with this email ran at the same time; sign in or try again",
            )
        })?;
    Ok((StatusCode::CREATED, Json(wire::Account { user_id, email })))
}

/// `POST /v1/sessions`: sign in. Public; rate-limited per address.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    operation_id = "accounts_sign_in",
    tag = "accounts",
    summary = "sign in: an expiring session token",
    responses(
        (status = 201, description = "a session token", body = wire::Session),
        (status = 401, description = "unauthorized: a wrong email or password (which is not said)", body = wire::Problem, content_type = "application/problem+json"),
        (status = 429, description = "too_many_attempts: 5 failures within 15 minutes; retry after `Retry-After`", body = wire::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn sign_in(
    State(state): State<AppState>,
    Json(request): Json<wire::Credentials>,
) -> Result<
    (
        StatusCode,
        [(axum::http::HeaderName, &'static str); 1],
        Json<wire::Session>,
    ),
    ApiError,
> {
    let session = open_session(&state, request).await?;
    Ok((
        StatusCode::CREATED,
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(wire::Session {
            token: session.token,
            user_id: session.user_id,
            expires_at: timestamp(session.expires_at.unix_micros()),
        }),
    ))
}

/// `POST /v1/browser-sessions`: sign in from the console. Public; rate-limited per address
/// like `POST /v1/sessions`, whose session it is, but the token goes only into an `HttpOnly`,
/// `SameSite=Strict` cookie (`Secure` when the platform's public URL is https).
#[utoipa::path(
    post,
    path = "/v1/browser-sessions",
    operation_id = "accounts_sign_in_browser",
    tag = "accounts",
    summary = "sign in from a browser: the session in an HttpOnly cookie, and its CSRF token",
    responses(
        (status = 201, description = "signed in: `Set-Cookie: gpunex_session=...; HttpOnly; SameSite=Strict; Path=/`; send `csrf_token` as `X-CSRF-Token` with every change", body = wire::BrowserSession),
        (status = 401, description = "unauthorized: a wrong email or password (which is not said)", body = wire::Problem, content_type = "application/problem+json"),
        (status = 429, description = "too_many_attempts: 5 failures within 15 minutes; retry after `Retry-After`", body = wire::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn sign_in_browser(
    State(state): State<AppState>,
    Json(request): Json<wire::Credentials>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let session = open_session(&state, request).await?;
    let cookie = session_cookie(&session.token, SESSION_HOURS * 3_600, state.secure_cookies);
    let body = wire::BrowserSession {
        user_id: session.user_id,
        expires_at: timestamp(session.expires_at.unix_micros()),
        csrf_token: crate::auth::csrf_token(&session.token),
    };
    Ok((
        StatusCode::CREATED,
        [
            (axum::http::header::CACHE_CONTROL, "no-store".to_owned()),
            (axum::http::header::SET_COOKIE, cookie),
        ],
        Json(body),
    )
        .into_response())
}

/// The `Set-Cookie` value of the browser session (`max_age_seconds` 0 removes it).
fn session_cookie(token: &str, max_age_seconds: i64, secure: bool) -> String {
    format!(
        "{}={token}; Path=/; Max-Age={max_age_seconds}; HttpOnly; SameSite=Strict{}",
        crate::auth::SESSION_COOKIE,
        if secure { "; Secure" } else { "" }
    )
}

/// A session opened by a right email and password.
struct Opened {
    token: String,
    user_id: Uuid,
    expires_at: Timestamp,
}

/// Checks the email and password (rate-limited per address) and issues a session token.
async fn open_session(state: &AppState, request: wire::Credentials) -> Result<Opened, ApiError> {
    // Normalized first: the limiter and the lookup key on the same address, and junk never
    // reaches the limiter.
    let address = accounts::normalize_email(&request.email)
        .map_err(|_| ApiError::Unauthorized)?
        .to_lowercase();
    let started = Instant::now();
    if let Err(retry_after) = state.login_limiter.begin_attempt(&address, started) {
        return Err(ApiError::TooManyRequests {
            retry_after_seconds: retry_after,
        });
    }
    if request.password.chars().count() > accounts::PASSWORD_CHARS_MAX {
        return Err(ApiError::Unauthorized);
    }
    let user = state.credentials.user_by_email(&address);
    let verified = verify_password(
        request.password,
        user.as_ref().map(|u| u.password_hash.clone()),
    )
    .await;
    let Some(user) = user.filter(|_| verified) else {
        return Err(ApiError::Unauthorized);
    };
    state.login_limiter.clear(&address);
    let at = state.clock.now();
    let expires_at =
        Timestamp::from_unix_micros(at.unix_micros() + SESSION_HOURS * 3_600 * MICROS_PER_SECOND);
    let actor = format!("user:{}", user.user_id);
    let (new, _) = issue_token(
        &state.store,
        &state.credentials,
        TokenRequest {
            expires_at: Some(expires_at),
            ..TokenRequest::new(
                Role::User {
                    user_id: user.user_id,
                },
                "session",
                &actor,
            )
        },
    )
    .await?;
    Ok(Opened {
        token: new.token,
        user_id: user.user_id,
        expires_at,
    })
}

/// `GET /v1/sessions/current`: the session the request is made with, and a browser session's
/// CSRF token (how the console, which cannot read its cookie, learns it after a reload).
#[utoipa::path(
    get,
    path = "/v1/sessions/current",
    operation_id = "accounts_current_session",
    tag = "accounts",
    summary = "the current session, and a browser session's CSRF token",
    responses((status = 200, description = "the current session", body = wire::CurrentSession)),
)]
pub async fn current_session(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    caller: Caller,
) -> Result<
    (
        [(axum::http::HeaderName, &'static str); 1],
        Json<wire::CurrentSession>,
    ),
    ApiError,
> {
    let Role::User { user_id } = caller.role else {
        return Err(ApiError::Forbidden);
    };
    let record = state
        .credentials
        .get(&caller.token_id)
        .ok_or(ApiError::Unauthorized)?;
    let (presented_as, csrf_token) = match crate::auth::presented(&headers) {
        Some(crate::auth::Presented::Cookie(token)) => {
            ("cookie", Some(crate::auth::csrf_token(token)))
        }
        _ => ("bearer", None),
    };
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Json(wire::CurrentSession {
            user_id,
            token_id: caller.token_id,
            expires_at: record.expires_at.map(|at| timestamp(at.unix_micros())),
            presented_as: presented_as.to_owned(),
            csrf_token,
        }),
    ))
}

/// `POST /v1/sessions/current/revoke`: sign out (the session's own token).
#[utoipa::path(
    post,
    path = "/v1/sessions/current/revoke",
    operation_id = "accounts_sign_out",
    tag = "accounts",
    summary = "sign out",
    responses((status = 204, description = "signed out: the session token is revoked (and a browser's session cookie removed)")),
)]
pub async fn sign_out(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<(StatusCode, [(axum::http::HeaderName, String); 1]), ApiError> {
    gpunex_app::credentials::revoke(
        &state.executor(),
        caller.token_id,
        None,
        &caller.actor(),
        "signed out",
    )
    .await?
    .map_err(|refusal| {
        crate::error::command_refused(
            refusal,
            |e| ApiError::Refused {
                code: ErrorCode::AlreadySignedOut,
                detail: e.to_string(),
            },
            "the session changed while signing out; sign in again",
        )
    })?;
    Ok((
        StatusCode::NO_CONTENT,
        [(
            axum::http::header::SET_COOKIE,
            session_cookie("", 0, state.secure_cookies),
        )],
    ))
}

/// `GET /v1/me`: the Roles page.
#[utoipa::path(
    get,
    path = "/v1/me",
    operation_id = "accounts_me",
    tag = "accounts",
    summary = "the Roles page: who you are and what you may do",
    responses((status = 200, description = "the Roles page", body = wire::Me)),
)]
pub async fn me(State(state): State<AppState>, caller: Caller) -> Result<Json<wire::Me>, ApiError> {
    let Role::User { user_id } = caller.role else {
        return Err(ApiError::Forbidden);
    };
    let user = state
        .credentials
        .user(&user_id)
        .ok_or(ApiError::NotFound("account"))?;
    // Every signed-in person may rent; an open application makes them an applicant; each
    // approved application makes them the holder of that provider.
    let mut roles = vec!["renter".to_owned()];
    let own: Vec<_> = state
        .credentials
        .applications()
        .into_iter()
        .map(|(_, a)| a)
        .filter(|a| a.applicant_user_id == user_id)
        .collect();
    if own.iter().any(|a| !a.status.is_decided()) {
        roles.push("applicant".to_owned());
    }
    roles.extend(
        own.iter()
            .filter_map(|a| a.provider_id)
            .map(|id| format!("provider:{id}")),
    );
    // Staff roles granted to the account (`gpunex admin grant`), which the session acts in by
    // naming them in `X-GPUnex-Act-As`.
    roles.extend(
        state
            .credentials
            .staff_roles(&user_id)
            .into_iter()
            .map(|role| role.name().to_owned()),
    );
    Ok(Json(wire::Me {
        user_id,
        email: user.email,
        roles,
        apply_as_provider: "/v1/applications".to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passwords_hash_with_argon2id_and_verify() {
        let hash = hash_password("correct horse battery".to_owned())
            .await
            .unwrap();
        assert!(
            hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{hash}"
        );
        assert!(verify_password("correct horse battery".to_owned(), Some(hash.clone())).await);
        assert!(!verify_password("wrong horse battery".to_owned(), Some(hash)).await);
        // The dummy is a real Argon2id hash, so unknown addresses cost a full verification.
        assert!(PasswordHash::new(DUMMY_HASH).is_ok());
        assert!(!verify_password("anything".to_owned(), None).await);
    }

    #[test]
    fn the_limiter_counts_attempts_and_forgets_them() {
        let limiter = LoginLimiter::default();
        let start = Instant::now();
        for _ in 0..LOGIN_FAILURES_MAX {
            assert_eq!(limiter.begin_attempt("a@b.co", start), Ok(()));
        }
        assert!(
            limiter.begin_attempt("a@b.co", start).is_err(),
            "the sixth attempt in the window is refused"
        );
        assert_eq!(limiter.begin_attempt("other@b.co", start), Ok(()));
        assert_eq!(
            limiter.begin_attempt("a@b.co", start + LOGIN_WINDOW),
            Ok(()),
            "attempts age out"
        );
        limiter.clear("a@b.co");
        assert_eq!(limiter.begin_attempt("a@b.co", start), Ok(()));
    }
}
