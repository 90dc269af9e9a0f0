//! Ledger adjustments under dual control, over real HTTP on both databases: one person proposes
//! a balanced entry with a reason and evidence, a second approves it (posted: the provider's
//! balance and the ledger move, `audit reconcile` stays clean) or rejects it (nothing moves);
//! the proposer cannot decide, a proposal is decided once, and bad entries are refused.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_domain::credentials::Role;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

mod common;

conformance!(adjustments_need_a_second_person_and_post_once);

async fn token(state: &AppState, role: Role, issued_by: &str) -> String {
    let (new, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(role, "person", issued_by),
    )
    .await
    .unwrap();
    new.token
}

fn credit(provider: Uuid, micros: i64) -> Value {
    json!([
        {"account": "platform_adjustments", "side": "debit", "amount_micro_usdc": micros},
        {"account": format!("provider_payable:{provider}"), "side": "credit", "amount_micro_usdc": micros},
    ])
}

async fn pending(base: &str, admin: &str, provider: Uuid) -> i64 {
    let (status, _, summary) = common::request(
        base,
        "GET",
        &format!("/v1/providers/{provider}/earnings"),
        Some(admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    summary["pending_balance_micro_usdc"].as_i64().unwrap()
}

async fn adjustments_need_a_second_person_and_post_once(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let alice = token(&state, Role::Treasury, "cli").await;
    let bob = token(&state, Role::Treasury, "cli").await;
    let finance = token(&state, Role::Finance, "cli").await;
    let base = common::serve(state.clone()).await;
    let (provider, _) =
        common::approved_provider(&base, &admin, "adjusted@example.com", common::one_h100()).await;
    let before = pending(&base, &admin, provider).await;

    // Refused proposals write nothing.
    let head = state.store.head_position().await.unwrap();
    let mut unbalanced = credit(provider, 5_000_000);
    unbalanced[1]["amount_micro_usdc"] = json!(4_000_000);
    let treasury = json!([
        {"account": "treasury", "side": "debit", "amount_micro_usdc": 1},
        {"account": format!("provider_payable:{provider}"), "side": "credit", "amount_micro_usdc": 1},
    ]);
    let bad_account = json!([{"account": "wallet:x", "side": "debit", "amount_micro_usdc": 1}]);
    let nobody = credit(Uuid::now_v7(), 1);
    for (postings, reason, status, field, code) in [
        (
            unbalanced,
            "r",
            StatusCode::BAD_REQUEST,
            Some("/postings"),
            "unbalanced_entry",
        ),
        (
            treasury,
            "r",
            StatusCode::UNPROCESSABLE_ENTITY,
            None,
            "account_not_adjustable",
        ),
        (
            bad_account,
            "r",
            StatusCode::BAD_REQUEST,
            Some("/postings/0/account"),
            "invalid_account",
        ),
        (
            nobody,
            "r",
            StatusCode::BAD_REQUEST,
            Some("/postings/1/account"),
            "unknown_account_owner",
        ),
        (
            credit(provider, 1),
            " ",
            StatusCode::BAD_REQUEST,
            Some("/reason"),
            "invalid_text",
        ),
    ] {
        let body = json!({"reason": reason, "evidence": "ticket 4711", "postings": postings});
        let (got, _, problem) = common::request(
            &base,
            "POST",
            "/v1/ledger/adjustments",
            Some(&alice),
            Some(body),
        )
        .await;
        assert_eq!(got, status, "{problem}");
        let found = match field {
            Some(field) => {
                (
                    problem["errors"][0]["field"].as_str(),
                    problem["errors"][0]["code"].as_str(),
                ) == (Some(field), Some(code))
            }
            None => problem["code"] == code,
        };
        assert!(found, "{code}: {problem}");
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);

    // Finance audits adjustments but cannot make them.
    let goodwill = json!({"reason": "goodwill for the outage of 1 December", "evidence": "support ticket 4711", "postings": credit(provider, 5_000_000)});
    let (status, _, problem) = common::request(
        &base,
        "POST",
        "/v1/ledger/adjustments",
        Some(&finance),
        Some(goodwill.clone()),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );

    // Alice proposes: nothing moves yet.
    let (status, _, proposed) = common::request(
        &base,
        "POST",
        "/v1/ledger/adjustments",
        Some(&alice),
        Some(goodwill),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{proposed}");
    assert_eq!(
        (proposed["status"].as_str(), proposed["total_usdc"].as_str()),
        (Some("proposed"), Some("5.000000"))
    );
    let id = proposed["proposal_id"].as_str().unwrap().to_owned();
    assert_eq!(pending(&base, &admin, provider).await, before);
    let (status, _, read) = common::request(
        &base,
        "GET",
        &format!("/v1/ledger/adjustments/{id}"),
        Some(&finance),
        None,
    )
    .await;
    assert_eq!((status, &read), (StatusCode::OK, &proposed));

    // Alice may not approve her own proposal, nor with a token she issued herself.
    let (alice_second, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(
            Role::Treasury,
            "alice again",
            proposed["proposed_by"].as_str().unwrap(),
        ),
    )
    .await
    .unwrap();
    for by in [&alice, &alice_second.token] {
        let (status, _, problem) = common::request(
            &base,
            "POST",
            &format!("/v1/ledger/adjustments/{id}/approve"),
            Some(by),
            None,
        )
        .await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("same_person")),
            "{problem}"
        );
    }

    // Bob approves: the entry is posted once.
    let (status, _, approved) = common::request(
        &base,
        "POST",
        &format!("/v1/ledger/adjustments/{id}/approve"),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(
        (status, approved["status"].as_str()),
        (StatusCode::OK, Some("approved")),
        "{approved}"
    );
    assert_eq!(pending(&base, &admin, provider).await, before + 5_000_000);
    let (status, _, problem) = common::request(
        &base,
        "POST",
        &format!("/v1/ledger/adjustments/{id}/reject"),
        Some(&bob),
        Some(json!({"reason": "changed my mind"})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("already_decided"))
    );

    // A rejection needs its reason, and posts nothing.
    let chargeback = json!({"reason": "chargeback", "evidence": "bank notice 88", "postings": credit(provider, 1_000_000)});
    let (_, _, second) = common::request(
        &base,
        "POST",
        "/v1/ledger/adjustments",
        Some(&bob),
        Some(chargeback),
    )
    .await;
    let second_id = second["proposal_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/ledger/adjustments/{second_id}/reject");
    let (status, _, problem) =
        common::request(&base, "POST", &path, Some(&alice), Some(json!({}))).await;
    assert_eq!(
        (status, problem["errors"][0]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("/reason")),
        "{problem}"
    );
    let (status, _, rejected) = common::request(
        &base,
        "POST",
        &path,
        Some(&alice),
        Some(json!({"reason": "the bank notice is for another account"})),
    )
    .await;
    assert_eq!(
        (status, rejected["status"].as_str()),
        (StatusCode::OK, Some("rejected")),
        "{rejected}"
    );
    assert_eq!(pending(&base, &admin, provider).await, before + 5_000_000);

    let (_, _, listed) = common::request(
        &base,
        "GET",
        "/v1/ledger/adjustments?status=approved",
        Some(&finance),
        None,
    )
    .await;
    assert_eq!(
        listed["adjustments"].as_array().unwrap().len(),
        1,
        "{listed}"
    );

    // The books agree: the ledger holds the posting and reconcile finds nothing amiss.
    state.store.run_projections().await.unwrap();
    let (_, _, lines) = common::request(
        &base,
        "GET",
        "/v1/ledger/accounts/platform_adjustments/lines",
        Some(&finance),
        None,
    )
    .await;
    assert_eq!(lines["lines"].as_array().unwrap().len(), 1, "{lines}");
    let (status, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&finance), None).await;
    assert_eq!(
        (status, &report["mismatches"]),
        (StatusCode::OK, &json!([])),
        "{report}"
    );
}
