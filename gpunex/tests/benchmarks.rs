//! Benchmarks over real HTTP, on SQLite and PostgreSQL (issue 18): runs reported as agent
//! events, scored and shown in listings; a failing GPU delisted with the provider's email, a
//! re-test asked for and a passing run relisting it; implausible runs recorded as refused;
//! malformed runs refused with nothing written; an admin override; a driver-wide anomaly pausing
//! automatic delisting until an admin resumes it, then the hour's rate limit; and a fresh fold of
//! the log giving the same scores and verdicts.
//!
//! The runs come from `gpunex_domain::benchmark::simulated` profiles, sent as a real machine's
//! agent would send its suite's results (the suite itself needs a GPU).

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_app::command::Executor;
use gpunex_app::outbox::{Mailbox, Transport, deliver_pending};
use gpunex_domain::benchmark::simulated::{self, Profile};
use gpunex_domain::gpu::GPU_CATALOG;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(
    runs_are_scored_listed_delisted_and_relisted_within_the_fleet_rules,
    an_agent_that_cannot_run_the_suite_says_why_on_the_platform
);

mod common;

async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = common::request(base, method, path, token, body).await;
    (status, body)
}

struct Host {
    provider: Uuid,
    token: String,
    agent: String,
    machine: Uuid,
    gpus: Vec<String>,
}

