//! Projections and audit on both databases: crash safety, rebuild-and-swap, tamper evidence.

use gpunex_domain::Account;
use gpunex_store::{AuditFinding, AuditReport, ExpectedVersion, Store};
use gpunex_tests::{TestDb, conformance, credits, provider, seed_credits, stream};

conformance!(
    runner_folds_every_event_once,
    failure_mid_batch_neither_loses_nor_doubles,
    rebuild_swaps_in_fresh_tables_and_repairs_drift,
    competing_runners_do_not_double_count,
    concurrent_rebuilds_never_mix_their_rows,
    subscriptions_stop_at_a_gap_without_skipping,
    audit_reports_an_undecodable_event_past_the_checkpoint,
    audit_reports_edited_rows,
    audit_reports_deleted_rows,
    audit_reports_reordered_rows,
    audit_reports_a_truncated_tail,
    events_are_immutable_to_ordinary_sql,
);

async fn audit(store: &Store) -> AuditReport {
    store.audit(&|_| {}).await.unwrap()
}

async fn runner_folds_every_event_once(db: &TestDb) {
    let store = db.open().await;
    let expected = seed_credits(&store, 2_500, 7).await;
    let report = store.run_projections().await.unwrap();
    assert_eq!((report.events, report.checkpoint), (2_500, 2_500));
    assert_eq!(
        store.run_projections().await.unwrap().events,
        0,
        "nothing twice"
    );
    let balances = store.balances().await.unwrap();
    for (provider_id, total) in &expected {
        let account = Account::ProviderPayable(*provider_id);
        assert_eq!(
            balances[&account].balance(account).unwrap().micros(),
            *total
        );
    }
    let adjustments = balances[&Account::PlatformAdjustments];
    assert_eq!(adjustments.debits.micros(), expected.values().sum::<i64>());
    let status = store.projection_status().await.unwrap();
    assert_eq!(status[0].lag(), 0);
    let lines = store
        .journal_lines(Some(Account::ProviderPayable(provider(0))), 0, 10_000)
        .await
        .unwrap();
    let lines_total: i64 = lines.iter().map(|line| line.amount.micros()).sum();
    assert_eq!(
        lines_total,
        expected[&provider(0)],
        "journal lines add up to the balance"
    );
    assert!(audit(&store).await.is_clean());
}

async fn failure_mid_batch_neither_loses_nor_doubles(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 5_000, 3).await;
    // A failure inside the transaction of the second batch (events 2001..4000), after some of
    // its rows were already written.
    db.execute_raw(
        &["CREATE TRIGGER fail_mid_batch BEFORE INSERT ON ledger_entries WHEN NEW.position = 3000 \
           BEGIN SELECT RAISE(ABORT, 'injected failure'); END"],
        &[
            "CREATE FUNCTION fail_mid_batch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.position = 3000 THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER fail_mid_batch BEFORE INSERT ON ledger_entries FOR EACH ROW EXECUTE FUNCTION fail_mid_batch()",
        ],
    )
    .await;
    let error = store.run_projections().await.unwrap_err();
    assert!(error.to_string().contains("injected failure"), "{error}");
    let status = store.projection_status().await.unwrap()[0];
    assert_eq!(
        status.checkpoint, 2_000,
        "first batch committed, second rolled back"
    );
    assert!(
        store
            .journal_lines(None, 2_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "no row of the failed batch survived"
    );
    let partial = audit(&store).await;
    assert!(
        partial.is_clean(),
        "read model consistent at its checkpoint: {:?}",
        partial.findings
    );

    db.execute_raw(
        &["DROP TRIGGER fail_mid_batch"],
        &["DROP TRIGGER fail_mid_batch ON ledger_entries"],
    )
    .await;
    store.run_projections().await.unwrap();
    let resumed_balances = store.balances().await.unwrap();
    let resumed_lines = store.journal_lines(None, 0, 10_000).await.unwrap();
    assert_eq!(resumed_lines.len(), 10_000);

    let rebuilt_at = store.rebuild_projections(&|_| {}).await.unwrap();
    assert_eq!(rebuilt_at, 5_000);
    assert_eq!(store.balances().await.unwrap(), resumed_balances);
    assert_eq!(
        store.journal_lines(None, 0, 10_000).await.unwrap(),
        resumed_lines
    );
    assert!(audit(&store).await.is_clean());
}

async fn rebuild_swaps_in_fresh_tables_and_repairs_drift(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 1_200, 4).await;
    store.run_projections().await.unwrap();
    let payable = format!("provider_payable:{}", provider(1));
    db.try_execute_raw(&format!(
        "UPDATE ledger_balances SET credits_micro_usdc = credits_micro_usdc + 1 WHERE account = '{payable}'"
    ))
    .await
    .unwrap();
    db.try_execute_raw("DELETE FROM ledger_entries WHERE position = 17")
        .await
        .unwrap();
    let drifted = audit(&store).await;
    assert!(drifted.findings.iter().any(
        |f| matches!(f, AuditFinding::BalanceMismatch { account, .. } if *account == payable)
    ));
    assert!(drifted.findings.iter().any(|f| matches!(
        f,
        AuditFinding::LineMismatch {
            position: 17,
            stored: None,
            ..
        }
    )));
    assert!(
        drifted
            .findings
            .iter()
            .any(|f| matches!(f, AuditFinding::Unbalanced { source, .. } if source == "stored"))
    );

    // Appends keep arriving while the rebuild runs; the swap folds them in.
    let writer = store.clone();
    let appends = tokio::spawn(async move {
        for _ in 0..20 {
            writer
                .append(
                    stream("ledger-live"),
                    ExpectedVersion::Any,
                    credits(provider(2), 5),
                )
                .await
                .unwrap();
        }
    });
    store.rebuild_projections(&|_| {}).await.unwrap();
    appends.await.unwrap();
    store.run_projections().await.unwrap();
    let repaired = audit(&store).await;
    assert!(repaired.is_clean(), "{:?}", repaired.findings);
    assert_eq!(repaired.ledger_checkpoint, 1_300);
    // A second rebuild works too (names of the swapped tables and indexes are reusable).
    store.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&store).await.is_clean());
}

