//! What a client that gets the request wrong sees, over real HTTP on both databases: every
//! refusal the framework or the JSON policy makes (no content type, a body over the limit with
//! and without an `Idempotency-Key`, a path parameter that is not a UUID, malformed JSON, an
//! unknown field, a duplicate key, a missing field, a method the path does not accept) is an
//! `application/problem+json` document with its stable code, a field pointer where there is a
//! field, a message with no Rust type in it, and nothing written to the log.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::Value;

mod common;

conformance!(framework_and_policy_refusals_are_problem_documents);

/// One raw request: `body` is sent as it is, with `content_type` when given.
async fn send(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    idempotency_key: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, String, Value) {
    let verb = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new()
        .request(verb, format!("{base}{path}"))
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    common::assert_documented(method, path, status);
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.bytes().await.unwrap();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A case: what is sent, and the status, problem code and (for field errors) the pointer and
/// field code it must get.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    token: Option<String>,
    content_type: Option<&'static str>,
    idempotency_key: Option<&'static str>,
    body: Vec<u8>,
    status: StatusCode,
    code: &'static str,
    field: Option<(&'static str, &'static str, &'static str)>,
}

async fn framework_and_policy_refusals_are_problem_documents(db: &TestDb) {
    let store = db.open().await;
    let state = AppState::load(store.clone()).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state).await;
    let person = common::person(&base, "ada@example.com").await;
    let application = uuid::Uuid::now_v7();
    let json = Some("application/json");
    let big = {
        let mut body = br#"{"email": "big@example.com", "password": ""#.to_vec();
        body.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
        body.extend(br#""}"#);
        body
    };
    let case = |what, method, path: &str, token: Option<&str>, body: &[u8]| Case {
        what,
        method,
        path: path.to_owned(),
        token: token.map(str::to_owned),
        content_type: json,
        idempotency_key: None,
        body: body.to_vec(),
        status: StatusCode::BAD_REQUEST,
        code: "invalid_request",
        field: None,
    };
    let cases = [
        Case {
            content_type: None,
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            ..case(
                "no content type",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "password": "correct horse battery"}"#,
            )
        },
        Case {
            content_type: Some("text/plain"),
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: "unsupported_media_type",
            ..case(
                "text/plain",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "password": "correct horse battery"}"#,
            )
        },
        Case {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "body_too_large",
            ..case("2 MiB body", "POST", "/v1/accounts", None, &big)
        },
        Case {
            idempotency_key: Some("big-body-1"),
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "body_too_large",
            ..case(
                "2 MiB body with an Idempotency-Key",
                "POST",
                "/v1/tokens",
                Some(&admin),
                &big,
            )
        },
        Case {
            field: Some(("id", "path", "invalid_path_parameter")),
            ..case(
                "a path id that is not a UUID",
                "POST",
                "/v1/applications/not-a-uuid/approve",
                Some(&admin),
                br#"{"tier": "community"}"#,
            )
        },
        Case {
            code: "malformed_json",
            ..case(
                "malformed JSON",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "password": "#,
            )
        },
        Case {
            code: "malformed_json",
            ..case(
                "trailing characters",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "password": "correct horse battery"} x"#,
            )
        },
        Case {
            field: Some(("/nickname", "body", "unknown_field")),
            ..case(
                "unknown field on sign-up",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "password": "correct horse battery", "nickname": "a"}"#,
            )
        },
        Case {
            field: Some(("/colour", "body", "unknown_field")),
            ..case(
                "unknown field on a token",
                "POST",
                "/v1/tokens",
                Some(&admin),
                br#"{"role": {"kind": "admin"}, "colour": 1}"#,
            )
        },
        Case {
            code: "malformed_json",
            ..case(
                "a number out of range in an ignored place",
                "POST",
                "/v1/tokens",
                Some(&admin),
                br#"{"role": {"kind": "admin"}, "label": "x", "colour": 1e999}"#,
            )
        },
        Case {
            code: "malformed_json",
            ..case(
                "invalid UTF-8",
                "POST",
                "/v1/tokens",
                Some(&admin),
                b"{\"role\": {\"kind\": \"admin\"}, \"label\": \"\xff\xfe\"}",
            )
        },
        Case {
            field: Some(("/email", "body", "duplicate_key")),
            ..case(
                "duplicate key",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com", "email": "b@example.com", "password": "correct horse battery"}"#,
            )
        },
        Case {
            field: Some(("/password", "body", "missing_field")),
            ..case(
                "missing field on sign-up",
                "POST",
                "/v1/accounts",
                None,
                br#"{"email": "a@example.com"}"#,
            )
        },
        Case {
            field: Some(("/role", "body", "missing_field")),
            ..case(
                "missing field on a token",
                "POST",
                "/v1/tokens",
                Some(&admin),
                br#"{"label": "ci"}"#,
            )
        },
        Case {
            field: Some(("/tier", "body", "missing_field")),
            ..case(
                "missing field on approve",
                "POST",
                &format!("/v1/applications/{application}/approve"),
                Some(&admin),
                b"{}",
            )
        },
        Case {
            field: Some(("/label", "body", "forbidden_character")),
            ..case(
                "a right-to-left override in a token label",
                "POST",
                "/v1/tokens",
                Some(&admin),
                "{\"role\": {\"kind\": \"admin\"}, \"label\": \"ops\u{202E}txt\"}".as_bytes(),
            )
        },
        Case {
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
            ..case(
                "the role is checked before the body is read",
                "POST",
                &format!("/v1/applications/{application}/reject"),
                Some(&person),
                b"{not json",
            )
        },
        Case {
            status: StatusCode::METHOD_NOT_ALLOWED,
            code: "method_not_allowed",
            ..case("a method the path does not accept", "DELETE", "/v1/accounts", None, b"")
        },
        Case {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            ..case("an unknown route", "GET", "/v1/no-such-thing", None, b"")
        },
    ];

    let head = store.head_position().await.unwrap();
    for case in cases {
        let what = case.what;
        let (status, content_type, problem) = send(
            &base,
            case.method,
            &case.path,
            case.token.as_deref(),
            case.content_type,
            case.idempotency_key,
            case.body,
        )
        .await;
        assert_eq!(status, case.status, "{what}: {problem}");
        assert_eq!(content_type, "application/problem+json", "{what}");
        assert_eq!(problem["code"], case.code, "{what}: {problem}");
        assert_eq!(problem["status"], case.status.as_u16(), "{what}");
        for text in ["title", "detail"] {
            let text = problem[text].as_str().unwrap_or_default();
            for internal in ["::", "enum", "struct", "Uuid", "serde", "{ entry"] {
                assert!(!text.contains(internal), "{what}: {text}");
            }
        }
        match case.field {
            Some((field, location, code)) => {
                let errors = problem["errors"].as_array().unwrap();
                assert_eq!(errors.len(), 1, "{what}: {problem}");
                assert_eq!(errors[0]["field"], field, "{what}: {problem}");
                assert_eq!(errors[0]["in"], location, "{what}: {problem}");
                assert_eq!(errors[0]["code"], code, "{what}: {problem}");
                let message = errors[0]["message"].as_str().unwrap();
                assert!(!message.contains("::"), "{what}: {message}");
            }
            None => assert!(
                problem["errors"].as_array().is_none_or(Vec::is_empty),
                "{what}: {problem}"
            ),
        }
    }
    // Refused requests leave nothing behind.
    assert_eq!(store.head_position().await.unwrap(), head);
}