/// An approved provider with one registered, online machine of `count` H100 SXM GPUs, priced.
async fn host(base: &str, admin: &str, email: &str, count: u32) -> Host {
    let entry = json!({
        "model": "h100-80gb", "quantity": count, "system_ram_gb": 1024,
        "upload_gbps": "10", "download_gbps": "10",
        "availability": {"kind": "always_on"},
        "location": {"city": "Frankfurt", "country": "DE", "region": "Hesse"}
    });
    let (provider, token) =
        common::approved_provider_as(base, admin, email, json!([entry]), "community").await;
    let (machine, agent) = common::agent_token(base, &token).await;
    let gpus: Vec<Value> = (0..count)
        .map(|i| {
            json!({
                "gpu_uuid": format!("GPU-{}-{i:04x}", &machine.simple().to_string()[..20]),
                "index": i, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x2330, "pci_bus_id": null,
                "vram_mib": 81_559, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                "pcie_current": {"generation": 5, "width": 16}, "pcie_max": {"generation": 5, "width": 16},
                "power_limit_w": 700, "default_power_limit_w": 700, "ecc_enabled": true, "mig_enabled": false
            })
        })
        .collect();
    let uuids: Vec<String> = gpus
        .iter()
        .map(|g| g["gpu_uuid"].as_str().unwrap().to_owned())
        .collect();
    let registration = json!({"events": [{
        "event_id": Uuid::now_v7(), "occurred_at": chrono::Utc::now().to_rfc3339(), "kind": "registration",
        "body": {"machine_id": machine, "agent_version": "test", "simulated": false,
                 "host": {"hostname": email, "cpu_model": null, "cpu_cores": null, "ram_mib": null,
                          "disk_total_gib": null, "disk_free_gib": null, "os": null, "kernel": null},
                 "gpus": gpus}
    }]});
    let (status, answer) = call(
        base,
        "POST",
        "/v1/agent/events",
        Some(&agent),
        Some(registration),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let beat = json!({"machine_id": machine, "gpus": []});
    let (status, _) = call(
        base,
        "POST",
        "/v1/agent/heartbeat",
        Some(&agent),
        Some(beat),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, price) = call(
        base,
        "POST",
        &format!("/v1/providers/{provider}/prices"),
        Some(&token),
        Some(json!({"model_id": "h100-80gb", "price_usdc": "2.00"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{price}");
    Host {
        provider,
        token,
        agent,
        machine,
        gpus: uuids,
    }
}

/// A run of `profile` on `gpu` as the agent's event (its id is the run id).
fn run_event(h: &Host, gpu: &str, profile: Profile, seed: u64, driver: &str) -> Value {
    let model = GPU_CATALOG.iter().find(|m| m.id == "h100-80gb").unwrap();
    let run = simulated::run(model, &model.variants[0], gpu, profile, seed);
    let now = chrono::Utc::now();
    json!({
        "event_id": Uuid::now_v7(),
        "occurred_at": now.to_rfc3339(),
        "kind": "benchmark_run",
        "body": {
            "machine_id": h.machine,
            "gpu_uuid": gpu,
            "simulated_profile": null,
            "environment": {
                "driver_version": driver, "cuda_version": "12.4", "sm_clock_mhz": 1980,
                "memory_clock_mhz": 2619, "idle_temperature_c": 34, "mig_enabled": false,
                "sustained_seconds": 60
            },
            "run": run,
            "started_at": (now - chrono::Duration::seconds(150)).to_rfc3339(),
            "finished_at": now.to_rfc3339(),
        }
    })
}

/// The agent's word that it skips `gpu`'s suite.
fn skipped_event(h: &Host, gpu: &str, reason: &str) -> Value {
    json!({
        "event_id": Uuid::now_v7(),
        "occurred_at": chrono::Utc::now().to_rfc3339(),
        "kind": "benchmark_skipped",
        "body": {"machine_id": h.machine, "gpu_uuid": gpu, "reason": reason}
    })
}

async fn report(base: &str, h: &Host, events: Vec<Value>) -> (StatusCode, Value) {
    call(
        base,
        "POST",
        "/v1/agent/events",
        Some(&h.agent),
        Some(json!({ "events": events })),
    )
    .await
}

async fn benchmarks(base: &str, gpu: &str) -> Value {
    let (status, view) = call(
        base,
        "GET",
        &format!("/v1/gpus/{gpu}/benchmarks"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    view
}

async fn hidden(base: &str, h: &Host, gpu: &str) -> Value {
    let (status, listings) = call(
        base,
        "GET",
        &format!("/v1/providers/{}/listings", h.provider),
        Some(&h.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listings}");
    listings["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gpu_uuid"] == gpu)
        .map(|g| g["hidden"].clone())
        .unwrap_or_else(|| panic!("{gpu} in {listings}"))
}

async fn pass(state: &AppState) -> gpunex_app::benchmarks::PassReport {
    let report =
        gpunex_app::benchmarks::actions_pass(&Executor::new(&state.store, &state.credentials))
            .await
            .unwrap();
    state.listings.rebuild(&state.credentials, common::now());
    report
}

async fn runs_are_scored_listed_delisted_and_relisted_within_the_fleet_rules(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let a = host(&base, &admin, "a@example.com", 4).await;
    let mail = tempfile::tempdir().unwrap();
    let mailbox =
        Transport::Mailbox(Mailbox::open(mail.path(), "GPUnex <no-reply@gpunex.local>").unwrap());

    // Three healthy GPUs and one that computes wrong answers, in one delivery.
    let mut events: Vec<Value> = (0..3)
        .map(|i| run_event(&a, &a.gpus[i], Profile::Healthy, i as u64, "550.54.15"))
        .collect();
    events.push(run_event(
        &a,
        &a.gpus[3],
        Profile::WrongResults,
        3,
        "550.54.15",
    ));
    let (status, answer) = report(&base, &a, events).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert!(
        answer["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "recorded"),
        "{answer}"
    );

    let healthy = benchmarks(&base, &a.gpus[0]).await;
    assert_eq!(healthy["benchmark_listing"], "listed", "{healthy}");
    assert_eq!(healthy["latest"]["verdict"]["outcome"], "pass", "{healthy}");
    let parts = healthy["latest"]["parts"].as_array().unwrap();
    assert!(parts.len() >= 9, "{healthy}");
    assert!(
        parts
            .iter()
            .all(|p| p["reference"]["source"]["kind"] == "datasheet")
    );
    let score = healthy["score_bp"].as_u64().unwrap();
    assert!((9_000..=11_000).contains(&score), "{score}");

    // Before the pass the failing GPU is still listed; the pass delists it, with the reason.
    assert_eq!(hidden(&base, &a, &a.gpus[3]).await, json!([]));
    let done = pass(&state).await;
    assert_eq!(
        (done.delisted, done.relisted, done.paused),
        (1, 0, false),
        "{done:?}"
    );
    assert_eq!(
        hidden(&base, &a, &a.gpus[3]).await,
        json!(["benchmark_failed"])
    );
    let failed = benchmarks(&base, &a.gpus[3]).await;
    assert_eq!(failed["benchmark_listing"], "delisted", "{failed}");
    let reasons = failed["latest"]["verdict"]["reasons"].as_array().unwrap();
    assert!(reasons.iter().any(|r| r["code"] == "wrong_results"
        && r["outcome"] == "fail"
        && !r["guidance"].as_str().unwrap().is_empty()));
    // A second pass does nothing more.
    assert_eq!(
        pass(&state).await,
        gpunex_app::benchmarks::PassReport::default()
    );

    // The provider's mailbox says what needs attention.
    deliver_pending(
        &state.store,
        &state.credentials,
        &mailbox,
        "https://gpunex.example",
    )
    .await
    .unwrap();
    let messages: Vec<String> = std::fs::read_dir(mail.path().join("new"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|m| m.contains("benchmark"))
        .collect();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].contains("To: a@example.com")
            && messages[0].contains(&a.gpus[3])
            && messages[0].contains("wrong_results")
            && messages[0].contains("What to do"),
        "{}",
        messages[0]
    );

    // Listings show the measured figure and the score; search sorts and filters by it.
    let (status, page) = call(
        &base,
        "GET",
        "/v1/listings?model=h100-80gb&sort=performance",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let listed = page["listings"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{page}");
    assert!(
        listed
            .iter()
            .all(|l| l["performance_source"] == "benchmark" && l["performance_score"].is_string())
    );
    let scores: Vec<String> = listed
        .iter()
        .map(|l| l["performance_score"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted: Vec<rust_decimal::Decimal> =
        scores.iter().map(|s| s.parse().unwrap()).collect();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(
        scores
            .iter()
            .map(|s| s.parse::<rust_decimal::Decimal>().unwrap())
            .collect::<Vec<_>>(),
        sorted
    );
    let (status, page) = call(&base, "GET", "/v1/listings?min_performance=110", None, None).await;
    assert_eq!(
        (status, page["listings"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{page}"
    );
    let (status, bad) = call(&base, "GET", "/v1/listings?min_performance=500", None, None).await;
    assert_eq!(
        (status, bad["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{bad}"
    );

    // Malformed runs are refused with nothing written.
    let before = state.store.head_position().await.unwrap();
    let mut other_gpu = run_event(&a, &a.gpus[0], Profile::Healthy, 9, "550.54.15");
    other_gpu["body"]["gpu_uuid"] = json!("GPU-not-here");
    let (status, refused) = report(&base, &a, vec![other_gpu]).await;
    assert_eq!(
        (status, refused["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_gpu")),
        "{refused}"
    );
    let mut old_method = run_event(&a, &a.gpus[0], Profile::Healthy, 9, "550.54.15");
    old_method["body"]["run"]["method_version"] = json!(99);
    let (status, refused) = report(&base, &a, vec![old_method]).await;
    assert_eq!(
        (status, refused["errors"][0]["code"].as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("unsupported_benchmark_method")
        ),
        "{refused}"
    );
    let mut simulated_on_real = run_event(&a, &a.gpus[0], Profile::Healthy, 9, "550.54.15");
    simulated_on_real["body"]["simulated_profile"] = json!("healthy");
    let (status, refused) = report(&base, &a, vec![simulated_on_real]).await;
    assert_eq!(
        (status, refused["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("simulation_mismatch")),
        "{refused}"
    );
    assert_eq!(state.store.head_position().await.unwrap(), before);

    // An impossible run is recorded as refused and changes nothing else.
    let mut impossible = run_event(&a, &a.gpus[1], Profile::Healthy, 11, "550.54.15");
    for figure in impossible["body"]["run"]["figures"].as_array_mut().unwrap() {
        for key in ["median_milli", "p10_milli", "p90_milli"] {
            figure[key] = json!(figure[key].as_u64().unwrap() * 3);
        }
    }
    let (status, answer) = report(&base, &a, vec![impossible.clone()]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // Sent again: the same answer, nothing new.
    let (status, again) = report(&base, &a, vec![impossible]).await;
    assert_eq!(
        (status, again["results"][0]["status"].as_str()),
        (StatusCode::OK, Some("duplicate")),
        "{again}"
    );
    let view = benchmarks(&base, &a.gpus[1]).await;
    assert_eq!(view["refused_total"], 1, "{view}");
    assert_eq!(
        view["refused"][0]["reason"]["kind"], "above_physical_limit",
        "{view}"
    );
    assert_eq!(view["runs_total"], 1);

    // A re-test: the provider asks once; again is refused while it waits; another provider may
    // not ask.
    let path = format!("/v1/gpus/{}/benchmarks/retest", a.gpus[3]);
    let (status, asked) = call(
        &base,
        "POST",
        &path,
        Some(&a.token),
        Some(json!({"reason": "replaced the GPU's thermal pads"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["retest"]["by_admin"], false);
    let (status, again) = call(
        &base,
        "POST",
        &path,
        Some(&a.token),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (StatusCode::CONFLICT, Some("retest_pending")),
        "{again}"
    );
    let b = host(&base, &admin, "b@example.com", 6).await;
    let (status, other) = call(
        &base,
        "POST",
        &path,
        Some(&b.token),
        Some(json!({"reason": "not mine"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{other}");

    // The re-test passes: relisted, the pending request answered, the provider told.
    let (status, _) = report(
        &base,
        &a,
        vec![run_event(&a, &a.gpus[3], Profile::Healthy, 33, "550.54.15")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let done = pass(&state).await;
    assert_eq!((done.delisted, done.relisted), (0, 1), "{done:?}");
    assert_eq!(hidden(&base, &a, &a.gpus[3]).await, json!([]));
    let view = benchmarks(&base, &a.gpus[3]).await;
    assert_eq!(
        (
            view["benchmark_listing"].as_str(),
            view["retest"].is_null(),
            view["runs_total"].as_u64()
        ),
        (Some("listed"), true, Some(2)),
        "{view}"
    );
    // Right after its first request the provider may not ask again within the hour.
    let (status, soon) = call(
        &base,
        "POST",
        &path,
        Some(&a.token),
        Some(json!({"reason": "once more"})),
    )
    .await;
    assert_eq!(
        (status, soon["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("retest_too_soon")),
        "{soon}"
    );
    let (status, _) = call(
        &base,
        "POST",
        &path,
        Some(&admin),
        Some(json!({"reason": "operator check"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // Fails again, and an admin keeps it listed: the override cancels the automatic action.
    let (status, _) = report(
        &base,
        &a,
        vec![run_event(
            &a,
            &a.gpus[3],
            Profile::EccDoubleBit,
            34,
            "550.54.15",
        )],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pass(&state).await.delisted, 1);
    let override_path = format!("/v1/gpus/{}/benchmarks/override", a.gpus[3]);
    let (status, _) = call(
        &base,
        "POST",
        &override_path,
        Some(&a.token),
        Some(json!({"keep_listed": true, "reason": "mine"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, overridden) = call(&base, "POST", &override_path, Some(&admin), Some(json!({"keep_listed": true, "reason": "ECC counter from a known driver bug; checked by hand"}))).await;
    assert_eq!(
        (status, overridden["benchmark_listing"].as_str()),
        (StatusCode::OK, Some("overridden")),
        "{overridden}"
    );
    state.listings.rebuild(&state.credentials, common::now());
    assert_eq!(hidden(&base, &a, &a.gpus[3]).await, json!([]));
    assert_eq!(
        pass(&state).await,
        gpunex_app::benchmarks::PassReport::default()
    );

    // A driver-wide anomaly: all six of b's GPUs on a new driver fail at once. Automatic
    // delisting pauses instead, and admins are told.
    let events: Vec<Value> = b
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| run_event(&b, g, Profile::EccDoubleBit, 100 + i as u64, "555.42.02"))
        .collect();
    let (status, answer) = report(&base, &b, events).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let done = pass(&state).await;
    assert_eq!(
        (done.delisted, done.paused, done.deferred),
        (0, true, 6),
        "{done:?}"
    );
    for gpu in &b.gpus {
        assert_eq!(hidden(&base, &b, gpu).await, json!([]));
    }
    let (status, paused) = call(
        &base,
        "GET",
        "/v1/admin/benchmarks/delisting",
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(
        (status, paused["paused"].as_bool()),
        (StatusCode::OK, Some(true)),
        "{paused}"
    );
    assert!(
        paused["evidence"].as_str().unwrap().contains("555.42.02"),
        "{paused}"
    );
    assert_eq!(pass(&state).await.deferred, 6, "still paused");
    // Resuming: an admin decides; the hour's budget applies (3 an hour for a fleet of 10 H100s,
    // two of them spent on a's GPU this hour).
    let (status, resumed) = call(
        &base,
        "POST",
        "/v1/admin/benchmarks/resume",
        Some(&admin),
        Some(json!({"reason": "looked at the runs: the cards are bad"})),
    )
    .await;
    assert_eq!(
        (status, resumed["paused"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{resumed}"
    );
    let (status, not_paused) = call(
        &base,
        "POST",
        "/v1/admin/benchmarks/resume",
        Some(&admin),
        Some(json!({"reason": "again"})),
    )
    .await;
    assert_eq!(
        (status, not_paused["code"].as_str()),
        (StatusCode::CONFLICT, Some("not_paused"))
    );
    let done = pass(&state).await;
    assert_eq!(
        (done.delisted, done.paused, done.deferred),
        (1, false, 5),
        "{done:?}"
    );
    deliver_pending(
        &state.store,
        &state.credentials,
        &mailbox,
        "https://gpunex.example",
    )
    .await
    .unwrap();
    let admin_mails = std::fs::read_dir(mail.path().join("new"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .filter(|m| m.contains("automatic delisting paused"))
        .count();
    // No person holds the admin role in this test (its admin is a CLI token): nobody to tell.
    assert_eq!(admin_mails, 0);

    // Replaying the log gives the same scores and verdicts.
    let fresh = AppState::load(state.store.clone()).await.unwrap();
    let fresh_base = common::serve(fresh).await;
    for gpu in a.gpus.iter().chain(&b.gpus) {
        assert_eq!(
            benchmarks(&fresh_base, gpu).await,
            benchmarks(&base, gpu).await,
            "{gpu}"
        );
    }
}

/// An agent that cannot run the suite on a GPU (no cuBLAS in its image, say) tells the platform
/// why; the provider sees the reason on the GPU's benchmarks until a run is recorded. A re-sent
/// report is a duplicate; a malformed one, or one about another machine's GPU, is refused with
/// nothing written.
async fn an_agent_that_cannot_run_the_suite_says_why_on_the_platform(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let a = host(&base, &admin, "a@example.com", 2).await;
    let b = host(&base, &admin, "b@example.com", 1).await;
    let why = "cuBLAS (libcublas.so.12 and libcublasLt.so.12) could not be loaded: the agent's image ships them; on a bare host install the CUDA 12 runtime libraries";

    let skipped = skipped_event(&a, &a.gpus[0], why);
    let (status, answer) = report(&base, &a, vec![skipped.clone()]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["results"][0]["status"], "recorded", "{answer}");
    let view = benchmarks(&base, &a.gpus[0]).await;
    assert_eq!(view["suite_skipped"]["reason"], why, "{view}");
    assert_eq!(view["benchmark_listing"], "not_benchmarked", "{view}");
    assert_eq!(view["model_id"], "h100-80gb", "{view}");
    assert_eq!(
        benchmarks(&base, &a.gpus[1]).await["suite_skipped"],
        Value::Null
    );

    // The same report again (the queue re-sends after a lost answer): nothing new.
    let (status, answer) = report(&base, &a, vec![skipped]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["results"][0]["status"], "duplicate", "{answer}");

    // Refused, with nothing written: an empty or overlong reason, another machine's GPU.
    let before = state.store.head_position().await.unwrap();
    for (event, code, field) in [
        (
            skipped_event(&a, &a.gpus[1], " "),
            "invalid_benchmark",
            "/events/0/body/reason",
        ),
        (
            skipped_event(&a, &a.gpus[1], &"x".repeat(501)),
            "invalid_benchmark",
            "/events/0/body/reason",
        ),
        (
            skipped_event(&a, &b.gpus[0], why),
            "unknown_gpu",
            "/events/0/body/gpu_uuid",
        ),
    ] {
        let (status, problem) = report(&base, &a, vec![event]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["code"], "invalid_request", "{problem}");
        assert_eq!(problem["errors"][0]["code"], code, "{problem}");
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }
    assert_eq!(state.store.head_position().await.unwrap(), before);

    // A run (the provider fixed the image) ends it.
    let (status, answer) = report(
        &base,
        &a,
        vec![run_event(&a, &a.gpus[0], Profile::Healthy, 1, "550.54.15")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let view = benchmarks(&base, &a.gpus[0]).await;
    assert_eq!(view["suite_skipped"], Value::Null, "{view}");
    assert_eq!(view["latest"]["verdict"]["outcome"], "pass", "{view}");
}
