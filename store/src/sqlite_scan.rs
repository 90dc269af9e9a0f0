//! Reads of the event log through `rusqlite`: whole-log scans for `audit verify`, and the pages
//! of events every projection's catch-up and rebuild folds ([`EventReader`]).
//!
//! sqlx's SQLite driver hands every row across a channel from its worker thread, copying each
//! value (`sqlite3_value_dup`) and allocating per row, which caps an ordered scan near 200,000 to
//! 300,000 rows/s on the reference machine; a plain read loop on a blocking thread is several
//! times faster, and an audit reads every event and every journal line. Both drivers link the
//! same bundled SQLite. Writes never go through here: connections are opened read-only. The
//! audit's one deferred read transaction gives it a single WAL snapshot; a page read is one
//! statement, so it sees one committed state of the log (SQLite has one writer, so committed
//! positions have no gaps).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use gpunex_domain::{Account, Usdc};
use gpunex_projections::ledger::{self, AccountTotals, LedgerLine};
use rusqlite::{Connection, OpenFlags, Row, params};
use uuid::Uuid;

use crate::audit::AuditSource;
use crate::plan::Head;
use crate::read_decoded::{Decode, RangeRead, Reach};
use crate::rows::{EVENT_COLUMNS, EVENT_ROW_COLUMNS, JOURNAL_SQLITE, hash32, schema_version};
use crate::{EventRow, RecordedEvent, StoreError, to_i64, to_u64};

/// Read-only connections kept between page reads (each page is read on a blocking thread).
pub(crate) struct EventReader {
    path: PathBuf,
    idle: std::sync::Mutex<Vec<Connection>>,
}

/// Connections an [`EventReader`] keeps idle; more may be open while reads run at once.
const IDLE_READERS_MAX: usize = 4;

fn open_read_only(path: &std::path::Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(scan_error)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(scan_error)?;
    Ok(conn)
}

impl EventReader {
    pub fn new(path: PathBuf) -> EventReader {
        EventReader {
            path,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Events with position > `after`, in position order, at most `limit`.
    pub async fn read_all(
        self: &std::sync::Arc<Self>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        self.with_connection(move |conn| scan_events(conn, after, limit))
            .await
    }

    /// The rows after `after` within `reach`, each decoded straight from SQLite's row
    /// ([`crate::read_decoded`]).
    pub async fn read_range<T: Send + 'static>(
        self: &std::sync::Arc<Self>,
        after: u64,
        reach: Reach,
        decode: Decode<T>,
    ) -> Result<RangeRead<T>, StoreError> {
        self.with_connection(move |conn| scan_range(conn, after, reach, decode))
            .await
    }

    /// Runs `read` on a blocking thread with an idle connection, or a new one.
    async fn with_connection<T: Send + 'static>(
        self: &std::sync::Arc<Self>,
        read: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let reader = std::sync::Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let idle = reader.idle.lock().map(|mut idle| idle.pop()).ok().flatten();
            let conn = match idle {
                Some(conn) => conn,
                None => open_read_only(&reader.path)?,
            };
            let read = read(&conn)?;
            // A connection that failed is dropped; one that read is kept for the next page.
            if let Ok(mut idle) = reader.idle.lock()
                && idle.len() < IDLE_READERS_MAX
            {
                idle.push(conn);
            }
            Ok(read)
        })
        .await
        .map_err(|e| StoreError::Direct(e.to_string()))?
    }
}

/// A read-only connection holding one read transaction (one snapshot) for its whole life.
pub(crate) struct SqliteSnapshot {
    conn: Option<Connection>,
}

fn scan_error(error: rusqlite::Error) -> StoreError {
    StoreError::Direct(error.to_string())
}

impl SqliteSnapshot {
    pub async fn begin(path: PathBuf) -> Result<SqliteSnapshot, StoreError> {
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection, StoreError> {
            let conn = open_read_only(&path)?;
            // The snapshot is taken by the first read inside the transaction.
            conn.execute_batch("BEGIN; SELECT count(*) FROM event_log_head;")
                .map_err(scan_error)?;
            Ok(conn)
        })
        .await
        .map_err(|e| StoreError::Direct(e.to_string()))??;
        Ok(SqliteSnapshot { conn: Some(conn) })
    }

    /// Runs `read` on a blocking thread with the connection, and takes the connection back.
    async fn blocking<T: Send + 'static>(
        &mut self,
        read: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.take().ok_or_else(|| {
            StoreError::Direct("snapshot connection lost by an earlier failure".to_owned())
        })?;
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let result = read(&conn);
            (conn, result)
        })
        .await
        .map_err(|e| StoreError::Direct(e.to_string()))?;
        self.conn = Some(conn);
        result
    }
}

