//! The command executor: one way every command writes. It loads the state the command needs,
//! asks a pure decision (a `decide` in `gpunex-domain`) what to append, appends it at the
//! versions that state was read at, and waits until this process's read models have folded its
//! own write (never the log head). When another writer moved a stream first, it waits for the
//! read models to reach those streams and decides again, a bounded, named number of times.
//!
//! The answer keeps the three outcomes apart: `Ok(Ok(_))` written (or nothing to write),
//! `Ok(Err(_))` refused (by the rules, or because the streams kept moving), `Err(_)` the
//! infrastructure failed and the command may be retried as it was.

use gpunex_domain::clock::SharedClock;
use gpunex_domain::time::Timestamp;
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::{
    AppendError, Committed, ConflictReason, ExpectedVersion, Metadata, NewEvent, Store,
    StreamAppend,
};
use uuid::Uuid;

use crate::{AppError, ReadModels};

/// How many times a command loads and decides again after another writer moved a stream it
/// appends to, and its name (in logs and in the refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub name: &'static str,
    pub attempts: usize,
}

/// What a command that was not refused did.
#[derive(Debug)]
pub enum Done {
    /// Its events are stored (or were already, under the same ids and content:
    /// `Committed::replayed`) and the read models have folded them.
    Committed(Committed),
    /// The decision had nothing to append.
    Nothing,
}

impl Done {
    /// The log position of the command's last event, if it wrote one.
    pub fn position(&self) -> Option<u64> {
        match self {
            Done::Committed(committed) => Some(committed.last_position()),
            Done::Nothing => None,
        }
    }
}

/// Why a command wrote nothing, other than an infrastructure failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection<R> {
    /// The rules refused it (the decision's own reason).
    Rule(R),
    /// Another writer moved a stream the command appends to before each of its attempts landed.
    Contended {
        retry: &'static str,
        attempts: usize,
    },
    /// An event id the command uses is stored already, with other content or as part of another
    /// append. Commands whose ids derive from an outside id (an agent's report) see the earlier
    /// delivery here.
    IdTaken {
        event_id: Uuid,
        reason: ConflictReason,
    },
}

/// The expected version of an append to a stream read at `version` (0: the stream must not
/// exist yet).
pub fn expected_at(version: u64) -> ExpectedVersion {
    match version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(v),
    }
}

/// A guard: no events, only the condition that `stream_id` is still at `version` when the
/// command's other appends commit (all or none).
pub fn guard_at(stream_id: StreamId, version: u64) -> StreamAppend {
    StreamAppend {
        stream_id,
        expected: expected_at(version),
        events: Vec::new(),
    }
}

/// A decision's events for one stream read at `version`, each under a new id.
pub fn append_at(
    stream_id: StreamId,
    version: u64,
    events: impl IntoIterator<Item = DomainEvent>,
    meta: &Metadata,
) -> StreamAppend {
    StreamAppend {
        stream_id,
        expected: expected_at(version),
        events: events
            .into_iter()
            .map(|e| NewEvent::from_domain(uuid::Uuid::now_v7(), &e, meta.clone()))
            .collect(),
    }
}

/// Runs commands against one store and the read models this process hosts, deciding at its
/// clock's now.
#[derive(Clone, Copy)]
pub struct Executor<'a> {
    store: &'a Store,
    models: &'a ReadModels,
    clock: &'a SharedClock,
}

impl<'a> Executor<'a> {
    /// Decides at the store's clock (the one the process was started with).
    pub fn new(store: &'a Store, models: &'a ReadModels) -> Executor<'a> {
        Executor {
            store,
            models,
            clock: store.clock(),
        }
    }

    /// Decides at `clock` instead: the simulation's simulated time. (The log's `recorded_at`
    /// stays the store's clock.)
    pub fn with_clock(self, clock: &'a SharedClock) -> Executor<'a> {
        Executor { clock, ..self }
    }

    /// The instant commands are decided at.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn store(&self) -> &'a Store {
        self.store
    }

    pub fn models(&self) -> &'a ReadModels {
        self.models
    }

    /// Loads with `load`, decides with `decide` at the clock's now, and appends what it decided
    /// (every stream at its expected version, all or none). Each attempt loads afresh.
    ///
    /// `load` returns a future rather than being an async closure so that a command running in a
    /// spawned task stays `Send` (write it `move || async move { ... }` over references).
    pub async fn execute<S, R, L>(
        &self,
        retry: Retry,
        mut load: impl FnMut() -> L,
        mut decide: impl FnMut(&S, Timestamp) -> Result<Vec<StreamAppend>, R>,
    ) -> Result<Result<Done, Rejection<R>>, AppError>
    where
        L: std::future::Future<Output = Result<S, AppError>>,
    {
        for _attempt in 0..retry.attempts.max(1) {
            let state = load().await?;
            let now = self.clock.now();
            let writes = match decide(&state, now) {
                Ok(writes) => writes,
                Err(rejection) => return Ok(Err(Rejection::Rule(rejection))),
            };
            if writes.iter().all(|w| w.events.is_empty()) {
                return Ok(Ok(Done::Nothing));
            }
            // An append with no events is a guard: it only checks its stream's version (say,
            // that the requesting token is still unrevoked), so only one that expects some
            // version is kept.
            let writes: Vec<StreamAppend> = writes
                .into_iter()
                .filter(|w| !w.events.is_empty() || w.expected != ExpectedVersion::Any)
                .collect();
            let streams: Vec<StreamId> = writes.iter().map(|w| w.stream_id.clone()).collect();
            match self.store.append_streams(writes).await {
                Ok(committed) => {
                    self.models.wait_for(committed.last_position()).await?;
                    return Ok(Ok(Done::Committed(committed)));
                }
                Err(AppendError::WrongExpectedVersion { stream_id, .. }) => {
                    tracing::debug!(retry = retry.name, %stream_id, "stream moved; deciding again");
                    let streams: Vec<&StreamId> = streams.iter().collect();
                    self.models.wait_for_streams(self.store, &streams).await?;
                }
                Err(AppendError::IdempotencyConflict { event_id, reason }) => {
                    return Ok(Err(Rejection::IdTaken { event_id, reason }));
                }
                Err(AppendError::Store(error)) => return Err(error.into()),
                Err(other) => return Err(AppError::Append(other)),
            }
        }
        Ok(Err(Rejection::Contended {
            retry: retry.name,
            attempts: retry.attempts.max(1),
        }))
    }
}