async fn competing_runners_do_not_double_count(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    seed_credits(&a, 6_000, 5).await;
    let (ra, rb) = tokio::join!(a.run_projections(), b.run_projections());
    // One may lose a compare-and-set race and stop early; running again finishes the job.
    for result in [ra, rb] {
        if let Err(error) = result {
            assert!(error.to_string().contains("checkpoint moved"), "{error}");
        }
    }
    a.run_projections().await.unwrap();
    let report = audit(&a).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.journal_lines_checked, 12_000);
}

async fn seeded_and_audited(db: &TestDb) -> Store {
    let store = db.open().await;
    seed_credits(&store, 12, 2).await;
    store.run_projections().await.unwrap();
    let clean = audit(&store).await;
    assert!(clean.is_clean(), "{:?}", clean.findings);
    assert_eq!(clean.events_checked, 12);
    store
}

const ALLOW_TAMPERING_SQLITE: &[&str] = &[
    "DROP TRIGGER events_are_immutable_update",
    "DROP TRIGGER events_are_immutable_delete",
];
const ALLOW_TAMPERING_POSTGRES: &[&str] = &["ALTER TABLE events DISABLE TRIGGER USER"];

async fn tamper(db: &TestDb, statements: &[&str]) {
    let mut sqlite = ALLOW_TAMPERING_SQLITE.to_vec();
    sqlite.extend_from_slice(statements);
    let mut postgres = ALLOW_TAMPERING_POSTGRES.to_vec();
    postgres.extend_from_slice(statements);
    db.execute_raw(&sqlite, &postgres).await;
}

async fn audit_reports_edited_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(
        db,
        &["UPDATE events SET payload = replace(payload, '1000005', '9000005') WHERE position = 6"],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(
        report.first_bad_position(),
        Some(6),
        "{:?}",
        report.findings
    );
    assert!(
        matches!(
            report.findings[0],
            AuditFinding::HashMismatch { position: 6, .. }
        ),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_deleted_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 7"]).await;
    let report = audit(&store).await;
    assert_eq!(report.first_bad_position(), Some(7));
    assert!(
        report.findings.contains(&AuditFinding::PositionGap {
            expected: 7,
            found: 8
        }),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_reordered_rows(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(
        db,
        &[
            "UPDATE events SET position = 1000 WHERE position = 3",
            "UPDATE events SET position = 3 WHERE position = 4",
            "UPDATE events SET position = 4 WHERE position = 1000",
        ],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(
        report.first_bad_position(),
        Some(3),
        "{:?}",
        report.findings
    );
}

async fn audit_reports_a_truncated_tail(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 12"]).await;
    let report = audit(&store).await;
    assert!(
        report.findings.iter().any(|f| matches!(
            f,
            AuditFinding::HeadMismatch {
                head_position: 12,
                log_position: 11,
                ..
            }
        )),
        "{:?}",
        report.findings
    );
}

async fn events_are_immutable_to_ordinary_sql(db: &TestDb) {
    let _store = seeded_and_audited(db).await;
    for statement in [
        "UPDATE events SET payload = '{}' WHERE position = 1",
        "DELETE FROM events WHERE position = 1",
    ] {
        let error = db.try_execute_raw(statement).await.unwrap_err();
        assert!(
            error.contains("events are immutable"),
            "{statement}: {error}"
        );
    }
}

async fn concurrent_rebuilds_never_mix_their_rows(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    seed_credits(&a, 25_000, 5).await;
    let (ra, rb) = tokio::join!(
        a.rebuild_projections(&|_| {}),
        b.rebuild_projections(&|_| {})
    );
    let mut swapped = 0;
    for result in [ra, rb] {
        match result {
            Ok(position) => {
                assert_eq!(position, 25_000);
                swapped += 1;
            }
            Err(error) => assert!(error.to_string().contains("took over"), "{error}"),
        }
    }
    assert!(swapped >= 1, "at least one rebuild completes");
    a.run_projections().await.unwrap();
    let report = audit(&a).await;
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.journal_lines_checked, 50_000);
    // A later rebuild still works after a superseded one left nothing behind to clean up.
    a.rebuild_projections(&|_| {}).await.unwrap();
    assert!(audit(&a).await.is_clean());
}

async fn subscriptions_stop_at_a_gap_without_skipping(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    tamper(db, &["DELETE FROM events WHERE position = 3"]).await;
    let mut subscription = store.subscribe(0).await;
    for _ in 0..2 {
        let error = subscription.next_batch(100).await.unwrap_err();
        assert!(error.to_string().contains("gap"), "{error}");
        assert_eq!(
            subscription.position(),
            0,
            "nothing counts as delivered past a gap"
        );
    }
}

async fn audit_reports_an_undecodable_event_past_the_checkpoint(db: &TestDb) {
    let store = seeded_and_audited(db).await;
    store
        .append(
            stream("ledger-late"),
            ExpectedVersion::NoStream,
            credits(provider(1), 1),
        )
        .await
        .unwrap();
    tamper(
        db,
        &["UPDATE events SET payload = '{\"not\": \"an adjustment\"}' WHERE position = 13"],
    )
    .await;
    let report = audit(&store).await;
    assert_eq!(report.ledger_checkpoint, 12);
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f, AuditFinding::Undecodable { position: 13, .. })),
        "{:?}",
        report.findings
    );
}
