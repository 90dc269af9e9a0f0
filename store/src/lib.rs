//! Event persistence for GPUnex: the only crate that contains SQL.
//!
//! One hash-chained, append-only event log with the same semantics on SQLite (the embedded
//! default) and PostgreSQL (production); the read-model tables the projections write; and the
//! audit that checks both. See `docs/ARCHITECTURE.md` for the invariants this crate keeps.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

/// SQL text assembled from compile-time constants (column lists, read-model table names), never
/// from input: values always travel as bind parameters.
macro_rules! sql {
    ($($arg:tt)*) => {
        sqlx::AssertSqlSafe(format!($($arg)*))
    };
}

/// Binds the values of a [`crate::sql::Binds`] to a query, in order (either database's query
/// type: use it inside `on_reader!`).
macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut query = $query;
        for value in &$binds.values {
            query = match value {
                crate::sql::Bound::Int(v) => query.bind(*v),
                crate::sql::Bound::Text(v) => query.bind(v.as_str()),
                crate::sql::Bound::Bool(v) => query.bind(*v),
            };
        }
        query
    }};
}

/// Runs the same statements in one transaction on either database.
macro_rules! in_transaction {
    ($store:expr, |$tx:ident| $body:block) => {
        match &$store.inner.db {
            crate::store::Db::Sqlite(db) => {
                let mut $tx = db.write.begin_with("BEGIN IMMEDIATE").await?;
                let result = $body;
                $tx.commit().await?;
                result
            }
            crate::store::Db::Postgres(db) => {
                let mut $tx = db.pool.begin().await?;
                let result = $body;
                $tx.commit().await?;
                result
            }
        }
    };
}

/// Runs reads in one snapshot on either database: SQLite's deferred read transaction (in WAL
/// mode its first read fixes what it sees), PostgreSQL's `REPEATABLE READ, READ ONLY`.
macro_rules! in_read_snapshot {
    ($store:expr, |$tx:ident| $body:block) => {
        match &$store.inner.db {
            crate::store::Db::Sqlite(db) => {
                let mut $tx = db.read.begin().await?;
                let result = $body;
                $tx.commit().await?;
                result
            }
            crate::store::Db::Postgres(db) => {
                let mut $tx = db
                    .pool
                    .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    .await?;
                let result = $body;
                $tx.commit().await?;
                result
            }
        }
    };
}

/// Runs one read on either database.
macro_rules! on_reader {
    ($store:expr, |$conn:ident| $body:expr) => {
        match &$store.inner.db {
            crate::store::Db::Sqlite(db) => {
                let $conn = &db.read;
                $body
            }
            crate::store::Db::Postgres(db) => {
                let $conn = &db.pool;
                $body
            }
        }
    };
}

/// The writes of an `Idempotency-Key` reservation inside a group commit, for one backend's
/// connection type (`$conn`) and the integer type its `status` column binds as (`$status`):
/// the same SQL on both databases, written once.
macro_rules! reservation_writes {
    ($conn:ty, $status:ty) => {
        /// For each request, whether this process may write it: unmarked ones always, marked ones while
        /// their `Idempotency-Key` reservation is still this process's (another may have taken it over).
        async fn owned_requests(
            conn: &mut $conn,
            marks: &[Option<KeyMark>],
        ) -> Result<Vec<bool>, StoreError> {
            let mut owned = Vec::with_capacity(marks.len());
            for mark in marks {
                owned.push(match mark {
                    None => true,
                    Some(mark) => {
                        let owner: Option<String> = sqlx::query_scalar(
                            "SELECT owner FROM idempotency_keys WHERE caller = $1 AND key = $2",
                        )
                        .bind(&mark.caller)
                        .bind(&mark.key)
                        .fetch_optional(&mut *conn)
                        .await?;
                        owner.as_deref() == Some(mark.owner.as_str())
                    }
                });
            }
            Ok(owned)
        }

        /// Records on each marked reservation the position its append committed, and the response its
        /// handler prepared: in the transaction of the events.
        async fn record_commits(
            conn: &mut $conn,
            marks: &[&Option<KeyMark>],
            outcomes: &[Result<crate::Committed, crate::AppendError>],
        ) -> Result<(), StoreError> {
            for (mark, outcome) in marks.iter().zip(outcomes) {
                let (Some(mark), Ok(committed)) = (mark, outcome) else {
                    continue;
                };
                if committed.replayed {
                    continue;
                }
                let position = to_i64(committed.last_position());
                sqlx::query(
                    "UPDATE idempotency_keys SET committed_position = $1 \
                     WHERE caller = $2 AND key = $3 AND owner = $4",
                )
                .bind(position)
                .bind(&mark.caller)
                .bind(&mark.key)
                .bind(&mark.owner)
                .execute(&mut *conn)
                .await?;
                if let Some((status, body)) = &mark.response {
                    sqlx::query(
                        "UPDATE idempotency_keys SET status = $1, body = $2 \
                         WHERE caller = $3 AND key = $4 AND owner = $5 AND status = 0",
                    )
                    .bind(<$status>::from(*status))
                    .bind(body)
                    .bind(&mark.caller)
                    .bind(&mark.key)
                    .bind(&mark.owner)
                    .execute(&mut *conn)
                    .await?;
                }
            }
            Ok(())
        }
    };
}

