//! The real `gpunex` binary: server over real HTTP with graceful shutdown, and the operator
//! commands with their exit codes.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gpunex_tests::{TestDb, conformance, seed_credits};

const GPUNEX: &str = env!("CARGO_BIN_EXE_gpunex");

conformance!(
    audit_verify_exits_zero_when_clean_and_one_with_each_difference,
    audit_reconcile_lists_every_mismatch,
    migrate_and_tail_the_log,
    payouts_run_builds_a_batch_once_and_dry_runs_write_nothing,
    bench_payouts_pays_every_provider_and_refuses_a_used_database,
    bench_scale_starts_a_server_and_reports_what_it_costs
);

mod common;

fn gpunex(db: &TestDb, args: &[&str]) -> Output {
    Command::new(GPUNEX)
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run gpunex")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

async fn audit_verify_exits_zero_when_clean_and_one_with_each_difference(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 300, 3).await;
    store.run_projections().await.unwrap();
    let clean = gpunex(db, &["audit", "verify"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));
    assert!(stdout(&clean).contains("OK: chain intact"));

    let json = gpunex(db, &["audit", "verify", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["clean"], true);
    assert_eq!(report["events_checked"], 300);
    let head_hash = report["head_hash"].as_str().unwrap().to_owned();
    let anchored = gpunex(
        db,
        &[
            "audit",
            "verify",
            "--expect-head-position",
            "300",
            "--expect-head-hash",
            &head_hash,
        ],
    );
    assert_eq!(anchored.status.code(), Some(0), "{}", stdout(&anchored));
    let genesis = "0".repeat(64);
    let anchored_at_genesis = gpunex(
        db,
        &[
            "audit",
            "verify",
            "--expect-head-position",
            "0",
            "--expect-head-hash",
            &genesis,
        ],
    );
    assert_eq!(
        anchored_at_genesis.status.code(),
        Some(0),
        "{}",
        stdout(&anchored_at_genesis)
    );
    let wrong_anchor = gpunex(
        db,
        &[
            "audit",
            "verify",
            "--expect-head-position",
            "300",
            "--expect-head-hash",
            "00",
        ],
    );
    assert_eq!(wrong_anchor.status.code(), Some(1));

    db.execute_raw(
        &[
            "DROP TRIGGER events_are_immutable_update",
            "UPDATE events SET metadata = replace(metadata, 'finance-test', 'someone-else') WHERE position = 120",
            "UPDATE ledger_balances SET debits_micro_usdc = debits_micro_usdc + 5 WHERE account = 'platform_adjustments'",
        ],
        &[
            "ALTER TABLE events DISABLE TRIGGER USER",
            "UPDATE events SET metadata = replace(metadata, 'finance-test', 'someone-else') WHERE position = 120",
            "UPDATE ledger_balances SET debits_micro_usdc = debits_micro_usdc + 5 WHERE account = 'platform_adjustments'",
        ],
    )
    .await;
    let tampered = gpunex(db, &["audit", "verify"]);
    let text = stdout(&tampered);
    assert_eq!(tampered.status.code(), Some(1), "{text}");
    assert!(text.contains("first bad position:    120"), "{text}");
    assert!(
        text.contains("DIFFERENCE: hash mismatch at position 120"),
        "{text}"
    );
    assert!(
        text.contains("DIFFERENCE: account platform_adjustments"),
        "{text}"
    );
    assert!(text.contains("result:                FAILED"), "{text}");
}

async fn migrate_and_tail_the_log(db: &TestDb) {
    let migrated = gpunex(db, &["migrate"]);
    assert_eq!(
        migrated.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    assert!(stdout(&migrated).contains("log head at position 0"));
    let store = db.open().await;
    seed_credits(&store, 30, 2).await;
    let tail = gpunex(db, &["events", "tail", "--lines", "5"]);
    let text = stdout(&tail);
    assert_eq!(tail.status.code(), Some(0));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[0].trim_start().starts_with("26 "), "{text}");
    assert!(lines[4].contains("ledger.adjustment_posted v2"), "{text}");
    let json = gpunex(db, &["events", "tail", "--after", "28", "--json"]);
    let events: Vec<serde_json::Value> = stdout(&json)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["position"], 30);
    let status = gpunex(db, &["projections", "status"]);
    assert!(
        stdout(&status).contains("lag       30 events"),
        "{}",
        stdout(&status)
    );
    // A rebuild says, model by model, where it got to and where its time went.
    let rebuilt = gpunex(db, &["projections", "rebuild"]);
    let text = stdout(&rebuilt);
    assert_eq!(rebuilt.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let models = [
        "ledger", "earnings", "rentals", "payouts", "presence", "prices",
    ];
    assert_eq!(lines.len(), models.len() + 1, "{text}");
    for (line, model) in lines.iter().zip(models) {
        assert!(line.starts_with(model), "{text}");
        assert!(line.contains(" at         30 in "), "{text}");
        assert!(
            line.contains(": reading and decoding ") && line.contains(", folding "),
            "{text}"
        );
    }
    assert!(
        lines[models.len()].ends_with("swapped in at position 30"),
        "{text}"
    );

    // One model alone: the others are left as they are.
    let rebuilt = gpunex(
        db,
        &[
            "projections",
            "rebuild",
            "--only",
            "earnings",
            "--only",
            "prices",
        ],
    );
    let text = stdout(&rebuilt);
    assert_eq!(rebuilt.status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("earnings") && lines[1].starts_with("prices"),
        "{text}"
    );
    let refused = gpunex(db, &["projections", "rebuild", "--only", "ledgers"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("invalid value 'ledgers'"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Boolean settings from the environment take the usual spellings; anything else is refused
/// at start with the accepted ones named, never silently read as false.
#[test]
fn boolean_settings_accept_the_usual_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |value: &str| {
        let mut child = Command::new(GPUNEX)
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .current_dir(dir.path())
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info")
            .env("GPUNEX_NO_PAYOUT_SCHEDULER", value)
            .env("GPUNEX_NO_OUTBOX", value)
            .env("GPUNEX_DEV_MODE", value)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut listening = None;
        while std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0 {
            if line.contains("gpunex listening") {
                listening = Some(serde_json::from_str::<serde_json::Value>(&line).unwrap());
                break;
            }
            if line.contains("invalid value") {
                break;
            }
            line.clear();
        }
        let _ = child.kill();
        let status = child.wait().unwrap();
        (listening, line, status)
    };
    for (value, on) in [
        ("1", true),
        ("yes", true),
        ("true", true),
        ("on", true),
        ("0", false),
        ("no", false),
        ("false", false),
        ("off", false),
    ] {
        let (listening, line, _) = serve(value);
        let fields = &listening.unwrap_or_else(|| panic!("{value}: {line}"))["fields"];
        assert_eq!(fields["payout_scheduler"], !on, "{value}");
        assert_eq!(fields["outbox"], !on, "{value}");
        assert_eq!(fields["dev_mode"], on, "{value}");
    }
    let (listening, line, status) = serve("maybe");
    assert!(listening.is_none() && !status.success());
    assert!(line.contains("invalid value 'maybe'"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_over_http_folds_new_events_and_stops_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The first admin credential, from the command line, before the server runs.
    let created = Command::new(GPUNEX)
        .args([
            "admin",
            "create-token",
            "--role",
            "admin",
            "--label",
            "first admin",
        ])
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let admin_token = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    assert!(admin_token.starts_with("gpnx_"), "{admin_token}");
    // No DATABASE_URL: the embedded default under ./data/ relative to the working directory.
    let mut server = tokio::process::Command::new(GPUNEX)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    loop {
        if let Ok(response) = client.get(format!("{base}/healthz")).send().await {
            assert!(response.status().is_success());
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unauthenticated = client
        .get(format!("{base}/v1/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    let events: serde_json::Value = client
        .get(format!("{base}/v1/events"))
        .bearer_auth(&admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(events["events"][0]["event_type"], "credential.token_issued");
    assert!(
        !events.to_string().contains(&admin_token[38..]),
        "the secret is never stored"
    );
    let database = dir.path().join("data/gpunex.sqlite");
    assert!(database.exists(), "SQLite file created under ./data/");

    // Another process appends; the server's projection runner folds it without being asked.
    let store = gpunex_store::Store::open(
        &format!("sqlite://{}", database.display()),
        &Default::default(),
    )
    .await
    .unwrap();
    seed_credits(&store, 50, 2).await;
    let started = Instant::now();
    loop {
        let ready: serde_json::Value = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if ready["projections"][0]["lag_events"] == 0 && ready["head_position"] == 51 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "projections did not catch up: {ready}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let pid = server.id().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("server stops within 10 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
    let mut logs = String::new();
    use tokio::io::AsyncReadExt;
    server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .await
        .unwrap();
    let first: serde_json::Value =
        serde_json::from_str(logs.lines().next().unwrap()).expect("structured JSON logs");
    assert_eq!(first["fields"]["message"], "gpunex listening");
    assert!(logs.contains("shutdown requested"));
}

/// `events tail --follow` prints events committed after it started, as they commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tail_follows_new_commits() {
    use tokio::io::AsyncBufReadExt;
    let db = TestDb::sqlite();
    let store = db.open().await;
    seed_credits(&store, 3, 1).await;
    let mut tail = tokio::process::Command::new(GPUNEX)
        .args(["events", "tail", "--lines", "1", "--follow", "--json"])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(tail.stdout.take().unwrap()).lines();
    let mut next = async || -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a line within 10 s")
            .unwrap()
            .unwrap();
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await["position"], 3, "the last existing event first");
    store
        .append(
            gpunex_tests::stream("ledger-later"),
            gpunex_store::ExpectedVersion::NoStream,
            gpunex_tests::credits(gpunex_tests::provider(1), 2),
        )
        .await
        .unwrap();
    assert_eq!(next().await["position"], 4);
    assert_eq!(next().await["position"], 5);
    tail.start_kill().unwrap();
    tail.wait().await.unwrap();
}

/// Usage events written straight to the log (as a buggy or tampered writer could): `gpunex audit
/// reconcile` recomputes every line and rental and names each mismatch.
async fn audit_reconcile_lists_every_mismatch(db: &TestDb) {
    use gpunex_domain::DomainEvent;
    use gpunex_domain::fleet::{FleetEvent, MachineOffline, MachineOnline};
    use gpunex_domain::metering::charge_entry;
    use gpunex_domain::money::Usdc;
    use gpunex_domain::rental::{RentalEvent, RentalStarted, UsageMetered};
    use gpunex_domain::time::Timestamp;
    use gpunex_store::{ExpectedVersion, Metadata, NewEvent};
    use uuid::Uuid;

    let store = db.open().await;
    let empty = gpunex(db, &["audit", "reconcile"]);
    assert_eq!(empty.status.code(), Some(0), "{}", stdout(&empty));
    let (renter, provider, machine) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let t = |s: i64| Timestamp::from_unix_micros(1_700_000_000_000_000 + s * 1_000_000);
    let append = |stream: String, event: DomainEvent| {
        let store = store.clone();
        async move {
            store
                .append(
                    gpunex_domain::StreamId::parse(stream).unwrap(),
                    ExpectedVersion::Any,
                    vec![NewEvent::from_domain(
                        Uuid::now_v7(),
                        &event,
                        Metadata::actor("test"),
                    )],
                )
                .await
                .unwrap();
        }
    };
    // Online from 0 to 100 s (last heartbeat): one GPU can earn at most 100 GPU-seconds.
    append(
        format!("machine-{machine}"),
        DomainEvent::Fleet(FleetEvent::MachineOnline(MachineOnline {
            machine_id: machine,
            provider_id: provider,
            at: t(0),
        })),
    )
    .await;
    append(
        format!("machine-{machine}"),
        DomainEvent::Fleet(FleetEvent::MachineOffline(MachineOffline {
            machine_id: machine,
            provider_id: provider,
            last_heartbeat_at: t(100),
            detected_at: t(160),
            grace_seconds: 60,
        })),
    )
    .await;
    let rental = Uuid::now_v7();
    let price = Usdc::from_micros(3_600_000);
    append(
        format!("rental-{rental}"),
        DomainEvent::Rental(RentalEvent::Started(RentalStarted {
            rental_id: rental,
            renter_id: renter,
            provider_id: provider,
            machine_id: machine,
            gpu_uuids: vec!["GPU-0a".to_owned()],
            model_id: "h100-80gb".to_owned(),
            price_per_gpu_hour: price,
            started_at: t(0),
            workload: None,
        })),
    )
    .await;
    let usage = |from: u64, to: u64, gross: i64, fee: i64| {
        let (gross, fee) = (Usdc::from_micros(gross), Usdc::from_micros(fee));
        DomainEvent::Rental(RentalEvent::UsageMetered(UsageMetered {
            entry_id: Uuid::now_v7(),
            rental_id: rental,
            renter_id: renter,
            provider_id: provider,
            report_id: Uuid::now_v7(),
            from_gpu_seconds: from,
            to_gpu_seconds: to,
            price_per_gpu_hour: price,
            gross,
            fee,
            net: Usdc::from_micros(gross.micros() - fee.micros()),
            fee_bp: 2_000,
            postings: charge_entry(renter, provider, gross, fee).unwrap(),
            reported_gpu_seconds: None,
            metered_at: None,
        }))
    };
    // Right: 60 s at 3.60/h is 60,000 micro-USDC, fee 12,000.
    append(format!("rental-{rental}"), usage(0, 60, 60_000, 12_000)).await;
    let clean = gpunex(db, &["audit", "reconcile"]);
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));
    assert!(stdout(&clean).contains("no mismatch"), "{}", stdout(&clean));
    // Wrong: overcharged (70,000 for 60 s), a fee off the rate, and beyond the online time.
    append(format!("rental-{rental}"), usage(60, 120, 70_000, 14_000)).await;
    append(format!("rental-{rental}"), usage(120, 180, 60_000, 11_000)).await;
    let dirty = gpunex(db, &["audit", "reconcile"]);
    assert_eq!(dirty.status.code(), Some(1), "{}", stdout(&dirty));
    let text = stdout(&dirty);
    for kind in [
        "line_charge",
        "line_fee",
        "rental_charge",
        "rental_beyond_online",
    ] {
        assert!(text.contains(kind), "{kind}: {text}");
    }
    let json = gpunex(db, &["audit", "reconcile", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["totals"]["renter_charges_micro_usdc"], 190_000);
    assert_eq!(report["totals"]["platform_fees_micro_usdc"], 37_000);
    assert_eq!(report["totals"]["provider_earnings_micro_usdc"], 153_000);
    assert_eq!(
        report["mismatches"].as_array().unwrap().len(),
        4,
        "{report}"
    );
}

/// Writes a provider's payout settings as the API does.
async fn weekly_solana(store: &gpunex_store::Store, provider_id: uuid::Uuid) {
    common::append(
        store,
        format!("payout_settings-{provider_id}"),
        gpunex_domain::DomainEvent::Payout(gpunex_domain::payouts::PayoutEvent::SettingsChanged(
            gpunex_domain::payouts::PayoutSettingsChanged {
                provider_id,
                schedule: gpunex_domain::payouts::Schedule::Weekly,
                // The ed25519 base point, a valid wallet.
                method: gpunex_domain::payouts::PayoutMethod::Solana {
                    wallet: "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH".to_owned(),
                },
                changed_at: common::at("2026-10-01T00:00:00Z"),
                changed_by: "test".to_owned(),
            },
        )),
    )
    .await;
}

async fn payouts_run_builds_a_batch_once_and_dry_runs_write_nothing(db: &TestDb) {
    let store = db.open().await;
    let (paid, low) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    for provider in [paid, low] {
        weekly_solana(&store, provider).await;
    }
    assert_eq!(
        common::earn(&store, paid, 31_404, "2026-10-20T10:00:00Z").await,
        25_123_200
    );
    assert_eq!(
        common::earn(&store, low, 24_999, "2026-10-21T10:00:00Z").await,
        19_999_200
    );
    let head = store.head_position().await.unwrap();
    let stderr = |output: &Output| String::from_utf8_lossy(&output.stderr).into_owned();

    // Not a payout date, or a minimum that is not an amount: exit 2, nothing written.
    let wednesday = gpunex(db, &["payouts", "run", "--date", "2026-11-04"]);
    assert_eq!(wednesday.status.code(), Some(2));
    assert!(
        stderr(&wednesday).contains("not_a_payout_date"),
        "{}",
        stderr(&wednesday)
    );
    let bad_flag = gpunex(
        db,
        &[
            "payouts",
            "run",
            "--date",
            "2026-11-02",
            "--payout-weekly-minimum",
            "twenty",
        ],
    );
    assert_eq!(bad_flag.status.code(), Some(2));
    assert!(
        stderr(&bad_flag).contains("--payout-weekly-minimum"),
        "{}",
        stderr(&bad_flag)
    );

    // A dry run shows the payout and the roll-forward, and writes nothing.
    let dry = gpunex(db, &["payouts", "run", "--date", "2026-11-02", "--dry-run"]);
    let text = stdout(&dry);
    assert_eq!(dry.status.code(), Some(0), "{text}{}", stderr(&dry));
    assert!(text.contains("dry run: nothing written"), "{text}");
    assert!(text.contains(&format!("provider {paid}")), "{text}");
    assert!(
        text.contains(&format!(
            "roll  provider {low} Weekly: 19999200 micro-USDC available, minimum 20000000"
        )),
        "{text}"
    );
    let dry_json = gpunex(
        db,
        &[
            "payouts",
            "run",
            "--date",
            "2026-11-02",
            "--dry-run",
            "--json",
        ],
    );
    let dry_batch: serde_json::Value = serde_json::from_slice(&dry_json.stdout).unwrap();
    assert_eq!(dry_batch["dry_run"], true);
    assert_eq!(dry_batch["payouts"][0]["amount_micro_usdc"], 25_123_200);
    assert_eq!(store.head_position().await.unwrap(), head);

    // The run writes the payout and the batch; the same payout the dry run showed.
    let run = gpunex(db, &["payouts", "run", "--date", "2026-11-02", "--json"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let batch: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(batch["created"], true);
    assert_eq!(
        batch["payouts"][0]["payout_id"],
        dry_batch["payouts"][0]["payout_id"]
    );
    assert_eq!(batch["total_micro_usdc"], 25_123_200);
    // The run's claim, the payout, the balance rolled forward, the batch.
    assert_eq!(store.head_position().await.unwrap(), head + 4);

    // Again: nothing new.
    let again = gpunex(db, &["payouts", "run", "--date", "2026-11-02"]);
    let text = stdout(&again);
    assert_eq!(again.status.code(), Some(0), "{text}");
    assert!(
        text.contains("already existed: nothing new created"),
        "{text}"
    );
    assert!(
        text.contains(batch["payouts"][0]["payout_id"].as_str().unwrap()),
        "{text}"
    );
    assert_eq!(store.head_position().await.unwrap(), head + 4);

    // A lower minimum by flag pays the rolled-forward balance the next Monday.
    let lower = gpunex(
        db,
        &[
            "payouts",
            "run",
            "--date",
            "2026-11-09",
            "--payout-weekly-minimum",
            "19.5",
            "--json",
        ],
    );
    let next: serde_json::Value = serde_json::from_slice(&lower.stdout).unwrap();
    assert_eq!(next["payouts"].as_array().unwrap().len(), 1, "{next}");
    assert_eq!(next["payouts"][0]["provider_id"], low.to_string());
    assert_eq!(next["payouts"][0]["amount_micro_usdc"], 19_999_200);
    let reconcile = gpunex(db, &["audit", "reconcile"]);
    assert_eq!(reconcile.status.code(), Some(0), "{}", stdout(&reconcile));

    // A payout written around the rules (the first provider's line settled a second time, in
    // a period of its own): the replay reports it.
    let mut rogue: gpunex_domain::payouts::PayoutScheduled =
        serde_json::from_value(batch_scheduled(&store, paid).await).unwrap();
    rogue.payout_id = uuid::Uuid::now_v7();
    rogue.period = "weekly-2026-11-16".to_owned();
    common::append(
        &store,
        format!("payout-{}", rogue.payout_id),
        gpunex_domain::DomainEvent::Payout(gpunex_domain::payouts::PayoutEvent::Scheduled(rogue)),
    )
    .await;
    let reconcile = gpunex(db, &["audit", "reconcile"]);
    let text = stdout(&reconcile);
    assert_eq!(reconcile.status.code(), Some(1), "{text}");
    assert!(text.contains("payout_lines"), "{text}");
}

/// The payload of the `payout.scheduled` event of this provider.
async fn batch_scheduled(store: &gpunex_store::Store, provider: uuid::Uuid) -> serde_json::Value {
    let events = store.read_all(0, 10_000).await.unwrap();
    events
        .iter()
        .filter(|e| e.event_type == gpunex_domain::events::PAYOUT_SCHEDULED)
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.payload).unwrap())
        .find(|p| p["provider_id"] == provider.to_string())
        .expect("a payout.scheduled event")
}

/// The payout bench, over the size (about 1,600 payouts) that once did not fit the batch's event:
/// every provider paid once or rolled forward, the bank files under the payload limit, the log
/// reconciled; a second run refuses the database it already wrote.
async fn bench_payouts_pays_every_provider_and_refuses_a_used_database(db: &TestDb) {
    let args = [
        "bench",
        "payouts",
        "--providers",
        "2100",
        "--lines",
        "2",
        "--json",
    ];
    let run = gpunex(db, &args);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["providers"], 2100);
    // The run's claim, 1,680 payouts, 420 rolled forward in 3 events, the batch.
    assert_eq!(report["batch_events"], 1 + 1_680 + 3 + 1);
    // Half the payouts by bank: 840 transfers in two files.
    assert_eq!(report["bank_transfers"], 840);
    assert_eq!(report["bank_files"], 2);
    assert!(report["reconcile_events_per_second"].as_u64().unwrap() > 0);
    let again = gpunex(db, &args);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("empty database"));
}

/// The scale bench on a small simulated log: it refuses a log shorter than asked, then starts a
/// real server process, waits until it is ready, and reports its memory, the catch-up beside a
/// bare read, and each dashboard endpoint's latency beside `/healthz`.
async fn bench_scale_starts_a_server_and_reports_what_it_costs(db: &TestDb) {
    let simulated = gpunex(
        db,
        &[
            "simulate",
            "--seed",
            "3",
            "--providers",
            "2",
            "--gpus",
            "2",
            "--days",
            "1",
        ],
    );
    assert_eq!(
        simulated.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&simulated.stderr)
    );
    let head = db.open().await.head_position().await.unwrap();
    let short = gpunex(db, &["bench", "scale", "--min-events", "100000000"]);
    assert_eq!(short.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&short.stderr).contains("run `gpunex simulate` first"));
    let no_rounds = gpunex(db, &["bench", "scale", "--catch-up-rounds", "0"]);
    assert_eq!(no_rounds.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_rounds.stderr).contains("--catch-up-rounds"));
    let run = gpunex(
        db,
        &[
            "bench",
            "scale",
            "--min-events",
            "1",
            "--seconds",
            "1",
            "--load-seconds",
            "1",
            "--clients",
            "1",
            "--catch-up-rounds",
            "2",
            "--json",
        ],
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    // Counted before the bench issues its own finance token.
    assert_eq!(report["events"].as_u64(), Some(head));
    assert!(
        report["cold_ready_seconds"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(report["cold_rss_mib"].as_u64().unwrap() > 0, "{report}");
    assert!(report["ready_seconds"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["rss_ready_mib"].as_u64().unwrap() > 0, "{report}");
    assert!(report["rss_loaded_mib"].as_u64().unwrap() > 0, "{report}");
    let catch_up = report["catch_up"].as_array().unwrap();
    let projections: Vec<&str> = catch_up
        .iter()
        .map(|c| c["projection"].as_str().unwrap())
        .collect();
    assert_eq!(
        projections,
        [
            "ledger", "earnings", "rentals", "payouts", "presence", "prices"
        ],
        "{report}"
    );
    for model in catch_up {
        assert!(model["events_per_second"].as_u64().unwrap() > 0, "{model}");
        assert!(
            model["bare_read_events_per_second"].as_u64().unwrap() > 0,
            "{model}"
        );
        // Where the time went: every model reads, decodes and writes pages; each step's time
        // is part of the whole (the steps overlap one another, a step never overlaps itself).
        let seconds = model["seconds"].as_f64().unwrap();
        for step in ["read_seconds", "fold_seconds", "write_seconds"] {
            let step = model[step].as_f64().unwrap();
            assert!(step > 0.0 && step <= seconds, "{model}");
        }
        // No model builds an index after its rows (ADR 0012, ADR 0013).
        assert!(model.get("index_seconds").is_none(), "{model}");
        // Two rounds; the figures are the fastest rebuild's and the fastest bare read's.
        let rounds = model["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "{model}");
        let fastest = |key: &str| {
            rounds
                .iter()
                .map(|r| r[key].as_f64().unwrap())
                .fold(f64::INFINITY, f64::min)
        };
        assert_eq!(seconds, fastest("seconds"), "{model}");
        assert_eq!(
            model["bare_read_seconds"].as_f64().unwrap(),
            fastest("bare_read_seconds"),
            "{model}"
        );
    }
    let endpoints = report["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 7, "{report}");
    for endpoint in endpoints {
        assert!(
            endpoint["latency"]["requests"].as_u64().unwrap() > 0,
            "{endpoint}"
        );
    }
}
