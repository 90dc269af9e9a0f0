//! Agents and the fleet over real HTTP, on SQLite and PostgreSQL: registration through agent
//! events (identified models, declared-vs-detected discrepancies, retries absorbed), heartbeats
//! and telemetry, the watchdog's offline and online events, GPU conditions, refusals of bad
//! input and of agents acting for another provider, and platform outages kept out of provider
//! downtime.

use std::time::Duration;

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_api::fleet::FleetConfig;
use gpunex_domain::clock::Clock;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(
    register_heartbeat_offline_and_back,
    agents_cannot_act_for_other_machines_or_send_nonsense,
    platform_outages_are_not_provider_downtime
);

mod common;
use common::{gpu, heartbeat, registration};

fn config() -> FleetConfig {
    FleetConfig {
        heartbeat_interval: Duration::from_millis(100),
        offline_grace: Duration::from_millis(1_000),
        telemetry_retention: Duration::from_secs(3_600),
        dev_mode: false,
        ..FleetConfig::default()
    }
}

struct Platform {
    base: String,
    admin: String,
    state: AppState,
}

async fn platform(db: &TestDb) -> Platform {
    platform_on(db.open().await).await
}

async fn platform_on(store: gpunex_store::Store) -> Platform {
    let mut state = AppState::load(store).await.unwrap();
    state.fleet = config();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    Platform { base, admin, state }
}

fn start_watchdog(state: &AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(gpunex_api::fleet::run_watchdog(
        state.store.clone(),
        state.credentials.clone(),
        config(),
    ))
}

fn h100_entry(quantity: u32) -> Value {
    json!([{
        "model": "h100-80gb", "quantity": quantity, "system_ram_gb": 2048,
        "upload_gbps": "10", "download_gbps": "10",
        "availability": {"kind": "always_on"},
        "location": {"city": "Frankfurt", "country": "DE", "region": "Hesse"}
    }])
}

async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = common::request(base, method, path, Some(token), body).await;
    (status, body)
}

async fn deliver(base: &str, agent: &str, events: Vec<Value>) -> (StatusCode, Value) {
    call(
        base,
        "POST",
        "/v1/agent/events",
        agent,
        Some(json!({"events": events})),
    )
    .await
}

/// Polls `check` every 50 ms for up to 10 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn fleet_events(p: &Platform, event_type: &str) -> Vec<Value> {
    let (_, page) = call(&p.base, "GET", "/v1/events?limit=1000", &p.admin, None).await;
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == event_type)
        .cloned()
        .collect()
}

