//! Group commit: every append in a process goes through one writer task, which takes whatever
//! appends are waiting (up to a limit) and commits them in one transaction under the log-head
//! lock. Under load this turns many small commits into few large ones; idle, it commits each
//! append at once.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::envelope::ValidatedStream;
use crate::{AppendError, Committed, StoreError};

/// Appends waiting for the writer before callers are made to wait for room.
pub(crate) const QUEUE_APPENDS_MAX: usize = 4_096;
/// Events committed in one group transaction (a single larger append still goes alone).
pub(crate) const GROUP_EVENTS_MAX: usize = 8_192;

pub(crate) type Reply = oneshot::Sender<Result<Committed, AppendError>>;

pub(crate) struct Pending {
    pub streams: Vec<ValidatedStream>,
    pub reply: Reply,
}

pub(crate) type GroupOutcome = (Vec<Result<Committed, AppendError>>, u64);

/// One database's implementation of a group commit.
pub(crate) trait GroupCommit: Send + Sync + 'static {
    /// Commits a group in one transaction and returns one outcome per request plus the new head
    /// position. An `Err` means nothing of the group was written.
    fn commit_group(
        &self,
        requests: &[Vec<ValidatedStream>],
    ) -> impl Future<Output = Result<GroupOutcome, StoreError>> + Send;
}

pub(crate) fn spawn<C: GroupCommit>(
    committer: Arc<C>,
    head: watch::Sender<u64>,
) -> mpsc::Sender<Pending> {
    let (sender, receiver) = mpsc::channel(QUEUE_APPENDS_MAX);
    tokio::spawn(run(committer, receiver, head));
    sender
}

async fn run<C: GroupCommit>(
    committer: Arc<C>,
    mut receiver: mpsc::Receiver<Pending>,
    head: watch::Sender<u64>,
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
        commit(&*committer, group, &head).await;
    }
}

async fn commit<C: GroupCommit>(committer: &C, group: Vec<Pending>, head: &watch::Sender<u64>) {
    let (requests, replies): (Vec<_>, Vec<_>) =
        group.into_iter().map(|p| (p.streams, p.reply)).unzip();
    match committer.commit_group(&requests).await {
        Ok((outcomes, position)) => {
            advance(head, position);
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // The caller may have gone away (timeout, cancelled request); the append stands.
                let _ = reply.send(outcome);
            }
        }
        Err(error) if requests.len() == 1 => {
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Err(AppendError::Store(error)));
            }
        }
        Err(error) if error.is_unavailable() => {
            // The database is down: retrying each request alone would only wait out a timeout
            // per request. Fail them all now; callers retry with the same ids, safely.
            tracing::warn!(%error, requests = requests.len(), "group commit failed: database unavailable");
            let message = error.to_string();
            for reply in replies {
                let _ = reply.send(Err(AppendError::Store(StoreError::Unavailable(
                    message.clone(),
                ))));
            }
        }
        Err(error) => {
            // One request must not fail its neighbours: retry each on its own.
            tracing::warn!(%error, requests = requests.len(), "group commit failed, retrying appends one by one");
            for (request, reply) in requests.into_iter().zip(replies) {
                let single = vec![request];
                let outcome = match committer.commit_group(&single).await {
                    Ok((mut outcomes, position)) => {
                        advance(head, position);
                        outcomes
                            .pop()
                            .unwrap_or(Err(AppendError::Store(StoreError::WriterStopped)))
                    }
                    Err(error) => Err(AppendError::Store(error)),
                };
                let _ = reply.send(outcome);
            }
        }
    }
}

/// Publishes a new head to subscribers in this process; never moves it backwards.
pub(crate) fn advance(head: &watch::Sender<u64>, position: u64) {
    head.send_if_modified(|current| {
        let moved = position > *current;
        *current = (*current).max(position);
        moved
    });
}
