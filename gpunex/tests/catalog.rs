//! Admins add models to the GPU catalog; applications naming them then count as catalog models.
//! Models are found by the names people write ("H100", "A100 80GB"), an ambiguous name is
//! refused, and an unknown one is flagged to the applicant and the reviewer.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::json;

mod common;

conformance!(
    an_added_model_is_a_catalog_model_for_applications,
    models_are_named_as_people_write_them
);

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

fn entry(model: &str) -> serde_json::Value {
    json!({
        "model": model, "quantity": 2, "system_ram_gb": 256, "upload_gbps": "10",
        "download_gbps": "10", "availability": {"kind": "always_on"},
        "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}
    })
}

async fn models_are_named_as_people_write_them(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    let (_, _, catalog) = common::request(&base, "GET", "/v1/catalog/models", None, None).await;
    let h100 = catalog
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model_id"] == "h100-80gb")
        .unwrap();
    assert!(
        h100["aliases"].as_array().unwrap().contains(&json!("H100")),
        "{h100}"
    );

    let person = common::person(&base, "names@example.com").await;
    let form = |gpus: serde_json::Value| {
        json!({"full_legal_name": "Ada Lovelace", "email": "names@example.com", "gpus": gpus,
               "ups_protected": true, "commitment_months": 12, "maintenance_notes": ""})
    };
    // "A100" is a 40 GB and an 80 GB model: refused, naming both.
    let (status, _, problem) = common::request(
        &base,
        "POST",
        "/v1/applications",
        Some(&person),
        Some(form(json!([entry("A100")]))),
    )
    .await;
    assert_eq!(
        (
            status,
            problem["errors"][0]["field"].as_str(),
            problem["errors"][0]["code"].as_str()
        ),
        (
            StatusCode::BAD_REQUEST,
            Some("/gpus/0/model"),
            Some("ambiguous_model")
        ),
        "{problem}"
    );
    assert!(
        problem["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("a100-40gb or a100-80gb")
    );
    // The guide's names resolve to catalog models; an unknown one is flagged.
    let (status, _, application) = common::request(
        &base,
        "POST",
        "/v1/applications",
        Some(&person),
        Some(form(json!([
            entry("H100"),
            entry("A100 80GB"),
            entry("NVIDIA GeForce RTX 4090"),
            entry("MI300X")
        ]))),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{application}");
    let models: Vec<&serde_json::Value> = application["form"]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| &g["model"])
        .collect();
    assert_eq!(
        models,
        [
            &json!({"catalog": "h100-80gb"}),
            &json!({"catalog": "a100-80gb"}),
            &json!({"catalog": "rtx-4090"}),
            &json!({"unlisted": "MI300X"})
        ]
    );
    assert_eq!(
        application["unlisted_models"].as_array().unwrap().len(),
        1,
        "{application}"
    );
    assert_eq!(application["unlisted_models"][0]["field"], "/gpus/3/model");
    let id = application["application_id"].as_str().unwrap();
    let (_, _, reviewed) = common::request(
        &base,
        "GET",
        &format!("/v1/applications/{id}"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        reviewed["unlisted_models"], application["unlisted_models"],
        "the reviewer sees the flag too"
    );

    // Prices, searches and recommendations take the same names.
    let (status, _, problem) =
        common::request(&base, "GET", "/v1/listings?model=A100", None, None).await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("ambiguous_model")),
        "{problem}"
    );
    let (status, _, page) =
        common::request(&base, "GET", "/v1/listings?model=RTX%204090", None, None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let (status, _, recommendation) = common::request(
        &base,
        "GET",
        "/v1/market/recommendations?model=H100",
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, recommendation["model_id"].as_str()),
        (StatusCode::OK, Some("h100-80gb")),
        "{recommendation}"
    );
}
