//! The event store conformance suite: every test runs on SQLite and on PostgreSQL.

use std::collections::HashSet;

use gpunex_domain::events::ADJUSTMENT_POSTED;
use gpunex_domain::{DecodeError, DomainEvent};
use gpunex_store::{
    AppendError, ConflictReason, ExpectedVersion, InvalidAppend, NewEvent, Store, StreamAppend,
};
use gpunex_tests::{TestDb, actor, conformance, credit, credits, new_event, provider, stream};
use serde_json::json;
use uuid::Uuid;

conformance!(
    appends_and_reads_a_stream,
    expected_version_mismatch_carries_the_actual_version,
    multi_stream_appends_are_all_or_nothing,
    retries_return_the_original_positions_even_after_restart,
    same_id_with_different_content_is_rejected,
    bad_input_gets_typed_errors_and_writes_nothing,
    older_schema_versions_are_upcast_on_read,
    reads_everything_in_batches,
    subscription_catches_up_then_delivers_live,
    concurrent_writers_never_let_a_subscriber_skip,
);

async fn appends_and_reads_a_stream(db: &TestDb) {
    let store = db.open().await;
    let events = credits(provider(1), 3);
    let committed = store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            events.clone(),
        )
        .await
        .unwrap();
    assert!(!committed.replayed);
    let positions: Vec<u64> = committed.events.iter().map(|e| e.position).collect();
    assert_eq!(positions, [1, 2, 3]);
    let read = store
        .read_stream(&stream("ledger-a"), 0, 100)
        .await
        .unwrap();
    assert_eq!(read.len(), 3);
    for (i, (recorded, sent)) in read.iter().zip(&events).enumerate() {
        assert_eq!(recorded.stream_version, i as u64 + 1);
        assert_eq!(recorded.event_id, sent.event_id);
        assert_eq!(recorded.event_type, ADJUSTMENT_POSTED);
        assert_eq!(recorded.decode_metadata().unwrap(), actor());
        assert_eq!(
            recorded.decode().unwrap(),
            DomainEvent::decode(&sent.event_type, sent.schema_version, &sent.payload).unwrap()
        );
    }
    let after_first = store
        .read_stream(&stream("ledger-a"), 1, 100)
        .await
        .unwrap();
    assert_eq!(after_first.len(), 2);
    assert!(
        store
            .read_stream(&stream("ledger-none"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    store
        .append(
            stream("ledger-a"),
            ExpectedVersion::Exact(3),
            credits(provider(1), 1),
        )
        .await
        .unwrap();
    store
        .append(
            stream("ledger-a"),
            ExpectedVersion::Any,
            credits(provider(1), 1),
        )
        .await
        .unwrap();
    assert_eq!(store.head_position().await.unwrap(), 5);
}

async fn expected_version_mismatch_carries_the_actual_version(db: &TestDb) {
    let store = db.open().await;
    store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            credits(provider(1), 3),
        )
        .await
        .unwrap();
    let cases = [
        ("ledger-a", ExpectedVersion::Exact(2), 3),
        ("ledger-a", ExpectedVersion::NoStream, 3),
        ("ledger-a", ExpectedVersion::Exact(4), 3),
        ("ledger-b", ExpectedVersion::Exact(1), 0),
    ];
    for (name, expected, actual_version) in cases {
        let error = store
            .append(stream(name), expected, credits(provider(1), 1))
            .await
            .unwrap_err();
        match error {
            AppendError::WrongExpectedVersion {
                stream_id, actual, ..
            } => {
                assert_eq!((stream_id.as_str(), actual), (name, actual_version));
            }
            other => panic!("expected a version conflict, got {other:?}"),
        }
    }
    assert_eq!(
        store.head_position().await.unwrap(),
        3,
        "rejected appends wrote nothing"
    );
}

async fn multi_stream_appends_are_all_or_nothing(db: &TestDb) {
    let store = db.open().await;
    store
        .append(
            stream("ledger-b"),
            ExpectedVersion::NoStream,
            credits(provider(2), 1),
        )
        .await
        .unwrap();
    let error = store
        .append_streams(vec![
            StreamAppend {
                stream_id: stream("ledger-a"),
                expected: ExpectedVersion::NoStream,
                events: credits(provider(1), 2),
            },
            StreamAppend {
                stream_id: stream("ledger-b"),
                expected: ExpectedVersion::NoStream, // wrong: it has one event
                events: credits(provider(2), 1),
            },
        ])
        .await
        .unwrap_err();
    assert!(
        matches!(error, AppendError::WrongExpectedVersion { actual: 1, .. }),
        "{error:?}"
    );
    assert!(
        store
            .read_stream(&stream("ledger-a"), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.head_position().await.unwrap(), 1);

    let committed = store
        .append_streams(vec![
            StreamAppend {
                stream_id: stream("ledger-a"),
                expected: ExpectedVersion::NoStream,
                events: credits(provider(1), 2),
            },
            StreamAppend {
                stream_id: stream("ledger-b"),
                expected: ExpectedVersion::Exact(1),
                events: credits(provider(2), 1),
            },
        ])
        .await
        .unwrap();
    let placed: Vec<(String, u64, u64)> = committed
        .events
        .iter()
        .map(|e| (e.stream_id.clone(), e.stream_version, e.position))
        .collect();
    assert_eq!(
        placed,
        [
            ("ledger-a".to_owned(), 1, 2),
            ("ledger-a".to_owned(), 2, 3),
            ("ledger-b".to_owned(), 2, 4)
        ]
    );
}

async fn retries_return_the_original_positions_even_after_restart(db: &TestDb) {
    let store = db.open().await;
    let events = credits(provider(1), 2);
    let first = store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            events.clone(),
        )
        .await
        .unwrap();
    // The retry's expectation is stale (the stream now has 2 events): idempotency comes first.
    let retry = store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            events.clone(),
        )
        .await
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(retry.events, first.events);
    assert_eq!(store.head_position().await.unwrap(), 2);

    drop(store);
    let reopened = db.open().await;
    // Same content with keys in another order is the same content.
    let mut reordered = events.clone();
    for event in &mut reordered {
        let object = event.payload.as_object().unwrap().clone();
        let mut keys: Vec<_> = object.keys().cloned().collect();
        keys.reverse();
        event.payload = json!({});
        for key in keys {
            event.payload[&key] = object[&key].clone();
        }
    }
    let after_restart = reopened
        .append(stream("ledger-a"), ExpectedVersion::Any, reordered)
        .await
        .unwrap();
    assert!(after_restart.replayed);
    assert_eq!(after_restart.events, first.events);
    assert_eq!(reopened.head_position().await.unwrap(), 2);

    // Two concurrent retries of one new append: one writes, the other replays.
    let events = credits(provider(1), 3);
    let (a, b) = tokio::join!(
        reopened.append(
            stream("ledger-c"),
            ExpectedVersion::NoStream,
            events.clone()
        ),
        reopened.append(
            stream("ledger-c"),
            ExpectedVersion::NoStream,
            events.clone()
        ),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.events, b.events);
    assert!(a.replayed != b.replayed);
    assert_eq!(reopened.head_position().await.unwrap(), 5);
}

