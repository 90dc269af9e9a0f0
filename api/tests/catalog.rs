//! Admins add models to the GPU catalog; applications naming them then count as catalog models.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::json;

mod common;

conformance!(an_added_model_is_a_catalog_model_for_applications);

async fn an_added_model_is_a_catalog_model_for_applications(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    let h200 = json!({"model_id": "h200-141gb", "name": "NVIDIA H200 141GB", "vram_gb": 141});
    assert_eq!(
        common::request(
            &base,
            "POST",
            "/v1/catalog/models",
            None,
            Some(h200.clone())
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
    let (status, _, added) = common::request(
        &base,
        "POST",
        "/v1/catalog/models",
        Some(&admin),
        Some(h200.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let (status, _, problem) = common::request(
        &base,
        "POST",
        "/v1/catalog/models",
        Some(&admin),
        Some(h200),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_listed"))
    );
    let bad = json!({"model_id": "H 200", "name": "x", "vram_gb": 141});
    let (status, _, problem) =
        common::request(&base, "POST", "/v1/catalog/models", Some(&admin), Some(bad)).await;
    assert_eq!(
        (status, problem["errors"][0]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("/model_id"))
    );
    let (_, _, models) = common::request(&base, "GET", "/v1/catalog/models", None, None).await;
    let ids: Vec<&str> = models
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 8);
    assert_eq!(ids.last(), Some(&"h200-141gb"));

    let ada = common::person(&base, "ada@example.com").await;
    let ada = ada.as_str();
    assert_eq!(
        common::request(
            &base,
            "POST",
            "/v1/catalog/models",
            Some(ada),
            Some(json!({"model_id": "x1", "name": "X", "vram_gb": 1}))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    let form = json!({
        "full_legal_name": "Ada Lovelace", "email": "ada@example.com",
        "gpus": [{"model": "nvidia h200 141gb", "quantity": 8, "system_ram_gb": 2048, "upload_gbps": "10", "download_gbps": "10",
                  "availability": {"kind": "always_on"},
                  "location": {"city": "Oslo", "country": "NO", "region": "Oslo"}}],
        "ups_protected": true, "commitment_months": 12, "maintenance_notes": ""
    });
    let (status, _, application) =
        common::request(&base, "POST", "/v1/applications", Some(ada), Some(form)).await;
    assert_eq!(status, StatusCode::CREATED, "{application}");
    assert_eq!(
        application["form"]["gpus"][0]["model"]["catalog"],
        "h200-141gb"
    );
    assert_eq!(
        application["enterprise_violations"],
        json!([]),
        "no longer an unlisted model"
    );
}
