//! Benchmarks end to end (issue 18), with the real binaries on SQLite and PostgreSQL: an agent
//! with simulated GPUs registers and runs the suite on each; the platform scores the runs and
//! lists the healthy GPU with its score; the GPU whose profile computes wrong answers is
//! delisted and its provider emailed what to fix; once the profile is repaired, the provider's
//! re-test relists it; a rental that arrives while a suite runs aborts it; a second machine whose
//! six GPUs all fail on the same driver pauses automatic delisting instead of emptying the
//! marketplace (at most the hour's budget goes before the pattern shows); and a restarted server shows the same scores and verdicts. (The rate limit, the
//! override and the resume are exercised over HTTP in `gpunex/tests/benchmarks.rs`.)

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

conformance!(
    an_agent_benchmarks_its_gpus_and_the_platform_acts_on_the_verdicts,
    the_host_figures_are_measured_for_real
);

/// `gpunex-agent bench-host`: storage in the state directory and the network to a real server.
async fn the_host_figures_are_measured_for_real(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    let _server = start_server(&db.url, port, dir.path()).await;
    let market = market(&base, &admin).await;
    let state = dir.path().join("agent-state");
    let output = Command::new(AGENT)
        .args(["--server", &base, "--state-dir", state.to_str().unwrap()])
        .args([
            "bench-host",
            "--storage-mib",
            "16",
            "--download-mib",
            "2",
            "--trials",
            "2",
            "--json",
        ])
        .env("GPUNEX_AGENT_TOKEN", &market.agent_token)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figures: Value = serde_json::from_slice(&output.stdout).unwrap();
    for (part, figure, metric) in [
        ("storage", "read", "ssd_read_mb_s"),
        ("storage", "write", "ssd_write_mb_s"),
        ("network", "rtt", "network_rtt_us"),
        ("network", "throughput", "network_mbit_s"),
    ] {
        let f = &figures[part][figure];
        assert_eq!(f["metric"], metric, "{figures}");
        assert!(f["median_milli"].as_u64().unwrap() > 0, "{figures}");
        assert!(
            f["p10_milli"].as_u64() <= f["median_milli"].as_u64(),
            "{figures}"
        );
    }
    assert_eq!(figures["storage"]["bytes"], 16 << 20);
    assert_eq!(figures["network"]["rtt"]["trials"], 20);
    // The test file is gone.
    let left: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("gpunex-bench-"))
        .collect();
    assert!(left.is_empty());
    // The speed test refuses what it does not serve.
    let (status, refused) = call(
        &base,
        "GET",
        "/v1/agent/speedtest?bytes=0",
        &market.agent_token,
        None,
    )
    .await;
    assert_eq!(
        (status, refused["errors"][0]["code"].as_str()),
        (400, Some("out_of_range")),
        "{refused}"
    );
    let (status, _) = call(
        &base,
        "GET",
        "/v1/agent/speedtest",
        &market.provider_token,
        None,
    )
    .await;
    assert_eq!(status, 403);
}

/// `gpunex serve` with its outbox writing into `mailbox`, simulated GPUs listable.
async fn serve(db_url: &str, port: u16, dir: &Path, mailbox: &Path) -> Child {
    let child = Command::new(server_binary())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--heartbeat-interval",
            "200ms",
            "--offline-grace",
            "5s",
            "--dev-mode",
        ])
        .args(["--mailbox-dir", mailbox.to_str().unwrap()])
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while reqwest::get(format!("{base}/healthz")).await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

