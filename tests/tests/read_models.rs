//! The in-memory read models on both databases: a start from the stored snapshot folds only the
//! tail and ends where a full fold does; `verify_snapshot` (what `audit verify` runs) proves a
//! snapshot equals the fold of the log and names the model that does not; a snapshot of another
//! log is not used.

use gpunex_app::ReadModels;
use gpunex_app::snapshot::{SNAPSHOT_NAME, SnapshotCheck};
use gpunex_domain::DomainEvent;
use gpunex_domain::credentials::{CredentialEvent, Role};
use gpunex_domain::time::Timestamp;
use gpunex_store::{ExpectedVersion, Store};
use gpunex_tests::{TestDb, conformance, new_event, provider, seed_credits, stream};
use uuid::Uuid;

conformance!(
    a_start_from_the_snapshot_folds_only_the_tail,
    a_snapshot_that_differs_from_the_log_is_named_or_ignored,
);

const LABEL: &str = "snapshot-label";

/// A finance token labelled [`LABEL`].
async fn issue_token(store: &Store) -> Uuid {
    let token_id = Uuid::now_v7();
    let issued = gpunex_domain::credentials::issue(
        token_id,
        Role::Finance,
        LABEL,
        &"ab".repeat(32),
        "test",
        None,
        Timestamp::from_unix_micros(1_790_000_000_000_000),
    )
    .unwrap();
    store
        .append(
            stream(&format!("credential-{token_id}")),
            ExpectedVersion::NoStream,
            vec![new_event(&DomainEvent::Credential(
                CredentialEvent::Issued(issued),
            ))],
        )
        .await
        .unwrap();
    token_id
}

fn pending(models: &ReadModels, provider_id: Uuid) -> i64 {
    models.with_earnings(|e| e.pending_balance(provider_id))
}

async fn a_start_from_the_snapshot_folds_only_the_tail(db: &TestDb) {
    let store = db.open().await;
    let totals = seed_credits(&store, 12_000, 3).await;
    let token = issue_token(&store).await;
    let head = store.head_position().await.unwrap();

    // More than 10,000 events folded at start: the start writes a snapshot at the head.
    let first = ReadModels::load(&store).await.unwrap();
    assert_eq!(first.started_from(), 0);
    let stored = store.read_snapshot(SNAPSHOT_NAME).await.unwrap().unwrap();
    assert_eq!(stored.position, head);
    assert_eq!(
        ReadModels::verify_snapshot(&store).await.unwrap(),
        SnapshotCheck::Matches { position: head }
    );

    // Later events; a new process starts from the snapshot and folds only them.
    store
        .append(
            stream("ledger-later"),
            ExpectedVersion::NoStream,
            gpunex_tests::credits(provider(0), 500),
        )
        .await
        .unwrap();
    let later: i64 = (0..500).map(|i| 1_000 + i).sum();
    let second = ReadModels::load(&store).await.unwrap();
    assert_eq!(second.started_from(), head);
    assert_eq!(second.position(), head + 500);
    assert_eq!(second.get(&token).map(|r| r.label), Some(LABEL.to_owned()));
    // The first process, following the log, ends where the second started.
    first.wait_for(head + 500).await.unwrap();
    for (provider_id, total) in &totals {
        assert_eq!(
            pending(&first, *provider_id),
            pending(&second, *provider_id)
        );
        let added = if *provider_id == provider(0) {
            later
        } else {
            0
        };
        assert_eq!(pending(&second, *provider_id), total + added);
    }
}

async fn a_snapshot_that_differs_from_the_log_is_named_or_ignored(db: &TestDb) {
    let store = db.open().await;
    seed_credits(&store, 11_000, 2).await;
    issue_token(&store).await;
    ReadModels::load(&store).await.unwrap();
    let position = store
        .read_snapshot(SNAPSHOT_NAME)
        .await
        .unwrap()
        .unwrap()
        .position;

    // Edited by hand: the check names the model that differs.
    let edit =
        format!("UPDATE read_model_snapshots SET body = REPLACE(body, '{LABEL}', 'edited-label')");
    db.execute_raw(&[&edit], &[&edit]).await;
    assert_eq!(
        ReadModels::verify_snapshot(&store).await.unwrap(),
        SnapshotCheck::Differs {
            position,
            models: vec!["credentials"],
            reason: None
        }
    );

    // Folded from another log (the hash at its position differs): not used at start, and
    // reported.
    let edit = "UPDATE read_model_snapshots SET body = REPLACE(body, '\"position_hash\":\"', '\"position_hash\":\"00')";
    db.execute_raw(&[edit], &[edit]).await;
    let check = ReadModels::verify_snapshot(&store).await.unwrap();
    assert!(
        matches!(&check, SnapshotCheck::Differs { reason: Some(r), .. } if r.contains("another log")),
        "{check:?}"
    );
    let models = ReadModels::load(&store).await.unwrap();
    assert_eq!(models.started_from(), 0);
    // ... and the start replaced it with a good one.
    assert_eq!(
        ReadModels::verify_snapshot(&store).await.unwrap(),
        SnapshotCheck::Matches { position }
    );

    // Unreadable JSON: ignored at start too.
    let edit = "UPDATE read_model_snapshots SET body = '{'";
    db.execute_raw(&[edit], &[edit]).await;
    assert_eq!(ReadModels::load(&store).await.unwrap().started_from(), 0);
}