async fn register_heartbeat_offline_and_back(db: &TestDb) {
    let p = platform(db).await;
    let (provider, provider_token) =
        common::approved_provider(&p.base, &p.admin, "grace@example.com", h100_entry(8)).await;
    let (machine, agent) = common::agent_token(&p.base, &provider_token).await;

    let (status, identity) = call(&p.base, "GET", "/v1/agent/identity", &agent, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(identity["machine_id"], json!(machine));

    // Heartbeats before registering are refused.
    let (status, problem) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent,
        Some(heartbeat(machine, 4)),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("machine_not_registered"))
    );

    // Register 4 of the 8 declared H100s; a re-sent registration is a duplicate.
    let event = registration(machine, 4);
    let (status, answer) = deliver(&p.base, &agent, vec![event.clone()]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["results"][0]["status"], "recorded");
    let position = answer["results"][0]["position"].clone();
    let (_, again) = deliver(&p.base, &agent, vec![event.clone()]).await;
    assert_eq!(again["results"][0]["status"], "duplicate");
    assert_eq!(again["results"][0]["position"], position);
    // The same id with other content is refused, not answered `duplicate`: a faulty agent
    // cannot lose what it sent the second time without hearing of it.
    let head = p.state.store.head_position().await.unwrap();
    let mut changed = event.clone();
    changed["body"]["host"]["hostname"] = json!("node-8");
    let (status, problem) = deliver(&p.base, &agent, vec![changed]).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("idempotency_conflict")),
        "{problem}"
    );
    let mut later = event.clone();
    later["occurred_at"] = json!(chrono::Utc::now().to_rfc3339());
    let (status, _) = deliver(&p.base, &agent, vec![later]).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "another time is other content too"
    );
    assert_eq!(p.state.store.head_position().await.unwrap(), head);
    assert_eq!(fleet_events(&p, "fleet.machine_registered").await.len(), 1);
    assert_eq!(fleet_events(&p, "fleet.gpu_detected").await.len(), 4);

    // The provider dashboard: the machine (offline until its first heartbeat), identified
    // GPUs, the lowered power limit, and the declaration difference.
    let path = format!("/v1/providers/{provider}/machines");
    let (status, view) = call(&p.base, "GET", &path, &provider_token, None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let m = &view["machines"][0];
    assert_eq!(m["status"], "offline");
    assert_eq!(m["simulated"], true);
    assert_eq!(m["gpus"].as_array().unwrap().len(), 4);
    assert_eq!(m["gpus"][0]["model_id"], "h100-80gb");
    assert_eq!(m["gpus"][0]["model_match"], "pci_device_id");
    assert_eq!(m["gpus"][0]["power_limit_lowered"], true);
    assert_eq!(m["gpus"][1]["power_limit_lowered"], false);
    assert_eq!(
        m["gpus"][0]["mig_enabled"],
        Value::Null,
        "unknown stays unknown"
    );
    assert_eq!(
        view["declaration"]["discrepancies"],
        json!([{"kind": "fewer_gpus", "model": "h100-80gb", "declared": 8, "detected": 4}])
    );
    // Reviewers see the same.
    let (_, admin_view) = call(&p.base, "GET", &path, &p.admin, None).await;
    assert_eq!(admin_view["declaration"], view["declaration"]);

    // First heartbeat: online, with telemetry.
    let watchdog = start_watchdog(&p.state);
    let (status, ack) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent,
        Some(heartbeat(machine, 4)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(ack["status"], "online");
    assert_eq!(ack["offline_after_seconds"], 1);
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &provider_token,
        None,
    )
    .await;
    assert_eq!(m["status"], "online");
    assert_eq!(m["gpus"][1]["telemetry"]["temperature_c"], 61);
    assert_eq!(
        m["gpus"][1]["telemetry"]["clock_event_reasons"],
        json!(["sw_power_cap"])
    );
    assert_eq!(fleet_events(&p, "fleet.machine_online").await.len(), 1);

    // Heartbeats keep it online and add telemetry samples, not events.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call(
            &p.base,
            "POST",
            "/v1/agent/heartbeat",
            &agent,
            Some(heartbeat(machine, 4)),
        )
        .await;
    }
    assert_eq!(fleet_events(&p, "fleet.machine_online").await.len(), 1);
    let gpu0 = gpu(machine, 0)["gpu_uuid"].as_str().unwrap().to_owned();
    let (status, series) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}/gpus/{gpu0}/telemetry"),
        &provider_token,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{series}");
    assert_eq!(series["samples"].as_array().unwrap().len(), 6);

    // A GPU condition from the agent's queue shows on the GPU and in the operators' filter.
    let condition = json!({
        "event_id": Uuid::now_v7(),
        "occurred_at": chrono::Utc::now().to_rfc3339(),
        "kind": "gpu_condition",
        "body": {"machine_id": machine, "gpu_uuid": gpu0, "condition": "hw_slowdown", "active": true, "evidence": null}
    });
    let (status, answer) = deliver(&p.base, &agent, vec![condition]).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &agent,
        None,
    )
    .await;
    assert_eq!(m["gpus"][0]["conditions"], json!(["hw_slowdown"]));
    // A GPU that fell off the bus is `lost` while the machine is online, and back when it ends.
    let gpu3 = gpu(machine, 3)["gpu_uuid"].as_str().unwrap().to_owned();
    let lost = |active: bool| {
        json!({
            "event_id": Uuid::now_v7(),
            "occurred_at": chrono::Utc::now().to_rfc3339(),
            "kind": "gpu_condition",
            "body": {"machine_id": machine, "gpu_uuid": gpu3, "condition": "lost", "active": active, "evidence": null}
        })
    };
    deliver(&p.base, &agent, vec![lost(true)]).await;
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &agent,
        None,
    )
    .await;
    assert_eq!(
        (
            m["gpus"][3]["status"].as_str(),
            m["gpus"][2]["status"].as_str()
        ),
        (Some("lost"), Some("online"))
    );
    deliver(&p.base, &agent, vec![lost(false)]).await;
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &agent,
        None,
    )
    .await;
    assert_eq!(m["gpus"][3]["status"], "online");
    assert_eq!(m["gpus"][3]["conditions"], json!([]));
    let (_, slowed) = call(
        &p.base,
        "GET",
        "/v1/fleet?condition=hw_slowdown",
        &p.admin,
        None,
    )
    .await;
    assert_eq!(slowed["matching_machines"], 1);
    let (_, online) = call(
        &p.base,
        "GET",
        "/v1/fleet?status=online&model=h100-80gb",
        &p.admin,
        None,
    )
    .await;
    assert_eq!(
        (
            online["matching_machines"].as_u64(),
            online["matching_gpus"].as_u64()
        ),
        (Some(1), Some(4))
    );
    let (status, _) = call(&p.base, "GET", "/v1/fleet?status=sideways", &p.admin, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Silence: offline after the grace period, dated at the last heartbeat.
    let last_seen = m["last_seen"].as_str().unwrap().to_owned();
    eventually("offline", || async {
        call(
            &p.base,
            "GET",
            &format!("/v1/machines/{machine}"),
            &p.admin,
            None,
        )
        .await
        .1["status"]
            == "offline"
    })
    .await;
    let offline = fleet_events(&p, "fleet.machine_offline").await;
    assert_eq!(offline.len(), 1);
    let last_heartbeat_us = offline[0]["payload"]["last_heartbeat_at"].as_i64().unwrap();
    let last_seen_us = chrono::DateTime::parse_from_rfc3339(&last_seen)
        .unwrap()
        .timestamp_micros();
    assert_eq!(
        last_heartbeat_us, last_seen_us,
        "offline is dated at the last heartbeat"
    );
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &p.admin,
        None,
    )
    .await;
    assert_eq!(m["since"].as_str().unwrap(), last_seen);
    let (_, offline_page) = call(&p.base, "GET", "/v1/fleet?status=offline", &p.admin, None).await;
    assert_eq!(offline_page["matching_machines"], 1);

    // Back: the next heartbeat records it online again.
    let (_, ack) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent,
        Some(heartbeat(machine, 4)),
    )
    .await;
    assert_eq!(ack["status"], "online");
    assert_eq!(fleet_events(&p, "fleet.machine_online").await.len(), 2);
    watchdog.abort();

    // Re-registering with all 8 GPUs clears the declaration difference.
    let (status, _) = deliver(&p.base, &agent, vec![registration(machine, 8)]).await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = call(&p.base, "GET", &path, &provider_token, None).await;
    assert_eq!(view["declaration"]["discrepancies"], json!([]));
    assert_eq!(view["machines"][0]["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(
        view["machines"][0]["status"], "online",
        "re-registering keeps presence"
    );
}

