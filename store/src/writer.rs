//! Group commit: every append in a process goes through one writer task, which takes whatever
//! appends are waiting (up to a limit) and commits them in one transaction under the log-head
//! lock. Under load this turns many small commits into few large ones; idle, it commits each
//! append at once.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};

use crate::envelope::ValidatedStream;
use crate::stats::WriterStats;
use crate::{AppendError, Committed, StoreError};

/// Appends waiting for the writer before callers are made to wait for room.
pub(crate) const QUEUE_APPENDS_MAX: usize = 4_096;
/// Events committed in one group transaction (a single larger append still goes alone).
pub(crate) const GROUP_EVENTS_MAX: usize = 8_192;

pub(crate) type Reply = oneshot::Sender<Result<Committed, AppendError>>;

pub(crate) struct Pending {
    pub streams: Vec<ValidatedStream>,
    /// The `Idempotency-Key` reservation this append belongs to, if any.
    pub mark: Option<crate::key_scope::KeyMark>,
    pub reply: Reply,
}

pub(crate) type GroupOutcome = (Vec<Result<Committed, AppendError>>, u64);

/// One database's implementation of a group commit.
pub(crate) trait GroupCommit: Send + Sync + 'static {
    /// Commits a group in one transaction and returns one outcome per request plus the new head
    /// position. An `Err` means nothing of the group was written.
    /// `marks[i]` is request `i`'s reservation: the request is written only while this process
    /// still owns it, and the reservation records the commit (and a prepared response) in the
    /// same transaction.
    fn commit_group(
        &self,
        requests: &[Vec<ValidatedStream>],
        marks: &[Option<crate::key_scope::KeyMark>],
    ) -> impl Future<Output = Result<GroupOutcome, StoreError>> + Send;
}

pub(crate) fn spawn<C: GroupCommit>(
    committer: Arc<C>,
    head: watch::Sender<u64>,
    stats: Arc<WriterStats>,
) -> mpsc::Sender<Pending> {
    let (sender, receiver) = mpsc::channel(QUEUE_APPENDS_MAX);
    tokio::spawn(run(committer, receiver, head, stats));
    sender
}

async fn run<C: GroupCommit>(
    committer: Arc<C>,
    mut receiver: mpsc::Receiver<Pending>,
    head: watch::Sender<u64>,
    stats: Arc<WriterStats>,
) {
    while let Some(first) = receiver.recv().await {
        let mut events: usize = first.streams.iter().map(|s| s.events.len()).sum();
        let mut group = vec![first];
        while events < GROUP_EVENTS_MAX {
            match receiver.try_recv() {
                Ok(next) => {
                    events += next.streams.iter().map(|s| s.events.len()).sum::<usize>();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        commit(&*committer, group, &head, &stats).await;
    }
}

/// Commits one group and answers each caller; every outcome is counted in `stats`.
async fn commit<C: GroupCommit>(
    committer: &C,
    group: Vec<Pending>,
    head: &watch::Sender<u64>,
    stats: &WriterStats,
) {
    let answer = |reply: Reply, outcome: Result<Committed, AppendError>| {
        stats.outcome(&outcome);
        // The caller may have gone away (timeout, cancelled request); the append stands.
        let _ = reply.send(outcome);
    };
    let mut requests = Vec::with_capacity(group.len());
    let mut marks = Vec::with_capacity(group.len());
    let mut replies = Vec::with_capacity(group.len());
    for pending in group {
        requests.push(pending.streams);
        marks.push(pending.mark);
        replies.push(pending.reply);
    }
    let started = Instant::now();
    let result = committer.commit_group(&requests, &marks).await;
    match &result {
        Ok(_) => {
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.group_size.observe(requests.len() as u64);
            stats
                .commit_micros
                .observe(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        }
        Err(_) => {
            stats.commit_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
    match result {
        Ok((outcomes, position)) => {
            advance(head, position);
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                answer(reply, outcome);
            }
        }
        Err(error) if requests.len() == 1 => {
            if let Some(reply) = replies.into_iter().next() {
                answer(reply, Err(AppendError::Store(error)));
            }
        }
        Err(error) if error.is_unavailable() => {
            // The database is down: retrying each request alone would only wait out a timeout
            // per request. Fail them all now; callers retry with the same ids, safely.
            tracing::warn!(%error, requests = requests.len(), "group commit failed: database unavailable");
            let message = error.to_string();
            for reply in replies {
                answer(
                    reply,
                    Err(AppendError::Store(StoreError::Unavailable(message.clone()))),
                );
            }
        }
        Err(error) => {
            // One request must not fail its neighbours: retry each on its own.
            tracing::warn!(%error, requests = requests.len(), "group commit failed, retrying appends one by one");
            for ((request, mark), reply) in requests.into_iter().zip(marks).zip(replies) {
                let single = vec![request];
                let started = Instant::now();
                let outcome = match committer.commit_group(&single, &[mark]).await {
                    Ok((mut outcomes, position)) => {
                        stats.commits.fetch_add(1, Ordering::Relaxed);
                        stats.group_size.observe(1);
                        stats.commit_micros.observe(
                            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                        );
                        advance(head, position);
                        outcomes
                            .pop()
                            .unwrap_or(Err(AppendError::Store(StoreError::WriterStopped)))
                    }
                    Err(error) => {
                        stats.commit_failures.fetch_add(1, Ordering::Relaxed);
                        Err(AppendError::Store(error))
                    }
                };
                answer(reply, outcome);
            }
        }
    }
}

/// The requests of a group this process may still write (`owned[i]`), their outcomes merged back
/// with a refusal for the others: a request whose reservation another process took over (this
/// one was presumed dead) must not write.
pub(crate) fn merge_owned(
    owned: &[bool],
    outcomes: Vec<Result<Committed, AppendError>>,
) -> Vec<Result<Committed, AppendError>> {
    let mut outcomes = outcomes.into_iter();
    owned
        .iter()
        .map(|owned| match owned {
            true => outcomes
                .next()
                .unwrap_or(Err(AppendError::Store(StoreError::WriterStopped))),
            false => Err(AppendError::ReservationLost),
        })
        .collect()
}

/// A deliberate crash for the tests of exactly-once across a crash: with
/// `GPUNEX_TEST_CRASH_AFTER_COMMIT=1`, a debug build aborts the process right after committing
/// an append that belongs to an `Idempotency-Key` reservation, before anyone hears of it.
/// Compiled out of release builds, which are what run in production.
pub(crate) fn crash_point(marks: &[&Option<crate::key_scope::KeyMark>]) {
    #[cfg(debug_assertions)]
    if marks.iter().any(|m| m.is_some())
        && std::env::var("GPUNEX_TEST_CRASH_AFTER_COMMIT").is_ok_and(|v| v == "1")
    {
        eprintln!("GPUNEX_TEST_CRASH_AFTER_COMMIT: aborting after the commit");
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = marks;
}

/// Publishes a new head to subscribers in this process; never moves it backwards.
pub(crate) fn advance(head: &watch::Sender<u64>, position: u64) {
    head.send_if_modified(|current| {
        let moved = position > *current;
        *current = (*current).max(position);
        moved
    });
}
