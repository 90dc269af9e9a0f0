//! Sign-up, sign-in, sessions and their limits, over real HTTP, on both databases.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

conformance!(
    sign_up_sign_in_and_out,
    failed_sign_ins_are_rate_limited,
    one_address_one_account_across_processes
);

mod common;

async fn call(
    base: &str,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, axum::http::HeaderMap, Value) {
    common::request(base, method, uri, token, body).await
}

const PASSWORD: &str = "correct horse battery staple";

async fn sign_up_sign_in_and_out(db: &TestDb) {
    let app = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let signup = json!({"email": "Ada@Example.com", "password": PASSWORD});
    let (status, _, account) = call(&app, "POST", "/v1/accounts", None, Some(signup)).await;
    assert_eq!(status, StatusCode::CREATED, "{account}");
    assert_eq!(account["email"], "Ada@example.com");

    // Bad input: precise field errors, nothing stored.
    for (body, field) in [
        (
            json!({"email": "not-an-email", "password": PASSWORD}),
            "/email",
        ),
        (
            json!({"email": "bob@example.com", "password": "short"}),
            "/password",
        ),
    ] {
        let (status, _, problem) = call(&app, "POST", "/v1/accounts", None, Some(body)).await;
        assert_eq!(
            (status, problem["errors"][0]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field))
        );
    }
    let duplicate = json!({"email": "ada@EXAMPLE.com", "password": PASSWORD});
    let (status, _, problem) = call(&app, "POST", "/v1/accounts", None, Some(duplicate)).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("email_taken"))
    );

    for wrong in [
        json!({"email": "ada@example.com", "password": "wrong horse battery"}),
        json!({"email": "nobody@example.com", "password": PASSWORD}),
    ] {
        assert_eq!(
            call(&app, "POST", "/v1/sessions", None, Some(wrong))
                .await
                .0,
            StatusCode::UNAUTHORIZED
        );
    }
    let (status, headers, session) = call(
        &app,
        "POST",
        "/v1/sessions",
        None,
        Some(json!({"email": "ADA@example.com", "password": PASSWORD})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    assert_eq!(headers["cache-control"], "no-store");
    let token = session["token"].as_str().unwrap().to_owned();
    let (status, _, me) = call(&app, "GET", "/v1/me", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (me["email"].as_str(), me["user_id"].clone()),
        (Some("Ada@example.com"), account["user_id"].clone())
    );
    // A person's session is not an operator credential.
    assert_eq!(
        call(&app, "GET", "/v1/events", Some(&token), None).await.0,
        StatusCode::FORBIDDEN
    );
    // A person lists only their own renter tokens: none yet.
    let (status, _, tokens) = call(&app, "GET", "/v1/tokens", Some(&token), None).await;
    assert_eq!(
        (status, tokens["tokens"].clone()),
        (StatusCode::OK, serde_json::json!([]))
    );

    assert_eq!(
        call(
            &app,
            "POST",
            "/v1/sessions/current/revoke",
            Some(&token),
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&app, "GET", "/v1/me", Some(&token), None).await.0,
        StatusCode::UNAUTHORIZED
    );
}

async fn failed_sign_ins_are_rate_limited(db: &TestDb) {
    let app = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let signup = json!({"email": "eve@example.com", "password": PASSWORD});
    assert_eq!(
        call(&app, "POST", "/v1/accounts", None, Some(signup))
            .await
            .0,
        StatusCode::CREATED
    );
    let wrong = json!({"email": "eve@example.com", "password": "guess guess guess"});
    for _ in 0..gpunex_api::accounts::LOGIN_FAILURES_MAX {
        assert_eq!(
            call(&app, "POST", "/v1/sessions", None, Some(wrong.clone()))
                .await
                .0,
            StatusCode::UNAUTHORIZED
        );
    }
    let right = json!({"email": "eve@example.com", "password": PASSWORD});
    let (status, headers, problem) = call(&app, "POST", "/v1/sessions", None, Some(right)).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_attempts"))
    );
    assert!(
        headers["retry-after"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
}

/// Two server processes racing to register one address: exactly one account.
async fn one_address_one_account_across_processes(db: &TestDb) {
    let a = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let b = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let body = json!({"email": "race@example.com", "password": PASSWORD});
    let (ra, rb) = tokio::join!(
        call(&a, "POST", "/v1/accounts", None, Some(body.clone())),
        call(&b, "POST", "/v1/accounts", None, Some(body)),
    );
    let mut statuses = [ra.0, rb.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
}
