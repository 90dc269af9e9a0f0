//! Real HTTP for the API tests: the router served on a loopback port, and a client call.
// Each test binary uses some of these helpers.
#![allow(dead_code)]

use axum::http::{HeaderMap, StatusCode};
use gpunex_api::{AppState, router};
use serde_json::{Value, json};
use uuid::Uuid;

/// Serves `state` on 127.0.0.1 with an OS-chosen port for the rest of the test; returns the
/// base URL.
/// It runs the server's own loop (`http_server::serve`) under `state.limits`.
pub async fn serve(state: AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let limits = state.limits;
    let connections = state.metrics.connections.clone();
    tokio::spawn(async move {
        gpunex_api::http_server::serve(
            listener,
            router(state),
            limits,
            connections,
            std::future::pending::<()>(),
        )
        .await
        .unwrap();
    });
    format!("http://{address}")
}

/// One request over the network. `token` is sent as `Bearer <token>`, or as the whole
/// `Authorization` value when it contains a space.
pub async fn request(
    base: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let client = reqwest::Client::new();
    let verb = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client.request(verb, format!("{base}{path}"));
    if let Some(token) = token {
        let header = if token.contains(' ') {
            token.to_owned()
        } else {
            format!("Bearer {token}")
        };
        request = request.header("authorization", header);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    assert_documented(method, path, status);
    let bytes = response.bytes().await.unwrap();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Every answer a test sees must be one the OpenAPI document declares for its operation: the
/// API tests double as a check that the document tells the truth about statuses.
pub fn assert_documented(method: &str, path: &str, status: StatusCode) {
    static DOCUMENT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let document = DOCUMENT.get_or_init(|| gpunex_api::server::endpoints().document());
    let path = path.split('?').next().unwrap_or(path);
    let method = method.to_lowercase();
    let segments: Vec<&str> = path.split('/').collect();
    let operation = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .find_map(|(template, item)| {
            let parts: Vec<&str> = template.split('/').collect();
            let matches = parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p.starts_with('{') || p == s);
            matches.then(|| item.get(&method)).flatten()
        });
    // Unknown paths and methods are the router's own 404 and 405.
    let Some(operation) = operation else {
        return;
    };
    let documented = operation["responses"]
        .as_object()
        .unwrap()
        .contains_key(status.as_str());
    assert!(
        documented,
        "{method} {path} answered {status}, which its operation {} does not document",
        operation["operationId"]
    );
}

/// A POST with an `Idempotency-Key`.
pub async fn post_with_key(
    base: &str,
    path: &str,
    token: Option<&str>,
    key: &str,
    body: Value,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("idempotency-key", key)
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    assert_documented("POST", path, status);
    let bytes = response.bytes().await.unwrap();
    (
        status,
        headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// An admin token issued as `gpunex admin create-token` would, for tests acting as operators.
pub async fn admin_token(state: &AppState) -> String {
    let (admin, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(
            gpunex_domain::credentials::Role::Admin,
            "tests",
            "cli",
        ),
    )
    .await
    .unwrap();
    admin.token
}

/// Signs a person up and in; returns their session token.
pub async fn person(base: &str, email: &str) -> String {
    let credentials =
        serde_json::json!({"email": email, "password": "correct horse battery staple"});
    let (status, _, _) = request(
        base,
        "POST",
        "/v1/accounts",
        None,
        Some(credentials.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, session) = request(base, "POST", "/v1/sessions", None, Some(credentials)).await;
    assert_eq!(status, StatusCode::CREATED);
    session["token"].as_str().unwrap().to_owned()
}

/// A provider approved from an application declaring `gpus` (the form's GPU entries), with its
/// first token: `(provider_id, provider_token)`.
pub async fn approved_provider(
    base: &str,
    admin: &str,
    email: &str,
    gpus: Value,
) -> (uuid::Uuid, String) {
    approved_provider_as(base, admin, email, gpus, "community").await
}

/// [`approved_provider`] with the tier the reviewer grants (`community` or `enterprise`).
pub async fn approved_provider_as(
    base: &str,
    admin: &str,
    email: &str,
    gpus: Value,
    tier: &str,
) -> (uuid::Uuid, String) {
    let person = person(base, email).await;
    let form = serde_json::json!({
        "full_legal_name": "Grace Hopper",
        "email": email,
        "gpus": gpus,
        "ups_protected": true,
        "commitment_months": 12,
        "maintenance_notes": "none planned"
    });
    let (status, _, application) =
        request(base, "POST", "/v1/applications", Some(&person), Some(form)).await;
    assert_eq!(status, StatusCode::CREATED, "{application}");
    let id = application["application_id"].as_str().unwrap().to_owned();
    let (status, _, approved) = request(
        base,
        "POST",
        &format!("/v1/applications/{id}/approve"),
        Some(admin),
        Some(serde_json::json!({"tier": tier})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let provider_id = approved["provider_id"].as_str().unwrap().parse().unwrap();
    let (status, _, token) = request(
        base,
        "POST",
        &format!("/v1/applications/{id}/provider-token"),
        Some(&person),
        None,
    )
    .await;
    assert!(status.is_success(), "{token}");
    (provider_id, token["token"].as_str().unwrap().to_owned())
}

/// An agent token the provider issues for a new machine: `(machine_id, token)`, the machine id
/// minted by the platform.
pub async fn agent_token(base: &str, provider_token: &str) -> (Uuid, String) {
    let (status, _, issued) = request(
        base,
        "POST",
        "/v1/tokens",
        Some(provider_token),
        Some(json!({"role": {"kind": "agent"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    let machine_id = issued["role"]["machine_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (machine_id, issued["token"].as_str().unwrap().to_owned())
}

/// The wall clock, as a server on the store's default clock reads it.
pub fn now() -> gpunex_domain::time::Timestamp {
    use gpunex_domain::clock::Clock;
    gpunex_store::SystemClock.now()
}

/// An RFC 3339 instant.
pub fn at(text: &str) -> gpunex_domain::time::Timestamp {
    gpunex_domain::time::Timestamp::from_unix_micros(
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_micros(),
    )
}

pub async fn append(
    store: &gpunex_store::Store,
    stream: String,
    event: gpunex_domain::DomainEvent,
) {
    store
        .append(
            gpunex_domain::StreamId::parse(stream).unwrap(),
            gpunex_store::ExpectedVersion::Any,
            vec![gpunex_store::NewEvent::from_domain(
                Uuid::now_v7(),
                &event,
                gpunex_store::Metadata::actor("test"),
            )],
        )
        .await
        .unwrap();
}

/// A rental of one GPU at 3.60 USDC per hour (1,000 micro-USDC a second) on a machine online
/// since a day before, metered once at `when` for `seconds`: Community fee 20%, so the provider
/// earns exactly 800 micro-USDC a second.
pub async fn earn(store: &gpunex_store::Store, provider_id: Uuid, seconds: u64, when: &str) -> i64 {
    let when = at(when);
    let machine_id = Uuid::now_v7();
    let started_at =
        gpunex_domain::time::Timestamp::from_unix_micros(when.unix_micros() - 86_400_000_000);
    append(
        store,
        format!("machine-{machine_id}"),
        gpunex_domain::DomainEvent::Fleet(gpunex_domain::fleet::FleetEvent::MachineOnline(
            gpunex_domain::fleet::MachineOnline {
                machine_id,
                provider_id,
                at: started_at,
            },
        )),
    )
    .await;
    let rental = gpunex_domain::rental::RentalStarted {
        rental_id: Uuid::now_v7(),
        renter_id: Uuid::from_u128(99),
        provider_id,
        machine_id,
        gpu_uuids: vec![format!("GPU-{machine_id}")],
        model_id: "h100-80gb".to_owned(),
        price_per_gpu_hour: gpunex_domain::money::Usdc::from_micros(3_600_000),
        started_at,
        workload: None,
    };
    let stream = format!("rental-{}", rental.rental_id);
    append(
        store,
        stream.clone(),
        gpunex_domain::DomainEvent::Rental(gpunex_domain::rental::RentalEvent::Started(
            rental.clone(),
        )),
    )
    .await;
    let metered = gpunex_domain::rental::meter_usage(&gpunex_domain::rental::UsageInput {
        rental: &rental,
        meter: gpunex_domain::metering::Meter::default(),
        tier: gpunex_domain::onboarding::Tier::Community,
        fees: gpunex_domain::metering::FeeSchedule::default(),
        reported_gpu_seconds: seconds,
        online_gpu_seconds: 86_400,
        report_id: Uuid::now_v7(),
        at: when,
    })
    .unwrap()
    .unwrap();
    let net = metered.net.micros();
    append(
        store,
        stream,
        gpunex_domain::DomainEvent::Rental(gpunex_domain::rental::RentalEvent::UsageMetered(
            metered,
        )),
    )
    .await;
    net
}

/// The GPU entries of a provider's application: one H100 in Madrid, always on.
pub fn one_h100() -> Value {
    serde_json::json!([{
        "model": "h100-80gb", "quantity": 1, "system_ram_gb": 256, "upload_gbps": "10",
        "download_gbps": "10", "availability": {"kind": "always_on"},
        "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}
    }])
}

/// Sets a provider's payout schedule and method, as the provider; the change must be accepted.
pub async fn set_payout_settings(
    base: &str,
    token: &str,
    provider_id: Uuid,
    schedule: &str,
    method: Value,
) {
    let (status, _, body) = request(
        base,
        "PUT",
        &format!("/v1/providers/{provider_id}/payout-settings"),
        Some(token),
        Some(serde_json::json!({"schedule": schedule, "method": method})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// What an agent sends: a GPU of `machine` as detected, its registration event, a telemetry
/// sample and a heartbeat (the GPU UUIDs derive from the machine id).
pub fn gpu(machine: Uuid, index: u32) -> Value {
    json!({
        "gpu_uuid": format!("GPU-{}-{index:04x}", &machine.simple().to_string()[..20]),
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_device_id": 0x2330,
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x18 + index),
        "vram_mib": 81_559,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "pcie_current": {"generation": 1, "width": 16},
        "pcie_max": {"generation": 5, "width": 16},
        "power_limit_w": if index == 0 { 500 } else { 700 },
        "default_power_limit_w": 700,
        "ecc_enabled": true,
        "mig_enabled": null
    })
}

pub fn registration(machine: Uuid, gpus: u32) -> Value {
    json!({
        "event_id": Uuid::now_v7(),
        "occurred_at": chrono::Utc::now().to_rfc3339(),
        "kind": "registration",
        "body": {
            "machine_id": machine,
            "agent_version": "test",
            "simulated": true,
            "host": {
                "hostname": "node-7", "cpu_model": "AMD EPYC 9654", "cpu_cores": 192,
                "ram_mib": 2_097_152, "disk_total_gib": 7_000, "disk_free_gib": 6_500,
                "os": "Ubuntu 22.04.4 LTS", "kernel": "6.5.0-41-generic"
            },
            "gpus": (0..gpus).map(|i| gpu(machine, i)).collect::<Vec<_>>(),
        }
    })
}

pub fn sample(machine: Uuid, index: u32, temperature: i64) -> Value {
    json!({
        "gpu_uuid": gpu(machine, index)["gpu_uuid"],
        "utilization_pct": 97, "memory_used_mib": 70_000, "temperature_c": temperature,
        "power_draw_mw": 640_000, "sm_clock_mhz": 1_980, "clock_event_reasons": 4,
        "ecc_corrected": 0, "ecc_uncorrected": 0
    })
}

pub fn heartbeat(machine: Uuid, gpus: u32) -> Value {
    json!({
        "machine_id": machine,
        "gpus": (0..gpus).map(|i| sample(machine, i, 60 + i64::from(i))).collect::<Vec<_>>(),
    })
}

/// One sample of a `/metrics` exposition.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub value: String,
}

/// A `/metrics` exposition, read and checked against the text format as it is read: every
/// family has one `# HELP` and one `# TYPE` before its samples, every sample belongs to a
/// declared family (a histogram's through `_bucket`, `_sum`, `_count`), names and labels are
/// well formed, values are numbers, and no series appears twice.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: std::collections::BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let name_ok = |name: &str| {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        };
        let mut exposition = Exposition::default();
        let mut helped = std::collections::BTreeSet::new();
        let mut seen = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap();
                assert!(name_ok(name) && !help.is_empty(), "{line}");
                assert!(helped.insert(name.to_owned()), "HELP {name} twice");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(helped.contains(name), "TYPE {name} before its HELP");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                assert!(
                    exposition
                        .types
                        .insert(name.to_owned(), kind.to_owned())
                        .is_none(),
                    "TYPE {name} twice"
                );
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(
                value == "+Inf" || value.parse::<f64>().is_ok(),
                "value of {line}"
            );
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.strip_suffix('}').unwrap()),
                None => (series, ""),
            };
            assert!(name_ok(name), "{line}");
            let family = exposition.types.get(name).map(|_| name).or_else(|| {
                ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                    name.strip_suffix(suffix).filter(|base| {
                        exposition.types.get(*base).map(String::as_str) == Some("histogram")
                    })
                })
            });
            assert!(family.is_some(), "{name} has no TYPE");
            let mut parsed = std::collections::BTreeMap::new();
            let mut rest = labels;
            while !rest.is_empty() {
                let (label, after) = rest.split_once("=\"").unwrap();
                assert!(name_ok(label), "label {label} in {line}");
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c)) => value.push(c),
                            None => panic!("{line}"),
                        },
                        Some((i, '"')) => break i,
                        Some((_, c)) => value.push(c),
                        None => panic!("unterminated label in {line}"),
                    }
                };
                assert!(parsed.insert(label.to_owned(), value).is_none(), "{line}");
                rest = after[end + 1..]
                    .strip_prefix(',')
                    .unwrap_or(&after[end + 1..]);
            }
            assert!(seen.insert(series.to_owned()), "{series} twice");
            exposition.samples.push(Sample {
                name: name.to_owned(),
                labels: parsed,
                value: value.to_owned(),
            });
        }
        exposition
    }

    /// The value of the one sample named `name` carrying every label of `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let matching: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(matching.len() <= 1, "{name} {labels:?}: {matching:?}");
        matching.first().map(|s| s.value.parse().unwrap())
    }

    pub fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

/// `GET /metrics`, checked as it is read; `token` as in [`request`].
pub async fn scrape(base: &str, token: Option<&str>) -> Exposition {
    let mut request = reqwest::Client::new().get(format!("{base}/metrics"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    Exposition::parse(&response.text().await.unwrap())
}
