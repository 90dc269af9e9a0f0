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
