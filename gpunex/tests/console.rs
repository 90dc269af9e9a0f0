//! The console's files and the browser session, over real HTTP, on SQLite and PostgreSQL: the
//! shell and its assets with their security headers and language; the session in an
//! `HttpOnly`, `SameSite=Strict` cookie whose token the body never carries; every state change
//! through the cookie refused without the session's CSRF token, and nothing written then.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::json;

conformance!(
    the_console_is_served_in_the_readers_language,
    a_browser_session_lives_in_an_http_only_cookie_and_changes_need_its_csrf_token,
);

mod common;

async fn get(base: &str, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(format!("{base}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

async fn the_console_is_served_in_the_readers_language(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let base = common::serve(state).await;
    for (path, headers, lang) in [
        ("/", vec![], "es"),
        (
            "/console/sign-in",
            vec![("accept-language", "en-US,en;q=0.9")],
            "en",
        ),
        (
            "/console/roles",
            vec![("accept-language", "en"), ("cookie", "gpunex_lang=es")],
            "es",
        ),
    ] {
        let response = get(&base, path, &headers).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let csp = response.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let page = response.text().await.unwrap();
        assert!(
            page.contains(&format!("<html lang=\"{lang}\">")),
            "{path}: {page}"
        );
        assert!(page.contains("/assets/console.js"));
    }
    for (path, content_type) in [
        ("/assets/console.js", "text/javascript"),
        ("/assets/console.css", "text/css"),
        ("/assets/i18n/es.json", "application/json"),
        ("/assets/i18n/en.json", "application/json"),
    ] {
        let response = get(&base, path, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(content_type),
            "{path}"
        );
    }
    let response = get(&base, "/assets/i18n/fr.json", &[]).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let problem: serde_json::Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "not_found");
}

async fn send(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, reqwest::header::HeaderMap, serde_json::Value) {
    let verb = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new().request(verb, format!("{base}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    common::assert_documented(method, path, status);
    let body = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, headers, body)
}

async fn a_browser_session_lives_in_an_http_only_cookie_and_changes_need_its_csrf_token(
    db: &TestDb,
) {
    let state = AppState::load(db.open().await).await.unwrap();
    let store = state.store.clone();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    let credentials =
        json!({"email": "ana@example.com", "password": "correct horse battery staple"});
    let (status, _, _) = common::request(
        &base,
        "POST",
        "/v1/accounts",
        None,
        Some(credentials.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);

    let (status, headers, session) = common::request(
        &base,
        "POST",
        "/v1/browser-sessions",
        None,
        Some(credentials.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        session.get("token").is_none(),
        "the body never carries the token: {session}"
    );
    assert_eq!(headers["cache-control"], "no-store");
    let set_cookie = headers["set-cookie"].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    assert!(
        !set_cookie.contains("Secure"),
        "plain http here: {set_cookie}"
    );
    let token = set_cookie
        .split(';')
        .next()
        .and_then(|pair| pair.strip_prefix("gpunex_session="))
        .unwrap()
        .to_owned();
    assert!(token.starts_with("gpnx_"));
    let cookie = format!("gpunex_session={token}");
    let csrf = session["csrf_token"].as_str().unwrap().to_owned();
    assert_eq!(csrf.len(), 64);

    // Reads need only the cookie; the CSRF token is read back after a reload.
    let (status, _, me) = send(&base, "GET", "/v1/me", &[("cookie", &cookie)]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["email"], "ana@example.com");
    let (status, _, current) =
        send(&base, "GET", "/v1/sessions/current", &[("cookie", &cookie)]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(current["presented_as"], "cookie");
    assert_eq!(current["csrf_token"], csrf.as_str());
    assert_eq!(current["expires_at"], session["expires_at"]);

    // The same person's bearer session needs no CSRF token and is told none.
    let (_, _, bearer) =
        common::request(&base, "POST", "/v1/sessions", None, Some(credentials)).await;
    let bearer = bearer["token"].as_str().unwrap().to_owned();
    let (status, _, current) =
        common::request(&base, "GET", "/v1/sessions/current", Some(&bearer), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(current["presented_as"], "bearer");
    assert!(current["csrf_token"].is_null());

    // A change through the cookie without the session's CSRF token is refused, and writes
    // nothing; another session's token does not do either.
    let head = store.head_position().await.unwrap();
    let other_csrf = gpunex_api::auth::csrf_token(&bearer);
    for headers in [
        vec![("cookie", cookie.as_str())],
        vec![("cookie", cookie.as_str()), ("x-csrf-token", "0000")],
        vec![
            ("cookie", cookie.as_str()),
            ("x-csrf-token", other_csrf.as_str()),
        ],
    ] {
        let (status, _, problem) =
            send(&base, "POST", "/v1/sessions/current/revoke", &headers).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
        assert_eq!(problem["code"], "csrf_token_invalid");
    }
    assert_eq!(
        store.head_position().await.unwrap(),
        head,
        "nothing was written"
    );

    // A cookie admits only a person's session, never another kind of token.
    let admin_cookie = format!("gpunex_session={admin}");
    let (status, _, _) = send(&base, "GET", "/v1/events", &[("cookie", &admin_cookie)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // An Authorization header wins over the cookie.
    let (status, _, _) = send(
        &base,
        "GET",
        "/v1/me",
        &[("cookie", &cookie), ("authorization", "Bearer nonsense")],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Signing out with the token revokes the session and removes the cookie.
    let (status, headers, _) = send(
        &base,
        "POST",
        "/v1/sessions/current/revoke",
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let cleared = headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("gpunex_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    let (status, _, _) = send(&base, "GET", "/v1/me", &[("cookie", &cookie)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = common::request(&base, "GET", "/v1/me", Some(&bearer), None).await;
    assert_eq!(status, StatusCode::OK, "the other session is untouched");
}
