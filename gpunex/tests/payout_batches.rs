//! Payout batches over real HTTP, on SQLite and PostgreSQL: the weekly minimum and roll-forward,
//! the first business day after a holiday, idempotent reruns, the bank rail's file, cents and
//! carried remainder, confirmations and returns, and each payout's proof summing exactly.
//!
//! Earnings are written as the platform writes them (`domain::rental::meter_usage`, machine
//! online, rental started) but dated in October 2026, so the batches of November can pay them.

use axum::http::StatusCode;
use chrono::NaiveDate;
use gpunex_api::AppState;
use gpunex_api::payout_run::PayoutConfig;
use gpunex_domain::payouts::{BankAddress, BankDetails, PayoutPolicy};
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(
    batches_pay_what_is_due_once_and_prove_it,
    the_scheduler_runs_each_due_date_once_and_catches_up,
    a_bank_status_report_confirms_and_returns_payouts,
    one_batch_runs_at_a_time_and_an_interrupted_one_is_finished,
    a_large_batch_answers_a_page_at_a_time
);

mod common;

/// The ed25519 base point, a valid wallet address.
const WALLET: &str = "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH";

fn bank(holder: &str, iban: &str) -> Value {
    json!({"kind": "bank", "iban": iban, "bic": "ABNANL2A", "account_holder": holder,
           "address": {"street": "Damrak", "post_code": "1012 LG", "town": "Amsterdam", "country": "NL"}})
}

/// The platform's own bank account.
fn debtor() -> BankDetails {
    BankDetails {
        iban: "DE89370400440532013000".to_owned(),
        bic: "COBADEFFXXX".to_owned(),
        account_holder: "GPUnex Treasury".to_owned(),
        address: BankAddress {
            street: "Friedrichstrasse".to_owned(),
            building_number: Some("68".to_owned()),
            post_code: "10117".to_owned(),
            town: "Berlin".to_owned(),
            country: "DE".to_owned(),
        },
    }
}

async fn batch(base: &str, token: &str, date: &str, dry_run: bool) -> (StatusCode, Value) {
    let (status, _, body) = common::request(
        base,
        "POST",
        "/v1/payout-batches",
        Some(token),
        Some(json!({"date": date, "dry_run": dry_run})),
    )
    .await;
    (status, body)
}

fn payout_of(batch: &Value, provider: Uuid) -> &Value {
    batch["payouts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider_id"] == provider.to_string())
        .unwrap_or_else(|| panic!("no payout for {provider} in {batch}"))
}

