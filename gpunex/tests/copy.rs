//! `gpunex events copy` between the two databases: the copy is the same log (head hash, every
//! read model and balance equal to its fold at the target), it resumes from a prefix, brings the
//! idempotency records and SMTP deliveries, and refuses a target holding another log or a page
//! that does not chain, writing nothing.

use std::process::Command;

use gpunex::copy::events_copy;
use gpunex_store::copy::TelemetryTable;
use gpunex_store::{Store, StoreError};
use gpunex_tests::{TestDb, conformance, provider, seed_credits};

const GPUNEX: &str = env!("CARGO_BIN_EXE_gpunex");

conformance!(
    a_copy_is_the_same_log_resumes_and_brings_the_side_tables,
    a_target_with_another_log_or_a_page_that_does_not_chain_is_refused,
);

/// A database of the other kind than `db` (SQLite when PostgreSQL cannot be reached).
async fn other_kind(db: &TestDb) -> TestDb {
    if db.is_postgres() {
        TestDb::sqlite()
    } else {
        match TestDb::postgres().await {
            Some(target) => target,
            None => TestDb::sqlite(),
        }
    }
}

async fn side_rows(db: &TestDb) {
    db.execute_raw(
        &[
            "INSERT INTO idempotency_keys (caller, key, request_sha256, status, body, \
             created_at_us, owner, lease_until_us, committed_position) VALUES \
             ('token-1', 'key-a', 'aa', 201, '{\"ok\":true}', 1790000000000000, '', 0, 7), \
             ('token-2', 'key-b', 'bb', 409, '{}', 1790000000000001, '', 0, 0)",
            "INSERT INTO notification_deliveries (message_id, delivered_at_us) VALUES \
             ('m-1', 1790000000000000)",
            "INSERT INTO machine_presence (machine_id, provider_id, last_heartbeat_us, \
             heartbeats) VALUES ('m-a', 'p-a', 1790000000000000, 12), \
             ('m-b', 'p-a', 1790000000500000, 3)",
            "INSERT INTO gpu_telemetry (gpu_uuid, at_us, machine_id, utilization_pct, \
             temperature_c) VALUES ('GPU-1', 1790000000000000, 'm-a', 90, 70), \
             ('GPU-1', 1790000015000000, 'm-a', 95, NULL), ('GPU-2', 1790000000000000, 'm-a', 1, 40)",
            "INSERT INTO gpu_telemetry_latest (gpu_uuid, at_us, machine_id, utilization_pct) \
             VALUES ('GPU-1', 1790000015000000, 'm-a', 95), ('GPU-2', 1790000000000000, 'm-a', 1)",
            "INSERT INTO platform_liveness (id, last_tick_us) VALUES (1, 1790000020000000) \
             ON CONFLICT (id) DO UPDATE SET last_tick_us = excluded.last_tick_us",
        ],
        &[
            "INSERT INTO idempotency_keys (caller, key, request_sha256, status, body, \
             created_at_us, owner, lease_until_us, committed_position) VALUES \
             ('token-1', 'key-a', 'aa', 201, '{\"ok\":true}', 1790000000000000, '', 0, 7), \
             ('token-2', 'key-b', 'bb', 409, '{}', 1790000000000001, '', 0, 0)",
            "INSERT INTO notification_deliveries (message_id, delivered_at_us) VALUES \
             ('m-1', 1790000000000000)",
            "INSERT INTO machine_presence (machine_id, provider_id, last_heartbeat_us, \
             heartbeats) VALUES ('m-a', 'p-a', 1790000000000000, 12), \
             ('m-b', 'p-a', 1790000000500000, 3)",
            "INSERT INTO gpu_telemetry (gpu_uuid, at_us, machine_id, utilization_pct, \
             temperature_c) VALUES ('GPU-1', 1790000000000000, 'm-a', 90, 70), \
             ('GPU-1', 1790000015000000, 'm-a', 95, NULL), ('GPU-2', 1790000000000000, 'm-a', 1, 40)",
            "INSERT INTO gpu_telemetry_latest (gpu_uuid, at_us, machine_id, utilization_pct) \
             VALUES ('GPU-1', 1790000015000000, 'm-a', 95), ('GPU-2', 1790000000000000, 'm-a', 1)",
            "INSERT INTO platform_liveness (id, last_tick_us) VALUES (1, 1790000020000000) \
             ON CONFLICT (id) DO UPDATE SET last_tick_us = excluded.last_tick_us",
        ],
    )
    .await;
}