fn agent(base: &str, token: &str, state: &Path, extra: &[&str]) -> Child {
    Command::new(AGENT)
        .args(["--server", base, "--state-dir", state.to_str().unwrap()])
        .args(["--simulate", "2xH100", "--runtime", "process"])
        .args(["--heartbeat-interval", "200ms", "--poll-interval", "200ms"])
        .args(extra)
        .arg("run")
        .env("GPUNEX_AGENT_TOKEN", token)
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn stop(mut child: Child) {
    terminate(&child);
    let _ = tokio::time::timeout(Duration::from_secs(20), child.wait()).await;
}

/// The agent's benchmark schedule, as it keeps it.
fn schedule(state: &Path) -> Value {
    let conn = rusqlite::Connection::open(state.join("agent.sqlite")).unwrap();
    let text: Option<String> = conn
        .query_row(
            "SELECT value FROM agent_state WHERE key = 'benchmarks'",
            [],
            |row| row.get(0),
        )
        .ok();
    text.map_or(Value::Null, |t| serde_json::from_str(&t).unwrap())
}

async fn view(base: &str, gpu: &str) -> Value {
    call(base, "GET", &format!("/v1/gpus/{gpu}/benchmarks"), "", None)
        .await
        .1
}

async fn an_agent_benchmarks_its_gpus_and_the_platform_acts_on_the_verdicts(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mailbox = dir.path().join("mailbox");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    let server = serve(&db.url, port, dir.path(), &mailbox).await;
    let market = market(&base, &admin).await;
    let state = dir.path().join("agent-state");

    // GPU 1 computes wrong answers; the suite takes a second.
    let first = agent(
        &base,
        &market.agent_token,
        &state,
        &[
            "--simulate-profiles",
            "1:wrong_results",
            "--benchmark-suite-duration",
            "1s",
        ],
    );
    let machine_path = format!("/v1/machines/{}", market.machine_id);
    eventually("the machine online", 60, || async {
        call(&base, "GET", &machine_path, &admin, None).await.1["status"] == "online"
    })
    .await;
    let (_, machine) = call(&base, "GET", &machine_path, &admin, None).await;
    let gpus: Vec<String> = machine["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gpu_uuid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(gpus.len(), 2, "{machine}");
    let (status, price) = call(
        &base,
        "POST",
        &format!("/v1/providers/{}/prices", market.provider),
        &market.provider_token,
        Some(json!({"model_id": "h100-80gb", "price_usdc": "2.50"})),
    )
    .await;
    assert_eq!(status, 200, "{price}");

    // Both GPUs run their first suite; the healthy one is listed with its measured score, the
    // faulty one is taken off the marketplace.
    eventually("both GPUs benchmarked, GPU 1 delisted", 60, || async {
        view(&base, &gpus[0]).await["benchmark_listing"] == "listed"
            && view(&base, &gpus[1]).await["benchmark_listing"] == "delisted"
    })
    .await;
    let healthy = view(&base, &gpus[0]).await;
    assert_eq!(healthy["latest"]["verdict"]["outcome"], "pass", "{healthy}");
    assert_eq!(healthy["latest"]["run"]["simulated_profile"], "healthy");
    let faulty = view(&base, &gpus[1]).await;
    assert!(
        faulty["latest"]["verdict"]["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["code"] == "wrong_results"),
        "{faulty}"
    );
    eventually("one GPU listed, with its benchmark", 30, || async {
        let (_, page) = call(&base, "GET", "/v1/listings?model=h100-80gb", "", None).await;
        let listed = page["listings"].as_array().cloned().unwrap_or_default();
        listed.len() == 1
            && listed[0]["gpu_uuid"] == gpus[0].as_str()
            && listed[0]["performance_source"] == "benchmark"
            && listed[0]["performance_score"].is_string()
    })
    .await;
    // The provider's mailbox says what needs attention.
    eventually("the provider emailed", 30, || async {
        std::fs::read_dir(mailbox.join("new")).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                std::fs::read_to_string(e.path()).is_ok_and(|m| {
                    m.contains("To: ada@example.com")
                        && m.contains(&gpus[1])
                        && m.contains("wrong_results")
                        && m.contains("What to do")
                })
            })
        })
    })
    .await;

    // Repaired: the agent comes back without the fault; the provider asks for a re-test, the
    // agent runs it, and the GPU is listed again.
    stop(first).await;
    let second = agent(
        &base,
        &market.agent_token,
        &state,
        &["--benchmark-suite-duration", "1s"],
    );
    let (status, asked) = call(
        &base,
        "POST",
        &format!("/v1/gpus/{}/benchmarks/retest", gpus[1]),
        &market.provider_token,
        Some(json!({"reason": "reseated the card and updated its firmware"})),
    )
    .await;
    assert_eq!(status, 200, "{asked}");
    eventually("the re-test relists GPU 1", 60, || async {
        let v = view(&base, &gpus[1]).await;
        v["benchmark_listing"] == "listed" && v["runs_total"] == 2 && v["retest"].is_null()
    })
    .await;
    eventually("both GPUs listed", 30, || async {
        let (_, page) = call(&base, "GET", "/v1/listings?model=h100-80gb", "", None).await;
        page["listings"].as_array().map(Vec::len) == Some(2)
    })
    .await;
    stop(second).await;

    // A rental arriving mid-suite aborts it: a long suite starts on GPU 0 (asked for by an
    // admin), a renter takes GPU 0, the suite stops and no run is reported while it is rented.
    let third = agent(
        &base,
        &market.agent_token,
        &state,
        &["--benchmark-suite-duration", "60s"],
    );
    let (status, _) = call(
        &base,
        "POST",
        &format!("/v1/gpus/{}/benchmarks/retest", gpus[0]),
        &admin,
        Some(json!({"reason": "periodic check by operations"})),
    )
    .await;
    assert_eq!(status, 200);
    eventually("the suite running on GPU 0", 30, || async {
        schedule(&state)["running"] == gpus[0].as_str()
    })
    .await;
    let (status, rental) = call(
        &base,
        "POST",
        "/v1/rentals",
        &market.renter,
        Some(json!({"gpu_uuids": [gpus[0]], "workload": {"image": "busybox", "command": ["sh", "-c", "sleep 30"]}})),
    )
    .await;
    assert_eq!(status, 201, "{rental}");
    eventually("the suite aborted", 30, || async {
        let s = schedule(&state);
        s["running"].is_null() && s["gpus"][&gpus[0]]["aborted"] == 1
    })
    .await;
    let runs_before = view(&base, &gpus[0]).await["runs_total"].clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rented = view(&base, &gpus[0]).await;
    assert_eq!(
        rented["runs_total"], runs_before,
        "no run while rented: {rented}"
    );
    assert!(
        rented["retest"].is_object(),
        "the re-test still waits: {rented}"
    );
    let rental_id = rental["rental_id"].as_str().unwrap();
    let (status, ended) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{rental_id}/end"),
        &market.renter,
        Some(json!({"evidence": "done"})),
    )
    .await;
    assert_eq!(status, 200, "{ended}");
    // Free again: the suite starts over.
    eventually("the suite running again on GPU 0", 60, || async {
        schedule(&state)["running"] == gpus[0].as_str()
    })
    .await;
    stop(third).await;

    // A second machine whose six GPUs all fail at once on the same driver as the first's: a
    // driver or platform problem is likelier than six broken GPUs, so automatic delisting pauses
    // and nothing more is delisted.
    let (second_machine, second_token) = agent_token(&base, &market.provider_token).await;
    let second_state = dir.path().join("agent-state-2");
    let fourth = Command::new(AGENT)
        .args(["--server", &base, "--state-dir", second_state.to_str().unwrap()])
        .args(["--simulate", "6xH100", "--runtime", "process"])
        .args(["--heartbeat-interval", "200ms", "--poll-interval", "200ms"])
        .args(["--benchmark-suite-duration", "200ms"])
        .args(["--simulate-profiles", "0:ecc_double_bit,1:ecc_double_bit,2:ecc_double_bit,3:ecc_double_bit,4:ecc_double_bit,5:ecc_double_bit"])
        .arg("run")
        .env("GPUNEX_AGENT_TOKEN", &second_token)
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("automatic delisting paused", 90, || async {
        call(&base, "GET", "/v1/admin/benchmarks/delisting", &admin, None)
            .await
            .1["paused"]
            == true
    })
    .await;
    let (_, second) = call(
        &base,
        "GET",
        &format!("/v1/machines/{second_machine}"),
        &admin,
        None,
    )
    .await;
    let second_gpus: Vec<String> = second["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gpu_uuid"].as_str().unwrap().to_owned())
        .collect();
    eventually("all six benchmarked", 60, || async {
        for gpu in &second_gpus {
            if view(&base, gpu).await["latest"]["verdict"]["outcome"] != "fail" {
                return false;
            }
        }
        true
    })
    .await;
    // The first failures may be delisted before the pattern shows (within the hour's budget of
    // 3 for a small fleet, one of it spent on GPU 1 above); the rest stay listed.
    let mut delisted = 0;
    for gpu in &second_gpus {
        let v = view(&base, gpu).await;
        assert!(
            v["delisting_paused"]
                .as_str()
                .unwrap()
                .contains("on driver"),
            "{v}"
        );
        if v["benchmark_listing"] == "delisted" {
            delisted += 1;
        } else {
            assert_eq!(v["benchmark_listing"], "listed", "{v}");
        }
    }
    assert!(delisted <= 2, "{delisted} of 6 delisted");
    stop(fourth).await;

    // A restarted server folds the same scores and verdicts from the log.
    let mut all = gpus.clone();
    all.extend(second_gpus);
    let mut before = Vec::new();
    for gpu in &all {
        before.push(view(&base, gpu).await);
    }
    stop(server).await;
    let _server = serve(&db.url, port, dir.path(), &mailbox).await;
    for (gpu, before) in all.iter().zip(before) {
        assert_eq!(view(&base, gpu).await, before, "{gpu}");
    }
}

/// `gpunex-agent bench-gpu` on a machine without the NVIDIA driver (CI): one sentence, exit 1,
/// no panic.
#[test]
fn the_gpu_suite_without_cuda_says_why_in_one_sentence() {
    let out = std::process::Command::new(AGENT)
        .arg("bench-gpu")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return; // A GPU host: scripts/gpu-check.sh checks the suite's figures.
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("libcuda.so.1") || stderr.contains("cuBLAS"),
        "{stderr}"
    );
}
