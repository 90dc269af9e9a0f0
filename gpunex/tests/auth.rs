//! The authorization matrix, over real HTTP, on SQLite and PostgreSQL: who may call what,
//! and revocation and rotation taking effect at once.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_domain::credentials::Role;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(
    authorization_matrix,
    revocation_reaches_other_processes,
    a_revoked_caller_cannot_write_where_the_revocation_is_not_yet_known,
    an_agent_token_never_reads_another_providers_machine,
);

mod common;

async fn call(
    base: &str,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, headers, body) = common::request(base, method, uri, token, body).await;
    if status == StatusCode::UNAUTHORIZED {
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
    (status, body)
}

async fn token(state: &AppState, role: Role) -> (Uuid, String) {
    let (new, issued) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(role, "test", "cli"),
    )
    .await
    .unwrap();
    (issued.token_id, new.token)
}

async fn authorization_matrix(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let (provider_a, provider_b) = (Uuid::now_v7(), Uuid::now_v7());
    let (_, admin) = token(&state, Role::Admin).await;
    let (_, finance) = token(&state, Role::Finance).await;
    let (_, a) = token(
        &state,
        Role::Provider {
            provider_id: provider_a,
        },
    )
    .await;
    let (b_id, b) = token(
        &state,
        Role::Provider {
            provider_id: provider_b,
        },
    )
    .await;
    let app = common::serve(state.clone()).await;

    // Who may read what.
    let matrix: [(&str, Option<&str>, StatusCode); 12] = [
        ("/healthz", None, StatusCode::OK),
        ("/v1/events", None, StatusCode::UNAUTHORIZED),
        (
            "/v1/events",
            Some("gpnx_not_a_token"),
            StatusCode::UNAUTHORIZED,
        ),
        ("/v1/events", Some(&admin), StatusCode::OK),
        ("/v1/events", Some(&finance), StatusCode::FORBIDDEN),
        ("/v1/events", Some(&a), StatusCode::FORBIDDEN),
        ("/v1/ledger/accounts", Some(&finance), StatusCode::OK),
        ("/v1/ledger/accounts", Some(&a), StatusCode::FORBIDDEN),
        ("/v1/projections", Some(&finance), StatusCode::OK),
        ("/v1/tokens", Some(&admin), StatusCode::OK),
        ("/v1/tokens", Some(&finance), StatusCode::FORBIDDEN),
        ("/v1/tokens", Some(&a), StatusCode::OK),
    ];
    for (uri, token, expected) in matrix {
        assert_eq!(
            call(&app, "GET", uri, token, None).await.0,
            expected,
            "GET {uri} as {token:?}"
        );
    }

    let lowercase_scheme = format!("bearer {a}");
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(&lowercase_scheme), None)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(&format!("Basic {a}")), None)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    let (status, headers, _) = common::request(
        &app,
        "POST",
        "/v1/tokens",
        Some(&admin),
        Some(json!({"role": {"kind": "finance"}, "label": "books"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        headers["cache-control"], "no-store",
        "a token must not be cached"
    );

    // Finance writes nothing.
    let agent_of = |provider: Uuid| json!({"role": {"kind": "agent", "provider_id": provider}, "label": "node 1"});
    assert_eq!(
        call(
            &app,
            "POST",
            "/v1/tokens",
            Some(&finance),
            Some(agent_of(provider_a))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/tokens/{b_id}/revoke"),
            Some(&finance),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );

    // A provider issues agent tokens for its own machines only.
    let (status, issued) = call(
        &app,
        "POST",
        "/v1/tokens",
        Some(&a),
        Some(agent_of(provider_a)),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let agent = issued["token"].as_str().unwrap().to_owned();
    let agent_id = issued["token_id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(
            &app,
            "POST",
            "/v1/tokens",
            Some(&a),
            Some(agent_of(provider_b))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    let finance_role = json!({"role": {"kind": "finance"}, "label": "sneaky"});
    assert_eq!(
        call(&app, "POST", "/v1/tokens", Some(&a), Some(finance_role))
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let (status, problem) = call(
        &app,
        "POST",
        "/v1/tokens",
        Some(&admin),
        Some(json!({"role": {"kind": "wizard"}, "label": "x"})),
    )
    .await;
    assert_eq!(
        (status, problem["errors"][0]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("/role/kind"))
    );

    // An agent acts for nobody else (and manages no tokens).
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(&agent), None).await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        call(
            &app,
            "POST",
            "/v1/tokens",
            Some(&agent),
            Some(agent_of(provider_a))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );

    // A provider sees and changes only its own tokens; another's do not exist for it.
    let (_, listed) = call(&app, "GET", "/v1/tokens", Some(&a), None).await;
    let ids: Vec<&str> = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        2,
        "its provider token and its agent token: {listed}"
    );
    assert!(
        listed.to_string().find("secret").is_none() && !listed.to_string().contains(&agent[40..])
    );
    assert_eq!(
        call(
            &app,
            "POST",
            &format!("/v1/tokens/{b_id}/revoke"),
            Some(&a),
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
            &format!("/v1/tokens/{b_id}/rotate"),
            Some(&a),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );

    // Revocation takes effect at once; revoking twice is a conflict.
    let (status, revoked) = call(
        &app,
        "POST",
        &format!("/v1/tokens/{b_id}/revoke"),
        Some(&admin),
        Some(json!({"reason": "left"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert!(revoked["revoked_at"].is_string());
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(&b), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (status, problem) = call(
        &app,
        "POST",
        &format!("/v1/tokens/{b_id}/revoke"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_revoked"))
    );

    // Rotation: the new token works, the old one is refused.
    let (status, rotated) = call(
        &app,
        "POST",
        &format!("/v1/tokens/{agent_id}/rotate"),
        Some(&a),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rotated}");
    assert_eq!(rotated["replaces"].as_str(), Some(agent_id.as_str()));
    let new_agent = rotated["token"].as_str().unwrap();
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(&agent), None).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&app, "GET", "/v1/tokens", Some(new_agent), None)
            .await
            .0,
        StatusCode::FORBIDDEN,
        "authenticated, not allowed"
    );
}

/// Another server process (its own registry) refuses a token revoked here within moments.
async fn revocation_reaches_other_processes(db: &TestDb) {
    let here = AppState::load(db.open().await).await.unwrap();
    let (_, admin) = token(&here, Role::Admin).await;
    let (finance_id, finance) = token(&here, Role::Finance).await;
    let there = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    assert_eq!(
        call(&there, "GET", "/v1/projections", Some(&finance), None)
            .await
            .0,
        StatusCode::OK
    );
    let here = common::serve(here).await;
    assert_eq!(
        call(
            &here,
            "POST",
            &format!("/v1/tokens/{finance_id}/revoke"),
            Some(&admin),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    let started = std::time::Instant::now();
    while call(&there, "GET", "/v1/projections", Some(&finance), None)
        .await
        .0
        != StatusCode::UNAUTHORIZED
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "revocation did not reach the other process"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Process `there` still believes a token active when process `here` revokes it: whatever
/// `there` answers, it must not let the revoked token write (its append checks the caller).
async fn a_revoked_caller_cannot_write_where_the_revocation_is_not_yet_known(db: &TestDb) {
    let here = AppState::load(db.open().await).await.unwrap();
    let (_, admin) = token(&here, Role::Admin).await;
    let provider = Uuid::now_v7();
    let (leaked_id, leaked) = token(
        &here,
        Role::Provider {
            provider_id: provider,
        },
    )
    .await;
    let there = common::serve(AppState::load(db.open().await).await.unwrap()).await;
    let here = common::serve(here).await;
    assert_eq!(
        call(
            &here,
            "POST",
            &format!("/v1/tokens/{leaked_id}/revoke"),
            Some(&admin),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    let body = json!({"role": {"kind": "agent", "provider_id": provider}, "label": "x"});
    let (status, answer) = call(&there, "POST", "/v1/tokens", Some(&leaked), Some(body)).await;
    assert!(
        status == StatusCode::UNAUTHORIZED || status == StatusCode::CONFLICT,
        "a revoked token must not mint tokens: {status} {answer}"
    );
}

/// Token lists and balances are paged with cursors and bounded pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_paged_with_cursors() {
    let db = TestDb::sqlite();
    let state = AppState::load(db.open().await).await.unwrap();
    let (_, admin) = token(&state, Role::Admin).await;
    for _ in 0..4 {
        token(&state, Role::Finance).await;
    }
    gpunex_tests::seed_credits(&state.store, 10, 3).await;
    state.store.run_projections().await.unwrap();
    let app = common::serve(state).await;
    let mut seen = Vec::new();
    let mut path = "/v1/tokens?limit=2".to_owned();
    loop {
        let (status, page) = call(&app, "GET", &path, Some(&admin), None).await;
        assert_eq!(status, StatusCode::OK);
        seen.extend(
            page["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["token_id"].as_str().unwrap().to_owned()),
        );
        match page["next_after"].as_str() {
            Some(cursor) => path = format!("/v1/tokens?limit=2&after={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);
    seen.dedup();
    assert_eq!(seen.len(), 5, "no token twice");
    let (_, first) = call(
        &app,
        "GET",
        "/v1/ledger/accounts?limit=2",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(first["accounts"].as_array().unwrap().len(), 2);
    let cursor = first["next_after"].as_str().unwrap();
    let (_, rest) = call(
        &app,
        "GET",
        &format!("/v1/ledger/accounts?limit=2&after={cursor}"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        rest["accounts"].as_array().unwrap().len(),
        2,
        "3 providers and the adjustments account"
    );
    assert!(rest["next_after"].is_null());
    assert_eq!(
        call(&app, "GET", "/v1/tokens?after=nope", Some(&admin), None)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(
            &app,
            "GET",
            "/v1/ledger/accounts?limit=0",
            Some(&admin),
            None
        )
        .await
        .0,
        StatusCode::BAD_REQUEST
    );
}

/// The cross-tenant case. It used to go: provider A holds an agent token for machine id M before
/// anyone registers M; provider B gets its own token for M and registers it; A's token then read
/// B's machine and telemetry. Now the platform mints machine ids, no provider can bind a token
/// to an id another holds, and even a token bound that way (by an operator's mistake) reads only
/// a machine of its own provider.
async fn an_agent_token_never_reads_another_providers_machine(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let app = common::serve(state.clone()).await;
    let (provider_a, token_a) =
        common::approved_provider(&app, &admin, "a@example.com", common::one_h100()).await;
    let (provider_b, token_b) =
        common::approved_provider(&app, &admin, "b@example.com", common::one_h100()).await;

    // A chooses an id: refused, machine ids are the platform's.
    let chosen = Uuid::now_v7();
    let (status, problem) = call(
        &app,
        "POST",
        "/v1/tokens",
        Some(&token_a),
        Some(json!({"role": {"kind": "agent", "machine_id": chosen}})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("machine_id_unknown")),
        "{problem}"
    );
    // A's token for a minted id M; B cannot bind a token to M, before or after it is registered.
    let (machine, agent_a) = common::agent_token(&app, &token_a).await;
    let (status, problem) = call(
        &app,
        "POST",
        "/v1/tokens",
        Some(&token_b),
        Some(json!({"role": {"kind": "agent", "machine_id": machine}})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("machine_registered_elsewhere")),
        "{problem}"
    );
    // A may issue a second token for its own M.
    let (status, second) = call(
        &app,
        "POST",
        "/v1/tokens",
        Some(&token_a),
        Some(json!({"role": {"kind": "agent", "machine_id": machine}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(
        second["role"],
        json!({"kind": "agent", "provider_id": provider_a, "machine_id": machine})
    );

    // Defence in depth: a token bound to M for B by going around the API registers M for B.
    let (forged, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(
            Role::Agent {
                provider_id: provider_b,
                machine_id: machine,
            },
            "forged",
            "cli",
        ),
    )
    .await
    .unwrap();
    let (status, _) = call(
        &app,
        "POST",
        "/v1/agent/events",
        Some(&forged.token),
        Some(json!({"events": [common::registration(machine, 1)]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(
        &app,
        "POST",
        "/v1/agent/heartbeat",
        Some(&forged.token),
        Some(common::heartbeat(machine, 1)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A's agent token names M but M is B's: nothing of it is visible to A.
    let gpu = common::gpu(machine, 0)["gpu_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    for path in [
        format!("/v1/machines/{machine}"),
        format!("/v1/machines/{machine}/gpus/{gpu}/telemetry"),
    ] {
        let (status, body) = call(&app, "GET", &path, Some(&agent_a), None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{path}: {body}"
        );
        let (status, _) = call(&app, "GET", &path, Some(&token_a), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path} as provider A");
        let (status, _) = call(&app, "GET", &path, Some(&token_b), None).await;
        assert_eq!(status, StatusCode::OK, "{path} as provider B, its owner");
    }
    let (status, problem) = call(&app, "GET", "/v1/agent/machine", Some(&agent_a), None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("machine_not_owned"))
    );
}