async fn same_id_with_different_content_is_rejected(db: &TestDb) {
    let store = db.open().await;
    let events = credits(provider(1), 2);
    store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            events.clone(),
        )
        .await
        .unwrap();

    let mut changed = events.clone();
    changed[1].payload["postings"][0]["amount_micro_usdc"] = json!(999);
    changed[1].payload["postings"][1]["amount_micro_usdc"] = json!(999);
    let error = store
        .append(stream("ledger-a"), ExpectedVersion::Any, changed)
        .await
        .unwrap_err();
    assert!(
        matches!(error, AppendError::IdempotencyConflict { event_id, reason: ConflictReason::DifferentContent } if event_id == events[1].event_id),
        "{error:?}"
    );

    let mut other_stream = events.clone();
    other_stream.truncate(1);
    let error = store
        .append(stream("ledger-b"), ExpectedVersion::Any, other_stream)
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        AppendError::IdempotencyConflict {
            reason: ConflictReason::DifferentContent,
            ..
        }
    ));

    let mut partial = vec![events[0].clone()];
    partial.extend(credits(provider(1), 1));
    let error = store
        .append(stream("ledger-a"), ExpectedVersion::Any, partial)
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        AppendError::IdempotencyConflict {
            reason: ConflictReason::PartiallyStored,
            ..
        }
    ));
    assert_eq!(error.code(), "idempotency_conflict");
    assert_eq!(
        store.head_position().await.unwrap(),
        2,
        "conflicts wrote nothing"
    );
}