async fn proof(base: &str, token: &str, payout: &Value) -> Value {
    let (status, _, proof) = common::request(
        base,
        "GET",
        &format!(
            "/v1/payouts/{}/proof",
            payout["payout_id"].as_str().unwrap()
        ),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{proof}");
    assert_eq!(proof["balanced"], true, "{proof}");
    let lines: i64 = proof["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["net_micro_usdc"].as_i64().unwrap())
        .sum();
    assert_eq!(lines, proof["lines_net_micro_usdc"].as_i64().unwrap());
    assert_eq!(
        lines + proof["brought_forward_micro_usdc"].as_i64().unwrap(),
        proof["amount_micro_usdc"].as_i64().unwrap()
            + proof["carried_micro_usdc"].as_i64().unwrap(),
        "{proof}"
    );
    proof
}

async fn batches_pay_what_is_due_once_and_prove_it(db: &TestDb) {
    let mut policy = PayoutPolicy::default();
    // Monday 2026-11-02 is a holiday: weekly payouts still run on Monday, the monthly ones wait
    // for Tuesday the 3rd (November 2026 starts on a Sunday).
    policy
        .holidays
        .insert(NaiveDate::from_ymd_opt(2026, 11, 2).unwrap());
    let state = AppState::load(db.open().await)
        .await
        .unwrap()
        .with_payout_config(PayoutConfig {
            policy,
            debtor: Some(debtor()),
        });
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let entry = common::one_h100();
    let mut providers = Vec::new();
    for (email, schedule, method) in [
        (
            "sol@example.com",
            "weekly",
            json!({"kind": "solana", "wallet": WALLET}),
        ),
        (
            "bank@example.com",
            "weekly",
            bank("Ada Lovelace", "NL91ABNA0417164300"),
        ),
        (
            "low@example.com",
            "weekly",
            json!({"kind": "solana", "wallet": WALLET}),
        ),
        (
            "month@example.com",
            "monthly",
            bank("Alan Turing", "NL02ABNA0123456789"),
        ),
    ] {
        let (provider, token) =
            common::approved_provider(&base, &admin, email, entry.clone()).await;
        common::set_payout_settings(&base, &token, provider, schedule, method).await;
        providers.push((provider, token));
    }
    let [(sol, sol_token), (bank_p, bank_token), (low, _), (month, _)] =
        <[(Uuid, String); 4]>::try_from(providers).unwrap();
    let store = &state.store;
    // Before the cutoff of Monday 2026-11-02 (Friday 2026-10-30 00:00 UTC, a 3-day hold):
    assert_eq!(
        common::earn(store, sol, 31_404, "2026-10-20T10:00:00Z").await,
        25_123_200
    );
    assert_eq!(
        common::earn(store, bank_p, 39_270, "2026-10-21T10:00:00Z").await,
        31_416_000
    );
    assert_eq!(
        common::earn(store, low, 24_999, "2026-10-22T10:00:00Z").await,
        19_999_200
    );
    assert_eq!(
        common::earn(store, month, 62_500, "2026-10-23T10:00:00Z").await,
        50_000_000
    );
    // After it (held until the next week):
    assert_eq!(
        common::earn(store, sol, 30_000, "2026-10-31T12:00:00Z").await,
        24_000_000
    );
    state
        .credentials
        .wait_for(store.head_position().await.unwrap())
        .await
        .unwrap();

    // Refusals first: nothing is written.
    let head = store.head_position().await.unwrap();
    for (date, status, code) in [
        (
            "2026-11-04",
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_a_payout_date",
        ),
        (
            "2099-01-05",
            StatusCode::UNPROCESSABLE_ENTITY,
            "date_in_future",
        ),
        ("2026-13-01", StatusCode::BAD_REQUEST, "invalid_date"),
    ] {
        let (got, body) = batch(&base, &admin, date, false).await;
        assert_eq!(got, status, "{date}: {body}");
        assert!(body.to_string().contains(code), "{date}: {body}");
    }
    let (status, _) = batch(&base, &sol_token, "2026-11-02", false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A dry run shows the batch and writes nothing.
    let (status, dry) = batch(&base, &admin, "2026-11-02", true).await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(store.head_position().await.unwrap(), head);
    assert_eq!(dry["payouts"].as_array().unwrap().len(), 2, "{dry}");

    let (status, monday) = batch(&base, &admin, "2026-11-02", false).await;
    assert_eq!(status, StatusCode::OK, "{monday}");
    assert_eq!(monday["created"], true);
    assert_eq!(monday["cutoff"], "2026-10-30T00:00:00.000000Z");
    // Solana: the exact micro-USDC, the late line held back.
    let paid_sol = payout_of(&monday, sol);
    assert_eq!(paid_sol["amount_micro_usdc"], 25_123_200);
    assert_eq!(paid_sol["lines"], 1);
    assert_eq!(paid_sol["status"], "scheduled");
    // Bank: whole cents; the sub-cent remainder stays in the balance.
    let paid_bank = payout_of(&monday, bank_p);
    assert_eq!(paid_bank["amount_micro_usdc"], 31_410_000);
    assert_eq!(paid_bank["carried_micro_usdc"], 6_000);
    assert_eq!(paid_bank["rail"], "bank");
    // Below the 20 USDC minimum: rolls forward. Monthly: not due on a holiday.
    assert_eq!(
        monday["rolled_forward"],
        json!([{"provider_id": low, "schedule": "weekly", "available_micro_usdc": 19_999_200,
                "minimum_micro_usdc": 20_000_000}])
    );
    assert_eq!(monday["payouts"].as_array().unwrap().len(), 2);
    assert_eq!(monday["total_micro_usdc"], 25_123_200 + 31_410_000);
    // The dry run showed exactly this.
    for (dry, real) in dry["payouts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(monday["payouts"].as_array().unwrap())
    {
        for field in [
            "payout_id",
            "amount_micro_usdc",
            "carried_micro_usdc",
            "lines",
        ] {
            assert_eq!(dry[field], real[field], "{field}");
        }
    }

    // Rerun: nothing new.
    let head = store.head_position().await.unwrap();
    let (status, again) = batch(&base, &admin, "2026-11-02", false).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["created"], false);
    assert_eq!(again["payouts"], monday["payouts"]);
    assert_eq!(store.head_position().await.unwrap(), head);

    // The payout queues in the metrics: one scheduled payout per rail, to the micro-USDC.
    let metrics = common::scrape(&base, Some(&admin)).await;
    for (rail, micros) in [("solana", 25_123_200.0), ("bank", 31_410_000.0)] {
        let labels = [("rail", rail), ("status", "scheduled")];
        assert_eq!(
            metrics.value("gpunex_payouts", &labels),
            Some(1.0),
            "{rail}"
        );
        assert_eq!(
            metrics.value("gpunex_payouts_micro_usdc", &labels),
            Some(micros),
            "{rail}"
        );
    }

    // Finance pages through a batch's payouts, and lists batches without them.
    let path = "/v1/payout-batches/2026-11-02";
    let (status, _, first) =
        common::request(&base, "GET", &format!("{path}?limit=1"), Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["payout_count"], 2);
    assert_eq!(first["payouts"].as_array().unwrap().len(), 1);
    assert_eq!(first["payouts"][0], monday["payouts"][0]);
    let after = first["next_after"].as_str().unwrap().to_owned();
    let (_, _, second) = common::request(
        &base,
        "GET",
        &format!("{path}?after={after}&limit=1"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(second["payouts"][0], monday["payouts"][1]);
    assert_eq!(second["next_after"], Value::Null);
    for (query, code) in [
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("after=nope", "invalid_cursor"),
        (&*format!("after={}", Uuid::now_v7()), "invalid_cursor"),
        ("page=2", "unknown_parameter"),
    ] {
        let (status, _, refused) =
            common::request(&base, "GET", &format!("{path}?{query}"), Some(&admin), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {refused}");
        assert_eq!(refused["errors"][0]["code"], code, "{query}: {refused}");
    }
    let (status, _, list) =
        common::request(&base, "GET", "/v1/payout-batches", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list[0]["date"], "2026-11-02");
    assert_eq!(list[0]["payout_count"], 2);
    assert_eq!(list[0]["rolled_forward_count"], 1);
    assert_eq!(list[0]["by_status"], json!({"scheduled": 2}));
    assert!(list[0].get("payouts").is_none());

    // The provider sees its pending payout; the balance left is what was held back.
    let (status, _, history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{sol}/payouts"),
        Some(&sol_token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{history}");
    assert_eq!(history["balance_micro_usdc"], 24_000_000);
    assert_eq!(history["in_flight_micro_usdc"], 25_123_200);
    assert_eq!(history["pending"][0]["payout_id"], paid_sol["payout_id"]);
    // The next payout as it stands: the next Monday (the server's clock is the wall clock),
    // what the lines after this batch's make available, at or above the weekly minimum.
    let today = chrono::Utc::now().date_naive();
    let monday = (0..7)
        .map(|d| today + chrono::Days::new(d))
        .find(|d| chrono::Datelike::weekday(d) == chrono::Weekday::Mon)
        .unwrap();
    let next = &history["next_payout"];
    assert_eq!(next["date"], json!(monday.to_string()), "{next}");
    assert_eq!(next["schedule"], "weekly");
    assert_eq!(next["rail"], "solana");
    assert_eq!(next["minimum_micro_usdc"], 20_000_000);
    assert_eq!(next["available_micro_usdc"], 24_000_000);
    assert_eq!(next["amount_usdc"], "24.000000");
    // Below the minimum, it would roll forward: no amount.
    let (_, _, low_history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{low}/payouts"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        low_history["next_payout"]["available_micro_usdc"],
        19_999_200
    );
    assert_eq!(low_history["next_payout"]["amount_micro_usdc"], json!(null));
    let (status, _, _) = common::request(
        &base,
        "GET",
        &format!("/v1/payouts/{}", paid_sol["payout_id"].as_str().unwrap()),
        Some(&bank_token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Tuesday: the monthly payout (first business day after the holiday).
    let (status, tuesday) = batch(&base, &admin, "2026-11-03", false).await;
    assert_eq!(status, StatusCode::OK, "{tuesday}");
    let paid_month = payout_of(&tuesday, month);
    assert_eq!(paid_month["amount_micro_usdc"], 50_000_000);
    assert_eq!(paid_month["period"], "monthly-2026-11");
    assert_eq!(tuesday["payouts"].as_array().unwrap().len(), 1);

    // Bank payouts cannot be confirmed before they are in a file, nor Solana ones by hand.
    let confirm = |payout: &Value| {
        format!(
            "/v1/payouts/{}/confirm",
            payout["payout_id"].as_str().unwrap()
        )
    };
    let (status, _, refused) = common::request(
        &base,
        "POST",
        &confirm(paid_bank),
        Some(&admin),
        Some(json!({"bank_reference": "REF-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["code"], "payout_not_submitted", "{refused}");
    let (status, _, refused) = common::request(
        &base,
        "POST",
        &confirm(paid_sol),
        Some(&admin),
        Some(json!({"bank_reference": "REF-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["code"], "not_a_bank_payout", "{refused}");

    // The provider moves to another bank after the payout was scheduled: the payout is still
    // filed to the account it was scheduled with.
    common::set_payout_settings(
        &base,
        &bank_token,
        bank_p,
        "weekly",
        bank("Ada Lovelace", "NL02ABNA0123456789"),
    )
    .await;

    // The SEPA file of Monday's batch: one transfer, euros at the stated rate, floored.
    let files_path = "/v1/payout-batches/2026-11-02/bank-files";
    let (status, _, refused) = common::request(
        &base,
        "POST",
        files_path,
        Some(&admin),
        Some(json!({"eur_per_usdc": "0.92.1"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["errors"][0]["code"], "invalid_rate", "{refused}");
    // The execution date is a TARGET2 business day at or after the next cut-off: not a
    // Saturday, not Christmas, not in the past.
    for (date, code) in [
        ("2030-12-07", "execution_date_closed"),
        ("2030-12-25", "execution_date_closed"),
        ("2031-04-11", "execution_date_closed"),
        ("2026-01-05", "execution_date_past"),
        ("0000-01-03", "invalid_date"),
        ("-0001-01-04", "invalid_date"),
    ] {
        let (status, _, refused) = common::request(
            &base,
            "POST",
            files_path,
            Some(&admin),
            Some(json!({"eur_per_usdc": "0.92", "execution_date": date})),
        )
        .await;
        assert_eq!(
            (status, refused["errors"][0]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{date}: {refused}"
        );
    }
    let (status, _, files) = common::request(
        &base,
        "POST",
        files_path,
        Some(&admin),
        Some(json!({"eur_per_usdc": "0.92"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{files}");
    let file = &files[0];
    assert_eq!(file["message_id"], "GPUNEX-20261102-01");
    let execution: chrono::NaiveDate = file["execution_date"].as_str().unwrap().parse().unwrap();
    assert!(
        gpunex_domain::sepa_calendar::is_target2_business_day(execution)
            && execution >= gpunex_domain::sepa_calendar::earliest_execution(common::now()),
        "{file}"
    );
    assert_eq!(file["transfers"], 1);
    // 3,141 USDC cents x 0.92 = 2,889.72: 2,889 euro cents.
    assert_eq!(file["control_sum_cents"], 2_889);
    let (status, headers, _) = common::request(
        &base,
        "GET",
        file["href"].as_str().unwrap(),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/xml")
    );
    let xml = reqwest::Client::new()
        .get(format!("{base}{}", file["href"].as_str().unwrap()))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // For the contract checks (`scripts/contract.sh`): validated against pain.001.001.09.
    let samples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/contract/sepa");
    std::fs::create_dir_all(&samples).unwrap();
    let partial = samples.join(format!(".{}.xml", Uuid::now_v7()));
    std::fs::write(&partial, &xml).unwrap();
    std::fs::rename(&partial, samples.join("api-batch-GPUNEX-20261102-01.xml")).unwrap();
    let end_to_end = Uuid::parse_str(paid_bank["payout_id"].as_str().unwrap())
        .unwrap()
        .simple()
        .to_string();
    for expected in [
        "<MsgId>GPUNEX-20261102-01</MsgId>".to_owned(),
        "<NbOfTxs>1</NbOfTxs>".to_owned(),
        "<CtrlSum>28.89</CtrlSum>".to_owned(),
        "<InstdAmt Ccy=\"EUR\">28.89</InstdAmt>".to_owned(),
        format!("<EndToEndId>{end_to_end}</EndToEndId>"),
        "<IBAN>NL91ABNA0417164300</IBAN>".to_owned(),
        "<StrtNm>Damrak</StrtNm>".to_owned(),
        "<TwnNm>Amsterdam</TwnNm>".to_owned(),
    ] {
        assert!(xml.contains(&expected), "{expected} not in {xml}");
    }
    assert!(!xml.contains("NL02ABNA0123456789"), "{xml}");
    use sha2::Digest;
    assert_eq!(
        hex::encode(sha2::Sha256::digest(xml.as_bytes())),
        file["sha256"].as_str().unwrap()
    );
    // Nothing left to file.
    let (status, _, refused) = common::request(
        &base,
        "POST",
        files_path,
        Some(&admin),
        Some(json!({"eur_per_usdc": "0.92"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["code"], "nothing_to_file");

    // Finance confirms the transfer with the bank's reference.
    let (status, _, confirmed) = common::request(
        &base,
        "POST",
        &confirm(paid_bank),
        Some(&admin),
        Some(json!({"bank_reference": "NOTPROVIDED-4711"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{confirmed}");
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(confirmed["bank_reference"], "NOTPROVIDED-4711");
    assert_eq!(confirmed["bank_amount_cents"], 2_889);

    // The monthly bank payout is filed, then returned by the bank: back in the balance.
    let (status, _, _) = common::request(
        &base,
        "POST",
        "/v1/payout-batches/2026-11-03/bank-files",
        Some(&admin),
        Some(json!({"eur_per_usdc": "1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let returned_path = format!(
        "/v1/payouts/{}/return",
        paid_month["payout_id"].as_str().unwrap()
    );
    let (status, _, refused) = common::request(
        &base,
        "POST",
        &returned_path,
        Some(&admin),
        Some(json!({"reason_code": "closed", "reason": "account closed"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, _, returned) = common::request(
        &base,
        "POST",
        &returned_path,
        Some(&admin),
        Some(json!({"reason_code": "AC04", "reason": "account closed"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{returned}");
    assert_eq!(returned["status"], "failed");
    assert_eq!(returned["failure_reason"], "AC04: account closed");
    let (_, _, history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{month}/payouts"),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(history["balance_micro_usdc"], 50_000_000, "{history}");
    assert_eq!(history["in_flight_micro_usdc"], 0);
    assert_eq!(history["history"][0]["status"], "failed");

    // The next Monday (all above the 20 USDC minimum): the held line is paid; the bank provider's carried 6,000 micro-USDC is
    // brought forward; one more second takes the low provider to exactly the minimum.
    assert_eq!(
        common::earn(store, bank_p, 31_256, "2026-11-04T10:00:00Z").await,
        25_004_800
    );
    assert_eq!(
        common::earn(store, low, 1, "2026-11-04T11:00:00Z").await,
        800
    );
    let (status, next) = batch(&base, &admin, "2026-11-09", false).await;
    assert_eq!(status, StatusCode::OK, "{next}");
    let sol_next = payout_of(&next, sol);
    assert_eq!(sol_next["amount_micro_usdc"], 24_000_000);
    let bank_next = payout_of(&next, bank_p);
    assert_eq!(bank_next["brought_forward_micro_usdc"], 6_000);
    assert_eq!(bank_next["lines_net_micro_usdc"], 25_004_800);
    // 25.010800 available: 25.01 paid, 800 micro-USDC carried again.
    assert_eq!(bank_next["amount_micro_usdc"], 25_010_000);
    assert_eq!(bank_next["carried_micro_usdc"], 800);
    // Scheduled after the change: the new account.
    assert_eq!(
        bank_next["method"]["iban"], "NL02ABNA0123456789",
        "{bank_next}"
    );
    assert_eq!(paid_bank["method"]["iban"], "NL91ABNA0417164300");
    let low_next = payout_of(&next, low);
    assert_eq!(low_next["amount_micro_usdc"], 20_000_000);
    assert_eq!(low_next["lines"], 2);
    assert_eq!(next["rolled_forward"], json!([]));

    // Every payout's proof: the lines it settled sum, with what was brought forward, to the
    // amount plus what was carried.
    for payout in [
        paid_sol, paid_bank, paid_month, sol_next, bank_next, low_next,
    ] {
        proof(&base, &admin, payout).await;
    }
    let low_proof = proof(&base, &admin, low_next).await;
    assert_eq!(low_proof["lines"].as_array().unwrap().len(), 2);
    assert_eq!(low_proof["lines_net_micro_usdc"], 20_000_000);

    // Money reconciles, payouts included.
    let (status, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["mismatches"], json!([]), "{report}");
}

/// The server's scheduler loop, on a clock that says Wednesday 2026-11-04: the Monday it missed
/// (the server was down) is paid once; later ticks write nothing.
async fn the_scheduler_runs_each_due_date_once_and_catches_up(db: &TestDb) {
    use gpunex_app::payout_run::{SchedulerState, run_scheduler, scheduler_dates, scheduler_tick};
    let date = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap();
    let policy = PayoutPolicy::default();
    assert_eq!(
        scheduler_dates(&policy, date("2026-11-04")),
        [date("2026-11-02")]
    );
    assert_eq!(
        scheduler_dates(&policy, date("2026-11-09")),
        [date("2026-11-09")]
    );
    // Tuesday 2026-12-01 is December's first business day; Monday the 30th is within reach.
    assert_eq!(
        scheduler_dates(&policy, date("2026-12-01")),
        [date("2026-11-30"), date("2026-12-01")]
    );

    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let entry = common::one_h100();
    let (provider, token) =
        common::approved_provider(&base, &admin, "sched@example.com", entry).await;
    common::set_payout_settings(
        &base,
        &token,
        provider,
        "weekly",
        json!({"kind": "solana", "wallet": WALLET}),
    )
    .await;
    let store = &state.store;
    assert_eq!(
        common::earn(store, provider, 31_404, "2026-10-20T10:00:00Z").await,
        25_123_200
    );

    let scheduler = tokio::spawn(run_scheduler(
        store.clone(),
        state.credentials.clone(),
        policy.clone(),
        move || NaiveDate::from_ymd_opt(2026, 11, 4).unwrap(),
        std::time::Duration::from_millis(20),
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let batch = loop {
        let (status, _, body) = common::request(
            &base,
            "GET",
            "/v1/payout-batches/2026-11-02",
            Some(&admin),
            None,
        )
        .await;
        if status == StatusCode::OK {
            break body;
        }
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "no batch from the scheduler"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let paid = payout_of(&batch, provider);
    assert_eq!(paid["amount_micro_usdc"], 25_123_200, "{batch}");
    assert_eq!(paid["status"], "scheduled");
    // Many ticks later: nothing more was written.
    let head = store.head_position().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(store.head_position().await.unwrap(), head);
    scheduler.abort();

    // The next Monday has nothing due: the tick writes nothing, and remembers it until the log
    // moves.
    let mut memory = SchedulerState::default();
    let created = scheduler_tick(
        store,
        &state.credentials,
        &policy,
        date("2026-11-09"),
        &mut memory,
    )
    .await
    .unwrap();
    assert!(created.is_empty());
    assert_eq!(store.head_position().await.unwrap(), head);
    // New earnings before that Monday's cutoff: the next tick pays them.
    assert_eq!(
        common::earn(store, provider, 25_000, "2026-11-03T10:00:00Z").await,
        20_000_000
    );
    state
        .credentials
        .wait_for(store.head_position().await.unwrap())
        .await
        .unwrap();
    let created = scheduler_tick(
        store,
        &state.credentials,
        &policy,
        date("2026-11-09"),
        &mut memory,
    )
    .await
    .unwrap();
    assert_eq!(created, [date("2026-11-09")]);
    let (status, _, batch) = common::request(
        &base,
        "GET",
        "/v1/payout-batches/2026-11-09",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{batch}");
    assert_eq!(
        payout_of(&batch, provider)["amount_micro_usdc"],
        20_000_000,
        "{batch}"
    );
}

/// A pain.002.001.10 report `message_id` on the file `original`, with a group status block and
/// transaction blocks.
fn pain002(message_id: &str, original: &str, group: &str, transactions: &[String]) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10">
  <CstmrPmtStsRpt>
    <GrpHdr><MsgId>{message_id}</MsgId><CreDtTm>2026-11-04T09:00:00Z</CreDtTm></GrpHdr>
    <OrgnlGrpInfAndSts>
      <OrgnlMsgId>{original}</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>
      {group}
    </OrgnlGrpInfAndSts>
    <OrgnlPmtInfAndSts>
      <OrgnlPmtInfId>{original}</OrgnlPmtInfId>
      {}
    </OrgnlPmtInfAndSts>
  </CstmrPmtStsRpt>
</Document>"#,
        transactions.concat()
    )
}

/// One transaction status: the payout's end-to-end id, a status, a reason code, euros.
fn transaction(payout: &Value, status: &str, reason: Option<&str>, euros: &str) -> String {
    let end_to_end = Uuid::parse_str(payout["payout_id"].as_str().unwrap())
        .unwrap()
        .simple()
        .to_string();
    let reason = reason.map_or(String::new(), |code| {
        format!(
            "<StsRsnInf><Rsn><Cd>{code}</Cd></Rsn><AddtlInf>account closed</AddtlInf></StsRsnInf>"
        )
    });
    format!(
        "<TxInfAndSts><OrgnlEndToEndId>{end_to_end}</OrgnlEndToEndId><TxSts>{status}</TxSts>{reason}\
         <OrgnlTxRef><Amt><InstdAmt Ccy=\"EUR\">{euros}</InstdAmt></Amt></OrgnlTxRef></TxInfAndSts>"
    )
}

async fn import(base: &str, token: &str, xml: &str) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/bank-status-reports"))
        .bearer_auth(token)
        .header("content-type", "application/xml")
        .body(xml.to_owned())
        .send()
        .await
        .unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    (status, response.json().await.unwrap())
}

/// Finance imports the bank's pain.002 report on a file: a settled transfer confirms its
/// payout, a rejected one returns the money to the balance, one in progress stays submitted.
/// Reports that contradict the file write nothing; a report imported twice changes nothing.
async fn a_bank_status_report_confirms_and_returns_payouts(db: &TestDb) {
    let state = AppState::load(db.open().await)
        .await
        .unwrap()
        .with_payout_config(PayoutConfig {
            policy: PayoutPolicy::default(),
            debtor: Some(debtor()),
        });
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let mut providers = Vec::new();
    for (n, (iban, seconds)) in [
        ("NL91ABNA0417164300", 31_250),
        ("NL85ABNA0555555569", 37_500),
        ("NL63ABNA0555555577", 43_750),
    ]
    .into_iter()
    .enumerate()
    {
        let (provider, token) = common::approved_provider(
            &base,
            &admin,
            &format!("bank{n}@example.com"),
            common::one_h100(),
        )
        .await;
        common::set_payout_settings(
            &base,
            &token,
            provider,
            "weekly",
            bank("Grace Hopper", iban),
        )
        .await;
        common::earn(&state.store, provider, seconds, "2026-10-20T10:00:00Z").await;
        providers.push((provider, token));
    }
    let (status, monday) = batch(&base, &admin, "2026-11-02", false).await;
    assert_eq!(status, StatusCode::OK, "{monday}");
    let [settled, rejected, pending] =
        [0, 1, 2].map(|n| payout_of(&monday, providers[n].0).clone());
    assert_eq!(settled["amount_micro_usdc"], 25_000_000);
    let (status, _, files) = common::request(
        &base,
        "POST",
        "/v1/payout-batches/2026-11-02/bank-files",
        Some(&admin),
        Some(json!({"eur_per_usdc": "1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{files}");
    let file = files[0]["message_id"].as_str().unwrap().to_owned();
    assert_eq!(files[0]["transfers"], 3);

    let good = [
        transaction(&settled, "ACSC", None, "25.00"),
        transaction(&rejected, "RJCT", Some("AC04"), "30.00"),
        transaction(&pending, "ACSP", None, "35.00"),
    ];
    // Refused, with nothing written: not XML; a file we never sent; another amount; a transfer
    // that is not in the file; a provider's token.
    let head = state.store.head_position().await.unwrap();
    for (xml, status, code) in [
        (
            "<Document>".to_owned(),
            StatusCode::BAD_REQUEST,
            "invalid_status_report",
        ),
        (
            pain002("R1", "GPUNEX-20261109-01", "<GrpSts>ACSC</GrpSts>", &[]),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            pain002(
                "R1",
                &file,
                "<GrpSts>PART</GrpSts>",
                &[
                    good[0].clone(),
                    transaction(&rejected, "RJCT", Some("AC04"), "30.01"),
                ],
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "report_amount_mismatch",
        ),
        (
            pain002(
                "R1",
                &file,
                "<GrpSts>PART</GrpSts>",
                &[
                    good[0].clone(),
                    transaction(&json!({"payout_id": Uuid::now_v7()}), "RJCT", None, "1.00"),
                ],
            ),
            StatusCode::UNPROCESSABLE_ENTITY,
            "report_transaction_unknown",
        ),
    ] {
        let (got, body) = import(&base, &admin, &xml).await;
        assert_eq!(got, status, "{body}");
        assert!(body.to_string().contains(code), "{code}: {body}");
    }
    let xml = pain002("BANK-RPT-7", &file, "<GrpSts>PART</GrpSts>", &good);
    let (status, _) = import(&base, &providers[0].1, &xml).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(state.store.head_position().await.unwrap(), head);

    let (status, report) = import(&base, &admin, &xml).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["batch_date"], "2026-11-02");
    assert_eq!(report["confirmed"], json!([settled["payout_id"]]));
    assert_eq!(report["failed"], json!([rejected["payout_id"]]));
    assert_eq!(
        report["pending"],
        json!([{"payout_id": pending["payout_id"], "status": "ACSP"}])
    );
    let get = |payout: &Value| format!("/v1/payouts/{}", payout["payout_id"].as_str().unwrap());
    let (_, _, confirmed) = common::request(&base, "GET", &get(&settled), Some(&admin), None).await;
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(confirmed["bank_reference"], "BANK-RPT-7");
    let (_, _, failed) = common::request(&base, "GET", &get(&rejected), Some(&admin), None).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_code"], "bank_rejected");
    assert!(
        failed["failure_reason"]
            .as_str()
            .unwrap()
            .starts_with("AC04: "),
        "{failed}"
    );
    let (_, _, history) = common::request(
        &base,
        "GET",
        &format!("/v1/providers/{}/payouts", providers[1].0),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(history["balance_micro_usdc"], 30_000_000, "{history}");
    let (_, _, still) = common::request(&base, "GET", &get(&pending), Some(&admin), None).await;
    assert_eq!(still["status"], "submitted");

    // The same report again: nothing new.
    let head = state.store.head_position().await.unwrap();
    let (status, again) = import(&base, &admin, &xml).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["confirmed"], json!([]));
    assert_eq!(again["unchanged"].as_array().unwrap().len(), 2);
    assert_eq!(state.store.head_position().await.unwrap(), head);

    // A later report contradicting what the bank said before is refused, one by one or file-wide
    // (the rejected payout's money is back in the balance: a settled file would pay it twice).
    for contradiction in [
        pain002(
            "BANK-RPT-8",
            &file,
            "<GrpSts>PART</GrpSts>",
            &[transaction(&settled, "RJCT", Some("AC04"), "25.00")],
        ),
        pain002("BANK-RPT-8", &file, "<GrpSts>ACSC</GrpSts>", &[]),
    ] {
        let (status, refused) = import(&base, &admin, &contradiction).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(refused["code"], "report_contradicts_payout");
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);
    // The last transfer settles (ACCC: credited to the creditor's account).
    let (status, last) = import(
        &base,
        &admin,
        &pain002(
            "BANK-RPT-9",
            &file,
            "<GrpSts>PART</GrpSts>",
            &[transaction(&pending, "ACCC", None, "35.00")],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{last}");
    assert_eq!(last["confirmed"], json!([pending["payout_id"]]));
    assert_eq!(last["unchanged"].as_array().unwrap().len(), 2);

    let (_, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(report["mismatches"], json!([]), "{report}");
}

/// Two runs for two Mondays at once must not both pay the same earnings; a run interrupted
/// part-way holds back every other date until it is finished, and finishing it keeps its
/// payouts even if a provider's schedule changed meanwhile.
async fn one_batch_runs_at_a_time_and_an_interrupted_one_is_finished(db: &TestDb) {
    use gpunex_api::payout_run::run_batch;
    use gpunex_app::payout_run::plan;
    let date = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap();
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let policy = PayoutPolicy::default();
    let store = &state.store;
    let mut providers = Vec::new();
    for n in 0..3 {
        let (provider, token) = common::approved_provider(
            &base,
            &admin,
            &format!("lease{n}@example.com"),
            common::one_h100(),
        )
        .await;
        common::set_payout_settings(
            &base,
            &token,
            provider,
            "weekly",
            json!({"kind": "solana", "wallet": WALLET}),
        )
        .await;
        common::earn(store, provider, 31_250, "2026-10-20T10:00:00Z").await;
        providers.push((provider, token));
    }
    let sync = || async {
        state
            .credentials
            .wait_for(store.head_position().await.unwrap())
            .await
            .unwrap()
    };
    sync().await;

    // Both Mondays can pay the same 25 USDC of each provider: run both at once.
    let (first, second) = tokio::join!(
        run_batch(
            store,
            &state.credentials,
            &policy,
            date("2026-11-02"),
            false,
            "test"
        ),
        run_batch(
            store,
            &state.credentials,
            &policy,
            date("2026-11-09"),
            false,
            "test"
        ),
    );
    let outcomes = [first, second];
    for outcome in &outcomes {
        // The run that lost either saw the other's append land first, or (when the other had
        // begun but not finished when it looked) is held back until that batch is finished:
        // both refuse to pay what the other pays.
        if let Err(error) = outcome {
            let text = error.to_string();
            assert!(
                text.contains("another payout run")
                    || text.contains("was started and not finished"),
                "{error}"
            );
        }
    }
    assert!(outcomes.iter().any(Result::is_ok));
    sync().await;
    let paid: i64 = state.credentials.with_earnings(|e| {
        providers
            .iter()
            .map(|(p, _)| e.payouts().provider(*p).scheduled)
            .sum()
    });
    assert_eq!(paid, 3 * 25_000_000, "each provider's earnings paid once");
    let (_, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(report["mismatches"], json!([]), "{report}");

    // New earnings, and a run of 2026-11-16 that stops after its first payout (written as the
    // first append of a run writes it: the claim and the payout).
    for (provider, _) in &providers {
        common::earn(store, *provider, 31_250, "2026-11-10T10:00:00Z").await;
    }
    sync().await;
    let monday = date("2026-11-16");
    let now = gpunex_domain::time::Timestamp::from_unix_micros(1_794_000_000_000_000);
    let stored =
        gpunex_app::payout_run::stored_ranges(store, &state.credentials, policy.cutoff(monday))
            .await
            .unwrap();
    let scheduled =
        gpunex_app::payout_run::scheduled_payouts(store, &state.credentials, &policy, monday)
            .await
            .unwrap();
    let planned = state
        .credentials
        .with_earnings(|e| plan(e, &stored, &scheduled, &policy, monday, now))
        .unwrap();
    assert_eq!(planned.payouts.len(), 3);
    let runs_version = state
        .credentials
        .with_earnings(|e| e.payouts().runs_version());
    let event = |e: gpunex_domain::payouts::PayoutEvent| {
        gpunex_store::NewEvent::from_domain(
            Uuid::now_v7(),
            &gpunex_domain::DomainEvent::Payout(e),
            gpunex_store::Metadata::actor("test"),
        )
    };
    store
        .append_streams(vec![
            gpunex_store::StreamAppend {
                stream_id: gpunex_domain::StreamId::parse("payout_runs".to_owned()).unwrap(),
                expected: gpunex_store::ExpectedVersion::Exact(runs_version),
                events: vec![event(gpunex_domain::payouts::PayoutEvent::BatchStarted(
                    gpunex_domain::payouts::BatchStarted {
                        batch_id: planned.batch_id,
                        payout_date: monday,
                        cutoff: planned.cutoff,
                        started_at: now,
                    },
                ))],
            },
            gpunex_store::StreamAppend {
                stream_id: gpunex_app::payout_run::payout_stream(planned.payouts[0].payout_id),
                expected: gpunex_store::ExpectedVersion::NoStream,
                events: vec![event(gpunex_domain::payouts::PayoutEvent::Scheduled(
                    planned.payouts[0].clone(),
                ))],
            },
        ])
        .await
        .unwrap();
    sync().await;
    // The interrupted payout's provider moves to monthly payouts: its payout stays in the batch.
    let interrupted = planned.payouts[0].provider_id;
    let token = &providers.iter().find(|(p, _)| *p == interrupted).unwrap().1;
    common::set_payout_settings(
        &base,
        token,
        interrupted,
        "monthly",
        json!({"kind": "solana", "wallet": WALLET}),
    )
    .await;
    // Another date waits for it; nothing is written.
    let head = store.head_position().await.unwrap();
    let refused = run_batch(
        store,
        &state.credentials,
        &policy,
        date("2026-11-23"),
        false,
        "test",
    )
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("2026-11-16"), "{refused}");
    assert_eq!(store.head_position().await.unwrap(), head);
    // Finishing it: the interrupted payout and the two others, once each.
    let finished = run_batch(store, &state.credentials, &policy, monday, false, "test")
        .await
        .unwrap();
    assert!(finished.created);
    assert_eq!(finished.payout_count, 3);
    assert_eq!(finished.total_micro_usdc, 3 * 25_000_000);
    assert!(
        finished
            .payouts
            .iter()
            .any(|p| p.payout_id == planned.payouts[0].payout_id)
    );
    // And the next date runs.
    run_batch(
        store,
        &state.credentials,
        &policy,
        date("2026-11-23"),
        false,
        "test",
    )
    .await
    .unwrap();
    let (_, _, report) =
        common::request(&base, "GET", "/v1/audit/reconcile", Some(&admin), None).await;
    assert_eq!(report["mismatches"], json!([]), "{report}");
}

/// A batch of 501 payouts: the POST answers with the first 500 and the cursor, the GET gives the
/// last one.
async fn a_large_batch_answers_a_page_at_a_time(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let store = &state.store;
    for _ in 0..501 {
        let provider = Uuid::now_v7();
        common::append(
            store,
            format!("payout_settings-{provider}"),
            gpunex_domain::DomainEvent::Payout(
                gpunex_domain::payouts::PayoutEvent::SettingsChanged(
                    gpunex_domain::payouts::PayoutSettingsChanged {
                        provider_id: provider,
                        schedule: gpunex_domain::payouts::Schedule::Weekly,
                        method: gpunex_domain::payouts::PayoutMethod::Solana {
                            wallet: WALLET.to_owned(),
                        },
                        changed_at: common::at("2026-10-01T00:00:00Z"),
                        changed_by: "test".to_owned(),
                    },
                ),
            ),
        )
        .await;
        common::earn(store, provider, 31_250, "2026-10-20T10:00:00Z").await;
    }
    state
        .credentials
        .wait_for(store.head_position().await.unwrap())
        .await
        .unwrap();
    let (status, created) = batch(&base, &admin, "2026-11-02", false).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(created["payout_count"], 501);
    let page = created["payouts"].as_array().unwrap();
    assert_eq!(page.len(), 500);
    assert_eq!(created["next_after"], page[499]["payout_id"]);
    let (status, _, rest) = common::request(
        &base,
        "GET",
        &format!(
            "/v1/payout-batches/2026-11-02?after={}",
            created["next_after"].as_str().unwrap()
        ),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    assert_eq!(rest["payouts"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_after"], Value::Null);
    let mut ids: Vec<&Value> = page.iter().map(|p| &p["payout_id"]).collect();
    ids.push(&rest["payouts"][0]["payout_id"]);
    ids.sort_by_key(|v| v.as_str().unwrap().to_owned());
    ids.dedup();
    assert_eq!(ids.len(), 501, "every payout once across the pages");
}
