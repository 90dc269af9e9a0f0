//! Bearer-token authentication, the browser session cookie, and role checks.
//!
//! A request presents its token in `Authorization: Bearer` or, from the console, in the
//! `HttpOnly` session cookie `POST /v1/browser-sessions` sets (ADR 0008). A cookie is ambient
//! (the browser attaches it by itself), so a state change made with it must also carry the
//! session's CSRF token in `X-CSRF-Token`: a hash of the session token that only a page able to
//! read `GET /v1/sessions/current` (same origin) learns. `Authorization` wins when both are sent.
//!
//! A person's session acts as the person (role `user`) unless the request names, in
//! `X-GPUnex-Act-As`, another role the person holds: a staff role granted to their account
//! (`admin`, `finance`, `treasury`) or a provider whose application they made and had approved
//! (`provider:<id>`). The request then runs in that role, with its session's expiry and
//! revocation, so a reviewer or a provider uses the console with their own account (ADR 0009).
//!
//! A token reads `gpnx_<token id, 32 hex>_<secret, 64 hex>`. The server keeps the credential
//! registry in memory (folded from the log, kept current by a subscription, and updated at once
//! by this process's own issues and revocations), hashes the presented secret with SHA-256 and
//! compares it in constant time. Tokens never appear in logs: the request log records the path
//! only.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
pub use gpunex_app::read_models::NewToken;
use gpunex_domain::credentials::Role;
use uuid::Uuid;

use crate::error::ApiError;
use crate::state::AppState;

/// Which kinds of caller an endpoint admits; every handler states its list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allow {
    Admin,
    Finance,
    Treasury,
    Provider,
    Agent,
    Renter,
    /// A signed-in person (session).
    User,
}

impl Allow {
    /// The role's name in tokens, documents and problem details.
    pub fn name(self) -> &'static str {
        match self {
            Allow::Admin => "admin",
            Allow::Finance => "finance",
            Allow::Treasury => "treasury",
            Allow::Provider => "provider",
            Allow::Agent => "agent",
            Allow::Renter => "renter",
            Allow::User => "user",
        }
    }

    fn of(role: Role) -> Allow {
        match role {
            Role::Admin => Allow::Admin,
            Role::Finance => Allow::Finance,
            Role::Treasury => Allow::Treasury,
            Role::Provider { .. } => Allow::Provider,
            Role::Agent { .. } => Allow::Agent,
            Role::Renter { .. } => Allow::Renter,
            Role::User { .. } => Allow::User,
        }
    }
}

/// What a route's guard needs: the registry to authenticate with, and the roles it admits.
#[derive(Clone)]
pub struct Guard {
    pub state: AppState,
    pub roles: &'static [crate::auth::Allow],
    /// The route also admits loopback requests without credentials (when the server allows).
    pub loopback: bool,
    /// The query parameters the route's operation declares.
    pub query_parameters: Arc<Vec<String>>,
}

/// Every route's first step: a route with roles authenticates the bearer token and refuses a
/// role it does not admit, before the body is read; the caller is then in the request's
/// extensions for the handler. A POST's `Idempotency-Key` is handled after that, so only an
/// admitted caller can reserve keys.
pub async fn guard(
    axum::extract::State(guard): axum::extract::State<Guard>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !guard.roles.is_empty() && !loopback_admitted(&guard, &request) {
        let caller = match authenticate(request.method(), request.headers(), &guard.state) {
            Ok(caller) => caller,
            Err(error) => return error.into_response(),
        };
        let role = Allow::of(caller.role);
        if !guard.roles.contains(&role) {
            return ApiError::RoleNotAdmitted {
                role: role.name(),
                admitted: guard
                    .roles
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .into_response();
        }
        let max = guard.state.limits.requests_in_flight_per_token_max;
        let Some(slot) = guard.state.token_load.enter(caller.token_id, max) else {
            return ApiError::TokenBusy { max }.into_response();
        };
        if let Err(error) = declared_query(&request, &guard.query_parameters) {
            return error.into_response();
        }
        request.extensions_mut().insert(caller);
        let response = crate::idempotency::idempotency(guard.state, request, next).await;
        drop(slot);
        return response;
    }
    if let Err(error) = declared_query(&request, &guard.query_parameters) {
        return error.into_response();
    }
    crate::idempotency::idempotency(guard.state, request, next).await
}

/// Whether a route that admits loopback requests has one: no credentials, from 127.0.0.0/8 or
/// ::1 (the server loop records each connection's peer), and the server allows it. A request
/// with credentials is authenticated as any other.
fn loopback_admitted(guard: &Guard, request: &axum::extract::Request) -> bool {
    guard.loopback
        && guard.state.metrics_loopback
        && presented(request.headers()).is_none()
        && request
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|peer| peer.0.ip().to_canonical().is_loopback())
}

/// Refuses a query parameter the route's operation does not declare: what the document lists
/// is all a route reads.
fn declared_query(request: &axum::extract::Request, declared: &[String]) -> Result<(), ApiError> {
    let Some(query) = request.uri().query() else {
        return Ok(());
    };
    for (name, _) in form_urlencoded_pairs(query) {
        if !declared.contains(&name) {
            let known = if declared.is_empty() {
                "this endpoint takes no query parameters".to_owned()
            } else {
                format!("known: {}", declared.join(", "))
            };
            return Err(ApiError::query(
                &crate::params::echo(&name),
                crate::error::ErrorCode::UnknownParameter,
                known,
            ));
        }
    }
    Ok(())
}

