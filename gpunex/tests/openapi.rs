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
                &state.credentials,
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

/// The constraints the document states are the ones the code enforces: lengths, ranges and
/// grammars taken from the same constants and checked against the validators themselves.
#[test]
fn the_documented_constraints_are_the_rules() {
    use gpunex_domain::{accounts, adjustments, credentials, market, onboarding};
    let document = gpunex_api::server::endpoints().document();
    let schemas = &document["components"]["schemas"];
    let property = |schema: &str, field: &str| schemas[schema]["properties"][field].clone();
    let query_maximum = |path: &str, method: &str, name: &str| {
        document["paths"][path][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["schema"]["maximum"].as_u64().unwrap())
            .unwrap()
    };

    // Lengths.
    for (schema, field, min, max) in [
        (
            "Credentials",
            "password",
            Some(accounts::PASSWORD_CHARS_MIN),
            accounts::PASSWORD_CHARS_MAX,
        ),
        (
            "IssueToken",
            "label",
            Some(1),
            credentials::TOKEN_LABEL_CHARS_MAX,
        ),
        (
            "ProposeAdjustment",
            "reason",
            Some(1),
            adjustments::ADJUSTMENT_REASON_CHARS_MAX,
        ),
        (
            "ProposeAdjustment",
            "evidence",
            Some(1),
            adjustments::ADJUSTMENT_EVIDENCE_CHARS_MAX,
        ),
        ("Message", "text", Some(1), onboarding::TEXT_CHARS_MAX),
        ("ListingChange", "reason", Some(1), market::REASON_CHARS_MAX),
    ] {
        let field_schema = property(schema, field);
        assert_eq!(
            field_schema["maxLength"].as_u64(),
            Some(max as u64),
            "{schema}.{field}"
        );
        assert_eq!(
            field_schema["minLength"].as_u64(),
            min.map(|m| m as u64),
            "{schema}.{field}"
        );
    }
    // Page sizes.
    for (path, method, name, max) in [
        (
            "/v1/events",
            "get",
            "limit",
            gpunex_api::server::PAGE_ITEMS_MAX,
        ),
        (
            "/v1/applications",
            "get",
            "limit",
            gpunex_api::applications::APPLICATIONS_PAGE_MAX as u64,
        ),
        (
            "/v1/tokens",
            "get",
            "limit",
            gpunex_api::tokens::TOKENS_PAGE_MAX as u64,
        ),
        (
            "/v1/listings",
            "get",
            "limit",
            gpunex_api::market::LISTING_PAGE_MAX as u64,
        ),
        (
            "/v1/payout-batches/{date}",
            "get",
            "limit",
            gpunex_api::payout_run::PAGE_MAX as u64,
        ),
        (
            "/v1/agent/assignments",
            "get",
            "wait_seconds",
            gpunex_api::rentals::ASSIGNMENTS_WAIT_MAX_SECONDS,
        ),
    ] {
        assert_eq!(
            query_maximum(path, method, name),
            max,
            "{method} {path} {name}"
        );
    }

    // Grammars, against the validators.
    let pattern = |schema: &str, field: &str| {
        regex::Regex::new(property(schema, field)["pattern"].as_str().unwrap()).unwrap()
    };
    let email = pattern("Credentials", "email");
    for address in [
        "ada@example.com",
        "a.b+c@sub.example.org",
        "o'neil@example.ie",
        ".ada@example.com",
        "ada.@example.com",
        "a..b@example.com",
        "ada@example",
        "ada@example.c0m",
        "ada@-example.com",
        "ada@example-.com",
        "ada@exa_mple.com",
        "ad a@example.com",
        "ada@@example.com",
    ] {
        assert_eq!(
            email.is_match(address),
            onboarding::validate_email(address).is_ok(),
            "{address}"
        );
    }
    let date = pattern("BatchRequest", "date");
    for (text, valid) in [
        ("2026-11-02", true),
        ("2000-01-01", true),
        ("2099-12-31", true),
        ("1999-12-31", false),
        ("2100-01-01", false),
        ("2026-13-01", false),
        ("2026-00-10", false),
        ("2026-1-02", false),
    ] {
        assert_eq!(date.is_match(text), valid, "{text}");
        if valid {
            assert!(gpunex_domain::calendar::date(text).is_ok(), "{text}");
        }
    }
    // The attributes spell the date grammar out each time (they take literals): every date
    // pattern of the document is this one.
    fn patterns(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(object) => {
                if let Some(pattern) = object.get("pattern").and_then(|p| p.as_str()) {
                    into.push(pattern.to_owned());
                }
                object.values().for_each(|v| patterns(v, into));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| patterns(v, into)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    patterns(&document, &mut all);
    let dates: Vec<&String> = all
        .iter()
        .filter(|p| p.starts_with("^20[0-9]{2}-") && !p.contains('T'))
        .collect();
    assert!(dates.len() > 10, "{dates:?}");
    assert!(dates.iter().all(|p| **p == date.as_str()), "{dates:?}");
}
