//! Two OS processes, eight writers, one subscriber: the subscriber sees every committed event
//! exactly once, in strictly increasing gapless position order.
//!
//! The test binary re-runs itself as the writer processes: `child_writer` does nothing unless
//! `GPUNEX_CHILD_DATABASE_URL` is set.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use gpunex_store::{ExpectedVersion, Store, StoreOptions};
use gpunex_tests::{TestDb, credits, provider, stream};
use uuid::Uuid;

const PROCESSES: usize = 2;
const WRITERS_PER_PROCESS: usize = 4;
const APPENDS_PER_WRITER: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_processes_eight_writers() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    run_parent(&db).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_processes_eight_writers() {
    let db = TestDb::sqlite();
    run_parent(&db).await;
}

async fn run_parent(db: &TestDb) {
    let store = db.open().await;
    let mut subscription = store.subscribe(0).await;
    let dir = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    for process in 0..PROCESSES {
        let ids_file = dir.path().join(format!("ids-{process}.txt"));
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
            .env("GPUNEX_CHILD_DATABASE_URL", &db.url)
            .env("GPUNEX_CHILD_PROCESS", process.to_string())
            .env("GPUNEX_CHILD_IDS_FILE", &ids_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        children.push((child, ids_file));
    }
    let written = PROCESSES * WRITERS_PER_PROCESS * APPENDS_PER_WRITER * 2; // 1..=3 events, mean 2
    // Read while the children write, not after.
    let mut seen = Vec::new();
    let reader = async {
        while seen.len() < written {
            let batch =
                tokio::time::timeout(Duration::from_secs(60), subscription.next_batch(1_000))
                    .await
                    .expect("the subscriber receives events while writers run");
            seen.extend(batch.unwrap());
        }
    };
    let waiter = async {
        let mut files = Vec::new();
        for (child, ids_file) in children {
            let output = child.wait_with_output().await.unwrap();
            assert!(
                output.status.success(),
                "child failed: {}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            files.push(ids_file);
        }
        files
    };
    let ((), files) = tokio::join!(reader, waiter);
    let mut expected = HashSet::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            assert!(
                expected.insert(Uuid::parse_str(line).unwrap()),
                "ids are unique"
            );
        }
    }
    assert_eq!(expected.len(), written);
    assert!(
        store.read_all(written as u64, 10).await.unwrap().is_empty(),
        "no event beyond those written"
    );
    let positions: Vec<u64> = seen.iter().map(|e| e.position).collect();
    assert_eq!(
        positions,
        (1..=written as u64).collect::<Vec<_>>(),
        "every position once, in order"
    );
    let seen_ids: HashSet<Uuid> = seen.iter().map(|e| e.event_id).collect();
    assert_eq!(seen_ids.len(), seen.len(), "nothing twice");
    assert_eq!(seen_ids, expected, "nothing missing");
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
}

/// Appends of the crash test: batch `i` holds events with ids fixed by `i`, so the parent can
/// send exactly the same appends again after killing the child.
const CRASH_BATCHES: u128 = 400;
const CRASH_BATCH_EVENTS: u128 = 5;

fn crash_batch(i: u128) -> Vec<gpunex_store::NewEvent> {
    (0..CRASH_BATCH_EVENTS)
        .map(|j| {
            // A valid UUIDv7 (version 7, RFC variant) with a fixed value.
            let id = Uuid::from_u128(
                0x0190_0000_0000_7000_8000_0000_0000_0000 | (i * CRASH_BATCH_EVENTS + j),
            );
            // Same content every time too: the entry id inside the payload is fixed as well.
            let mut event = gpunex_tests::credit(provider(1), 1_000 + j as i64);
            let gpunex_domain::DomainEvent::AdjustmentPosted(adjustment) = &mut event else {
                unreachable!("credit() builds an adjustment")
            };
            adjustment.entry_id = id;
            gpunex_store::NewEvent::from_domain(id, &event, gpunex_tests::actor())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writer_killed_mid_append_loses_and_doubles_nothing() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    killed_writer(&db).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writer_killed_mid_append_loses_and_doubles_nothing() {
    let db = TestDb::sqlite();
    killed_writer(&db).await;
}

/// SIGKILL a process while it appends, then resend every append: each event is stored exactly
/// once, the chain is intact, and the read model matches.
async fn killed_writer(db: &TestDb) {
    let store = db.open().await;
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env("GPUNEX_CRASH_DATABASE_URL", &db.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Kill it once it is part-way through (some batches stored, not all).
    let started = std::time::Instant::now();
    loop {
        let head = store.head_position().await.unwrap();
        if head >= 50 * CRASH_BATCH_EVENTS as u64 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "child made no progress"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    // PostgreSQL finishes a COMMIT it had already received when the client died: let the head
    // settle before reading what the child stored.
    let mut stored_by_child = store.head_position().await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = store.head_position().await.unwrap();
        if now == stored_by_child {
            break;
        }
        stored_by_child = now;
    }
    assert!(
        stored_by_child < (CRASH_BATCHES * CRASH_BATCH_EVENTS) as u64,
        "killed before the end"
    );

    let mut replayed = 0;
    for i in 0..CRASH_BATCHES {
        let committed = store
            .append(
                stream(&format!("ledger-crash-{i}")),
                ExpectedVersion::NoStream,
                crash_batch(i),
            )
            .await
            .unwrap();
        replayed += u64::from(committed.replayed);
    }
    let total = (CRASH_BATCHES * CRASH_BATCH_EVENTS) as u64;
    assert_eq!(
        store.head_position().await.unwrap(),
        total,
        "every event exactly once"
    );
    assert_eq!(
        replayed * CRASH_BATCH_EVENTS as u64,
        stored_by_child,
        "what the child stored replays"
    );
    store.run_projections().await.unwrap();
    let report = store.audit(&|_| {}).await.unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert_eq!(report.journal_lines_checked, 2 * total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(url) = std::env::var("GPUNEX_CRASH_DATABASE_URL") else {
        return;
    };
    let store = Store::open(&url, &StoreOptions::default()).await.unwrap();
    for i in 0..CRASH_BATCHES {
        store
            .append(
                stream(&format!("ledger-crash-{i}")),
                ExpectedVersion::NoStream,
                crash_batch(i),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_writer() {
    let Ok(url) = std::env::var("GPUNEX_CHILD_DATABASE_URL") else {
        return;
    };
    let process: usize = std::env::var("GPUNEX_CHILD_PROCESS")
        .unwrap()
        .parse()
        .unwrap();
    let ids_file = std::env::var("GPUNEX_CHILD_IDS_FILE").unwrap();
    let mut writers = Vec::new();
    for w in 0..WRITERS_PER_PROCESS {
        // Each writer is its own store handle: its own connections and its own writer task.
        let store = Store::open(
            &url,
            &StoreOptions {
                postgres_connections_max: 4,
                ..StoreOptions::default()
            },
        )
        .await
        .unwrap();
        let writer = process * WRITERS_PER_PROCESS + w;
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..APPENDS_PER_WRITER {
                let events = credits(provider(writer as u128), 1 + i % 3);
                ids.extend(events.iter().map(|e| e.event_id));
                store
                    .append(
                        stream(&format!("ledger-w{writer}")),
                        ExpectedVersion::Any,
                        events,
                    )
                    .await
                    .unwrap();
            }
            ids
        }));
    }
    let mut all = String::new();
    for writer in writers {
        for id in writer.await.unwrap() {
            all.push_str(&id.to_string());
            all.push('\n');
        }
    }
    std::fs::write(ids_file, all).unwrap();
}
