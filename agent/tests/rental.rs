//! The whole path of money, end to end with the real binaries on SQLite and PostgreSQL: a person
//! applies, an admin approves, an agent with simulated GPUs registers and goes online, the
//! provider sets a price, a renter rents, the agent runs the job with the process runtime (only
//! the rented GPUs visible), usage is metered, the job completes, and the provider's earnings show
//! exactly the micro-USDC computed here by hand from the usage lines; `audit verify` and
//! `audit reconcile` pass.

use std::path::Path;

use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use tokio::process::Command;

conformance!(a_rented_job_is_metered_and_earned_to_the_micro_usdc);

mod common;

use common::*;

/// `round_half_even(price x seconds / 3600)` in micro-USDC, by hand.
fn charge(price_micros: i64, gpu_seconds: i64) -> i64 {
    let numerator = price_micros * gpu_seconds;
    let (quotient, remainder) = (numerator / 3_600, numerator % 3_600);
    match (2 * remainder).cmp(&3_600) {
        std::cmp::Ordering::Less => quotient,
        std::cmp::Ordering::Greater => quotient + 1,
        std::cmp::Ordering::Equal => quotient + quotient % 2,
    }
}

fn gpunex(db_url: &str, dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(server_binary())
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "error")
        .current_dir(dir)
        .output()
        .unwrap()
}

