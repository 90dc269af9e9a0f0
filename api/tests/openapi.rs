//! The OpenAPI document is generated from the same list that builds the router: every route is
//! in it, every documented operation is a real route, and its declared roles match what the
//! route enforces (anonymous callers are refused exactly where roles are declared).

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::TestDb;
use serde_json::Value;

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_is_documented_with_the_roles_it_enforces() {
    let db = TestDb::sqlite();
    let base = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let (status, _, document) = common::request(&base, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    let endpoints = gpunex_api::server::endpoints();
    let paths = document["paths"].as_object().unwrap();
    let documented: usize = paths
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        documented,
        endpoints.endpoints().len(),
        "one operation per route"
    );
    for endpoint in endpoints.endpoints() {
        let operation = &paths[endpoint.path][endpoint.method];
        assert_eq!(operation["summary"], endpoint.summary);
        let roles: Vec<&str> = operation["x-gpunex-roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let declared: Vec<&str> = endpoint.roles.iter().map(|r| r.name()).collect();
        assert_eq!(roles, declared);
        let concrete = endpoint
            .path
            .replace("{id}", &uuid::Uuid::now_v7().to_string())
            .replace("{token_id}", &uuid::Uuid::now_v7().to_string())
            .replace("{account}", "treasury");
        let body = (endpoint.method == "post").then(|| Value::Object(Default::default()));
        let (status, _, answer) = common::request(
            &base,
            &endpoint.method.to_uppercase(),
            &concrete,
            None,
            body,
        )
        .await;
        assert_ne!(
            answer["detail"], "no route for this path",
            "{} {} is not routed",
            endpoint.method, endpoint.path
        );
        if endpoint.roles.is_empty() {
            assert_ne!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {} is public",
                endpoint.method,
                endpoint.path
            );
        } else {
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {} must refuse anonymous callers",
                endpoint.method,
                endpoint.path
            );
            assert_eq!(operation["security"][0]["bearer"], serde_json::json!([]));
        }
    }
}
