//! The provider application flow over real HTTP, on SQLite and PostgreSQL: apply (valid and
//! invalid), information requested and answered, Enterprise refused without UPS, approved,
//! rejected, withdrawn, and the provider's first token.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

conformance!(apply_review_and_approve, reject_withdraw_and_who_sees_what);

mod common;

async fn call(
    base: &str,
    method: &str,
    uri: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = common::request(base, method, uri, Some(token), body).await;
    (status, body)
}

fn form(ups: bool) -> Value {
    json!({
        "full_legal_name": "Ada Lovelace",
        "email": "ada@example.com",
        "gpus": [{
            "model": "NVIDIA H100 80GB", "quantity": 8, "system_ram_gb": 2048,
            "upload_gbps": "10", "download_gbps": "10",
            "availability": {"kind": "always_on"},
            "location": {"city": "Frankfurt", "country": "DE", "region": "Hesse"}
        }],
        "ups_protected": ups,
        "commitment_months": 12,
        "maintenance_notes": "2-hour window the first Sunday of each month"
    })
}

async fn setup(db: &TestDb) -> (String, String, String) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let app = common::serve(state).await;
    let applicant = common::person(&app, "ada@example.com").await;
    (app, admin, applicant)
}

async fn apply_review_and_approve(db: &TestDb) {
    let (app, admin, ada) = setup(db).await;

    // Invalid: field-level problem+json, nothing stored.
    let mut bad = form(true);
    bad["gpus"][0]["quantity"] = json!(0);
    bad["gpus"][0]["location"]["country"] = json!("ZZ");
    let (status, problem) = call(&app, "POST", "/v1/applications", &ada, Some(bad)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    let fields: Vec<&str> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["/gpus/0/quantity", "/gpus/0/location/country"]);
    assert_eq!(
        call(&app, "GET", "/v1/applications", &admin, None).await.1["applications"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // Without UPS: submitted, but Enterprise is refused with the rule it breaks.
    let (status, application) =
        call(&app, "POST", "/v1/applications", &ada, Some(form(false))).await;
    assert_eq!(status, StatusCode::CREATED, "{application}");
    assert_eq!(application["status"], "under_review");
    assert_eq!(
        application["form"]["gpus"][0]["model"]["catalog"],
        "h100-80gb"
    );
    let id = application["application_id"].as_str().unwrap().to_owned();
    let (status, problem) = call(
        &app,
        "POST",
        &format!("/v1/applications/{id}/approve"),
        &admin,
        Some(json!({"tier": "enterprise"})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("tier_rules_broken"))
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("must be UPS-protected"),
        "{problem}"
    );

    // Information requested, answered, back in review.
    let (status, waiting) = call(
        &app,
        "POST",
        &format!("/v1/applications/{id}/request-information"),
        &admin,
        Some(json!({"text": "Is a UPS planned?"})),
    )
    .await;
    assert_eq!(
        (status, waiting["status"].as_str()),
        (StatusCode::OK, Some("information_requested"))
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{id}/request-information"),
            &admin,
            Some(json!({"text": "again?"}))
        )
        .await
        .0,
        StatusCode::CONFLICT
    );
    let (status, answered) = call(
        &app,
        "POST",
        &format!("/v1/applications/{id}/answer"),
        &ada,
        Some(json!({"text": "Not yet: Community is fine."})),
    )
    .await;
    assert_eq!(
        (status, answered["status"].as_str()),
        (StatusCode::OK, Some("under_review"))
    );

    // Approved as Community; deciding twice is refused.
    let (status, approved) = call(
        &app,
        "POST",
        &format!("/v1/applications/{id}/approve"),
        &admin,
        Some(json!({"tier": "community"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(
        (approved["status"].as_str(), approved["tier"].as_str()),
        (Some("approved"), Some("community"))
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{id}/reject"),
            &admin,
            Some(json!({"text": "no"}))
        )
        .await
        .0,
        StatusCode::CONFLICT
    );

    // The applicant reads the conversation: the question, the answer, the decision.
    let (status, read) = call(&app, "GET", &format!("/v1/applications/{id}"), &ada, None).await;
    assert_eq!(status, StatusCode::OK, "{read}");
    let steps: Vec<(&str, Option<&str>)> = read["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap(),
                s["text"].as_str().or(s["tier"].as_str()),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("submitted", None),
            ("information_requested", Some("Is a UPS planned?")),
            ("information_provided", Some("Not yet: Community is fine.")),
            ("approved", Some("community")),
        ]
    );
    assert!(
        !read.to_string().contains("reviewer"),
        "no reviewer's id reaches the applicant: {read}"
    );
    // A list answers no steps (each application's read does).
    let (_, list) = call(&app, "GET", "/v1/applications", &ada, None).await;
    assert!(list["applications"][0].get("steps").is_none());

    // The Roles page now lists the provider the person holds.
    let (_, me) = call(&app, "GET", "/v1/me", &ada, None).await;
    let provider_role = format!("provider:{}", approved["provider_id"].as_str().unwrap());
    assert!(
        me["roles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str() == Some(provider_role.as_str())),
        "{me}"
    );

    // An Enterprise application with UPS is approved as Enterprise.
    let (_, second) = call(&app, "POST", "/v1/applications", &ada, Some(form(true))).await;
    let second_id = second["application_id"].as_str().unwrap();
    let (status, enterprise) = call(
        &app,
        "POST",
        &format!("/v1/applications/{second_id}/approve"),
        &admin,
        Some(json!({"tier": "enterprise"})),
    )
    .await;
    assert_eq!(
        (status, enterprise["tier"].as_str()),
        (StatusCode::OK, Some("enterprise"))
    );

    // The applicant takes the provider's first token, once; it is a provider credential.
    let (status, first) = call(
        &app,
        "POST",
        &format!("/v1/applications/{id}/provider-token"),
        &ada,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["role"]["kind"], "provider");
    assert_eq!(first["role"]["provider_id"], approved["provider_id"]);
    let provider_token = first["token"].as_str().unwrap();
    assert_eq!(
        call(&app, "GET", "/v1/tokens", provider_token, None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{id}/provider-token"),
            &ada,
            None
        )
        .await
        .0,
        StatusCode::CONFLICT
    );

    // Two racing claims for the Enterprise provider's first token: exactly one wins.
    let claim = format!("/v1/applications/{second_id}/provider-token");
    let (a, b) = tokio::join!(
        call(&app, "POST", &claim, &ada, None),
        call(&app, "POST", &claim, &ada, None)
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
}

async fn reject_withdraw_and_who_sees_what(db: &TestDb) {
    let (app, admin, ada) = setup(db).await;
    let bob = common::person(&app, "bob@example.com").await;
    let (_, first) = call(&app, "POST", "/v1/applications", &ada, Some(form(true))).await;
    let (_, second) = call(&app, "POST", "/v1/applications", &ada, Some(form(true))).await;
    let (first_id, second_id) = (
        first["application_id"].as_str().unwrap(),
        second["application_id"].as_str().unwrap(),
    );

    // Others' applications do not exist for a person; reviewers see all, oldest first.
    assert_eq!(
        call(
            &app,
            "GET",
            &format!("/v1/applications/{first_id}"),
            &bob,
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{first_id}/withdraw"),
            &bob,
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&app, "GET", "/v1/applications", &bob, None).await.1["applications"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // A person cannot review; a reviewer cannot answer for the applicant.
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{first_id}/approve"),
            &ada,
            Some(json!({"tier": "community"}))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{first_id}/answer"),
            &admin,
            Some(json!({"text": "x"}))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );

    let (status, rejected) = call(
        &app,
        "POST",
        &format!("/v1/applications/{first_id}/reject"),
        &admin,
        Some(json!({"text": "Residential power only."})),
    )
    .await;
    assert_eq!(
        (status, rejected["status"].as_str()),
        (StatusCode::OK, Some("rejected"))
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{first_id}/approve"),
            &admin,
            Some(json!({"tier": "community"}))
        )
        .await
        .0,
        StatusCode::CONFLICT
    );
    let (status, withdrawn) = call(
        &app,
        "POST",
        &format!("/v1/applications/{second_id}/withdraw"),
        &ada,
        None,
    )
    .await;
    assert_eq!(
        (status, withdrawn["status"].as_str()),
        (StatusCode::OK, Some("withdrawn"))
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/applications/{second_id}/approve"),
            &admin,
            Some(json!({"tier": "community"}))
        )
        .await
        .0,
        StatusCode::CONFLICT
    );

    let (_, listed) = call(
        &app,
        "GET",
        "/v1/applications?status=rejected",
        &admin,
        None,
    )
    .await;
    let ids: Vec<&str> = listed["applications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["application_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [first_id]);
    let (_, page) = call(&app, "GET", "/v1/applications?limit=1", &admin, None).await;
    assert_eq!(
        page["applications"][0]["application_id"].as_str(),
        Some(first_id)
    );
    let cursor = page["next_after"].as_str().unwrap();
    let (_, next) = call(
        &app,
        "GET",
        &format!("/v1/applications?limit=1&after={cursor}"),
        &admin,
        None,
    )
    .await;
    assert_eq!(
        next["applications"][0]["application_id"].as_str(),
        Some(second_id)
    );
    assert_eq!(
        call(&app, "GET", "/v1/applications?status=lost", &admin, None)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert!(
        next["next_after"].is_null(),
        "the second of two is the last page: {next}"
    );
    assert_eq!(
        call(&app, "GET", "/v1/applications?after=abc", &admin, None)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&app, "GET", "/v1/applications?overdue=true", &admin, None)
            .await
            .1["applications"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // A boolean filter is `true` or `false`, nothing else.
    let (status, refused) = call(&app, "GET", "/v1/applications?overdue=15741", &admin, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["errors"][0]["field"], "overdue", "{refused}");
}