pub mod audit;
pub mod bench;
mod bytes;
mod clock;
pub mod copy;
pub mod earnings;
mod earnings_hours;
mod earnings_runs;
pub mod envelope;
mod event_rows;
pub mod fleet;
pub mod idempotency;
pub mod job_logs;
mod journal;
mod key_scope;
mod off_task;
mod pages;
pub mod payouts;
mod plan;
mod postgres;
mod postgres_snapshot;
pub mod presence_history;
pub mod price_history;
mod read_ahead;
mod read_decoded;
mod rebuild;
pub mod rentals;
mod row_audit;
mod rows;
pub mod snapshots;
mod sql;
mod sqlite;
mod sqlite_bulk;
mod sqlite_scan;
pub mod stats;
mod store;
mod subscription;
mod timing;
mod writer;

use gpunex_domain::codes::ErrorCode;
use gpunex_domain::{DecodeError, DomainEvent, StreamId};
use gpunex_projections::ProjectedEvent;
use uuid::Uuid;

pub use audit::{AuditFinding, AuditProgress, AuditReport};
pub use clock::SystemClock;
pub use envelope::{
    APPEND_EVENTS_MAX, APPEND_STREAMS_MAX, ExpectedVersion, InvalidAppend, Metadata, NewEvent,
    StreamAppend,
};
pub use store::{Backend, ProjectionStatus, Rebuilt, Store, StoreOptions, StreamTip};
pub use subscription::Subscription;
pub use timing::CatchUpTimes;

/// Rows read per query when scanning the log.
pub const READ_BATCH_EVENTS_MAX: usize = 10_000;

/// An event as stored: exactly the columns of the `events` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    pub position: u64,
    pub event_id: Uuid,
    pub stream_id: String,
    pub stream_version: u64,
    pub event_type: String,
    pub schema_version: u32,
    pub recorded_at_us: i64,
    /// Canonical JSON text, exactly as hashed.
    pub payload: String,
    /// Canonical JSON text of [`Metadata`], exactly as hashed.
    pub metadata: String,
    pub hash: [u8; 32],
}

impl RecordedEvent {
    /// The event at its current schema version (older versions are upcast).
    pub fn decode(&self) -> Result<DomainEvent, DecodeError> {
        self.row().decode()
    }

    pub fn decode_metadata(&self) -> Result<Metadata, StoreError> {
        serde_json::from_str(&self.metadata).map_err(|e| StoreError::CorruptRow {
            position: self.position,
            reason: format!("metadata: {e}"),
        })
    }

    pub fn to_projected(&self) -> Result<ProjectedEvent, StoreError> {
        self.row().to_projected()
    }

    /// The columns a projection reads, borrowed.
    pub fn row(&self) -> EventRow<'_> {
        EventRow {
            position: self.position,
            event_id: self.event_id,
            stream_id: &self.stream_id,
            stream_version: self.stream_version,
            event_type: &self.event_type,
            schema_version: self.schema_version,
            recorded_at_us: self.recorded_at_us,
            payload: &self.payload,
        }
    }
}

/// The columns of a stored event that projections read (not its metadata or hash), borrowed:
/// a catch-up decodes each event straight from the database's row, without copying it first
/// (ADR 0015).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRow<'a> {
    pub position: u64,
    pub event_id: Uuid,
    pub stream_id: &'a str,
    pub stream_version: u64,
    pub event_type: &'a str,
    pub schema_version: u32,
    pub recorded_at_us: i64,
    /// Canonical JSON text, exactly as hashed.
    pub payload: &'a str,
}

impl EventRow<'_> {
    /// The event at its current schema version (older versions are upcast).
    pub fn decode(&self) -> Result<DomainEvent, DecodeError> {
        DomainEvent::decode_json(self.event_type, self.schema_version, self.payload)
    }

    pub fn to_projected(&self) -> Result<ProjectedEvent, StoreError> {
        let corrupt = |reason: String| StoreError::CorruptRow {
            position: self.position,
            reason,
        };
        Ok(ProjectedEvent {
            position: self.position,
            event_id: self.event_id,
            stream_id: StreamId::parse(self.stream_id.to_owned())
                .map_err(|e| corrupt(e.to_string()))?,
            stream_version: self.stream_version,
            recorded_at_us: self.recorded_at_us,
            event: self.decode().map_err(|e| corrupt(e.to_string()))?,
        })
    }
}

