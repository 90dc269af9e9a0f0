//! Renters' job output as stored on both databases: chunks by offset, resent chunks ignored,
//! the newest `KEEP_BYTES` kept, contiguous reads that start where the kept output does, and
//! pruning by age.

use gpunex_store::job_logs::{JobLogRead, KEEP_BYTES};
use gpunex_tests::{TestDb, conformance};
use uuid::Uuid;

conformance!(job_output_is_kept_bounded_and_read_by_offset);

async fn job_output_is_kept_bounded_and_read_by_offset(db: &TestDb) {
    let store = db.open().await;
    let rental = Uuid::now_v7();
    let other = Uuid::now_v7();
    assert_eq!(
        store.read_job_log(rental, 0, 100).await.unwrap(),
        JobLogRead::default(),
        "nothing shipped yet"
    );
    store
        .append_job_log(rental, 0, b"hello ", 1_000)
        .await
        .unwrap();
    store
        .append_job_log(rental, 6, b"world\n", 2_000)
        .await
        .unwrap();
    // Sent again (the agent did not hear the answer): kept as it was.
    store
        .append_job_log(rental, 6, b"WORLD\n", 3_000)
        .await
        .unwrap();
    store
        .append_job_log(other, 0, b"not mine", 1_000)
        .await
        .unwrap();
    let read = store.read_job_log(rental, 0, 100).await.unwrap();
    assert_eq!(read.data, b"hello world\n");
    assert_eq!((read.from, read.first_kept, read.end), (0, 0, 12));
    // From inside a chunk, at most `limit` bytes.
    let read = store.read_job_log(rental, 3, 5).await.unwrap();
    assert_eq!((read.from, read.data.as_slice()), (3, b"lo wo".as_slice()));
    // Past the end: nothing, at the end.
    let read = store.read_job_log(rental, 99, 5).await.unwrap();
    assert_eq!((read.from, read.data.len()), (12, 0));
    // A gap (the agent dropped output it could not ship): a read stops before it, the next
    // one starts after it.
    store
        .append_job_log(rental, 20, b"later\n", 4_000)
        .await
        .unwrap();
    let read = store.read_job_log(rental, 0, 100).await.unwrap();
    assert_eq!(read.data, b"hello world\n");
    let read = store.read_job_log(rental, 12, 100).await.unwrap();
    assert_eq!(
        (read.from, read.data.as_slice()),
        (20, b"later\n".as_slice())
    );
    // Many chunks: a read crosses the 64-chunk pages.
    let many = Uuid::now_v7();
    for i in 0..150_u64 {
        store
            .append_job_log(many, i * 2, b"x\n", 5_000)
            .await
            .unwrap();
    }
    let read = store.read_job_log(many, 0, 1_000).await.unwrap();
    assert_eq!(read.data.len(), 300);
    // Past KEEP_BYTES the oldest chunks go.
    let big = vec![b'a'; 512 * 1024];
    let huge = Uuid::now_v7();
    let chunks = KEEP_BYTES / big.len() as u64 + 2;
    for i in 0..chunks {
        store
            .append_job_log(huge, i * big.len() as u64, &big, 6_000)
            .await
            .unwrap();
    }
    let read = store.read_job_log(huge, 0, 10).await.unwrap();
    let end = chunks * big.len() as u64;
    assert_eq!(read.end, end);
    assert!(read.first_kept >= end - KEEP_BYTES - big.len() as u64 && read.first_kept > 0);
    assert_eq!(read.from, read.first_kept);
    // Pruning by age: chunks received before the instant go.
    assert_eq!(
        store.prune_job_logs(1_500).await.unwrap(),
        2,
        "the two at 1,000"
    );
    let read = store.read_job_log(rental, 0, 100).await.unwrap();
    assert_eq!(
        (read.from, read.data.as_slice()),
        (6, b"world\n".as_slice())
    );
}
