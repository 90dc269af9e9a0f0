//! The HTTP API through the router (no sockets), on SQLite and PostgreSQL.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpunex_api::{AppState, router};

use gpunex_tests::{TestDb, conformance, provider, seed_credits};
use gpunex_wire as wire;
use http_body_util::BodyExt;

conformance!(
    health_and_readiness,
    events_page_through_the_log,
    balances_and_journal_lines_trace_back_to_events,
    bad_query_parameters_get_problem_documents,
);

/// The router with an admin token, as an operator would use it.
async fn app(store: gpunex_store::Store) -> (axum::Router, String) {
    let state = AppState::load(store).await.unwrap();
    let (token, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(
            gpunex_domain::credentials::Role::Admin,
            "tests",
            "cli",
        ),
    )
    .await
    .unwrap();
    (router(state), token.token)
}

async fn get(app: &(axum::Router, String), uri: &str) -> (StatusCode, String, serde_json::Value) {
    use tower::ServiceExt;
    let (app, token) = app;
    let request = Request::get(uri)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

async fn health_and_readiness(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 30, 2).await;
    let app = app(store.clone()).await; // issuing its token is event 31
    let (status, _, body) = get(&app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    let (status, _, body) = get(&app, "/readyz").await;
    assert_eq!(status, StatusCode::OK);
    let ready: wire::Readiness = serde_json::from_value(body).unwrap();
    assert_eq!(ready.head_position, 31);
    assert_eq!(ready.projections[0].lag_events, 31, "nothing folded yet");
    store.run_projections().await.unwrap();
    let (_, _, body) = get(&app, "/v1/projections").await;
    assert_eq!(body[0]["lag_events"], 0);
}

async fn events_page_through_the_log(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 250, 3).await;
    let app = app(store).await;
    let mut after = 0;
    let mut seen = 0;
    loop {
        let (status, _, body) = get(&app, &format!("/v1/events?after={after}&limit=100")).await;
        assert_eq!(status, StatusCode::OK);
        let page: wire::EventsPage = serde_json::from_value(body).unwrap();
        if page.events.is_empty() {
            assert_eq!(page.next_after, after);
            break;
        }
        assert_eq!(page.events[0].position, after + 1);
        assert_eq!(page.events[0].event_type, "ledger.adjustment_posted");
        assert_eq!(page.events[0].hash.len(), 64);
        assert!(page.events[0].recorded_at.ends_with('Z'));
        seen += page.events.len();
        after = page.next_after;
    }
    assert_eq!(seen, 251, "250 credits and the admin token's issue");
}

async fn balances_and_journal_lines_trace_back_to_events(db: &TestDb) {
    let store = db.open().await;
    let expected = seed_credits(&store, 40, 2).await;
    store.run_projections().await.unwrap();
    let app = app(store).await;
    let (status, _, body) = get(&app, "/v1/ledger/accounts").await;
    assert_eq!(status, StatusCode::OK);
    let balances: wire::AccountBalances = serde_json::from_value(body).unwrap();
    assert_eq!(balances.as_of_position, 40);
    let account = format!("provider_payable:{}", provider(1));
    let payable = balances
        .accounts
        .iter()
        .find(|a| a.account == account)
        .unwrap();
    assert_eq!(payable.balance_micro_usdc, expected[&provider(1)]);
    assert_eq!(
        payable.balance_usdc,
        gpunex_domain::Usdc::from_micros(expected[&provider(1)]).to_string()
    );

    let (status, _, body) = get(
        &app,
        &format!("/v1/ledger/accounts/{account}/lines?limit=1000"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let page: wire::JournalPage = serde_json::from_value(body).unwrap();
    assert_eq!(page.lines.len(), 20);
    let sum: i64 = page.lines.iter().map(|l| l.amount_micro_usdc).sum();
    assert_eq!(
        sum, payable.balance_micro_usdc,
        "the lines explain the balance to the micro-USDC"
    );
    let (_, _, event_page) = get(
        &app,
        &format!("/v1/events?after={}&limit=1", page.lines[0].position - 1),
    )
    .await;
    assert_eq!(
        event_page["events"][0]["event_id"],
        page.lines[0].event_id.to_string()
    );
}

async fn bad_query_parameters_get_problem_documents(db: &TestDb) {
    let store = db.open().await;
    let app = app(store).await;
    let cases = [
        ("/v1/events?limit=0", "limit"),
        ("/v1/events?limit=1001", "limit"),
        ("/v1/events?after=-1", "after"),
        ("/v1/events?after=abc", "after"),
        ("/v1/ledger/accounts/wallet:x/lines", "account"),
        ("/v1/ledger/accounts/provider_payable/lines", "account"),
    ];
    for (uri, field) in cases {
        let (status, content_type, body) = get(&app, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(content_type, "application/problem+json", "{uri}");
        let problem: wire::Problem = serde_json::from_value(body).unwrap();
        assert_eq!(problem.code, "invalid_request");
        assert_eq!(problem.errors[0].field, field, "{uri}");
    }
    let (status, content_type, body) = get(&app, "/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(body["code"], "not_found");
}