async fn bad_input_gets_typed_errors_and_writes_nothing(db: &TestDb) {
    let store = db.open().await;
    let good = new_event(&credit(provider(1), 10));
    let with = |change: &dyn Fn(&mut NewEvent)| {
        let mut event = new_event(&credit(provider(1), 10));
        change(&mut event);
        vec![good.clone(), event]
    };
    type Check = fn(&InvalidAppend) -> bool;
    let cases: Vec<(&str, Vec<NewEvent>, Check)> = vec![
        ("empty", vec![], |e| matches!(e, InvalidAppend::Empty)),
        (
            "unknown type",
            with(&|e| e.event_type = "ledger.invented".into()),
            |e| {
                matches!(
                    e,
                    InvalidAppend::Decode {
                        index: 1,
                        source: DecodeError::UnknownEventType { .. },
                        ..
                    }
                )
            },
        ),
        ("future version", with(&|e| e.schema_version = 9), |e| {
            matches!(
                e,
                InvalidAppend::Decode {
                    source: DecodeError::UnsupportedSchemaVersion { version: 9, .. },
                    ..
                }
            )
        }),
        (
            "malformed payload",
            with(&|e| e.payload = json!({"entry_id": 5})),
            |e| {
                matches!(
                    e,
                    InvalidAppend::Decode {
                        source: DecodeError::MalformedPayload { .. },
                        ..
                    }
                )
            },
        ),
        (
            "unbalanced postings",
            with(&|e| e.payload["postings"][0]["amount_micro_usdc"] = json!(11)),
            |e| matches!(e, InvalidAppend::Decode { source: DecodeError::MalformedPayload { reason, .. }, .. } if reason.contains("unbalanced")),
        ),
        (
            "uuid v4 id",
            with(&|e| e.event_id = Uuid::from_u128(0x4000_0000_0000_4000_8000_0000_0000_0001)),
            |e| {
                matches!(
                    e,
                    InvalidAppend::EventIdNotV7 {
                        index: 1,
                        version: 4,
                        ..
                    }
                )
            },
        ),
        ("duplicate id", with(&|e| e.event_id = Uuid::nil()), |_| {
            true
        }),
        (
            "blank actor",
            with(&|e| e.metadata.actor = String::new()),
            |e| matches!(e, InvalidAppend::InvalidActor { index: 1, .. }),
        ),
        (
            "huge payload",
            with(&|e| e.payload["reason"] = json!("x".repeat(70_000))),
            |e| {
                matches!(
                    e,
                    InvalidAppend::Decode { .. } | InvalidAppend::PayloadTooLarge { .. }
                )
            },
        ),
        (
            "oversized batch",
            credits(provider(1), gpunex_store::APPEND_EVENTS_MAX + 1),
            |e| matches!(e, InvalidAppend::TooManyEvents { .. }),
        ),
    ];
    for (name, events, check) in cases {
        let mut events = events;
        if name == "duplicate id" {
            events[1].event_id = events[0].event_id;
        }
        let error = store
            .append(stream("ledger-a"), ExpectedVersion::Any, events)
            .await
            .unwrap_err();
        match &error {
            AppendError::Invalid(invalid) if name == "duplicate id" => {
                assert!(
                    matches!(invalid, InvalidAppend::DuplicateEventId { .. }),
                    "{name}: {invalid:?}"
                )
            }
            AppendError::Invalid(invalid) => assert!(check(invalid), "{name}: {invalid:?}"),
            other => panic!("{name}: expected a validation error, got {other:?}"),
        }
        assert_eq!(error.code(), "invalid_append");
    }
    let error = store
        .append_streams(vec![
            StreamAppend {
                stream_id: stream("ledger-a"),
                expected: ExpectedVersion::Any,
                events: credits(provider(1), 1),
            },
            StreamAppend {
                stream_id: stream("ledger-a"),
                expected: ExpectedVersion::Any,
                events: credits(provider(1), 1),
            },
        ])
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        AppendError::Invalid(InvalidAppend::DuplicateStream { .. })
    ));
    assert_eq!(
        store.head_position().await.unwrap(),
        0,
        "nothing was written"
    );
}