async fn a_rented_job_is_metered_and_earned_to_the_micro_usdc(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    // Development deployment: simulated GPUs may be listed.
    let _server = start_server_with(&db.url, port, dir.path(), &["--dev-mode"]).await;

    // An approved Community provider (20% fee), a renter, and the agent: simulated GPUs, the
    // process runtime, quick polls and usage reports. Price: 2.50 USDC per GPU-hour (694.44...
    // micro-USDC per GPU-second: rounding matters).
    let market = market(&base, &admin).await;
    let (provider, provider_token, renter) = (
        market.provider,
        market.provider_token.clone(),
        market.renter.clone(),
    );
    let state = dir.path().join("agent-state");
    let mut agent = Command::new(AGENT)
        .args(["--server", &base, "--state-dir", state.to_str().unwrap()])
        .args(["--simulate", "2xH100", "--runtime", "process"])
        .args(["--heartbeat-interval", "200ms", "--poll-interval", "200ms"])
        .args(["--usage-interval", "1s", "run"])
        .env("GPUNEX_AGENT_TOKEN", &market.agent_token)
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    market.price_and_wait_listed(&base, &admin, 2).await;

    // Rent both GPUs for a job that records what it sees and runs about three seconds.
    let script = "echo \"$CUDA_VISIBLE_DEVICES\" > visible.txt; echo 'hello from the job'; echo 'año, €' >&2; sleep 3";
    let (status, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        &renter,
        Some(json!({"gpus": 2, "filter": {"model": "h100-80gb"},
                    "workload": {"image": "busybox", "command": ["sh", "-c", script]}})),
    )
    .await;
    assert_eq!(status, 201, "{rental}");
    let rental_id = rental["rental_id"].as_str().unwrap().to_owned();
    let rented: Vec<String> = serde_json::from_value(rental["gpu_uuids"].clone()).unwrap();
    let rental_path = format!("/v1/rentals/{rental_id}");
    eventually("the job completed", 60, || async {
        let (_, view) = call(&base, "GET", &rental_path, &renter, None).await;
        view["status"] == "ended"
    })
    .await;
    let (_, done) = call(&base, "GET", &rental_path, &renter, None).await;
    assert_eq!(done["cause"], "completed", "{done}");
    assert_eq!(done["job_status"], "ended");
    assert_eq!(done["job_evidence"]["exit_code"], 0);
    // Its output, for the renter only (a provider sees the rental, not what it printed).
    let logs_path = format!("{rental_path}/logs");
    eventually("the job's output shipped", 30, || async {
        let (_, log) = call(&base, "GET", &logs_path, &renter, None).await;
        log["text"] == "hello from the job\naño, €\n" && log["job_ended"] == true
    })
    .await;
    let (_, log) = call(&base, "GET", &logs_path, &renter, None).await;
    assert_eq!(
        (&log["from"], &log["next"], &log["end"], &log["truncated"]),
        (&json!(0), &json!(29), &json!(29), &json!(false)),
        "{log}"
    );
    // Paged by byte offset; a page never ends inside a character.
    let (_, page) = call(
        &base,
        "GET",
        &format!("{logs_path}?after=19&limit=7"),
        &renter,
        None,
    )
    .await;
    assert_eq!(
        (&page["text"], &page["next"]),
        (&json!("año, "), &json!(25)),
        "{page}"
    );
    let (status, refused) = call(&base, "GET", &logs_path, &provider_token, None).await;
    assert_eq!(status, 403, "{refused}");
    // Another renter does not learn the rental exists.
    let other = json!({"email": "mallory@example.com", "password": "correct horse battery staple"});
    let (status, _) = call(&base, "POST", "/v1/accounts", "", Some(other.clone())).await;
    assert_eq!(status, 201);
    let (_, session) = call(&base, "POST", "/v1/sessions", "", Some(other)).await;
    let mallory = token(
        &base,
        session["token"].as_str().unwrap(),
        json!({"kind": "renter"}),
    )
    .await;
    let (status, hidden) = call(&base, "GET", &logs_path, &mallory, None).await;
    assert_eq!(
        (status, &hidden["code"]),
        (404, &json!("not_found")),
        "{hidden}"
    );
    let (status, bad) = call(&base, "GET", &format!("{logs_path}?limit=0"), &renter, None).await;
    assert_eq!(
        (status, &bad["code"]),
        (400, &json!("invalid_request")),
        "{bad}"
    );
    let (status, _) = call(&base, "GET", &logs_path, &admin, None).await;
    assert_eq!(status, 200);
    // Only the rented GPUs were visible to the job.
    let visible =
        std::fs::read_to_string(state.join("jobs").join(&rental_id).join("visible.txt")).unwrap();
    assert_eq!(visible.trim(), rented.join(","));

    // The usage lines, from the statement: every line names its rental and usage event.
    let today = chrono::Utc::now().date_naive();
    let (from, to) = (today.pred_opt().unwrap(), today.succ_opt().unwrap());
    let client = reqwest::Client::new();
    let csv = client
        .get(format!(
            "{base}/v1/providers/{provider}/earnings/statement.csv?from={from}&to={to}&tz=UTC"
        ))
        .bearer_auth(&provider_token)
        .send()
        .await
        .unwrap();
    assert_eq!(csv.status(), 200);
    let csv = csv.text().await.unwrap();
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let lines: Vec<Vec<&str>> = rows
        .map(|r| r.split(',').collect::<Vec<_>>())
        .filter(|r| r[0] != "total")
        .collect();
    // Reports every second while the job ran, and a final one when it ended.
    assert!(lines.len() >= 2, "{csv}");
    let events = all_events(&base, &admin).await;
    // By hand: each line's gross is the difference of the rounded cumulative charges, the fee
    // is floor(20%) of it, the net the rest.
    let (mut gross, mut fee, mut previous) = (0_i64, 0_i64, 0_i64);
    for line in &lines {
        assert_eq!(line[column("rental_id")], rental_id);
        let usage_event = line[column("usage_event_id")];
        assert!(
            events
                .iter()
                .any(|e| e["event_id"] == usage_event && e["event_type"] == "rental.usage_metered"),
            "{usage_event} is a usage event in the log"
        );
        let from_s: i64 = line[column("from_gpu_seconds")].parse().unwrap();
        let to_s: i64 = line[column("to_gpu_seconds")].parse().unwrap();
        assert_eq!(from_s, previous, "lines are contiguous");
        previous = to_s;
        let line_gross = charge(2_500_000, to_s) - charge(2_500_000, from_s);
        let line_fee = line_gross * 2_000 / 10_000;
        let micros = |text: &str| -> i64 {
            let (whole, fraction) = text.split_once('.').unwrap();
            whole.parse::<i64>().unwrap() * 1_000_000 + fraction.parse::<i64>().unwrap()
        };
        assert_eq!(micros(line[column("gross_usdc")]), line_gross);
        assert_eq!(micros(line[column("fee_usdc")]), line_fee);
        gross += line_gross;
        fee += line_fee;
    }
    let seconds = previous;
    assert_eq!(done["gpu_seconds"], seconds);
    assert!(
        (4..=20).contains(&seconds),
        "2 GPUs for about 3 s: {seconds}"
    );
    assert_eq!(gross, charge(2_500_000, seconds), "no drift");
    let net = gross - fee;

    // The dashboard shows exactly that.
    let (status, earnings) = call(
        &base,
        "GET",
        &format!("/v1/providers/{provider}/earnings?tz=UTC"),
        &provider_token,
        None,
    )
    .await;
    assert_eq!(status, 200, "{earnings}");
    for period in ["this_week", "this_month", "period"] {
        assert_eq!(
            earnings[period]["totals"]["net_micro_usdc"], net,
            "{period}: {earnings}"
        );
        assert_eq!(earnings[period]["totals"]["gross_micro_usdc"], gross);
        assert_eq!(earnings[period]["totals"]["fee_micro_usdc"], fee);
    }
    assert_eq!(earnings["all_time"]["net_micro_usdc"], net);
    assert_eq!(earnings["pending_balance_micro_usdc"], net);
    let per_gpu = earnings["per_gpu"].as_array().unwrap();
    assert_eq!(per_gpu.len(), 2);
    let shared: i64 = per_gpu
        .iter()
        .map(|g| g["totals"]["net_micro_usdc"].as_i64().unwrap())
        .sum();
    assert_eq!(shared, net);
    assert_eq!(earnings["per_model"][0]["model_id"], "h100-80gb");
    assert_eq!(earnings["per_model"][0]["totals"]["net_micro_usdc"], net);
    let (_, daily) = call(
        &base,
        "GET",
        &format!("/v1/providers/{provider}/earnings/daily?from={from}&to={to}&tz=UTC"),
        &provider_token,
        None,
    )
    .await;
    let days = daily["days"].as_array().unwrap();
    assert_eq!(days.len(), 3);
    assert_eq!(days[1]["date"], today.to_string());
    assert_eq!(days[1]["totals"]["net_micro_usdc"], net);
    assert_eq!(days[0]["totals"]["net_micro_usdc"], 0);
    // Finance sees the same, and the platform's totals.
    let (_, finance) = call(&base, "GET", "/v1/earnings", &admin, None).await;
    assert_eq!(finance["totals"]["gross_micro_usdc"], gross, "{finance}");
    assert_eq!(finance["providers"][0]["period"]["net_micro_usdc"], net);
    let (status, _) = call(&base, "GET", "/v1/earnings", &provider_token, None).await;
    assert_eq!(status, 403);

    // The audits agree.
    let (_, reconciled) = call(&base, "GET", "/v1/audit/reconcile", &admin, None).await;
    assert_eq!(reconciled["mismatches"], json!([]), "{reconciled}");
    assert_eq!(reconciled["totals"]["renter_charges_micro_usdc"], gross);
    for args in [["audit", "verify"], ["audit", "reconcile"]] {
        let output = gpunex(&db.url, dir.path(), &args);
        assert!(
            output.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = gpunex(&db.url, dir.path(), &["audit", "reconcile", "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["totals"]["provider_earnings_micro_usdc"], net);
    assert_eq!(report["totals"]["platform_fees_micro_usdc"], fee);

    // The renter cancels a running job: the agent stops it and reports the renter's cause.
    let long_job = json!({"gpus": 1, "filter": {"model": "h100-80gb"},
                          "workload": {"image": "busybox", "command": ["sleep", "120"]}});
    let (status, cancelled) = call(
        &base,
        "POST",
        "/v1/rentals",
        &renter,
        Some(long_job.clone()),
    )
    .await;
    assert_eq!(status, 201, "{cancelled}");
    let cancelled_path = format!("/v1/rentals/{}", cancelled["rental_id"].as_str().unwrap());
    eventually("the long job running", 30, || async {
        call(&base, "GET", &cancelled_path, &renter, None).await.1["job_status"] == "running"
    })
    .await;
    let (status, _) = call(
        &base,
        "POST",
        &format!("{cancelled_path}/end"),
        &renter,
        None,
    )
    .await;
    assert_eq!(status, 200);
    eventually("the agent stopped the cancelled job", 30, || async {
        call(&base, "GET", &cancelled_path, &renter, None).await.1["job_status"] == "ended"
    })
    .await;
    let (_, view) = call(&base, "GET", &cancelled_path, &renter, None).await;
    assert_eq!(view["cause"], "renter_cancelled");
    assert_eq!(view["job_cause"], "renter_cancelled");
    assert_eq!(view["job_evidence"]["signal"], 15, "{view}");

    // The agent shuts down while a job runs: the job ends as the provider's host shutdown.
    let (_, last) = call(&base, "POST", "/v1/rentals", &renter, Some(long_job)).await;
    let last_path = format!("/v1/rentals/{}", last["rental_id"].as_str().unwrap());
    eventually("the last job running", 30, || async {
        call(&base, "GET", &last_path, &renter, None).await.1["job_status"] == "running"
    })
    .await;
    terminate(&agent);
    assert!(agent.wait().await.unwrap().success());
    let (_, view) = call(&base, "GET", &last_path, &renter, None).await;
    assert_eq!(
        (view["status"].as_str(), view["cause"].as_str()),
        (Some("ended"), Some("host_shutdown")),
        "{view}"
    );
    let output = gpunex(&db.url, dir.path(), &["audit", "reconcile"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}
