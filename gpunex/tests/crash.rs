//! Exactly once across a crash, on both databases: a server killed right after it commits a
//! request (before answering) leaves the request's answer recorded with its events; the retry
//! with the same `Idempotency-Key`, on a restarted server, gets that answer at once, and the
//! request's events are in the log once. For a price change, a rental and a payout-settings
//! change.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

mod common;

conformance!(a_request_killed_after_its_commit_is_answered_once);

const GPUNEX: &str = env!("CARGO_BIN_EXE_gpunex");

struct Server {
    child: std::process::Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gpunex serve` on `db`; with `crash`, it aborts right after committing a keyed request.
///
/// The server binds port 0 and the test reads the address from its "gpunex listening" log
/// line: a port picked here and bound later by the server could be taken in between by another
/// test's server, and this test would then talk to that one.
fn start(db: &TestDb, dir: &std::path::Path, crash: bool) -> Server {
    use std::io::BufRead;
    let mut command = std::process::Command::new(GPUNEX);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--no-outbox", "--no-payout-scheduler"])
        .current_dir(dir)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn,gpunex_api=info")
        .stderr(std::process::Stdio::piped());
    if crash {
        command.env("GPUNEX_TEST_CRASH_AFTER_COMMIT", "1");
    }
    let mut child = command.spawn().unwrap();
    let (found, address) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    // Reads the log to its end, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Ok(record) = serde_json::from_str::<Value>(&line)
                && record["fields"]["message"] == "gpunex listening"
                && let Some(address) = record["fields"]["address"].as_str()
            {
                let _ = found.send(address.to_owned());
            }
        }
    });
    let address = address
        .recv_timeout(Duration::from_secs(30))
        .expect("the server did not say where it listens");
    let server = Server {
        child,
        base: format!("http://{address}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(address.as_str()).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

async fn send(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    key: &str,
    body: &Value,
) -> Result<(StatusCode, reqwest::header::HeaderMap, Value), reqwest::Error> {
    let response = reqwest::Client::new()
        .request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{base}{path}"),
        )
        .bearer_auth(token)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await?;
    let (status, headers) = (response.status(), response.headers().clone());
    let body = response.json().await.unwrap_or(Value::Null);
    Ok((status, headers, body))
}

async fn events_of(state: &AppState, event_type: &str) -> usize {
    let mut count = 0;
    let mut after = 0;
    loop {
        let events = state.store.read_all(after, 1_000).await.unwrap();
        let Some(last) = events.last() else {
            return count;
        };
        after = last.position;
        count += events.iter().filter(|e| e.event_type == event_type).count();
    }
}

async fn a_request_killed_after_its_commit_is_answered_once(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    // A provider with an online, priced H100 and a renter, set up on the same database.
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let setup = common::serve(state.clone()).await;
    let (provider, token) =
        common::approved_provider(&setup, &admin, "crash@example.com", common::one_h100()).await;
    let (machine, agent) = common::agent_token(&setup, &token).await;
    let mut registration = common::registration(machine, 1);
    registration["body"]["simulated"] = json!(false);
    let (status, _, answer) = common::request(
        &setup,
        "POST",
        "/v1/agent/events",
        Some(&agent),
        Some(json!({"events": [registration]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, _, _) = common::request(
        &setup,
        "POST",
        "/v1/agent/heartbeat",
        Some(&agent),
        Some(common::heartbeat(machine, 1)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let gpu = common::gpu(machine, 0)["gpu_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let renter = common::person(&setup, "renter@example.com").await;

    let price = json!({"model_id": "H100", "price_usdc": "2.40"});
    let rental =
        json!({"gpu_uuids": [gpu], "workload": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04"}});
    let settings = json!({"schedule": "weekly", "method": {"kind": "solana", "wallet": "6x5SYnLroiN7WYq8NQYU9KHcH4YjpBbwpUfVu3EB7ieH"}});
    let cases = [
        (
            "POST",
            format!("/v1/providers/{provider}/prices"),
            token.clone(),
            price,
            StatusCode::OK,
            "market.price_set",
        ),
        (
            "POST",
            "/v1/rentals".to_owned(),
            renter.clone(),
            rental,
            StatusCode::CREATED,
            "rental.started",
        ),
        (
            "PUT",
            format!("/v1/providers/{provider}/payout-settings"),
            token.clone(),
            settings,
            StatusCode::OK,
            "payout.settings_changed",
        ),
    ];
    for (i, (method, path, caller, body, success, event_type)) in cases.into_iter().enumerate() {
        let key = format!("crash-{i}");
        let before = events_of(&state, event_type).await;
        // The first server commits the request and dies before answering.
        let crashing = start(db, dir.path(), true);
        let lost = send(&crashing.base, method, &path, &caller, &key, &body).await;
        assert!(
            lost.is_err(),
            "{path}: the server died before answering: {lost:?}"
        );
        drop(crashing);
        assert_eq!(
            events_of(&state, event_type).await,
            before + 1,
            "{path}: the request committed before the crash"
        );
        // A restarted server answers the retry at once with the recorded answer; nothing runs
        // again.
        let restarted = start(db, dir.path(), false);
        let started = Instant::now();
        let (status, headers, answer) = send(&restarted.base, method, &path, &caller, &key, &body)
            .await
            .unwrap();
        assert_eq!(status, success, "{path}: {answer}");
        assert_eq!(headers["idempotency-replayed"], "true", "{path}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{path} answered within seconds"
        );
        let (again_status, _, again) = send(&restarted.base, method, &path, &caller, &key, &body)
            .await
            .unwrap();
        assert_eq!((again_status, &again), (success, &answer), "{path}");
        assert_eq!(
            events_of(&state, event_type).await,
            before + 1,
            "{path}: once"
        );
        match event_type {
            "market.price_set" => assert_eq!(
                answer["models"][0]["current"]["price_usdc"], "2.400000",
                "{answer}"
            ),
            "rental.started" => assert_eq!(answer["gpu_uuids"], json!([gpu]), "{answer}"),
            _ => assert_eq!(answer["schedule"], "weekly", "{answer}"),
        }
    }

    // A request whose handler records no answer with its commit (an availability change): once
    // the dead server's lease lapses, the retry learns it was recorded, and it is not run again.
    let path = format!("/v1/providers/{provider}/availability");
    let body = json!({"availability": {"kind": "always_on"}});
    let before = events_of(&state, "market.availability_set").await;
    let crashing = start(db, dir.path(), true);
    assert!(
        send(&crashing.base, "POST", &path, &token, "crash-3", &body)
            .await
            .is_err()
    );
    drop(crashing);
    let restarted = start(db, dir.path(), false);
    let deadline = Instant::now()
        + Duration::from_micros(gpunex_store::idempotency::IDEMPOTENCY_LEASE_US.unsigned_abs())
        + Duration::from_secs(3);
    loop {
        let (status, _, answer) = send(&restarted.base, "POST", &path, &token, "crash-3", &body)
            .await
            .unwrap();
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        if answer["code"] == "request_committed" {
            break;
        }
        assert_eq!(answer["code"], "request_in_progress", "{answer}");
        assert!(Instant::now() < deadline, "the lapsed lease is noticed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        events_of(&state, "market.availability_set").await,
        before + 1
    );
}