async fn older_schema_versions_are_upcast_on_read(db: &TestDb) {
    let store = db.open().await;
    let v1 = NewEvent {
        event_id: Uuid::now_v7(),
        event_type: ADJUSTMENT_POSTED.to_owned(),
        schema_version: 1,
        payload: json!({
            "entry_id": Uuid::now_v7(),
            "reason": "written by an older producer",
            "debit_account": "platform_adjustments",
            "credit_account": format!("provider_payable:{}", provider(7)),
            "amount_micro_usdc": 2_500_000,
        }),
        metadata: actor(),
    };
    store
        .append(stream("ledger-a"), ExpectedVersion::NoStream, vec![v1])
        .await
        .unwrap();
    let stored = &store.read_all(0, 10).await.unwrap()[0];
    assert_eq!(
        stored.schema_version, 1,
        "rows keep the version they were written with"
    );
    let DomainEvent::AdjustmentPosted(event) = stored.decode().unwrap() else {
        panic!("an adjustment was appended")
    };
    assert_eq!(event.postings.lines().len(), 2);
    assert_eq!(event.postings.total().micros(), 2_500_000);
    store.run_projections().await.unwrap();
    let balances = store.balances().await.unwrap();
    let payable = gpunex_domain::Account::ProviderPayable(provider(7));
    assert_eq!(
        balances[&payable].balance(payable).unwrap().micros(),
        2_500_000
    );
}

async fn reads_everything_in_batches(db: &TestDb) {
    let store = db.open().await;
    for i in 0..5 {
        store
            .append(
                stream(&format!("ledger-{i}")),
                ExpectedVersion::NoStream,
                credits(provider(1), 50),
            )
            .await
            .unwrap();
    }
    let mut position = 0;
    let mut sizes = Vec::new();
    loop {
        let batch = store.read_all(position, 100).await.unwrap();
        let Some(last) = batch.last() else { break };
        for (i, event) in batch.iter().enumerate() {
            assert_eq!(event.position, position + i as u64 + 1);
        }
        position = last.position;
        sizes.push(batch.len());
    }
    assert_eq!(sizes, [100, 100, 50]);
}

async fn subscription_catches_up_then_delivers_live(db: &TestDb) {
    let store = db.open().await;
    store
        .append(
            stream("ledger-a"),
            ExpectedVersion::NoStream,
            credits(provider(1), 5),
        )
        .await
        .unwrap();
    let mut subscription = store.subscribe(2).await;
    let first = subscription.next_batch(100).await.unwrap();
    assert_eq!(
        first.iter().map(|e| e.position).collect::<Vec<_>>(),
        [3, 4, 5]
    );
    let writer = store.clone();
    let live = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        writer
            .append(
                stream("ledger-a"),
                ExpectedVersion::Exact(5),
                credits(provider(1), 2),
            )
            .await
            .unwrap()
    });
    let next = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        subscription.next_batch(100),
    )
    .await
    .expect("live event delivered within 5 s")
    .unwrap();
    live.await.unwrap();
    assert_eq!(next[0].position, 6);
    assert_eq!(subscription.position(), next.last().unwrap().position);
}

/// 8 writers (two store handles, each with its own writer) append concurrently while a
/// subscriber records what it sees: every event exactly once, in gapless increasing order.
async fn concurrent_writers_never_let_a_subscriber_skip(db: &TestDb) {
    const WRITERS: usize = 8;
    const APPENDS_PER_WRITER: usize = 60;
    let stores = [db.open().await, db.open().await];
    let mut subscription = stores[0].subscribe(0).await;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store: Store = stores[w % 2].clone();
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..APPENDS_PER_WRITER {
                let events = credits(provider(w as u128), 1 + i % 3);
                ids.extend(events.iter().map(|e| e.event_id));
                store
                    .append(
                        stream(&format!("ledger-w{w}")),
                        ExpectedVersion::Any,
                        events,
                    )
                    .await
                    .unwrap();
            }
            ids
        }));
    }
    let mut expected = HashSet::new();
    for writer in writers {
        expected.extend(writer.await.unwrap());
    }
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let batch = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            subscription.next_batch(500),
        )
        .await
        .expect("subscriber keeps up")
        .unwrap();
        seen.extend(batch);
    }
    let positions: Vec<u64> = seen.iter().map(|e| e.position).collect();
    assert_eq!(positions, (1..=expected.len() as u64).collect::<Vec<_>>());
    let seen_ids: HashSet<Uuid> = seen.iter().map(|e| e.event_id).collect();
    assert_eq!(seen_ids, expected);
}

#[tokio::test]
async fn in_memory_sqlite_is_refused() {
    let error = Store::open("sqlite::memory:", &Default::default())
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("in-memory"), "{error}");
}
