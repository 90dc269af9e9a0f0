//! Notifications: decisions and information requests reach the applicant's mailbox exactly
//! once, even when delivery restarts from an old checkpoint (a crash between delivering and
//! recording it) with a half-written message left behind.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_app::outbox::{Mailbox, OUTBOX, Transport, deliver_pending};
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

mod common;

const PUBLIC_URL: &str = "https://gpunex.example";

conformance!(each_notification_is_delivered_exactly_once_across_restarts);

fn form() -> Value {
    json!({
        "full_legal_name": "Ada Lovelace", "email": "ada@example.com",
        "gpus": [{"model": "l40s", "quantity": 2, "system_ram_gb": 256, "upload_gbps": "1", "download_gbps": "1",
                  "availability": {"kind": "always_on"},
                  "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}}],
        "ups_protected": true, "commitment_months": 6, "maintenance_notes": ""
    })
}

async fn post(base: &str, path: &str, token: &str, body: Value) -> Value {
    let (status, _, answer) = common::request(base, "POST", path, Some(token), Some(body)).await;
    assert!(status.is_success(), "{path}: {status} {answer}");
    answer
}

fn delivered(dir: &std::path::Path) -> Vec<String> {
    let mut messages: Vec<String> = std::fs::read_dir(dir.join("new"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    messages.sort();
    messages
}

async fn each_notification_is_delivered_exactly_once_across_restarts(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let ada = common::person(&base, "ada@example.com").await;
    let ada = ada.as_str();

    let first = post(&base, "/v1/applications", ada, form()).await;
    let first = first["application_id"].as_str().unwrap();
    post(
        &base,
        &format!("/v1/applications/{first}/request-information"),
        &admin,
        json!({"text": "Photo of the rack?"}),
    )
    .await;
    post(
        &base,
        &format!("/v1/applications/{first}/answer"),
        ada,
        json!({"text": "Sent."}),
    )
    .await;
    post(
        &base,
        &format!("/v1/applications/{first}/approve"),
        &admin,
        json!({"tier": "enterprise"}),
    )
    .await;
    let second = post(&base, "/v1/applications", ada, form()).await;
    let second = second["application_id"].as_str().unwrap();
    post(
        &base,
        &format!("/v1/applications/{second}/reject"),
        &admin,
        json!({"text": "Duplicate of the first."}),
    )
    .await;
    let third = post(&base, "/v1/applications", ada, form()).await;
    let third = third["application_id"].as_str().unwrap();
    post(
        &base,
        &format!("/v1/applications/{third}/withdraw"),
        ada,
        json!({}),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let mailbox =
        Transport::Mailbox(Mailbox::open(dir.path(), "GPUnex <no-reply@gpunex.local>").unwrap());
    assert_eq!(
        deliver_pending(&state.store, &state.credentials, &mailbox, PUBLIC_URL)
            .await
            .unwrap(),
        3
    );
    let messages = delivered(dir.path());
    assert_eq!(
        messages.len(),
        3,
        "information requested, approved, rejected; not submitted, answered or withdrawn"
    );
    assert!(
        messages
            .iter()
            .all(|m| m.contains("To: ada@example.com\r\n"))
    );
    assert!(messages.iter().any(|m| m.contains("Photo of the rack?")));
    let approval = messages
        .iter()
        .find(|m| m.contains("approved (Enterprise tier)"))
        .expect("the approval message");
    // It carries the steps: claim the token, issue an agent token, install the agent, see the
    // machine online, each against the platform's public address.
    for step in [
        "/v1/applications/",
        "/provider-token",
        "https://gpunex.example/v1/sessions",
        "{\"role\": {\"kind\": \"agent\"}}",
        "nvidia-smi",
        "install.sh --server https://gpunex.example",
        "docker ps | grep gpunex-agent",
        "/machines",
        "https://gpunex.example/console/applications/",
        "https://gpunex.example/console/provider/",
    ] {
        assert!(
            approval.contains(step),
            "the approval message lacks `{step}`:\n{approval}"
        );
    }
    assert!(
        !approval.contains("application page"),
        "no page that does not exist"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("Duplicate of the first."))
    );
    let head = state.store.head_position().await.unwrap();
    assert_eq!(state.store.consumer_checkpoint(OUTBOX).await.unwrap(), head);

    // A restart as after a crash: the checkpoint never moved, and a message was half-written.
    db.execute_raw(
        &["UPDATE projection_checkpoints SET position = 0 WHERE projection = 'outbox'"],
        &["UPDATE projection_checkpoints SET position = 0 WHERE projection = 'outbox'"],
    )
    .await;
    std::fs::write(dir.path().join("tmp").join("torn.eml"), "From: half").unwrap();
    let restarted = AppState::load(db.open().await).await.unwrap();
    let mailbox =
        Transport::Mailbox(Mailbox::open(dir.path(), "GPUnex <no-reply@gpunex.local>").unwrap());
    assert_eq!(
        deliver_pending(
            &restarted.store,
            &restarted.credentials,
            &mailbox,
            PUBLIC_URL
        )
        .await
        .unwrap(),
        0
    );
    assert_eq!(
        delivered(dir.path()),
        messages,
        "exactly once: nothing sent twice, nothing lost"
    );
    assert_eq!(
        restarted.store.consumer_checkpoint(OUTBOX).await.unwrap(),
        head
    );

    // A new decision after the restart is delivered, once.
    let fourth = post(&base, "/v1/applications", ada, form()).await;
    let fourth = fourth["application_id"].as_str().unwrap();
    let (status, _, _) = common::request(
        &base,
        "POST",
        &format!("/v1/applications/{fourth}/reject"),
        Some(&admin),
        Some(json!({"text": "No."})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        deliver_pending(
            &restarted.store,
            &restarted.credentials,
            &mailbox,
            PUBLIC_URL
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(delivered(dir.path()).len(), 4);
}

/// SMTP delivery against a real SMTP server (Python's standard-library `smtpd`, which prints
/// every message it receives): each notification sent once, even after a restart from an old
/// checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_delivery_sends_each_notification_once() {
    use tokio::io::AsyncBufReadExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new("python3")
        .args([
            "-u",
            "-W",
            "ignore",
            "-m",
            "smtpd",
            "-n",
            "-c",
            "DebuggingServer",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs the SMTP server");
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    // Wait until it accepts connections.
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "SMTP server did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let db = TestDb::sqlite();
    let state = AppState::load(db.open().await).await.unwrap();
    let admin = common::admin_token(&state).await;
    let base = common::serve(state.clone()).await;
    let ada = common::person(&base, "ada@example.com").await;
    let ada = ada.as_str();
    let application = post(&base, "/v1/applications", ada, form()).await;
    let id = application["application_id"].as_str().unwrap();
    post(
        &base,
        &format!("/v1/applications/{id}/reject"),
        &admin,
        json!({"text": "Not this time."}),
    )
    .await;

    let smtp = Transport::Smtp(
        gpunex_app::outbox::Smtp::from_url(
            &format!("smtp://127.0.0.1:{port}"),
            "GPUnex <no-reply@gpunex.local>",
        )
        .unwrap(),
    );
    assert_eq!(
        deliver_pending(&state.store, &state.credentials, &smtp, PUBLIC_URL)
            .await
            .unwrap(),
        1
    );
    let mut received = String::new();
    while !received.contains("END MESSAGE") {
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.next_line())
            .await
            .expect("the SMTP server printed the message")
            .unwrap()
            .unwrap();
        received.push_str(&line);
        received.push('\n');
    }
    assert!(received.contains("To: ada@example.com"), "{received}");
    assert!(
        received.contains("Subject: GPUnex: your provider application was not approved"),
        "{received}"
    );
    assert!(received.contains("Not this time."), "{received}");

    // Restart from an old checkpoint: nothing is sent again.
    db.execute_raw(
        &["UPDATE projection_checkpoints SET position = 0 WHERE projection = 'outbox'"],
        &[],
    )
    .await;
    assert_eq!(
        deliver_pending(&state.store, &state.credentials, &smtp, PUBLIC_URL)
            .await
            .unwrap(),
        0
    );
    let extra =
        tokio::time::timeout(std::time::Duration::from_millis(500), lines.next_line()).await;
    assert!(extra.is_err(), "no second message: {extra:?}");
}