impl AuditSource for SqliteSnapshot {
    async fn head(&mut self) -> Result<Head, StoreError> {
        self.blocking(|conn| {
            let (position, hash): (i64, Vec<u8>) = conn
                .query_row(
                    "SELECT last_position, last_hash FROM event_log_head WHERE id = 1",
                    [],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .map_err(scan_error)?;
            let position = to_u64(position, 0, "last_position")?;
            Ok(Head {
                position,
                hash: hash32(hash, position)?,
            })
        })
        .await
    }

    async fn checkpoint(&mut self) -> Result<u64, StoreError> {
        self.blocking(|conn| {
            let position: Option<i64> = conn
                .query_row(
                    "SELECT position FROM projection_checkpoints WHERE projection = ?1",
                    [ledger::LEDGER],
                    |row| row.get(0),
                )
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    other => Err(other),
                })
                .map_err(scan_error)?;
            to_u64(position.unwrap_or(0), 0, "checkpoint")
        })
        .await
    }

    async fn page(
        &mut self,
        after: u64,
        limit: usize,
        checkpoint: u64,
    ) -> Result<(Vec<RecordedEvent>, Vec<LedgerLine>), StoreError> {
        self.blocking(move |conn| {
            let events = scan_events(conn, after, limit)?;
            let through = events.last().map_or(after, |e| e.position).min(checkpoint);
            let lines = scan_lines(conn, after, through)?;
            Ok((events, lines))
        })
        .await
    }

    async fn lines(&mut self, after: u64, through: u64) -> Result<Vec<LedgerLine>, StoreError> {
        self.blocking(move |conn| scan_lines(conn, after, through))
            .await
    }

    async fn balances(&mut self) -> Result<BTreeMap<Account, AccountTotals>, StoreError> {
        self.blocking(|conn| {
            let mut statement = conn
                .prepare("SELECT account, debits_micro_usdc, credits_micro_usdc, last_position FROM ledger_balances")
                .map_err(scan_error)?;
            let mut rows = statement.query([]).map_err(scan_error)?;
            let mut balances = BTreeMap::new();
            while let Some(row) = rows.next().map_err(scan_error)? {
                let account: String = row.get(0).map_err(scan_error)?;
                let last_position = to_u64(row.get(3).map_err(scan_error)?, 0, "last_position")?;
                let account: Account = account.parse().map_err(|e: gpunex_domain::ledger::AccountParseError| {
                    StoreError::CorruptRow {
                        position: last_position,
                        reason: e.to_string(),
                    }
                })?;
                balances.insert(
                    account,
                    AccountTotals {
                        debits: Usdc::from_micros(row.get(1).map_err(scan_error)?),
                        credits: Usdc::from_micros(row.get(2).map_err(scan_error)?),
                        last_position,
                    },
                );
            }
            Ok(balances)
        })
        .await
    }

    async fn postings(
        &mut self,
        after: (String, u64),
        limit: usize,
    ) -> Result<Vec<(String, u64, Vec<u8>)>, StoreError> {
        self.blocking(move |conn| {
            let mut statement = conn
                .prepare_cached(
                    "SELECT account, last_position, positions FROM ledger_postings \
                     WHERE (account, last_position) > (?1, ?2) ORDER BY account, last_position LIMIT ?3",
                )
                .map_err(scan_error)?;
            let mut rows = statement
                .query(params![after.0, to_i64(after.1), to_i64(limit as u64)])
                .map_err(scan_error)?;
            let mut postings = Vec::new();
            while let Some(row) = rows.next().map_err(scan_error)? {
                let last = to_u64(row.get(1).map_err(scan_error)?, 0, "last_position")?;
                postings.push((row.get(0).map_err(scan_error)?, last, row.get(2).map_err(scan_error)?));
            }
            Ok(postings)
        })
        .await
    }
}

fn scan_events(
    conn: &Connection,
    after: u64,
    limit: usize,
) -> Result<Vec<RecordedEvent>, StoreError> {
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE position > ?1 ORDER BY position LIMIT ?2"
        ))
        .map_err(scan_error)?;
    let mut rows = statement
        .query(params![to_i64(after), to_i64(limit as u64)])
        .map_err(scan_error)?;
    let mut events = Vec::with_capacity(limit);
    while let Some(row) = rows.next().map_err(scan_error)? {
        events.push(event_from_row(row)?);
    }
    Ok(events)
}

