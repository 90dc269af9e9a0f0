//! SQLite: the embedded default. One file in WAL mode with `synchronous = FULL` (a committed
//! append survives power loss), one writer connection (SQLite allows one writer at a time anyway)
//! and a small pool of readers that never block it.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::time::Duration;

use gpunex_domain::Account;
use gpunex_projections::ledger::{AccountTotals, LedgerBatch, LedgerLine};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};
use uuid::Uuid;

use crate::envelope::ValidatedStream;
use crate::journal::LedgerRows;
use crate::key_scope::KeyMark;
use crate::plan::{Head, StoredIdentity, group_keys, plan_group};
use crate::read_decoded::{Decode, RangeRead, Reach, ReadRange};
use crate::rebuild::{LedgerTables, RebuildBackend};
use crate::rows::{self, EVENT_COLUMNS, JOURNAL_SQLITE, schema_version};
use crate::writer::{GroupCommit, GroupOutcome, merge_owned};
use crate::{RecordedEvent, StoreError, to_i64, to_u64};

const READ_CONNECTIONS_MAX: u32 = 4;
/// How long a connection waits for SQLite's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// Rows per multi-row INSERT, under SQLite's 32,766 bound parameters.
const INSERT_ROWS_MAX: usize = 500;

pub(crate) struct SqliteBackend {
    pub read: SqlitePool,
    pub write: SqlitePool,
    /// The database file, for the bulk scans of `sqlite_scan`.
    pub path: std::path::PathBuf,
    /// Pages of events for projections, read through rusqlite (see `sqlite_scan`).
    events: std::sync::Arc<crate::sqlite_scan::EventReader>,
    /// The rebuilds' page writes (ledger, earnings), through rusqlite (see `sqlite_bulk`).
    pub rebuild_writer: std::sync::Arc<crate::sqlite_bulk::RebuildWriter>,
    clock: gpunex_domain::clock::SharedClock,
}

