//! Slow and greedy clients over real TCP: partial requests cannot lock normal clients out, even
//! against a low file descriptor limit; headers, bodies and idle connections have deadlines; one
//! token cannot hold every worker.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_api::http_server::ServerLimits;
use gpunex_tests::TestDb;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

const GPUNEX: &str = env!("CARGO_BIN_EXE_gpunex");

/// Opens a connection and sends `bytes`, keeping it open.
async fn partial(address: &str, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// Reads what the server sends until it closes the connection (or `limit` passes).
async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut answer = Vec::new();
    match tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await {
        Ok(_) => Some(String::from_utf8_lossy(&answer).into_owned()),
        Err(_) => None,
    }
}

const PARTIAL_HEADERS: &[u8] =
    b"POST /v1/accounts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Le";
const PARTIAL_BODY: &[u8] = b"POST /v1/accounts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"email\": ";

/// 364 partial requests (half stopped in their headers, half in their bodies) against a server
/// with 256 file descriptors and room for 128 connections: every normal request still answers
/// at once, and the server never runs out of descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_requests_do_not_lock_out_normal_clients() {
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let address = format!("127.0.0.1:{port}");
    let mut server = tokio::process::Command::new("prlimit")
        .args([
            "--nofile=256:256",
            "--",
            GPUNEX,
            "serve",
            "--listen",
            &address,
        ])
        .args([
            "--connections-max",
            "128",
            "--no-outbox",
            "--no-payout-scheduler",
        ])
        .args(["--header-read-timeout", "60s", "--body-read-timeout", "60s"])
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://{address}");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut held = Vec::new();
    for i in 0..364 {
        let bytes = if i % 2 == 0 {
            PARTIAL_HEADERS
        } else {
            PARTIAL_BODY
        };
        held.push(partial(&address, bytes).await);
    }
    // Normal clients, one new connection each, while the partial requests are held.
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        let health = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        let signup = client
            .post(format!("{base}/v1/accounts"))
            .json(&json!({"email": format!("p{i}@example.com"), "password": "correct horse battery staple"}))
            .send()
            .await;
        let Ok(signup) = signup else {
            server.start_kill().unwrap();
            let output = server.wait_with_output().await.unwrap();
            let log = String::from_utf8_lossy(&output.stderr);
            panic!("{signup:?}\n{}", &log[log.len().saturating_sub(3000)..]);
        };
        assert_eq!(signup.status(), StatusCode::CREATED);
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_secs(3),
        "normal requests answer while partial ones are held: the slowest took {slowest:?}"
    );
    // The partial requests that made room were closed: the oldest is gone.
    let closed = read_to_close(&mut held[0], Duration::from_secs(5)).await;
    assert_eq!(
        closed.as_deref(),
        Some(""),
        "the oldest partial request was closed"
    );
    // The server's own figures say the same (a Prometheus on this host reads them anonymously).
    let metrics = common::scrape(&base, None).await;
    let room = metrics
        .value(
            "gpunex_http_connections_closed_total",
            &[("reason", "room")],
        )
        .unwrap();
    assert!(
        room >= 364.0 - 128.0,
        "{room} connections closed to make room"
    );
    assert!(metrics.value("gpunex_http_connections_open", &[]).unwrap() <= 128.0);
    drop(held);
    server.start_kill().unwrap();
    let output = server.wait_with_output().await.unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!log.contains("Too many open files"), "{log}");
}

async fn limited(limits: ServerLimits) -> (AppState, String) {
    let db = TestDb::sqlite();
    let state = AppState::load(db.open().await)
        .await
        .unwrap()
        .with_limits(limits);
    let base = common::serve(state.clone()).await;
    std::mem::forget(db);
    (state, base)
}

