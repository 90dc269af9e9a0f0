//! Sign-up, sign-in, sessions and their limits, over real HTTP, on both databases.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

conformance!(
    sign_up_sign_in_and_out,
    failed_sign_ins_are_rate_limited,
    one_address_one_account_across_processes,
    sessions_are_forgotten_a_day_after_they_expire
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

/// Every sign-in issues a token, so servers forget one a day after it expires: the admin's list
/// shows it until then, it never authenticates after its expiry, and a restarted server (from
/// the snapshot or the log) agrees.
async fn sessions_are_forgotten_a_day_after_they_expire(db: &TestDb) {
    let clock = gpunex_tests::manual_clock();
    let store = db.open_with_clock(clock.clone()).await;
    let (admin, _) = gpunex_app::credentials::issue_unattended(
        &store,
        gpunex_domain::credentials::Role::Admin,
        "ops",
        "cli",
    )
    .await
    .unwrap()
    .unwrap();
    let app = common::serve(AppState::load(store.clone()).await.unwrap()).await;
    let signup = json!({"email": "ada@example.com", "password": PASSWORD});
    let (status, _, _) = call(&app, "POST", "/v1/accounts", None, Some(signup)).await;
    assert_eq!(status, StatusCode::CREATED);
    let sign_in = || {
        let app = app.clone();
        async move {
            let body = json!({"email": "ada@example.com", "password": PASSWORD});
            let (status, _, session) = call(&app, "POST", "/v1/sessions", None, Some(body)).await;
            assert_eq!(status, StatusCode::CREATED, "{session}");
            // A token is `<prefix>_<id, 32 hex digits>_<secret>`.
            let token = session["token"].as_str().unwrap().to_owned();
            let (rest, _secret) = token.rsplit_once('_').unwrap();
            let (_, id) = rest.rsplit_once('_').unwrap();
            let id = uuid::Uuid::try_parse(id).unwrap().to_string();
            (token, id)
        }
    };
    let listed = |base: String| {
        let admin = admin.token.clone();
        async move {
            let (status, _, page) = call(&base, "GET", "/v1/tokens", Some(&admin), None).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            page["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["token_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let (first, first_id) = sign_in().await;
    assert!(listed(app.clone()).await.contains(&first_id));

    // Expired after 12 hours; still listed for a day after.
    clock.advance_seconds(12 * 3_600 + 1);
    assert_eq!(
        call(&app, "GET", "/v1/me", Some(&first), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (_, second_id) = sign_in().await;
    let tokens = listed(app.clone()).await;
    assert!(tokens.contains(&first_id) && tokens.contains(&second_id));

    // A day after it expired, the next sign-in makes every server forget it.
    clock.advance_seconds(24 * 3_600);
    let (third, third_id) = sign_in().await;
    let tokens = listed(app.clone()).await;
    assert!(!tokens.contains(&first_id), "{tokens:?}");
    assert!(tokens.contains(&second_id) && tokens.contains(&third_id));
    assert_eq!(
        call(&app, "GET", "/v1/me", Some(&first), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&app, "GET", "/v1/me", Some(&third), None).await.0,
        StatusCode::OK
    );

    // A restarted server folds the same.
    let restarted = common::serve(AppState::load(store.clone()).await.unwrap()).await;
    let tokens = listed(restarted).await;
    assert!(!tokens.contains(&first_id), "{tokens:?}");
    assert!(tokens.contains(&second_id) && tokens.contains(&third_id));
}

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