impl SqliteBackend {
    pub async fn connect(
        url: &str,
        clock: gpunex_domain::clock::SharedClock,
    ) -> Result<SqliteBackend, StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let path = options.get_filename().to_path_buf();
        // sqlx names in-memory databases `file:sqlx-in-memory-N` (or `mode=memory` URLs); the
        // ledger must be a file that every connection, the audit and other processes share.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        if path.as_os_str().is_empty() || in_memory {
            return Err(StoreError::UnsupportedUrl {
                scheme: "sqlite in-memory (the ledger needs a file)".to_owned(),
            });
        }
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        let read = SqlitePoolOptions::new()
            .max_connections(READ_CONNECTIONS_MAX)
            .connect_with(options.read_only(true))
            .await?;
        Ok(SqliteBackend {
            read,
            write,
            events: std::sync::Arc::new(crate::sqlite_scan::EventReader::new(path.clone())),
            rebuild_writer: std::sync::Arc::new(crate::sqlite_bulk::RebuildWriter::new(
                path.clone(),
                BUSY_TIMEOUT,
            )),
            path,
            clock,
        })
    }

    fn now_us(&self) -> i64 {
        self.clock.now().unix_micros()
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        sqlx::migrate!("../migrations/sqlite")
            .run(&self.write)
            .await?;
        let mut conn = self.write.acquire().await?;
        create_live_ledger_tables(&mut conn).await?;
        // Every stored projection starts at position 0.
        for projection in gpunex_projections::PROJECTIONS {
            sqlx::query(
                "INSERT INTO projection_checkpoints (projection, position, updated_at_us) \
                 VALUES (?, 0, ?) ON CONFLICT (projection) DO NOTHING",
            )
            .bind(projection)
            .bind(self.now_us())
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }

    pub async fn head(&self) -> Result<Head, StoreError> {
        let row = sqlx::query("SELECT last_position, last_hash FROM event_log_head WHERE id = 1")
            .fetch_one(&self.read)
            .await?;
        rows::sqlite::head(&row)
    }

    pub async fn read_all(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        self.events.read_all(after, limit).await
    }

    /// Appends rows recorded by another log, after checking they continue this one's chain
    /// (see `copy`), and moves the head, in one transaction.
    pub async fn import_events(&self, rows: &[RecordedEvent]) -> Result<u64, StoreError> {
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query("SELECT last_position, last_hash FROM event_log_head WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?;
        let head = crate::plan::continue_chain(rows::sqlite::head(&row)?, rows)?;
        insert_rows(&mut tx, rows).await?;
        sqlx::query("UPDATE event_log_head SET last_position = ?, last_hash = ? WHERE id = 1")
            .bind(to_i64(head.position))
            .bind(head.hash.as_slice())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(head.position)
    }

    /// The position of a stream's last event, if it has any.
    /// The last event of a stream: its log position and stream version (`None`: no events).
    pub async fn stream_tip(&self, stream_id: &str) -> Result<Option<(u64, u64)>, StoreError> {
        let tip: Option<(i64, i64)> = sqlx::query_as(
            "SELECT position, stream_version FROM events WHERE stream_id = ? \
             ORDER BY stream_version DESC LIMIT 1",
        )
        .bind(stream_id)
        .fetch_optional(&self.read)
        .await?;
        tip.map(|(p, v)| {
            let position = to_u64(p, 0, "position")?;
            Ok((position, to_u64(v, position, "stream_version")?))
        })
        .transpose()
    }

    pub async fn read_stream(
        &self,
        stream_id: &str,
        after_version: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = sqlx::query(sql!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ? AND stream_version > ? \
             ORDER BY stream_version LIMIT ?"
        ))
        .bind(stream_id)
        .bind(to_i64(after_version))
        .bind(to_i64(limit as u64))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(rows::sqlite::event).collect()
    }

    pub async fn checkpoint(&self, projection: &str) -> Result<u64, StoreError> {
        let position: Option<i64> =
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE projection = ?")
                .bind(projection)
                .fetch_optional(&self.read)
                .await?;
        to_u64(position.unwrap_or(0), 0, "checkpoint")
    }

    /// Moves consumer `name`'s checkpoint from `from` to `to`, only if it is still at `from`.
    pub async fn advance_checkpoint(
        &self,
        name: &str,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let moved = sqlx::query(
            "INSERT INTO projection_checkpoints (projection, position, updated_at_us) VALUES (?1, ?2, ?3) \
             ON CONFLICT (projection) DO UPDATE SET position = excluded.position, updated_at_us = excluded.updated_at_us \
             WHERE projection_checkpoints.position = ?4",
        )
        .bind(name)
        .bind(to_i64(to))
        .bind(self.now_us())
        .bind(to_i64(from))
        .execute(&self.write)
        .await?;
        if moved.rows_affected() != 1 {
            return Err(StoreError::CheckpointMoved {
                projection: name.to_owned(),
                expected: from,
            });
        }
        Ok(())
    }

    pub async fn commit_ledger(
        &self,
        batch: &LedgerBatch,
        from: u64,
        to: u64,
    ) -> Result<(), StoreError> {
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;
        move_checkpoint(&mut tx, from, to, self.now_us()).await?;
        write_ledger_batch(&mut tx, LedgerTables::LIVE, &LedgerRows::of(batch)?).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The ledger checkpoint and every account's totals, read in one snapshot so the totals are
    /// exactly those as of the checkpoint.
    pub async fn balances(&self) -> Result<(u64, BTreeMap<Account, AccountTotals>), StoreError> {
        let mut tx = self.read.begin().await?;
        let checkpoint: Option<i64> =
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE projection = ?")
                .bind(gpunex_projections::ledger::LEDGER)
                .fetch_optional(&mut *tx)
                .await?;
        let rows = sqlx::query(
            "SELECT account, debits_micro_usdc, credits_micro_usdc, last_position FROM ledger_balances",
        )
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let balances = rows
            .iter()
            .map(rows::sqlite::balance)
            .collect::<Result<_, _>>()?;
        Ok((to_u64(checkpoint.unwrap_or(0), 0, "checkpoint")?, balances))
    }

    /// Journal lines (optionally of one account) after `after`, at most `limit`, read in one
    /// snapshot: an account's through its postings rows, then the entries at those positions.
    pub async fn entries(
        &self,
        account: Option<Account>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LedgerLine>, StoreError> {
        let mut tx = self.read.begin().await?;
        let entries = match account {
            Some(account) => {
                let positions = account_positions(&mut tx, account, after, limit).await?;
                let wanted: std::collections::HashSet<u64> = positions.iter().copied().collect();
                let blocks = sqlx::query_as(JOURNAL_SQLITE.at)
                    .bind(json_list(&positions)?)
                    .fetch_all(&mut *tx)
                    .await?;
                crate::journal::block_entries(blocks, |at| wanted.contains(&at))?
            }
            None => {
                let mut walk = crate::journal::BlockWalk::new(after, limit);
                while let Some(from) = walk.next() {
                    walk.add(
                        sqlx::query_as(JOURNAL_SQLITE.after)
                            .bind(to_i64(from))
                            .bind(to_i64(crate::journal::BLOCKS_PER_READ))
                            .fetch_all(&mut *tx)
                            .await?,
                    )?;
                }
                walk.entries()
            }
        };
        let stamps: Vec<(i64, Option<Uuid>, Option<i64>)> = sqlx::query_as(JOURNAL_SQLITE.stamps)
            .bind(json_list(&crate::journal::entry_positions(&entries))?)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let lines = crate::journal::entry_lines(entries, &crate::journal::stamp_map(stamps)?)?;
        Ok(crate::journal::statement(lines, account, limit))
    }
}

/// A list of positions as SQLite's `json_each` reads it.
fn json_list<T: serde::Serialize>(positions: &[T]) -> Result<String, StoreError> {
    serde_json::to_string(positions).map_err(|e| StoreError::Direct(e.to_string()))
}

/// Up to `limit` positions after `after` of the entries that post to `account`, in order.
async fn account_positions(
    conn: &mut SqliteConnection,
    account: Account,
    after: u64,
    limit: usize,
) -> Result<Vec<u64>, StoreError> {
    let account = account.to_string();
    let mut walk = crate::journal::PositionWalk::new(after, limit);
    while let Some(from) = walk.next() {
        let rows = sqlx::query(
            "SELECT last_position, positions FROM ledger_postings \
             WHERE account = ? AND last_position > ? ORDER BY last_position LIMIT ?",
        )
        .bind(&account)
        .bind(to_i64(from))
        .bind(to_i64(crate::journal::POSTINGS_ROWS_PER_READ))
        .fetch_all(&mut *conn)
        .await?;
        walk.add(
            rows.iter()
                .map(rows::sqlite::postings)
                .collect::<Result<_, _>>()?,
        );
    }
    Ok(walk.positions())
}

impl ReadRange for SqliteBackend {
    async fn read_range<T: Send + 'static>(
        &self,
        after: u64,
        reach: Reach,
        decode: Decode<T>,
    ) -> Result<RangeRead<T>, StoreError> {
        self.events.read_range(after, reach, decode).await
    }
}

impl RebuildBackend for SqliteBackend {
    type Swap = sqlx::Transaction<'static, Sqlite>;

    async fn start(&self, run_id: Uuid) -> Result<(), StoreError> {
        let tables = LedgerTables::REBUILD;
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(
            "INSERT INTO projection_rebuilds (projection, run_id, position, started_at_us) VALUES (?, ?, 0, ?) \
             ON CONFLICT (projection) DO UPDATE SET run_id = excluded.run_id, position = 0, \
             started_at_us = excluded.started_at_us",
        )
        .bind(gpunex_projections::ledger::LEDGER)
        .bind(run_id)
        .bind(self.now_us())
        .execute(&mut *tx)
        .await?;
        drop_ledger_tables(&mut tx, tables).await?;
        create_ledger_tables(&mut tx, tables).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn write(&self, run_id: Uuid, through: u64, page: LedgerRows) -> Result<(), StoreError> {
        self.rebuild_writer
            .write_page(gpunex_projections::ledger::LEDGER, run_id, through, page)
            .await
    }

    /// Under the write lock: appends wait for the swap, so it folds to the end of the log.
    async fn begin_swap(
        &self,
        run_id: Uuid,
        position: u64,
    ) -> Result<(Self::Swap, Option<u64>), StoreError> {
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;
        claim_rebuild(&mut tx, run_id, position).await?;
        Ok((tx, None))
    }

    async fn read_in_swap(
        swap: &mut Self::Swap,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        read_all(&mut **swap, after, limit).await
    }

    async fn write_in_swap(swap: &mut Self::Swap, rows: &LedgerRows) -> Result<(), StoreError> {
        write_ledger_batch(swap, LedgerTables::REBUILD, rows).await
    }

    async fn finish_swap(
        &self,
        mut tx: Self::Swap,
        run_id: Uuid,
        position: u64,
    ) -> Result<(), StoreError> {
        drop_ledger_tables(&mut tx, LedgerTables::LIVE).await?;
        for (rebuilt, live) in LedgerTables::REBUILD
            .all()
            .into_iter()
            .zip(LedgerTables::LIVE.all())
        {
            sqlx::query(sql!("ALTER TABLE {rebuilt} RENAME TO {live}"))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE projection_checkpoints SET position = ?, updated_at_us = ? WHERE projection = ?")
            .bind(to_i64(position))
            .bind(self.now_us())
            .bind(gpunex_projections::ledger::LEDGER)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM projection_rebuilds WHERE projection = ? AND run_id = ?")
            .bind(gpunex_projections::ledger::LEDGER)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Checks that rebuild `run_id` still owns the `*_rebuild` tables and records its progress.
async fn claim_rebuild(
    conn: &mut SqliteConnection,
    run_id: Uuid,
    position: u64,
) -> Result<(), StoreError> {
    let claimed = sqlx::query(
        "UPDATE projection_rebuilds SET position = ? WHERE projection = ? AND run_id = ?",
    )
    .bind(to_i64(position))
    .bind(gpunex_projections::ledger::LEDGER)
    .bind(run_id)
    .execute(&mut *conn)
    .await?;
    if claimed.rows_affected() != 1 {
        return Err(StoreError::RebuildSuperseded {
            projection: gpunex_projections::ledger::LEDGER.to_owned(),
        });
    }
    Ok(())
}

impl GroupCommit for SqliteBackend {
    async fn commit_group(
        &self,
        all_requests: &[Vec<ValidatedStream>],
        all_marks: &[Option<KeyMark>],
    ) -> Result<GroupOutcome, StoreError> {
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;
        let row = sqlx::query("SELECT last_position, last_hash FROM event_log_head WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?;
        let head = rows::sqlite::head(&row)?;
        let owned = owned_requests(&mut tx, all_marks).await?;
        // Almost always every request is owned: then the group is planned as it came.
        let filtered: Vec<Vec<ValidatedStream>>;
        let requests: &[Vec<ValidatedStream>] = if owned.iter().all(|owned| *owned) {
            all_requests
        } else {
            filtered = all_requests
                .iter()
                .zip(&owned)
                .filter(|(_, owned)| **owned)
                .map(|(request, _)| request.clone())
                .collect();
            &filtered
        };
        let marks: Vec<&Option<KeyMark>> = all_marks
            .iter()
            .zip(&owned)
            .filter(|(_, owned)| **owned)
            .map(|(mark, _)| mark)
            .collect();
        let (ids, streams) = group_keys(requests);
        let existing = stored_identities(&mut tx, &ids).await?;
        let mut versions = HashMap::with_capacity(streams.len());
        for stream in streams {
            let version: Option<i64> =
                sqlx::query_scalar("SELECT max(stream_version) FROM events WHERE stream_id = ?")
                    .bind(&stream)
                    .fetch_one(&mut *tx)
                    .await?;
            if let Some(version) = version {
                versions.insert(stream, to_u64(version, 0, "stream_version")?);
            }
        }
        let plan = plan_group(head, requests, existing, versions, self.now_us());
        if plan.rows.is_empty() {
            tx.rollback().await?;
            return Ok((merge_owned(&owned, plan.outcomes), head.position));
        }
        insert_rows(&mut tx, &plan.rows).await?;
        sqlx::query("UPDATE event_log_head SET last_position = ?, last_hash = ? WHERE id = 1")
            .bind(to_i64(plan.head.position))
            .bind(plan.head.hash.as_slice())
            .execute(&mut *tx)
            .await?;
        record_commits(&mut tx, &marks, &plan.outcomes).await?;
        tx.commit().await?;
        crate::writer::crash_point(&marks);
        Ok((merge_owned(&owned, plan.outcomes), plan.head.position))
    }
}

reservation_writes!(SqliteConnection, i64);

pub(crate) async fn read_all<'e, E>(
    executor: E,
    after: u64,
    limit: usize,
) -> Result<Vec<RecordedEvent>, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let rows = sqlx::query(sql!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?"
    ))
    .bind(to_i64(after))
    .bind(to_i64(limit as u64))
    .fetch_all(executor)
    .await?;
    rows.iter().map(rows::sqlite::event).collect()
}

async fn stored_identities(
    conn: &mut SqliteConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, StoredIdentity>, StoreError> {
    let mut found = HashMap::new();
    for chunk in ids.chunks(INSERT_ROWS_MAX) {
        let mut query = QueryBuilder::<Sqlite>::new(
            "SELECT event_id, position, stream_id, stream_version, event_type, schema_version, payload, metadata \
             FROM events WHERE event_id IN (",
        );
        let mut separated = query.separated(", ");
        for id in chunk {
            separated.push_bind(*id);
        }
        query.push(")");
        for row in query.build().fetch_all(&mut *conn).await? {
            let position = to_u64(row.try_get("position")?, 0, "position")?;
            found.insert(
                row.try_get("event_id")?,
                StoredIdentity {
                    position,
                    stream_id: row.try_get("stream_id")?,
                    stream_version: to_u64(
                        row.try_get("stream_version")?,
                        position,
                        "stream_version",
                    )?,
                    event_type: row.try_get("event_type")?,
                    schema_version: schema_version(row.try_get("schema_version")?, position)?,
                    payload: row.try_get("payload")?,
                    metadata: row.try_get("metadata")?,
                },
            );
        }
    }
    Ok(found)
}

async fn insert_rows(
    conn: &mut SqliteConnection,
    rows: &[RecordedEvent],
) -> Result<(), StoreError> {
    for chunk in rows.chunks(INSERT_ROWS_MAX / 2) {
        let mut query =
            QueryBuilder::<Sqlite>::new(format!("INSERT INTO events ({EVENT_COLUMNS}) "));
        query.push_values(chunk, |mut values, row| {
            values
                .push_bind(to_i64(row.position))
                .push_bind(row.event_id)
                .push_bind(&row.stream_id)
                .push_bind(to_i64(row.stream_version))
                .push_bind(&row.event_type)
                .push_bind(i64::from(row.schema_version))
                .push_bind(row.recorded_at_us)
                .push_bind(&row.payload)
                .push_bind(&row.metadata)
                .push_bind(row.hash.as_slice());
        });
        query.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn move_checkpoint(
    conn: &mut SqliteConnection,
    from: u64,
    to: u64,
    now_us: i64,
) -> Result<(), StoreError> {
    let projection = gpunex_projections::ledger::LEDGER;
    let moved = sqlx::query(
        "UPDATE projection_checkpoints SET position = ?, updated_at_us = ? WHERE projection = ? AND position = ?",
    )
    .bind(to_i64(to))
    .bind(now_us)
    .bind(projection)
    .bind(to_i64(from))
    .execute(&mut *conn)
    .await?;
    if moved.rows_affected() != 1 {
        return Err(StoreError::CheckpointMoved {
            projection: projection.to_owned(),
            expected: from,
        });
    }
    Ok(())
}

async fn write_ledger_batch(
    conn: &mut SqliteConnection,
    tables: LedgerTables,
    page: &LedgerRows,
) -> Result<(), StoreError> {
    let rows = &page.journal;
    for chunk in rows.blocks.chunks(INSERT_ROWS_MAX) {
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "INSERT INTO {} (position, first_position, entries) ",
            tables.journal
        ));
        query.push_values(chunk, |mut values, block| {
            values
                .push_bind(to_i64(block.position))
                .push_bind(to_i64(block.first_position))
                .push_bind(block.entries.as_slice());
        });
        query.build().execute(&mut *conn).await?;
    }
    for chunk in rows.postings.chunks(INSERT_ROWS_MAX) {
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "INSERT INTO {} (account, last_position, positions) ",
            tables.postings
        ));
        query.push_values(chunk, |mut values, postings| {
            values
                .push_bind(postings.account.as_str())
                .push_bind(to_i64(postings.last_position))
                .push_bind(postings.positions.as_slice());
        });
        query.build().execute(&mut *conn).await?;
    }
    let deltas: Vec<_> = page.deltas.iter().collect();
    for chunk in deltas.chunks(INSERT_ROWS_MAX) {
        let mut query = QueryBuilder::<Sqlite>::new(format!(
            "INSERT INTO {} (account, debits_micro_usdc, credits_micro_usdc, last_position) ",
            tables.balances
        ));
        query.push_values(chunk, |mut values, (account, totals)| {
            values
                .push_bind(account.to_string())
                .push_bind(totals.debits.micros())
                .push_bind(totals.credits.micros())
                .push_bind(to_i64(totals.last_position));
        });
        query.push(format!(
            " ON CONFLICT (account) DO UPDATE SET \
             debits_micro_usdc = {t}.debits_micro_usdc + excluded.debits_micro_usdc, \
             credits_micro_usdc = {t}.credits_micro_usdc + excluded.credits_micro_usdc, \
             last_position = max({t}.last_position, excluded.last_position)",
            t = tables.balances
        ));
        query.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// Creates the live ledger tables, once. A database with a journal layout before ADR 0016
/// (`ledger_entries`, ADR 0012's `ledger_journal`) has those tables dropped and its ledger
/// checkpoint set back to 0, in one transaction: the live runner then refolds the ledger from
/// the log.
async fn create_live_ledger_tables(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
    let exists: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ledger_journal_blocks'",
    )
    .fetch_one(&mut *tx)
    .await?;
    if exists == 0 {
        for table in crate::rebuild::OLD_LEDGER_TABLES {
            sqlx::query(sql!("DROP TABLE IF EXISTS {table}"))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE projection_checkpoints SET position = 0 WHERE projection = ?")
            .bind(gpunex_projections::ledger::LEDGER)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM projection_rebuilds WHERE projection = ?")
            .bind(gpunex_projections::ledger::LEDGER)
            .execute(&mut *tx)
            .await?;
        create_ledger_tables(&mut tx, LedgerTables::LIVE).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The ledger tables of one generation with their keys (see `crate::journal`).
async fn create_ledger_tables(
    conn: &mut SqliteConnection,
    tables: LedgerTables,
) -> Result<(), StoreError> {
    sqlx::query(sql!(
        "CREATE TABLE {journal} (
            position        INTEGER PRIMARY KEY,
            first_position  INTEGER NOT NULL CHECK (first_position BETWEEN 1 AND position),
            entries         BLOB    NOT NULL
        )",
        journal = tables.journal
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "CREATE TABLE {postings} (
            account        TEXT    NOT NULL,
            last_position  INTEGER NOT NULL,
            positions      BLOB    NOT NULL,
            UNIQUE (account, last_position)
        )",
        postings = tables.postings
    ))
    .execute(&mut *conn)
    .await?;
    // `typeof(...) = 'integer'`: SQLite turns an overflowing integer sum into a float; refuse it.
    sqlx::query(sql!(
        "CREATE TABLE {balances} (
            account             TEXT    PRIMARY KEY,
            debits_micro_usdc   INTEGER NOT NULL CHECK (typeof(debits_micro_usdc) = 'integer'),
            credits_micro_usdc  INTEGER NOT NULL CHECK (typeof(credits_micro_usdc) = 'integer'),
            last_position       INTEGER NOT NULL
        )",
        balances = tables.balances
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn drop_ledger_tables(
    conn: &mut SqliteConnection,
    tables: LedgerTables,
) -> Result<(), StoreError> {
    for table in tables.all() {
        sqlx::query(sql!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}
