//! Payout settings over real HTTP, on SQLite and PostgreSQL: a Solana wallet or SEPA bank
//! details, checked precisely; each change an event; only the provider (or an admin) may change
//! them.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::json;

conformance!(payout_settings_are_checked_and_recorded);

mod common;

/// The ed25519 base point, a valid wallet address.
const WALLET: &str = "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH";

async fn payout_settings_are_checked_and_recorded(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let entry = common::one_h100();
    let (provider, token) =
        common::approved_provider(&base, &admin, "pay@example.com", entry.clone()).await;
    let (_, other) = common::approved_provider(&base, &admin, "other@example.com", entry).await;
    let path = format!("/v1/providers/{provider}/payout-settings");
    let (status, _, _) = common::request(&base, "GET", &path, Some(&token), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Weekly to a Solana wallet.
    let (status, _, set) = common::request(
        &base,
        "PUT",
        &path,
        Some(&token),
        Some(json!({
            "schedule": "weekly", "method": {"kind": "solana", "wallet": format!(" {WALLET} ")}
        })),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["method"], json!({"kind": "solana", "wallet": WALLET}));
    assert_eq!(set["minimum_usdc"], "20.000000");

    // Bad input: precise codes for the field, nothing written.
    let head = state.store.head_position().await.unwrap();
    let bank = |iban: &str, bic: &str| {
        json!({
            "schedule": "monthly",
            "method": {"kind": "bank", "iban": iban, "bic": bic, "account_holder": "Ada Lovelace",
                       "address": {"street": "Calle Mayor", "building_number": "1", "post_code": "28013",
                                   "town": "Madrid", "country": "ES"}}
        })
    };
    for (body, field, code) in [
        (
            json!({"schedule": "weekly", "method": {"kind": "solana", "wallet": "0OIl"}}),
            "/method/wallet",
            "invalid_wallet",
        ),
        (
            json!({"schedule": "weekly", "method": {"kind": "solana", "wallet": "tVojvhToWjQ8Xvo4UPx2Xz9eRy7auyYMmZBjc2XfN"}}),
            "/method/wallet",
            "invalid_wallet",
        ),
        (
            bank("DE89370400440532013001", "COBADEFFXXX"),
            "/method/iban",
            "invalid_iban",
        ),
        (
            bank("SA0380000000608010167519", "COBADEFFXXX"),
            "/method/iban",
            "bank_region_unsupported",
        ),
        (
            bank("DE89370400440532013000", "COBAD"),
            "/method/bic",
            "invalid_bic",
        ),
        (
            json!({"schedule": "daily", "method": {"kind": "solana", "wallet": WALLET}}),
            "/schedule",
            "unknown_value",
        ),
    ] {
        let (status, _, problem) =
            common::request(&base, "PUT", &path, Some(&token), Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(
            (
                problem["errors"][0]["field"].as_str(),
                problem["errors"][0]["code"].as_str()
            ),
            (Some(field), Some(code)),
            "{problem}"
        );
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);

    // Monthly by SEPA transfer: the method changes, as an event; the latest is in force.
    let (status, _, set) = common::request(
        &base,
        "PUT",
        &path,
        Some(&token),
        Some(bank("DE89 3704 0044 0532 0130 00", "COBADEFFXXX")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{set}");
    assert_eq!(set["method"]["iban"], "DE89370400440532013000");
    assert_eq!(set["minimum_usdc"], "5.000000");
    let (_, _, read) = common::request(&base, "GET", &path, Some(&admin), None).await;
    assert_eq!(
        (read["schedule"].as_str(), read["method"]["kind"].as_str()),
        (Some("monthly"), Some("bank"))
    );
    let (_, _, events) =
        common::request(&base, "GET", "/v1/events?limit=1000", Some(&admin), None).await;
    let changes = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "payout.settings_changed")
        .count();
    assert_eq!(changes, 2);

    // Only the provider itself (or an admin) may change them.
    let (status, _, _) = common::request(
        &base,
        "PUT",
        &path,
        Some(&other),
        Some(json!({
            "schedule": "weekly", "method": {"kind": "solana", "wallet": WALLET}
        })),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = common::request(&base, "GET", &path, Some(&other), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
