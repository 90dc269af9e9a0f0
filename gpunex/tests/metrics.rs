//! `GET /metrics` over real HTTP on both databases: what the server did shows up in the
//! exposition (requests by route template and status, latency histograms, connections, log
//! appends and group commits, read-model lag, adjustments waiting for a second person), the
//! text is well-formed, and only admins or loopback callers (when allowed) read it.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_domain::credentials::Role;
use gpunex_tests::{TestDb, conformance};
use serde_json::json;
use tower::ServiceExt;
use uuid::Uuid;

mod common;

conformance!(
    what_the_server_did_is_in_its_metrics,
    metrics_are_for_admins_and_loopback_only
);

async fn token(state: &AppState, role: Role) -> String {
    let (new, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(role, "metrics", "cli"),
    )
    .await
    .unwrap();
    new.token
}

async fn what_the_server_did_is_in_its_metrics(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let treasury = token(&state, Role::Treasury).await;
    let base = common::serve(state.clone()).await;

    let before = common::scrape(&base, None).await;
    let commits_before = before.value("gpunex_store_commits_total", &[]).unwrap();
    assert_eq!(before.value("gpunex_database_up", &[]), Some(1.0));

    for _ in 0..3 {
        common::request(&base, "GET", "/healthz", None, None).await;
    }
    let machine = Uuid::now_v7();
    let (status, _, _) = common::request(
        &base,
        "GET",
        &format!("/v1/machines/{machine}"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = common::request(&base, "GET", "/v1/no-such-thing", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A proposal: an append through the writer, and one adjustment waiting for its decision.
    let (provider, _) =
        common::approved_provider(&base, &admin, "metrics@example.com", common::one_h100()).await;
    let (status, _, proposal) = common::request(
        &base,
        "POST",
        "/v1/ledger/adjustments",
        Some(&treasury),
        Some(json!({"reason": "goodwill", "evidence": "ticket 1", "postings": [
            {"account": "platform_adjustments", "side": "debit", "amount_micro_usdc": 1_000_000},
            {"account": format!("provider_payable:{provider}"), "side": "credit", "amount_micro_usdc": 1_000_000},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{proposal}");
    state
        .credentials
        .wait_for(state.store.head_position().await.unwrap())
        .await
        .unwrap();

    let after = common::scrape(&base, Some(&admin)).await;
    let requests = |route: &str, method: &str, status: &str| {
        after.value(
            "gpunex_http_requests_total",
            &[("route", route), ("method", method), ("status", status)],
        )
    };
    assert_eq!(requests("/healthz", "GET", "200"), Some(3.0));
    // Route templates, never the path a client sent.
    assert_eq!(
        requests("/v1/machines/{machine_id}", "GET", "404"),
        Some(1.0)
    );
    assert!(
        after
            .all("gpunex_http_requests_total")
            .iter()
            .all(|s| !s.labels["route"].contains(&machine.to_string())
                && s.labels["route"] != "/v1/no-such-thing")
    );
    assert_eq!(requests("unmatched", "GET", "404"), Some(1.0));
    assert_eq!(requests("/v1/ledger/adjustments", "POST", "201"), Some(1.0));
    // The first scrape was counted, anonymous from loopback.
    assert_eq!(requests("/metrics", "GET", "200"), Some(1.0));

    // Latency histograms: cumulative buckets ending at +Inf = count = the requests.
    let labels = [("route", "/healthz"), ("method", "GET")];
    let buckets: Vec<(f64, f64)> = after
        .all("gpunex_http_request_duration_seconds_bucket")
        .into_iter()
        .filter(|s| s.labels["route"] == "/healthz")
        .map(|s| {
            let le = &s.labels["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, s.value.parse().unwrap())
        })
        .collect();
    assert!(buckets.len() > 5);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
    );
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, 3.0));
    assert_eq!(
        after.value("gpunex_http_request_duration_seconds_count", &labels),
        Some(3.0)
    );
    assert!(
        after
            .value("gpunex_http_request_duration_seconds_sum", &labels)
            .unwrap()
            > 0.0
    );

    // The writer: commits since the first scrape, every committed group in the group sizes.
    let commits = after.value("gpunex_store_commits_total", &[]).unwrap();
    assert!(commits > commits_before, "{commits} > {commits_before}");
    assert_eq!(
        after.value("gpunex_store_group_size_appends_count", &[]),
        Some(commits)
    );
    assert_eq!(
        after.value("gpunex_store_commit_duration_seconds_count", &[]),
        Some(commits)
    );
    let committed = after
        .value("gpunex_store_appends_total", &[("outcome", "committed")])
        .unwrap();
    assert!(committed >= commits, "every commit holds an append");
    assert!(after.value("gpunex_store_events_total", &[]).unwrap() >= committed);
    assert_eq!(after.value("gpunex_store_append_queue", &[]), Some(0.0));

    // Read models: the registry has applied everything; each SQL projection has its lag.
    let head = state.store.head_position().await.unwrap() as f64;
    assert!(after.value("gpunex_log_head_position", &[]).unwrap() <= head);
    assert_eq!(after.value("gpunex_registry_lag_events", &[]), Some(0.0));
    let lags = after.all("gpunex_projection_lag_events");
    assert!(!lags.is_empty());
    assert!(after.value("gpunex_outbox_lag_events", &[]).is_some());
    assert_eq!(
        after.value("gpunex_adjustments_awaiting_decision", &[]),
        Some(1.0)
    );

    // Connections: this client's keep-alive connections and the ones before.
    assert!(
        after
            .value("gpunex_http_connections_accepted_total", &[])
            .unwrap()
            >= 1.0
    );
    assert!(after.value("gpunex_http_connections_open", &[]).unwrap() >= 1.0);
    assert_eq!(
        after.value("gpunex_http_connections_refused_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        after.value(
            "gpunex_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        Some(1.0)
    );
}

async fn metrics_are_for_admins_and_loopback_only(db: &TestDb) {
    let state = AppState::load(db.open().await)
        .await
        .unwrap()
        .with_metrics_loopback(false);
    let admin = common::admin_token(&state).await;
    let finance = token(&state, Role::Finance).await;
    let base = common::serve(state.clone()).await;

    // Loopback access turned off: anonymous callers are refused, even from 127.0.0.1.
    let (status, _, problem) = common::request(&base, "GET", "/metrics", None, None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (status, _, problem) =
        common::request(&base, "GET", "/metrics", Some(&finance), None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );
    common::scrape(&base, Some(&admin)).await;

    // Loopback access on: a caller from elsewhere still needs an admin token, and a loopback
    // caller who sends credentials is judged by them.
    let state = state.with_metrics_loopback(true);
    let from = |peer: &str| {
        let mut request = axum::http::Request::get("/metrics")
            .body(axum::body::Body::empty())
            .unwrap();
        request.extensions_mut().insert(axum::extract::ConnectInfo(
            peer.parse::<std::net::SocketAddr>().unwrap(),
        ));
        request
    };
    for (peer, status) in [
        ("203.0.113.7:40000", StatusCode::UNAUTHORIZED),
        ("[2001:db8::1]:40000", StatusCode::UNAUTHORIZED),
        ("127.0.0.1:40000", StatusCode::OK),
        ("127.8.9.10:40000", StatusCode::OK),
        ("[::1]:40000", StatusCode::OK),
        ("[::ffff:127.0.0.1]:40000", StatusCode::OK),
    ] {
        let response = gpunex_api::router(state.clone())
            .oneshot(from(peer))
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{peer}");
    }
    let mut with_token = from("127.0.0.1:40000");
    with_token.headers_mut().insert(
        "authorization",
        format!("Bearer {finance}").parse().unwrap(),
    );
    let response = gpunex_api::router(state.clone())
        .oneshot(with_token)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    // No peer recorded (not through the server loop): not loopback.
    let response = gpunex_api::router(state)
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}