async fn a_copy_is_the_same_log_resumes_and_brings_the_side_tables(db: &TestDb) {
    let source = db.open().await;
    let totals = seed_credits(&source, 2_500, 3).await;
    side_rows(db).await;
    let (head, hash) = source.head().await.unwrap();
    let target_db = other_kind(db).await;

    // Through the binary, a prefix first: events only.
    let output = Command::new(GPUNEX)
        .args([
            "events",
            "copy",
            "--to",
            &target_db.url,
            "--through",
            "1000",
            "--json",
        ])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["events_copied"], 1000);
    assert_eq!(report["head_position"], 1000);
    assert_eq!(report["idempotency_records_copied"], 0);

    // The rest resumes from the target's head, then the side tables.
    let target = target_db.open().await;
    let report = events_copy(&source, &target, &target_db.url, None, &|_, _| {})
        .await
        .unwrap();
    assert_eq!(
        (report.resumed_from, report.events_copied),
        (1000, head - 1000)
    );
    assert_eq!(target.head().await.unwrap(), (head, hash.clone()));
    assert_eq!(
        (report.idempotency_records_copied, report.deliveries_copied),
        (2, 1)
    );
    let records = target.idempotency_records(None, 10).await.unwrap();
    assert_eq!(records, source.idempotency_records(None, 10).await.unwrap());
    assert_eq!(records.len(), 2);
    let after_first = target
        .idempotency_records(Some(("token-1", "key-a")), 10)
        .await
        .unwrap();
    assert_eq!(after_first.len(), 1);
    assert_eq!(after_first[0].key, "key-b");
    assert_eq!(
        target.deliveries(None, 10).await.unwrap(),
        source.deliveries(None, 10).await.unwrap()
    );
    assert_eq!(
        (report.presence_rows_copied, report.telemetry_rows_copied),
        (2, 5)
    );
    assert_eq!(
        target.presence_rows(None, 10).await.unwrap(),
        source.presence_rows(None, 10).await.unwrap()
    );
    for table in [TelemetryTable::Series, TelemetryTable::Latest] {
        let copied = target.telemetry_rows(table, None, 10).await.unwrap();
        assert_eq!(
            copied,
            source.telemetry_rows(table, None, 10).await.unwrap()
        );
        assert!(!copied.is_empty());
    }
    let series = target
        .telemetry_rows(
            TelemetryTable::Series,
            Some(("GPU-1", 1790000000000000)),
            10,
        )
        .await
        .unwrap();
    assert_eq!(series.len(), 2);
    assert_eq!(series[0].temperature_c, None);
    assert_eq!(
        target.liveness_tick().await.unwrap(),
        Some(1790000020000000)
    );

    // Again: nothing new.
    let again = events_copy(&source, &target, &target_db.url, None, &|_, _| {})
        .await
        .unwrap();
    assert_eq!(
        (
            again.events_copied,
            again.idempotency_records_copied,
            again.deliveries_copied,
            again.presence_rows_copied,
            again.telemetry_rows_copied
        ),
        (0, 0, 0, 0, 0)
    );

    // The target's read models, built from the copied log, are the fold of it.
    target.run_projections().await.unwrap();
    let report = target.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.events_checked, head);
    assert_eq!(report.ledger_checkpoint, head);
    assert_eq!(report.journal_lines_checked, 2 * 2_500);
    let expected: i64 = totals.values().sum();
    assert_eq!(report.total_debits_micro_usdc, expected.to_string());
    drop(target);
    target_db.cleanup().await;
}

async fn a_target_with_another_log_or_a_page_that_does_not_chain_is_refused(db: &TestDb) {
    let source = db.open().await;
    seed_credits(&source, 300, 2).await;
    let target_db = other_kind(db).await;
    let target = target_db.open().await;
    // Another log: the same shape, other amounts, so other hashes.
    target
        .append(
            gpunex_tests::stream("ledger-other"),
            gpunex_store::ExpectedVersion::NoStream,
            gpunex_tests::credits(provider(9), 5),
        )
        .await
        .unwrap();
    let before = target.head().await.unwrap();
    let error = events_copy(&source, &target, &target_db.url, None, &|_, _| {})
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("holds a different log"),
        "{error}"
    );
    assert_eq!(target.head().await.unwrap(), before);

    // The binary says so and exits non-zero.
    let output = Command::new(GPUNEX)
        .args(["events", "copy", "--to", &target_db.url])
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("holds a different log"),
        "{output:?}"
    );
    let output = Command::new(GPUNEX)
        .args(["events", "copy", "--to", &target_db.url, "--through", "301"])
        .env("DATABASE_URL", &db.url)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("past the source's head"),
        "{output:?}"
    );
    // An empty source (a mistyped path opens a new, empty file) is refused.
    let empty = TestDb::sqlite();
    let output = Command::new(GPUNEX)
        .args(["events", "copy", "--to", &target_db.url])
        .env("DATABASE_URL", &empty.url)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("holds no events"),
        "{output:?}"
    );
    drop(target);
    target_db.cleanup().await;

    // A page whose bytes were changed, or that skips positions, does not chain: nothing is written.
    let fresh_db = other_kind(db).await;
    let fresh = fresh_db.open().await;
    let mut page = source.read_all(0, 100).await.unwrap();
    page[40].payload = page[40].payload.replace("1000", "9000");
    assert_refused(&fresh, &page, "position 41 does not chain").await;
    let page = source.read_all(1, 10).await.unwrap();
    assert_refused(&fresh, &page, "does not follow").await;
    assert_eq!(fresh.head_position().await.unwrap(), 0);
    assert!(fresh.read_all(0, 10).await.unwrap().is_empty());
    drop(fresh);
    fresh_db.cleanup().await;
}

async fn assert_refused(store: &Store, page: &[gpunex_store::RecordedEvent], message: &str) {
    match store.import_events(page).await {
        Err(StoreError::ImportRefused(reason)) => {
            assert!(reason.contains(message), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
