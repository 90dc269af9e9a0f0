//! The OpenAPI document is generated from the same list that builds the router: every documented
//! operation is routed, nothing undocumented is, and each operation's declared roles are the
//! roles it enforces, for every role.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_domain::credentials::Role;
use gpunex_tests::TestDb;
use serde_json::{Value, json};
use uuid::Uuid;

mod common;

/// A concrete path for a documented one.
fn concrete(path: &str) -> String {
    let mut out = path.to_owned();
    for (parameter, value) in [
        ("{date}", "2026-11-02".to_owned()),
        ("{message_id}", "GPUNEX-20261102-01".to_owned()),
        ("{account}", "treasury".to_owned()),
        (
            "{gpu_uuid}",
            "GPU-00000000-0000-0000-0000-000000000000".to_owned(),
        ),
    ] {
        out = out.replace(parameter, &value);
    }
    while let Some(start) = out.find('{') {
        let end = out[start..].find('}').unwrap() + start;
        out.replace_range(start..=end, &Uuid::now_v7().to_string());
    }
    out
}

async fn call(base: &str, method: &str, path: &str, token: Option<&str>) -> (StatusCode, Value) {
    let body = (method != "get").then(|| json!({}));
    let (status, _, answer) =
        common::request(base, &method.to_uppercase(), path, token, body).await;
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_the_router_and_its_roles_are_enforced_for_every_role() {
    let db = TestDb::sqlite();
    let state = AppState::load(db.open().await).await.unwrap();
    let base = common::serve(state.clone()).await;
    let (status, _, document) = common::request(&base, "GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    let endpoints = gpunex_api::server::endpoints();
    assert_eq!(
        document,
        endpoints.document(),
        "the served document is the list's"
    );
    assert_eq!(document["openapi"], "3.1.0");

    // One operation per route, each with an id, a summary and responses.
    let paths = document["paths"].as_object().unwrap();
    let documented: usize = paths
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(documented, endpoints.endpoints().len());
    let mut ids = std::collections::HashSet::new();
    for endpoint in endpoints.endpoints() {
        let operation = &paths[&endpoint.path][&endpoint.method];
        let id = operation["operationId"].as_str().unwrap();
        assert!(ids.insert(id.to_owned()), "operationId {id} twice");
        assert!(!operation["summary"].as_str().unwrap().is_empty(), "{id}");
        let success = operation["responses"]
            .as_object()
            .unwrap()
            .keys()
            .any(|status| status.starts_with('2'));
        assert!(success, "{id} documents its success");
        let roles: Vec<&str> = endpoint.roles.iter().map(|r| r.name()).collect();
        assert_eq!(operation["x-gpunex-roles"], json!(roles), "{id}");
        if endpoint.loopback {
            // Anonymous from the loopback interface, or one of the roles.
            assert_eq!(
                operation["security"],
                json!([{"bearer": roles}, {}]),
                "{id}"
            );
            assert_eq!(operation["x-gpunex-loopback"], true, "{id}");
        } else if !roles.is_empty() {
            assert_eq!(operation["security"], json!([{"bearer": roles}]), "{id}");
        }
        // Every path parameter of the template is declared.
        for name in endpoint
            .path
            .split('{')
            .skip(1)
            .map(|p| p.split('}').next().unwrap())
        {
            let declared = operation["parameters"].as_array().is_some_and(|params| {
                params
                    .iter()
                    .any(|p| p["name"] == name && p["in"] == "path")
            });
            assert!(declared, "{id} declares its path parameter {name}");
        }
    }

    // Every documented operation is routed; anonymous callers are refused exactly where roles
    // are declared; an undocumented path is 404 and an undocumented method 405, both problem
    // documents.
    for endpoint in endpoints.endpoints() {
        let path = concrete(&endpoint.path);
        let (status, answer) = call(&base, &endpoint.method, &path, None).await;
        assert_ne!(
            answer["detail"], "no route for this path",
            "{} {}",
            endpoint.method, endpoint.path
        );
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{} {}",
            endpoint.method,
            endpoint.path
        );
        if endpoint.roles.is_empty() || endpoint.loopback {
            // These calls come from 127.0.0.1: a loopback operation admits them.
            assert_ne!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {} is public or admits loopback",
                endpoint.method,
                endpoint.path
            );
        } else {
            assert_eq!(
                (status, answer["code"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthorized")),
                "{} {} refuses anonymous callers",
                endpoint.method,
                endpoint.path
            );
        }
    }
    let (status, answer) = call(&base, "get", "/v1/no-such-thing", None).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, _, answer) = common::request(&base, "DELETE", "/v1/tokens", None, None).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")),
        "{answer}"
    );

    // Every role against every operation: a role the operation does not declare is refused by
    // the guard (403 forbidden); a declared one is never.
    let roles = [
        Role::Admin,
        Role::Finance,
        Role::Treasury,
        Role::Provider {
            provider_id: Uuid::now_v7(),
        },
        Role::Agent {
            provider_id: Uuid::now_v7(),
            machine_id: Uuid::now_v7(),
        },
        Role::Renter {
            user_id: Uuid::now_v7(),
        },
        Role::User {
            user_id: Uuid::now_v7(),
        },
    ];
    let mut checked = 0;
    for endpoint in endpoints.endpoints().iter().filter(|e| !e.roles.is_empty()) {
        for role in roles {
            // A fresh token each time: some operations (sign out, revoke) end the caller's token.
            let (token, _) = gpunex_api::tokens::issue_token(
                &state.store,
                Some(&state.credentials),
                gpunex_api::tokens::TokenRequest::new(role, "matrix", "cli"),
            )
            .await
            .unwrap();
            let admitted = endpoint
                .roles
                .iter()
                .any(|allowed| allowed.name() == role.name());
            let path = concrete(&endpoint.path);
            let (status, answer) = call(&base, &endpoint.method, &path, Some(&token.token)).await;
            let refused_by_role = status == StatusCode::FORBIDDEN && answer["code"] == "forbidden";
            assert_eq!(
                refused_by_role,
                !admitted,
                "{} {} as {}: {status} {answer}",
                endpoint.method,
                endpoint.path,
                role.name()
            );
            assert_ne!(
                status,
                StatusCode::UNAUTHORIZED,
                "{} {} as {}",
                endpoint.method,
                endpoint.path,
                role.name()
            );
            checked += 1;
        }
    }
    assert!(checked > 400, "{checked} role checks");
}

/// A query parameter the operation does not declare is refused (`unknown_parameter`), so what
/// the document lists is all a route reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_query_parameters_are_refused() {
    let db = TestDb::sqlite();
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    for path in [
        "/v1/events?colour=red",
        "/healthz?x=1",
        "/v1/tokens?after_id=1",
    ] {
        let (status, _, problem) = common::request(&base, "GET", path, Some(&admin), None).await;
        assert_eq!(
            (
                status,
                problem["errors"][0]["code"].as_str(),
                problem["errors"][0]["in"].as_str()
            ),
            (
                StatusCode::BAD_REQUEST,
                Some("unknown_parameter"),
                Some("query")
            ),
            "{path}: {problem}"
        );
    }
    let (status, _, _) =
        common::request(&base, "GET", "/v1/events?limit=5", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK);
}
