//! The SQLite rebuilds' page writes, through `rusqlite` on a blocking thread: the ledger's
//! (here) and the earnings projection's (`earnings::write_page_sqlite`).
//!
//! A rebuild writes a journal block per 28 events and a postings row per account and page into
//! the `*_rebuild` tables.
//! Through sqlx every value of every row is bound into an argument buffer and handed to its
//! worker thread; here one cached prepared statement is stepped per row on the rebuild's own
//! connection, which is what the writes cost when nothing stands between them and SQLite. Only
//! the rebuild tables and the rebuild's own row in `projection_rebuilds` are written through
//! this connection; the live tables, the log and the swap stay with the sqlx writer. SQLite
//! serializes writers across connections, so a page waits for the writer's lock like any other
//! (busy timeout) and appends wait for a page's short transaction.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};
use uuid::Uuid;

use crate::journal::LedgerRows;
use crate::rebuild::LedgerTables;
use crate::{StoreError, to_i64};

/// The rebuild's read-write connection, opened on its first page and kept for the next.
pub(crate) struct RebuildWriter {
    path: PathBuf,
    /// How long a page waits for SQLite's write lock (the sqlx writer's own bound).
    busy_timeout: Duration,
    conn: Mutex<Option<Connection>>,
}

fn open(path: &std::path::Path, busy_timeout: Duration) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(bulk_error)?;
    conn.busy_timeout(busy_timeout).map_err(bulk_error)?;
    // The same durability as the sqlx writer: a page the rebuild recorded as written is on disk.
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
        .map_err(bulk_error)?;
    Ok(conn)
}

impl RebuildWriter {
    pub fn new(path: PathBuf, busy_timeout: Duration) -> RebuildWriter {
        RebuildWriter {
            path,
            busy_timeout,
            conn: Mutex::new(None),
        }
    }

    /// Runs `write` on this writer's connection, on a blocking thread. The connection is kept
    /// for the next call only after a write that succeeded (a failed transaction rolled back
    /// when it was dropped).
    pub async fn run<T, F>(self: &Arc<Self>, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let writer = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut slot = writer
                .conn
                .lock()
                .map_err(|_| StoreError::Direct("rebuild writer lock poisoned".to_owned()))?;
            let mut conn = match slot.take() {
                Some(conn) => conn,
                None => open(&writer.path, writer.busy_timeout)?,
            };
            let written = write(&mut conn);
            if written.is_ok() {
                *slot = Some(conn);
            }
            written
        })
        .await
        .map_err(|e| StoreError::Direct(e.to_string()))?
    }

    /// In one transaction: checks that `run_id` still owns the rebuild tables (recording
    /// `through` as its progress), then writes `batch` into them.
    pub async fn write_page(
        self: &Arc<Self>,
        projection: &'static str,
        run_id: Uuid,
        through: u64,
        page: LedgerRows,
    ) -> Result<(), StoreError> {
        self.run(move |conn| write_page(conn, projection, run_id, through, &page))
            .await
    }
}

/// A rusqlite error as the store's.
pub(crate) fn bulk_error(error: rusqlite::Error) -> StoreError {
    StoreError::Direct(error.to_string())
}

fn write_page(
    conn: &mut Connection,
    projection: &'static str,
    run_id: Uuid,
    through: u64,
    page: &LedgerRows,
) -> Result<(), StoreError> {
    let tables = LedgerTables::REBUILD;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(bulk_error)?;
    let claimed = tx
        .prepare_cached(
            "UPDATE projection_rebuilds SET position = ?1 WHERE projection = ?2 AND run_id = ?3",
        )
        .and_then(|mut claim| {
            claim.execute(params![
                to_i64(through),
                projection,
                run_id.as_bytes().as_slice()
            ])
        })
        .map_err(bulk_error)?;
    if claimed != 1 {
        return Err(StoreError::RebuildSuperseded {
            projection: projection.to_owned(),
        });
    }
    {
        let rows = &page.journal;
        let mut insert = tx
            .prepare_cached(&format!(
                "INSERT INTO {} (position, first_position, entries) VALUES (?1, ?2, ?3)",
                tables.journal
            ))
            .map_err(bulk_error)?;
        for block in &rows.blocks {
            insert
                .execute(params![
                    to_i64(block.position),
                    to_i64(block.first_position),
                    block.entries.as_slice(),
                ])
                .map_err(bulk_error)?;
        }
        let mut postings = tx
            .prepare_cached(&format!(
                "INSERT INTO {} (account, last_position, positions) VALUES (?1, ?2, ?3)",
                tables.postings
            ))
            .map_err(bulk_error)?;
        for row in &rows.postings {
            postings
                .execute(params![
                    row.account.as_str(),
                    to_i64(row.last_position),
                    row.positions.as_slice(),
                ])
                .map_err(bulk_error)?;
        }
        let mut upsert = tx
            .prepare_cached(&format!(
                "INSERT INTO {t} (account, debits_micro_usdc, credits_micro_usdc, last_position) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (account) DO UPDATE SET \
                 debits_micro_usdc = {t}.debits_micro_usdc + excluded.debits_micro_usdc, \
                 credits_micro_usdc = {t}.credits_micro_usdc + excluded.credits_micro_usdc, \
                 last_position = max({t}.last_position, excluded.last_position)",
                t = tables.balances
            ))
            .map_err(bulk_error)?;
        for (account, totals) in &page.deltas {
            upsert
                .execute(params![
                    account.to_string(),
                    totals.debits.micros(),
                    totals.credits.micros(),
                    to_i64(totals.last_position),
                ])
                .map_err(bulk_error)?;
        }
    }
    tx.commit().map_err(bulk_error)
}