/// Headers have a deadline (the connection is closed), a body has one (`408 request_timeout`),
/// and an idle keep-alive connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_bodies_and_idle_connections_have_deadlines() {
    let (_, base) = limited(ServerLimits {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(1_500),
        ..ServerLimits::default()
    })
    .await;
    let address = base.trim_start_matches("http://").to_owned();

    let mut headers = partial(&address, PARTIAL_HEADERS).await;
    let started = Instant::now();
    let closed = read_to_close(&mut headers, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "slow headers are cut off");
    assert!(started.elapsed() < Duration::from_secs(3));

    let mut body = partial(&address, PARTIAL_BODY).await;
    let answer = read_to_close(&mut body, Duration::from_secs(5))
        .await
        .expect("a slow body is answered");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        answer.contains("application/problem+json")
            && answer.contains("\"code\":\"request_timeout\""),
        "{answer}"
    );

    // A connection that never sends a request owes its first headers from the start.
    let mut silent = partial(&address, b"").await;
    let started = Instant::now();
    assert!(
        read_to_close(&mut silent, Duration::from_secs(5))
            .await
            .is_some()
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    let mut idle = partial(
        &address,
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .await;
    let started = Instant::now();
    let answer = read_to_close(&mut idle, Duration::from_secs(5))
        .await
        .expect("an idle keep-alive connection is closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let after = started.elapsed();
    // The idle timeout, not the header deadline, ends a keep-alive connection's wait for its
    // next request.
    assert!(
        after >= Duration::from_millis(1_500) && after < Duration::from_secs(4),
        "{after:?}"
    );
    let metrics = common::scrape(&base, None).await;
    let closed = |reason| {
        metrics
            .value(
                "gpunex_http_connections_closed_total",
                &[("reason", reason)],
            )
            .unwrap()
    };
    assert!(closed("header_timeout") >= 1.0);
    assert!(closed("idle") >= 1.0);
    // The slow body's answer is counted like any other.
    assert!(
        metrics
            .value(
                "gpunex_http_requests_total",
                &[
                    ("route", "/v1/accounts"),
                    ("method", "POST"),
                    ("status", "408")
                ],
            )
            .is_some()
    );
}

/// One token may have only so many requests in flight; the next is `429 too_many_requests`
/// with `Retry-After`, and others' requests are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_hold_every_worker() {
    let (state, base) = limited(ServerLimits {
        requests_in_flight_per_token_max: 2,
        ..ServerLimits::default()
    })
    .await;
    let admin = common::admin_token(&state).await;
    let other = common::admin_token(&state).await;
    let address = base.trim_start_matches("http://").to_owned();
    let slow = format!(
        "POST /v1/tokens HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {admin}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    let _held = [
        partial(&address, slow.as_bytes()).await,
        partial(&address, slow.as_bytes()).await,
    ];
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, headers, problem) =
        common::request(&base, "GET", "/v1/tokens", Some(&admin), None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("too_many_requests")),
        "{problem}"
    );
    assert_eq!(headers["retry-after"], "1");
    let (status, _, _) = common::request(&base, "GET", "/v1/tokens", Some(&other), None).await;
    assert_eq!(status, StatusCode::OK, "another token is served");
}

/// PostgreSQL connections terminated under load (a failover): requests answer `503
/// database_unavailable` with `Retry-After`, never `500`, and the server recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_database_connection_answers_503_and_recovers() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let (base, admin, stop) = (base.clone(), admin.clone(), stop.clone());
        load.spawn(async move {
            let mut statuses = Vec::new();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                let (status, headers, body) = if i % 2 == 0 {
                    common::request(&base, "GET", "/v1/events?limit=50", Some(&admin), None).await
                } else {
                    let body =
                        json!({"role": {"kind": "finance"}, "label": format!("w{worker} {i}")});
                    common::request(&base, "POST", "/v1/tokens", Some(&admin), Some(body)).await
                };
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    assert!(headers.contains_key("retry-after"), "{body}");
                    assert!(
                        matches!(
                            body["code"].as_str(),
                            Some("database_unavailable" | "credentials_unavailable")
                        ),
                        "{body}"
                    );
                }
                statuses.push(status.as_u16());
            }
            statuses
        });
    }
    let mut terminated = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        terminated += db.terminate_connections().await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut statuses = Vec::new();
    while let Some(worker) = load.join_next().await {
        statuses.extend(worker.unwrap());
    }
    assert!(terminated > 0, "connections were terminated");
    let failed: Vec<u16> = statuses
        .iter()
        .copied()
        .filter(|s| *s >= 500 && *s != 503)
        .collect();
    assert!(failed.is_empty(), "5xx other than 503: {failed:?}");
    eprintln!(
        "{} requests, {} connections terminated, {} answered 503",
        statuses.len(),
        terminated,
        statuses.iter().filter(|s| **s == 503).count()
    );
    // Recovered: the next requests succeed.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _, body) =
            common::request(&base, "GET", "/v1/events?limit=1", Some(&admin), None).await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not recover: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    db.cleanup().await;
}