async fn agents_cannot_act_for_other_machines_or_send_nonsense(db: &TestDb) {
    let p = platform(db).await;
    let (provider_a, token_a) =
        common::approved_provider(&p.base, &p.admin, "a@example.com", h100_entry(4)).await;
    let (provider_b, token_b) =
        common::approved_provider(&p.base, &p.admin, "b@example.com", h100_entry(4)).await;
    let (machine_a, agent_a) = common::agent_token(&p.base, &token_a).await;
    let (machine_b, agent_b) = common::agent_token(&p.base, &token_b).await;
    let (status, _) = deliver(&p.base, &agent_a, vec![registration(machine_a, 2)]).await;
    assert_eq!(status, StatusCode::OK);
    let head = |p: &Platform| {
        let store = p.state.store.clone();
        async move { store.head_position().await.unwrap() }
    };
    let before = head(&p).await;

    // B's agent names A's machine: refused, nothing written.
    let (status, problem) = deliver(&p.base, &agent_b, vec![registration(machine_a, 2)]).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("machine_not_owned"))
    );
    let (status, problem) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent_b,
        Some(heartbeat(machine_a, 2)),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("machine_not_owned"))
    );
    // B registers its own machine but claims A's GPUs.
    let mut stolen = registration(machine_b, 2);
    stolen["body"]["gpus"] = registration(machine_a, 2)["body"]["gpus"].clone();
    let (status, problem) = deliver(&p.base, &agent_b, vec![stolen]).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("gpu_registered_elsewhere"))
    );
    // B's provider cannot read A's machine; a provider token cannot act as an agent.
    let (status, _) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine_a}"),
        &token_b,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &p.base,
        "GET",
        &format!("/v1/providers/{provider_a}/machines"),
        &token_b,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = deliver(&p.base, &token_a, vec![registration(machine_a, 2)]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(head(&p).await, before);

    // B chooses A's machine id for a new agent token: refused at issue; and a token bound that
    // way by an operator is refused by every agent endpoint.
    let (status, problem) = call(
        &p.base,
        "POST",
        "/v1/tokens",
        &token_b,
        Some(json!({"role": {"kind": "agent", "provider_id": provider_b, "machine_id": machine_a}, "label": "takeover"})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::CONFLICT, Some("machine_registered_elsewhere"))
    );
    let (forged, _) = gpunex_api::tokens::issue_token(
        &p.state.store,
        &p.state.credentials,
        gpunex_api::tokens::TokenRequest::new(
            gpunex_domain::credentials::Role::Agent {
                provider_id: provider_b,
                machine_id: machine_a,
            },
            "forged",
            "cli",
        ),
    )
    .await
    .unwrap();
    let before = head(&p).await;
    for (method, path, body) in [
        (
            "POST",
            "/v1/agent/events",
            Some(json!({"events": [registration(machine_a, 2)]})),
        ),
        ("POST", "/v1/agent/heartbeat", Some(heartbeat(machine_a, 2))),
        ("GET", "/v1/agent/machine", None),
    ] {
        let (status, problem) = call(&p.base, method, path, &forged.token, body).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("machine_not_owned")),
            "{path}"
        );
    }
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine_a}"),
        &token_a,
        None,
    )
    .await;
    assert_eq!(m["provider_id"], json!(provider_a));
    assert_eq!(head(&p).await, before);

    // Malformed and out-of-range input: a precise error, nothing written, nothing recorded.
    let bad_batches: Vec<(Value, &str, &str)> = vec![
        (
            {
                let mut e = registration(machine_a, 2);
                e["event_id"] = json!(Uuid::new_v4());
                e
            },
            "/events/0/event_id",
            "invalid_event_id",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["occurred_at"] = json!("yesterday");
                e
            },
            "/events/0/occurred_at",
            "invalid_timestamp",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["occurred_at"] = json!("2099-01-01T00:00:00Z");
                e
            },
            "/events/0/occurred_at",
            "clock_skew",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["occurred_at"] = json!("0001-01-01T00:00:00Z");
                e
            },
            "/events/0/occurred_at",
            "invalid_timestamp",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["host"]["hostname"] = json!("node\u{202e}7");
                e
            },
            "/events/0/body/host/hostname",
            "forbidden_character",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["gpus"][0]["name"] = json!("NVIDIA\nH100");
                e
            },
            "/events/0/body/gpus/0/name",
            "forbidden_character",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["gpus"][1]["gpu_uuid"] = e["body"]["gpus"][0]["gpu_uuid"].clone();
                e
            },
            "/events/0/body/gpus/1/gpu_uuid",
            "duplicate_gpu",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["gpus"][0]["vram_mib"] = json!(3);
                e
            },
            "/events/0/body/gpus/0/vram_mib",
            "out_of_range",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["host"]["hostname"] = json!(" ");
                e
            },
            "/events/0/body/host/hostname",
            "required",
        ),
        (
            {
                let mut e = registration(machine_a, 2);
                e["body"]["gpus"] = json!([]);
                e
            },
            "/events/0/body/gpus",
            "no_gpus",
        ),
    ];
    for (event, field, code) in bad_batches {
        let good = registration(machine_a, 2);
        let (status, problem) = deliver(&p.base, &agent_a, vec![good, event]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        // The good event before the bad one is not written either.
        let field = field.replacen("/events/0", "/events/1", 1);
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
        assert_eq!(problem["errors"][0]["code"], code, "{problem}");
    }
    let (status, problem) = call(
        &p.base,
        "POST",
        "/v1/agent/events",
        &agent_a,
        Some(json!({"events": []})),
    )
    .await;
    assert_eq!(
        (status, problem["errors"][0]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("out_of_range"))
    );
    let (status, _) = call(
        &p.base,
        "POST",
        "/v1/agent/events",
        &agent_a,
        Some(json!({"events": [{"event_id": 7}]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(head(&p).await, before);

    let mut hot = heartbeat(machine_a, 2);
    hot["gpus"][1]["temperature_c"] = json!(400);
    let (status, problem) = call(&p.base, "POST", "/v1/agent/heartbeat", &agent_a, Some(hot)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(problem["errors"][0]["field"], "/gpus/1/temperature_c");
    let mut stranger = heartbeat(machine_a, 2);
    stranger["gpus"][0]["gpu_uuid"] = json!("GPU-ffffffff");
    let (_, problem) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent_a,
        Some(stranger),
    )
    .await;
    assert_eq!(problem["errors"][0]["code"], "unknown_gpu");
    let (status, _) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent_a,
        Some(json!({"machine_id": machine_a, "gpus": [], "extra": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(head(&p).await, before, "refused heartbeats record nothing");
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine_a}"),
        &token_a,
        None,
    )
    .await;
    assert_eq!(
        m["last_seen"],
        Value::Null,
        "refused heartbeats are not presence"
    );

    // Everyone else is still served.
    let (status, ack) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent_a,
        Some(heartbeat(machine_a, 2)),
    )
    .await;
    assert_eq!(
        (status, ack["status"].as_str()),
        (StatusCode::OK, Some("online"))
    );
}

async fn platform_outages_are_not_provider_downtime(db: &TestDb) {
    let clock = gpunex_tests::manual_clock();
    let p = platform_on(db.open_with_clock(clock.clone()).await).await;
    let (_, token) =
        common::approved_provider(&p.base, &p.admin, "o@example.com", h100_entry(1)).await;
    let (machine, agent) = common::agent_token(&p.base, &token).await;
    deliver(&p.base, &agent, vec![registration(machine, 1)]).await;
    let first = start_watchdog(&p.state);
    let (_, ack) = call(
        &p.base,
        "POST",
        "/v1/agent/heartbeat",
        &agent,
        Some(heartbeat(machine, 1)),
    )
    .await;
    assert_eq!(ack["status"], "online");
    let heard = clock.now();
    // The first watchdog's first pass has ticked (on a loaded machine it may not have run yet).
    eventually("the first liveness tick", || async {
        p.state.store.platform_tick().await.unwrap().is_some()
    })
    .await;

    // The platform goes down (no watchdog ticks) and the machine dies while it is down.
    first.abort();
    clock.advance_micros(4_000_000);
    // The platform comes back: it records the outage, and gives the machine a full grace period
    // before declaring it offline, dated at its last heartbeat.
    let second = start_watchdog(&p.state);
    eventually("outage recorded", || async {
        !fleet_events(&p, "platform.outage_recorded")
            .await
            .is_empty()
    })
    .await;

    eventually("offline", || async {
        // Time goes on in steps shorter than the outage threshold.
        clock.advance_micros(50_000);
        call(
            &p.base,
            "GET",
            &format!("/v1/machines/{machine}"),
            &token,
            None,
        )
        .await
        .1["status"]
            == "offline"
    })
    .await;
    second.abort();
    let (_, m) = call(
        &p.base,
        "GET",
        &format!("/v1/machines/{machine}"),
        &token,
        None,
    )
    .await;
    let silent = i128::from((clock.now().unix_micros() - heard.unix_micros()) / 1_000);
    let downtime = i128::from(m["downtime_seconds_24h"].as_i64().unwrap()) * 1_000;
    let outage = &fleet_events(&p, "platform.outage_recorded").await[0]["payload"];
    let until = outage["until"].as_i64().unwrap();
    let length = until - outage["from"].as_i64().unwrap();
    // Not offline merely because the platform was down: the watchdog that came back waited a
    // full grace period (1 s) after the outage before declaring it.
    let offline = &fleet_events(&p, "fleet.machine_offline").await[0]["payload"];
    assert!(
        offline["detected_at"].as_i64().unwrap() - until >= 1_000_000,
        "{offline}"
    );
    assert!(silent >= 5_000, "{silent} ms");
    // Silent for all that time, of which the platform was down 4 s: only the rest counts
    // (whole seconds, rounded down).
    assert_eq!(length, 4_000_000, "{outage}");
    assert!(
        downtime <= silent - i128::from(length / 1_000) && downtime + 3_000 <= silent,
        "downtime {downtime} ms of {silent} ms silent, outage {length} us"
    );
}
