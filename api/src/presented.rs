//! How a request presents its credential: the `Authorization` header or the browser session
//! cookie, and the session's CSRF token (ADR 0008). A leaf: authentication (`auth`) and
//! idempotency scoping both read it.

/// The browser session cookie's name (`POST /v1/browser-sessions` sets it).
pub const SESSION_COOKIE: &str = "gpunex_session";
/// The header a cookie-authenticated state change carries its CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The header a person's session names the role it acts in (`admin`, `finance`, `treasury`,
/// `provider:<provider id>`): see `auth::act_as`.
pub const ACT_AS_HEADER: &str = "x-gpunex-act-as";

/// How a request presents its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    /// `Authorization: Bearer <token>` (`None`: the header is there but is not a bearer token).
    Bearer(Option<&'a str>),
    /// The browser session cookie.
    Cookie(&'a str),
}

impl<'a> Presented<'a> {
    /// The token, if the request presented one in a usable form.
    pub fn token(self) -> Option<&'a str> {
        match self {
            Presented::Bearer(token) => token,
            Presented::Cookie(token) => Some(token),
        }
    }
}

/// The credential a request presents: its `Authorization` header if it has one (even a
/// malformed one, which then authenticates no one), else the session cookie.
pub fn presented(headers: &axum::http::HeaderMap) -> Option<Presented<'_>> {
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let token = value.to_str().ok().and_then(|value| {
            // The scheme is case-insensitive (RFC 9110, section 11.1).
            let (scheme, token) = value.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim())
        });
        return Some(Presented::Bearer(token));
    }
    session_cookie(headers).map(Presented::Cookie)
}

/// The session cookie's value, from any `Cookie` header (RFC 6265, section 5.4).
pub fn session_cookie(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value.trim_matches('"'))
}

/// The CSRF token of a browser session: the hex SHA-256 of the session token under a fixed
/// label. It reveals nothing of the token, needs no stored state (any process can check it),
/// and changes with every session.
pub fn csrf_token(session_token: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"gpunex console csrf v1\0");
    hash.update(session_token.as_bytes());
    hex::encode(hash.finalize())
}