/// Where one appended event landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedEvent {
    pub event_id: Uuid,
    pub stream_id: String,
    pub stream_version: u64,
    pub position: u64,
}

/// The result of an append. `replayed` is true when every event id was already stored with
/// identical content: the original positions are returned and nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub events: Vec<CommittedEvent>,
    pub replayed: bool,
}

impl Committed {
    pub fn last_position(&self) -> u64 {
        self.events.iter().map(|e| e.position).max().unwrap_or(0)
    }
}

/// Why an event id that is already stored cannot be accepted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictReason {
    /// Same id, different stream, type, version, payload or metadata.
    DifferentContent,
    /// Some ids of this append are stored and others are not: it is not a retry of one append.
    PartiallyStored,
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("invalid append: {0}")]
    Invalid(#[from] InvalidAppend),
    #[error("stream `{stream_id}` is at version {actual} (0: no stream), expected {expected:?}")]
    WrongExpectedVersion {
        stream_id: String,
        expected: ExpectedVersion,
        actual: u64,
    },
    #[error("event id {event_id} already exists: {}", match reason {
        ConflictReason::DifferentContent => "stored with different content",
        ConflictReason::PartiallyStored => "stored as part of a different append",
    })]
    IdempotencyConflict {
        event_id: Uuid,
        reason: ConflictReason,
    },
    #[error(
        "the request's Idempotency-Key reservation was taken over by another server; nothing was written"
    )]
    ReservationLost,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AppendError {
    /// A stable machine code for clients and logs.
    pub fn code(&self) -> ErrorCode {
        match self {
            AppendError::Invalid(_) => ErrorCode::InvalidAppend,
            AppendError::WrongExpectedVersion { .. } => ErrorCode::WrongExpectedVersion,
            AppendError::IdempotencyConflict { .. } => ErrorCode::IdempotencyConflict,
            AppendError::ReservationLost => ErrorCode::RequestInProgress,
            AppendError::Store(_) => ErrorCode::StoreUnavailable,
        }
    }
}

/// Infrastructure failures, as opposed to rejections of the request.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database url `{scheme}`: use sqlite:// or postgres://")]
    UnsupportedUrl { scheme: String },
    #[error("stored row at position {position} is malformed: {reason}")]
    CorruptRow { position: u64, reason: String },
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// A failure on one of the SQLite connections opened directly (rusqlite), not through the
    /// sqlx pools: the projections' event reader and the ledger rebuild's page writer.
    #[error("SQLite (direct connection) failed: {0}")]
    Direct(String),
    #[error("copy refused: {0}")]
    ImportRefused(String),
    #[error(
        "another rebuild of `{projection}` started and took over; this one stopped without swapping"
    )]
    RebuildSuperseded { projection: String },
    #[error("the append writer has stopped")]
    WriterStopped,
    #[error("projection `{projection}` checkpoint moved from {expected}: another runner is active")]
    CheckpointMoved { projection: String, expected: u64 },
    #[error(transparent)]
    Fold(#[from] gpunex_projections::FoldError),
}

impl StoreError {
    /// The database could not be reached (as opposed to a bug or corrupt data): worth a retry.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Database(error) => is_transient(error),
            _ => false,
        }
    }
}

/// A database error that says nothing about the request: the connection or the server went
/// away, or was too busy. A retry may succeed.
fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::Io(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(database) => {
            let Some(code) = database.code() else {
                return false;
            };
            if database
                .try_downcast_ref::<sqlx::sqlite::SqliteError>()
                .is_some()
            {
                // SQLite: 5 busy, 6 locked, and their extended codes (the primary code in the
                // low byte).
                return code.parse::<u32>().is_ok_and(|n| matches!(n & 0xff, 5 | 6));
            }
            // PostgreSQL: class 08 connection exceptions; 57P01-57P03 the server shutting down or
            // terminating the backend; class 53 insufficient resources; 40001 and 40P01 a
            // serialization failure or deadlock, rolled back whole.
            code.starts_with("08")
                || code.starts_with("57P0")
                || code.starts_with("53")
                || code == "40001"
                || code == "40P01"
        }
        _ => false,
    }
}

pub(crate) fn to_u64(value: i64, position: u64, column: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::CorruptRow {
        position,
        reason: format!("{column} is negative: {value}"),
    })
}

pub(crate) fn to_i64(value: u64) -> i64 {
    // Positions, versions and amounts stored by this crate never exceed i64::MAX: positions are
    // allocated one by one from 0, and amounts are i64 already.
    i64::try_from(value).unwrap_or(i64::MAX)
}