/// [`EventReader::read_range`] on one connection.
fn scan_range<T>(
    conn: &Connection,
    after: u64,
    reach: Reach,
    decode: Decode<T>,
) -> Result<RangeRead<T>, StoreError> {
    let (sql, bound) = match reach {
        Reach::Through(through) => (
            format!(
                "SELECT {EVENT_ROW_COLUMNS} FROM events WHERE position > ?1 AND position <= ?2 \
                 ORDER BY position"
            ),
            through,
        ),
        Reach::Next(limit) => (
            format!(
                "SELECT {EVENT_ROW_COLUMNS} FROM events WHERE position > ?1 ORDER BY position \
                 LIMIT ?2"
            ),
            limit as u64,
        ),
    };
    let mut statement = conn.prepare_cached(&sql).map_err(scan_error)?;
    let mut rows = statement
        .query(params![to_i64(after), to_i64(bound)])
        .map_err(scan_error)?;
    let mut read = RangeRead::with_capacity(reach.rows_at_most(after));
    while let Some(row) = rows.next().map_err(scan_error)? {
        read.push(&event_row(row)?, decode)?;
    }
    Ok(read)
}

fn scan_lines(conn: &Connection, after: u64, through: u64) -> Result<Vec<LedgerLine>, StoreError> {
    if after >= through {
        return Ok(Vec::new());
    }
    let mut statement = conn
        .prepare_cached(JOURNAL_SQLITE.through)
        .map_err(scan_error)?;
    let blocks = statement
        .query_map(params![to_i64(after), to_i64(through)], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .map_err(scan_error)?
        .collect::<Result<Vec<(i64, i64, Vec<u8>)>, _>>()
        .map_err(scan_error)?;
    let entries = crate::journal::block_entries(blocks, |at| at > after && at <= through)?;
    let positions = serde_json::to_string(&crate::journal::entry_positions(&entries))
        .map_err(|e| StoreError::Direct(e.to_string()))?;
    let mut statement = conn
        .prepare_cached(JOURNAL_SQLITE.stamps)
        .map_err(scan_error)?;
    let mut rows = statement.query(params![positions]).map_err(scan_error)?;
    let mut stamps = HashMap::new();
    while let Some(row) = rows.next().map_err(scan_error)? {
        let position = to_u64(row.get(0).map_err(scan_error)?, 0, "position")?;
        let recorded_at_us: Option<i64> = row.get(2).map_err(scan_error)?;
        stamps.insert(
            position,
            (
                uuid_column(row, 1, position)?,
                recorded_at_us.unwrap_or_default(),
            ),
        );
    }
    let lines = crate::journal::entry_lines(entries, &stamps)?;
    Ok(lines)
}

fn uuid_column(row: &Row<'_>, index: usize, position: u64) -> Result<Uuid, StoreError> {
    let bytes: Vec<u8> = row.get(index).map_err(scan_error)?;
    Uuid::from_slice(&bytes).map_err(|_| StoreError::CorruptRow {
        position,
        reason: format!("column {index} is not a 16-byte UUID"),
    })
}

/// The columns of [`EVENT_ROW_COLUMNS`], borrowed from the row.
fn event_row<'r>(row: &'r Row<'_>) -> Result<EventRow<'r>, StoreError> {
    let position = to_u64(row.get(0).map_err(scan_error)?, 0, "position")?;
    let text = |index: usize| -> Result<&'r str, StoreError> {
        row.get_ref(index)
            .map_err(scan_error)?
            .as_str()
            .map_err(|e| StoreError::CorruptRow {
                position,
                reason: format!("column {index}: {e}"),
            })
    };
    let event_id = row.get_ref(1).map_err(scan_error)?.as_blob().ok();
    Ok(EventRow {
        position,
        event_id: event_id
            .and_then(|bytes| Uuid::from_slice(bytes).ok())
            .ok_or_else(|| StoreError::CorruptRow {
                position,
                reason: "column 1 is not a 16-byte UUID".to_owned(),
            })?,
        stream_id: text(2)?,
        stream_version: to_u64(row.get(3).map_err(scan_error)?, position, "stream_version")?,
        event_type: text(4)?,
        schema_version: schema_version(row.get(5).map_err(scan_error)?, position)?,
        recorded_at_us: row.get(6).map_err(scan_error)?,
        payload: text(7)?,
    })
}

fn event_from_row(row: &Row<'_>) -> Result<RecordedEvent, StoreError> {
    let position = to_u64(row.get(0).map_err(scan_error)?, 0, "position")?;
    Ok(RecordedEvent {
        position,
        event_id: uuid_column(row, 1, position)?,
        stream_id: row.get(2).map_err(scan_error)?,
        stream_version: to_u64(row.get(3).map_err(scan_error)?, position, "stream_version")?,
        event_type: row.get(4).map_err(scan_error)?,
        schema_version: schema_version(row.get(5).map_err(scan_error)?, position)?,
        recorded_at_us: row.get(6).map_err(scan_error)?,
        payload: row.get(7).map_err(scan_error)?,
        metadata: row.get(8).map_err(scan_error)?,
        hash: hash32(row.get(9).map_err(scan_error)?, position)?,
    })
}