fn form_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default()
}

pub use crate::presented::{
    ACT_AS_HEADER, CSRF_HEADER, Presented, SESSION_COOKIE, csrf_token, presented, session_cookie,
};

/// The role a request acts in: its token's own, or the one `X-GPUnex-Act-As` names, which only
/// a person's session may name and only for a role the person holds now.
fn act_as(headers: &axum::http::HeaderMap, own: Role, state: &AppState) -> Result<Role, ApiError> {
    use crate::error::ErrorCode;
    use gpunex_domain::accounts::StaffRole;
    let Some(value) = headers.get(ACT_AS_HEADER) else {
        return Ok(own);
    };
    let invalid = || {
        ApiError::refused(
            ErrorCode::InvalidActAs,
            "X-GPUnex-Act-As is `admin`, `finance`, `treasury` or `provider:<provider id>`",
        )
    };
    let wanted = value.to_str().map_err(|_| invalid())?.trim();
    let Role::User { user_id } = own else {
        return Err(ApiError::refused(
            ErrorCode::RoleNotHeld,
            "only a person's session may act in another role",
        ));
    };
    let not_held = || {
        ApiError::refused(
            ErrorCode::RoleNotHeld,
            format!("this account does not hold the role `{wanted}`"),
        )
    };
    if let Some(id) = wanted.strip_prefix("provider:") {
        let provider_id = Uuid::parse_str(id).map_err(|_| invalid())?;
        let owns = state
            .credentials
            .provider_application(&provider_id)
            .is_some_and(|application| application.applicant_user_id == user_id);
        return if owns {
            Ok(Role::Provider { provider_id })
        } else {
            Err(not_held())
        };
    }
    let staff = StaffRole::parse(wanted).ok_or_else(invalid)?;
    if !state.credentials.staff_roles(&user_id).contains(&staff) {
        return Err(not_held());
    }
    Ok(match staff {
        StaffRole::Admin => Role::Admin,
        StaffRole::Finance => Role::Finance,
        StaffRole::Treasury => Role::Treasury,
    })
}

/// Whether a cookie-authenticated request to `method` carries its session's CSRF token (safe
/// methods need none).
fn csrf_checked(method: &axum::http::Method, headers: &axum::http::HeaderMap, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    if method.is_safe() {
        return true;
    }
    let expected = csrf_token(token);
    headers
        .get(CSRF_HEADER)
        .map(|sent| bool::from(sent.as_bytes().ct_eq(expected.as_bytes())))
        .unwrap_or(false)
}

/// The caller a request's `Authorization` header or session cookie names. A cookie admits only
/// a person's session, and a state change through it only with the session's CSRF token.
fn authenticate(
    method: &axum::http::Method,
    headers: &axum::http::HeaderMap,
    state: &AppState,
) -> Result<Caller, ApiError> {
    let presented = presented(headers).ok_or(ApiError::Unauthorized)?;
    let token = presented.token().ok_or(ApiError::Unauthorized)?;
    if !state.credentials.is_healthy() {
        return Err(ApiError::CredentialsUnavailable);
    }
    let record = state
        .credentials
        .authenticate(token, state.clock.now())
        .ok_or(ApiError::Unauthorized)?;
    if let Presented::Cookie(token) = presented {
        if !matches!(record.role, Role::User { .. }) {
            return Err(ApiError::Unauthorized);
        }
        if !csrf_checked(method, headers, token) {
            return Err(ApiError::refused(
                crate::error::ErrorCode::CsrfTokenInvalid,
                "a change made with the browser session needs its X-CSRF-Token header (from GET /v1/sessions/current)",
            ));
        }
    }
    Ok(Caller {
        token_id: record.token_id,
        role: act_as(headers, record.role, state)?,
    })
}

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: Uuid,
    pub role: Role,
}

impl Caller {
    /// Refuses a provider acting on another provider's resource (the route's guard has already
    /// checked the role).
    pub fn for_provider(&self, provider_id: Uuid) -> Result<(), ApiError> {
        match self.role {
            Role::Provider { provider_id: own } if own != provider_id => {
                Err(ApiError::OtherProvider)
            }
            _ => Ok(()),
        }
    }

    /// The renter this caller acts as: a renter token's person, or a signed-in person renting
    /// for themselves.
    pub fn renter_id(&self) -> Option<Uuid> {
        match self.role {
            Role::Renter { user_id } | Role::User { user_id } => Some(user_id),
            _ => None,
        }
    }

    /// `token:<id>`: who did it, in event metadata and `issued_by` fields.
    pub fn actor(&self) -> String {
        format!("token:{}", self.token_id)
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// The caller the route's guard authenticated (every route with roles has one).
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, ApiError> {
        match parts.extensions.get::<Caller>() {
            Some(caller) => Ok(caller.clone()),
            None => authenticate(&parts.method, &parts.headers, state),
        }
    }
}
