//! The real binaries for the end-to-end tests: a `gpunex serve` process, `gpunex-agent`
//! processes with simulated GPUs, and an HTTP client.
// Each test binary uses some of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::{Child, Command};
use uuid::Uuid;

pub const AGENT: &str = env!("CARGO_BIN_EXE_gpunex-agent");

/// The server binary, built beside the agent by `cargo test --workspace`.
pub fn server_binary() -> PathBuf {
    let path = Path::new(AGENT).with_file_name("gpunex");
    assert!(
        path.exists(),
        "{} is missing: run the workspace tests (`cargo test --workspace`), which build it",
        path.display()
    );
    path
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Server {
    pub child: Child,
}

pub async fn start_server(db_url: &str, port: u16, dir: &Path) -> Server {
    start_server_with(db_url, port, dir, &[]).await
}

/// [`start_server`] with more `serve` flags.
pub async fn start_server_with(db_url: &str, port: u16, dir: &Path, extra: &[&str]) -> Server {
    let child = Command::new(server_binary())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--no-outbox",
            "--heartbeat-interval",
            "200ms",
            "--offline-grace",
            "1500ms",
        ])
        .args(extra)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .current_dir(dir)
        .stdout(Stdio::null())
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
    Server { child }
}

pub fn agent_command(base: &str, token: &str, state: &Path) -> Command {
    let mut command = Command::new(AGENT);
    command
        .args([
            "--server",
            base,
            "--state-dir",
            state.to_str().unwrap(),
            "--simulate",
            "2xH100",
            "--simulate-condition-every",
            "2",
            "--heartbeat-interval",
            "200ms",
        ])
        .env("GPUNEX_AGENT_TOKEN", token)
        // Failed sends while the server is down are expected here; keep the output readable.
        .env("RUST_LOG", "error")
        .kill_on_drop(true);
    command
}

pub async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client.request(method.parse().unwrap(), format!("{base}{path}"));
    // An empty token: an anonymous call.
    if !token.is_empty() {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

pub async fn eventually<F, Fut>(what: &str, seconds: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(seconds),
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every event in the log, paged.
pub async fn all_events(base: &str, admin: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let (status, page) = call(
            base,
            "GET",
            &format!("/v1/events?after={after}&limit=1000"),
            admin,
            None,
        )
        .await;
        assert_eq!(status, 200, "{page}");
        let batch = page["events"].as_array().unwrap().clone();
        if batch.is_empty() {
            return events;
        }
        after = page["next_after"].as_u64().unwrap();
        events.extend(batch);
    }
}

pub fn of_type<'a>(events: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .collect()
}

