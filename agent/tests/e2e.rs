//! End to end with the real binaries: a `gpunex serve` process and `gpunex-agent` processes with
//! simulated GPUs, on SQLite and PostgreSQL. Register, go online, send telemetry and GPU
//! conditions, lose the server mid-stream and get it back with every queued event stored exactly
//! once, go offline when the agent is stopped or killed, come back, and be refused when acting
//! for another provider.

use std::time::Duration;

use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};
use uuid::Uuid;

conformance!(agents_register_report_and_lose_nothing_across_a_server_restart);

mod common;

use common::*;

async fn agents_register_report_and_lose_nothing_across_a_server_restart(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    let mut server = start_server(&db.url, port, dir.path()).await;

    let provider = Uuid::now_v7();
    let provider_token = token(
        &base,
        &admin,
        json!({"kind": "provider", "provider_id": provider}),
    )
    .await;
    let (machine_id, agent_token) = common::agent_token(&base, &provider_token).await;
    let state = dir.path().join("agent-state");

    // `register`: detected, queued, delivered, acknowledged.
    let registered = agent_command(&base, &agent_token, &state)
        .arg("register")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&registered.stdout);
    assert!(
        registered.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&registered.stderr)
    );
    assert!(stdout.contains("registered with 2 GPU(s)"), "{stdout}");
    assert!(stdout.contains("h100-80gb"), "{stdout}");

    // `run`: online with telemetry; GPU 0 flaps a hardware slowdown every 2 samples.
    let mut agent = agent_command(&base, &agent_token, &state)
        .arg("run")
        .spawn()
        .unwrap();
    eventually("online with telemetry", 30, || async {
        let m = machine(&base, &admin, machine_id).await;
        m["status"] == "online" && m["gpus"][0]["telemetry"]["utilization_pct"].is_u64()
    })
    .await;
    let m = machine(&base, &admin, machine_id).await;
    assert_eq!(m["simulated"], true);
    assert_eq!(m["gpus"][1]["model_id"], "h100-80gb");
    eventually("condition events", 30, || async {
        of_type(
            &all_events(&base, &admin).await,
            "fleet.gpu_condition_changed",
        )
        .len()
            >= 3
    })
    .await;

    // The server dies mid-stream (SIGKILL) while the agent keeps queueing; it comes back.
    server.child.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let queued_while_down = outbox(&state)
        .iter()
        .filter(|(_, _, s)| s == "pending")
        .count();
    assert!(
        queued_while_down >= 1,
        "the agent queued events while the server was down"
    );
    let mut server = start_server(&db.url, port, dir.path()).await;
    eventually("queue drained after the restart", 30, || async {
        let rows = outbox(&state);
        rows.iter().all(|(_, _, s)| s == "delivered")
            && rows.iter().filter(|(_, k, _)| k == "gpu_condition").count()
                >= 3 + queued_while_down + 2
    })
    .await;
    let events = all_events(&base, &admin).await;
    assert!(
        of_type(&events, "fleet.machine_offline").is_empty(),
        "a server restart shorter than the grace period does not make the machine offline"
    );

    // Graceful stop: the agent hands over what it queued and exits 0.
    terminate(&agent);
    let status = agent.wait().await.unwrap();
    assert!(status.success(), "{status}");

    // Exactly once: every event the agent queued is in the log once, and nothing else is.
    let rows = outbox(&state);
    assert!(rows.iter().all(|(_, _, s)| s == "delivered"), "{rows:?}");
    let events = all_events(&base, &admin).await;
    for (event_id, kind, _) in &rows {
        let stored = events
            .iter()
            .filter(|e| e["event_id"] == json!(event_id))
            .count();
        assert_eq!(stored, 1, "{kind} {event_id} stored {stored} times");
    }
    let conditions = rows.iter().filter(|(_, k, _)| k == "gpu_condition").count();
    assert_eq!(
        of_type(&events, "fleet.gpu_condition_changed").len(),
        conditions
    );
    assert_eq!(
        of_type(&events, "fleet.machine_registered").len(),
        1,
        "same hardware, one registration"
    );
    assert_eq!(of_type(&events, "fleet.gpu_detected").len(), 2);

    // Stopped: offline after the grace period, dated at the last heartbeat.
    eventually("offline after the agent stopped", 30, || async {
        machine(&base, &admin, machine_id).await["status"] == "offline"
    })
    .await;
    let m = machine(&base, &admin, machine_id).await;
    let events = all_events(&base, &admin).await;
    let offline = of_type(&events, "fleet.machine_offline");
    assert_eq!(offline.len(), 1);
    let last_seen = chrono::DateTime::parse_from_rfc3339(m["last_seen"].as_str().unwrap()).unwrap();
    assert_eq!(
        offline[0]["payload"]["last_heartbeat_at"].as_i64().unwrap(),
        last_seen.timestamp_micros()
    );

    // Back, then killed outright: online again, offline again.
    let mut agent = agent_command(&base, &agent_token, &state)
        .arg("run")
        .spawn()
        .unwrap();
    eventually("online again", 30, || async {
        machine(&base, &admin, machine_id).await["status"] == "online"
    })
    .await;
    agent.kill().await.unwrap();
    eventually("offline after the agent was killed", 30, || async {
        machine(&base, &admin, machine_id).await["status"] == "offline"
    })
    .await;
    let events = all_events(&base, &admin).await;
    assert_eq!(of_type(&events, "fleet.machine_online").len(), 2);
    assert_eq!(of_type(&events, "fleet.machine_offline").len(), 2);

    // `status` reads the local queue and the platform's view.
    let status = agent_command(&base, &agent_token, &state)
        .args(["status", "--json"])
        .output()
        .await
        .unwrap();
    let report: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(report["identity"]["machine_id"], json!(machine_id));
    assert_eq!(report["platform"]["status"], "offline");
    assert_eq!(report["queue"]["rejected"], 0);

    // Another provider's agent cannot report for this machine.
    let intruder = Uuid::now_v7();
    let intruder_provider = token(
        &base,
        &admin,
        json!({"kind": "provider", "provider_id": intruder}),
    )
    .await;
    let (_, intruder_agent) = common::agent_token(&base, &intruder_provider).await;
    let (status, problem) = call(
        &base,
        "POST",
        "/v1/agent/heartbeat",
        &intruder_agent,
        Some(json!({"machine_id": machine_id, "gpus": []})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (403, Some("machine_not_owned"))
    );
    let (status, problem) = call(
        &base,
        "POST",
        "/v1/agent/events",
        &intruder_agent,
        Some(json!({"events": [{
            "event_id": Uuid::now_v7(), "occurred_at": chrono::Utc::now().to_rfc3339(),
            "kind": "gpu_condition",
            "body": {"machine_id": machine_id, "gpu_uuid": m["gpus"][0]["gpu_uuid"], "condition": "lost", "active": true, "evidence": null}
        }]})),
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (403, Some("machine_not_owned"))
    );
    // An agent given another token in the same state directory learns that token's machine and
    // registers it, never the first one.
    let (_, identity) = call(&base, "GET", "/v1/agent/identity", &intruder_agent, None).await;
    let registered = agent_command(&base, &intruder_agent, &state)
        .arg("register")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&registered.stdout);
    assert!(
        registered.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&registered.stderr)
    );
    assert!(
        stdout.contains(identity["machine_id"].as_str().unwrap()),
        "{stdout}"
    );
    let m = machine(&base, &admin, machine_id).await;
    assert_eq!(
        m["provider_id"],
        json!(provider),
        "the first machine is untouched"
    );

    server.child.kill().await.unwrap();
}
