//! `Idempotency-Key` on POSTs, over real HTTP on both databases.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

mod common;

conformance!(a_retried_post_returns_the_original_response_and_acts_once);

fn form() -> Value {
    json!({
        "full_legal_name": "Ada Lovelace", "email": "ada@example.com",
        "gpus": [{"model": "l4", "quantity": 1, "system_ram_gb": 64, "upload_gbps": "1", "download_gbps": "1",
                  "availability": {"kind": "always_on"},
                  "location": {"city": "Lyon", "country": "FR", "region": "Rhone"}}],
        "ups_protected": false, "commitment_months": 3, "maintenance_notes": ""
    })
}

async fn a_retried_post_returns_the_original_response_and_acts_once(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    let person = json!({"email": "ada@example.com", "password": "correct horse battery staple"});
    let (status, _, _) =
        common::post_with_key(&base, "/v1/accounts", None, "signup-1", person.clone()).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, headers, _) =
        common::post_with_key(&base, "/v1/accounts", None, "signup-1", person.clone()).await;
    assert_eq!(
        (status, headers["idempotency-replayed"].to_str().unwrap()),
        (StatusCode::CREATED, "true")
    );
    let (_, _, session) = common::request(&base, "POST", "/v1/sessions", None, Some(person)).await;
    let ada = session["token"].as_str().unwrap();

    // The same application sent twice with one key: one application, the same answer.
    let (status, _, first) =
        common::post_with_key(&base, "/v1/applications", Some(ada), "apply-1", form()).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, headers, again) =
        common::post_with_key(&base, "/v1/applications", Some(ada), "apply-1", form()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(again, first);
    assert_eq!(headers["idempotency-replayed"], "true");
    let (_, _, listed) = common::request(&base, "GET", "/v1/applications", Some(ada), None).await;
    assert_eq!(
        listed["applications"].as_array().unwrap().len(),
        1,
        "acted once"
    );

    // Another request under the same key is refused; another caller's keys are its own.
    let mut other = form();
    other["commitment_months"] = json!(6);
    let (status, _, problem) =
        common::post_with_key(&base, "/v1/applications", Some(ada), "apply-1", other).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("idempotency_key_reused")
        )
    );
    let role = json!({"role": {"kind": "finance"}, "label": "books"});
    let (status, _, issued) =
        common::post_with_key(&base, "/v1/tokens", Some(&admin), "apply-1", role.clone()).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(issued["token"].is_string());

    // A secret is shown once: the replay says what happened, without the token.
    let (status, headers, replayed) =
        common::post_with_key(&base, "/v1/tokens", Some(&admin), "apply-1", role).await;
    assert_eq!(
        (status, headers["idempotency-replayed"].to_str().unwrap()),
        (StatusCode::CREATED, "true")
    );
    assert_eq!(replayed["token_id"], issued["token_id"]);
    assert!(replayed["token"].is_null());

    let (status, _, problem) = common::post_with_key(
        &base,
        "/v1/applications",
        Some(ada),
        &"k".repeat(256),
        form(),
    )
    .await;
    assert_eq!(
        (status, problem["errors"][0]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Idempotency-Key"))
    );
}