/// The agent's outbox: `(event_id, kind, status)` in queue order.
pub fn outbox(state: &Path) -> Vec<(Uuid, String, String)> {
    let conn = rusqlite::Connection::open(state.join("agent.sqlite")).unwrap();
    let mut statement = conn
        .prepare("SELECT event_id, kind, status FROM outbox ORDER BY seq")
        .unwrap();
    statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?.parse().unwrap(),
                row.get(1)?,
                row.get(2)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

pub fn admin_token(db_url: &str, dir: &Path) -> String {
    let created = std::process::Command::new(server_binary())
        .args(["admin", "create-token", "--role", "admin"])
        .env("DATABASE_URL", db_url)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    String::from_utf8(created.stdout).unwrap().trim().to_owned()
}

pub async fn token(base: &str, issuer: &str, role: Value) -> String {
    let (status, issued) = call(
        base,
        "POST",
        "/v1/tokens",
        issuer,
        Some(json!({"role": role, "label": "e2e"})),
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    issued["token"].as_str().unwrap().to_owned()
}

/// An agent token the provider issues for a new machine: `(machine_id, token)`, the machine id
/// minted by the platform.
pub async fn agent_token(base: &str, provider_token: &str) -> (Uuid, String) {
    let (status, issued) = call(
        base,
        "POST",
        "/v1/tokens",
        provider_token,
        Some(json!({"role": {"kind": "agent"}})),
    )
    .await;
    assert_eq!(status, 201, "{issued}");
    let machine_id = issued["role"]["machine_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (machine_id, issued["token"].as_str().unwrap().to_owned())
}

pub async fn machine(base: &str, admin: &str, machine_id: Uuid) -> Value {
    call(
        base,
        "GET",
        &format!("/v1/machines/{machine_id}"),
        admin,
        None,
    )
    .await
    .1
}

#[cfg(unix)]
pub fn terminate(child: &Child) {
    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// A marketplace ready to rent: an approved Community provider (20 % fee) with a claimed
/// provider token and an agent token for a new machine, a price of 2.50 USDC per H100-hour,
/// and a renter with a renter token.
pub struct Market {
    pub provider: Uuid,
    pub provider_token: String,
    pub machine_id: Uuid,
    pub agent_token: String,
    pub renter: String,
}

/// Sets up a [`Market`] on the server at `base` (started with `--dev-mode`, so simulated GPUs
/// are listed). The price is set once the machine's GPUs are known: call
/// [`Market::price_and_wait_listed`] after the agent brought the machine online.
pub async fn market(base: &str, admin: &str) -> Market {
    let credentials =
        json!({"email": "ada@example.com", "password": "correct horse battery staple"});
    let (status, _) = call(base, "POST", "/v1/accounts", "", Some(credentials.clone())).await;
    assert_eq!(status, 201);
    let (_, session) = call(base, "POST", "/v1/sessions", "", Some(credentials)).await;
    let person = session["token"].as_str().unwrap().to_owned();
    let form = json!({
        "full_legal_name": "Ada Lovelace", "email": "ada@example.com",
        "gpus": [{"model": "h100-80gb", "quantity": 2, "system_ram_gb": 512,
                  "upload_gbps": "10", "download_gbps": "10",
                  "availability": {"kind": "always_on"},
                  "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}}],
        "ups_protected": true, "commitment_months": 12, "maintenance_notes": "none planned"
    });
    let (status, application) = call(base, "POST", "/v1/applications", &person, Some(form)).await;
    assert_eq!(status, 201, "{application}");
    let application_id = application["application_id"].as_str().unwrap().to_owned();
    let (status, approved) = call(
        base,
        "POST",
        &format!("/v1/applications/{application_id}/approve"),
        admin,
        Some(json!({"tier": "community"})),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    let provider: Uuid = approved["provider_id"].as_str().unwrap().parse().unwrap();
    let (_, claimed) = call(
        base,
        "POST",
        &format!("/v1/applications/{application_id}/provider-token"),
        &person,
        None,
    )
    .await;
    let provider_token = claimed["token"].as_str().unwrap().to_owned();
    let (machine_id, agent_token) = agent_token(base, &provider_token).await;
    let renter_login =
        json!({"email": "grace@example.com", "password": "correct horse battery staple"});
    let (status, _) = call(base, "POST", "/v1/accounts", "", Some(renter_login.clone())).await;
    assert_eq!(status, 201);
    let (_, session) = call(base, "POST", "/v1/sessions", "", Some(renter_login)).await;
    let renter = token(
        base,
        session["token"].as_str().unwrap(),
        json!({"kind": "renter"}),
    )
    .await;
    Market {
        provider,
        provider_token,
        machine_id,
        agent_token,
        renter,
    }
}

impl Market {
    /// Waits until the machine is online, prices the H100s at 2.50 USDC per GPU-hour and waits
    /// until `gpus` of them are listed.
    pub async fn price_and_wait_listed(&self, base: &str, admin: &str, gpus: usize) {
        let machine_path = format!("/v1/machines/{}", self.machine_id);
        eventually("the machine online", 60, || async {
            let (_, m) = call(base, "GET", &machine_path, admin, None).await;
            m["status"] == "online"
        })
        .await;
        let (status, price) = call(
            base,
            "POST",
            &format!("/v1/providers/{}/prices", self.provider),
            &self.provider_token,
            Some(json!({"model_id": "h100-80gb", "price_usdc": "2.50"})),
        )
        .await;
        assert_eq!(status, 200, "{price}");
        eventually("the GPUs listed", 30, || async {
            let (_, page) = call(base, "GET", "/v1/listings?model=h100-80gb", "", None).await;
            page["listings"].as_array().map(Vec::len) == Some(gpus)
        })
        .await;
    }
}
