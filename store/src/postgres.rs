//! PostgreSQL: production. Appends serialize on the `event_log_head` row lock (so position order
//! is commit order across every process), and each group commit inserts its rows with one
//! `UNNEST` statement. Commits publish the new head with `pg_notify` for live subscribers.

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;

use gpunex_domain::Account;
use gpunex_projections::ledger::{AccountTotals, LedgerBatch, LedgerLine};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row};
use uuid::Uuid;

use crate::envelope::ValidatedStream;
use crate::journal::LedgerRows;
use crate::key_scope::KeyMark;
use crate::plan::{Head, StoredIdentity, group_keys, plan_group};
use crate::read_decoded::{Decode, RangeRead, Reach, ReadRange};
use crate::rebuild::{LedgerTables, RebuildBackend};
use crate::rows::{self, EVENT_COLUMNS, EVENT_ROW_COLUMNS, JOURNAL_PG, schema_version};
use crate::writer::{GroupCommit, GroupOutcome, merge_owned};
use crate::{RecordedEvent, StoreError, to_i64, to_u64};

/// Every read-write transaction states its isolation: the head lock and the checkpoint
/// compare-and-set rely on READ COMMITTED (each statement sees commits made before it), whatever
/// the server's `default_transaction_isolation`.
const READ_COMMITTED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// The channel commits notify on; the payload is the new head position.
pub(crate) const NOTIFY_CHANNEL: &str = "gpunex_events";

/// How long a caller waits for a pooled connection before the store reports it unavailable.
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) struct PgBackend {
    pub pool: PgPool,
    clock: gpunex_domain::clock::SharedClock,
}

impl PgBackend {
    pub async fn connect(
        url: &str,
        connections_max: u32,
        clock: gpunex_domain::clock::SharedClock,
    ) -> Result<PgBackend, StoreError> {
        let options = PgConnectOptions::from_str(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(connections_max)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(PgBackend { pool, clock })
    }

    fn now_us(&self) -> i64 {
        self.clock.now().unix_micros()
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        sqlx::migrate!("../migrations/postgres")
            .run(&self.pool)
            .await?;
        // Read-model DDL runs outside sqlx's migration lock: serialize it across processes
        // starting at the same time, or their catalog inserts can collide.
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('gpunex.read_models'))")
            .execute(&mut *tx)
            .await?;
        // A database with a journal layout before ADR 0016 (`ledger_entries`, ADR 0012's
        // `ledger_journal`) has those tables dropped and its ledger checkpoint set back to 0:
        // the live runner refolds it.
        let exists: bool =
            sqlx::query_scalar("SELECT to_regclass('ledger_journal_blocks') IS NOT NULL")
                .fetch_one(&mut *tx)
                .await?;
        if !exists {
            for table in crate::rebuild::OLD_LEDGER_TABLES {
                sqlx::query(sql!("DROP TABLE IF EXISTS {table}"))
                    .execute(&mut *tx)
                    .await?;
            }
            sqlx::query("UPDATE projection_checkpoints SET position = 0 WHERE projection = $1")
                .bind(gpunex_projections::ledger::LEDGER)
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM projection_rebuilds WHERE projection = $1")
                .bind(gpunex_projections::ledger::LEDGER)
                .execute(&mut *tx)
                .await?;
            create_ledger_tables(&mut tx, LedgerTables::LIVE).await?;
        }
        // Every stored projection starts at position 0.
        for projection in gpunex_projections::PROJECTIONS {
            sqlx::query(
                "INSERT INTO projection_checkpoints (projection, position, updated_at_us) \
                 VALUES ($1, 0, $2) ON CONFLICT (projection) DO NOTHING",
            )
            .bind(projection)
            .bind(self.now_us())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn head(&self) -> Result<Head, StoreError> {
        let row = sqlx::query("SELECT last_position, last_hash FROM event_log_head WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        rows::pg::head(&row)
    }

    pub async fn read_all(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        read_all(&self.pool, after, limit).await
    }

    /// Appends rows recorded by another log, after checking they continue this one's chain
    /// (see `copy`), and moves the head, in one transaction holding the head's row lock.
    pub async fn import_events(&self, rows: &[RecordedEvent]) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        let row = sqlx::query(
            "SELECT last_position, last_hash FROM event_log_head WHERE id = 1 FOR UPDATE",
        )
        .fetch_one(&mut *tx)
        .await?;
        let head = crate::plan::continue_chain(rows::pg::head(&row)?, rows)?;
        insert_rows_and_move_head(&mut tx, rows, head).await?;
        tx.commit().await?;
        Ok(head.position)
    }

    /// The position of a stream's last event, if it has any.
    /// The last event of a stream: its log position and stream version (`None`: no events).
    pub async fn stream_tip(&self, stream_id: &str) -> Result<Option<(u64, u64)>, StoreError> {
        let tip: Option<(i64, i64)> = sqlx::query_as(
            "SELECT position, stream_version FROM events WHERE stream_id = $1 \
             ORDER BY stream_version DESC LIMIT 1",
        )
        .bind(stream_id)
        .fetch_optional(&self.pool)
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
            "SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND stream_version > $2 \
             ORDER BY stream_version LIMIT $3"
        ))
        .bind(stream_id)
        .bind(to_i64(after_version))
        .bind(to_i64(limit as u64))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rows::pg::event).collect()
    }

    pub async fn checkpoint(&self, projection: &str) -> Result<u64, StoreError> {
        let position: Option<i64> =
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE projection = $1")
                .bind(projection)
                .fetch_optional(&self.pool)
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
            "INSERT INTO projection_checkpoints (projection, position, updated_at_us) VALUES ($1, $2, $3) \
             ON CONFLICT (projection) DO UPDATE SET position = excluded.position, updated_at_us = excluded.updated_at_us \
             WHERE projection_checkpoints.position = $4",
        )
        .bind(name)
        .bind(to_i64(to))
        .bind(self.now_us())
        .bind(to_i64(from))
        .execute(&self.pool)
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
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        // First statement: takes the checkpoint row lock, so a second runner waits here and then
        // finds the checkpoint moved instead of writing the same rows twice.
        let moved = sqlx::query(
            "UPDATE projection_checkpoints SET position = $1, updated_at_us = $2 WHERE projection = $3 AND position = $4",
        )
        .bind(to_i64(to))
        .bind(self.now_us())
        .bind(gpunex_projections::ledger::LEDGER)
        .bind(to_i64(from))
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Err(StoreError::CheckpointMoved {
                projection: gpunex_projections::ledger::LEDGER.to_owned(),
                expected: from,
            });
        }
        write_ledger_batch(&mut tx, LedgerTables::LIVE, &LedgerRows::of(batch)?).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The ledger checkpoint and every account's totals, read in one snapshot so the totals are
    /// exactly those as of the checkpoint.
    pub async fn balances(&self) -> Result<(u64, BTreeMap<Account, AccountTotals>), StoreError> {
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        let checkpoint: Option<i64> =
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE projection = $1")
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
            .map(rows::pg::balance)
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
        let mut tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        let entries = match account {
            Some(account) => {
                let positions = account_positions(&mut tx, account, after, limit).await?;
                let wanted: std::collections::HashSet<u64> = positions.iter().copied().collect();
                let blocks = sqlx::query_as(JOURNAL_PG.at)
                    .bind(positions.into_iter().map(to_i64).collect::<Vec<_>>())
                    .fetch_all(&mut *tx)
                    .await?;
                crate::journal::block_entries(blocks, |at| wanted.contains(&at))?
            }
            None => {
                let mut walk = crate::journal::BlockWalk::new(after, limit);
                while let Some(from) = walk.next() {
                    walk.add(
                        sqlx::query_as(JOURNAL_PG.after)
                            .bind(to_i64(from))
                            .bind(to_i64(crate::journal::BLOCKS_PER_READ))
                            .fetch_all(&mut *tx)
                            .await?,
                    )?;
                }
                walk.entries()
            }
        };
        let stamps = sqlx::query_as(JOURNAL_PG.stamps)
            .bind(crate::journal::entry_positions(&entries))
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        let lines = crate::journal::entry_lines(entries, &crate::journal::stamp_map(stamps)?)?;
        Ok(crate::journal::statement(lines, account, limit))
    }
}

/// Up to `limit` positions after `after` of the entries that post to `account`, in order.
async fn account_positions(
    conn: &mut PgConnection,
    account: Account,
    after: u64,
    limit: usize,
) -> Result<Vec<u64>, StoreError> {
    let account = account.to_string();
    let mut walk = crate::journal::PositionWalk::new(after, limit);
    while let Some(from) = walk.next() {
        let rows = sqlx::query(
            "SELECT last_position, positions FROM ledger_postings \
             WHERE account = $1 AND last_position > $2 ORDER BY last_position LIMIT $3",
        )
        .bind(&account)
        .bind(to_i64(from))
        .bind(to_i64(crate::journal::POSTINGS_ROWS_PER_READ))
        .fetch_all(&mut *conn)
        .await?;
        walk.add(
            rows.iter()
                .map(rows::pg::postings)
                .collect::<Result<_, _>>()?,
        );
    }
    Ok(walk.positions())
}

impl ReadRange for PgBackend {
    /// The rows are fetched on this task, then decoded from sqlx's rows on a blocking thread.
    async fn read_range<T: Send + 'static>(
        &self,
        after: u64,
        reach: Reach,
        decode: Decode<T>,
    ) -> Result<RangeRead<T>, StoreError> {
        let rows =
            match reach {
                Reach::Through(through) => sqlx::query(sql!(
                    "SELECT {EVENT_ROW_COLUMNS} FROM events WHERE position > $1 AND position <= $2 \
                     ORDER BY position"
                ))
                .bind(to_i64(after))
                .bind(to_i64(through))
                .fetch_all(&self.pool)
                .await?,
                Reach::Next(limit) => sqlx::query(sql!(
                    "SELECT {EVENT_ROW_COLUMNS} FROM events WHERE position > $1 ORDER BY position \
                     LIMIT $2"
                ))
                .bind(to_i64(after))
                .bind(to_i64(limit as u64))
                .fetch_all(&self.pool)
                .await?,
            };
        crate::off_task::off_task(move || {
            let mut read = RangeRead::with_capacity(rows.len());
            for row in &rows {
                read.push(&rows::pg_event_row(row)?, decode)?;
            }
            Ok(read)
        })
        .await
    }
}

impl RebuildBackend for PgBackend {
    type Swap = sqlx::Transaction<'static, Postgres>;

    async fn start(&self, run_id: Uuid) -> Result<(), StoreError> {
        let tables = LedgerTables::REBUILD;
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        sqlx::query(
            "INSERT INTO projection_rebuilds (projection, run_id, position, started_at_us) VALUES ($1, $2, 0, $3) \
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
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        claim_rebuild(&mut tx, run_id, through).await?;
        write_ledger_batch(&mut tx, LedgerTables::REBUILD, &page).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Holds the checkpoint row (live runners wait) but not the log: appends go on, so the swap
    /// folds up to the head as it is now and leaves what comes later to the live runner, ending
    /// however fast events arrive.
    async fn begin_swap(
        &self,
        run_id: Uuid,
        position: u64,
    ) -> Result<(Self::Swap, Option<u64>), StoreError> {
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        // Fail rather than queue behind a long reader (an audit holds its tables all along):
        // while the swap waits, live runners and readers would queue behind it.
        sqlx::query("SET LOCAL lock_timeout = '5s'")
            .execute(&mut *tx)
            .await?;
        claim_rebuild(&mut tx, run_id, position).await?;
        sqlx::query("SELECT position FROM projection_checkpoints WHERE projection = $1 FOR UPDATE")
            .bind(gpunex_projections::ledger::LEDGER)
            .execute(&mut *tx)
            .await?;
        let head: i64 = sqlx::query_scalar("SELECT last_position FROM event_log_head WHERE id = 1")
            .fetch_one(&mut *tx)
            .await?;
        Ok((tx, Some(to_u64(head, 0, "last_position")?)))
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
        // Each table's key index is named after the table it was made with: renamed too, so
        // the next rebuild's tables can take their names.
        for (rebuilt, live) in LedgerTables::REBUILD
            .all()
            .into_iter()
            .zip(LedgerTables::LIVE.all())
        {
            sqlx::query(sql!("ALTER TABLE {rebuilt} RENAME TO {live}"))
                .execute(&mut *tx)
                .await?;
            sqlx::query(sql!("ALTER INDEX {rebuilt}_pkey RENAME TO {live}_pkey"))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE projection_checkpoints SET position = $1, updated_at_us = $2 WHERE projection = $3")
            .bind(to_i64(position))
            .bind(self.now_us())
            .bind(gpunex_projections::ledger::LEDGER)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM projection_rebuilds WHERE projection = $1 AND run_id = $2")
            .bind(gpunex_projections::ledger::LEDGER)
            .bind(run_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// Checks that rebuild `run_id` still owns the `*_rebuild` tables (locking its row until this
/// transaction ends) and records its progress.
async fn claim_rebuild(
    conn: &mut PgConnection,
    run_id: Uuid,
    position: u64,
) -> Result<(), StoreError> {
    let claimed = sqlx::query(
        "UPDATE projection_rebuilds SET position = $1 WHERE projection = $2 AND run_id = $3",
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

impl GroupCommit for PgBackend {
    async fn commit_group(
        &self,
        all_requests: &[Vec<ValidatedStream>],
        all_marks: &[Option<KeyMark>],
    ) -> Result<GroupOutcome, StoreError> {
        let mut tx = self.pool.begin_with(READ_COMMITTED).await?;
        let row = sqlx::query(
            "SELECT last_position, last_hash FROM event_log_head WHERE id = 1 FOR UPDATE",
        )
        .fetch_one(&mut *tx)
        .await?;
        let head = rows::pg::head(&row)?;
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
        let (existing, versions) = identities_and_versions(&mut tx, &ids, &streams).await?;
        let plan = plan_group(head, requests, existing, versions, self.now_us());
        if plan.rows.is_empty() {
            tx.rollback().await?;
            return Ok((merge_owned(&owned, plan.outcomes), head.position));
        }
        insert_rows_and_move_head(&mut tx, &plan.rows, plan.head).await?;
        record_commits(&mut tx, &marks, &plan.outcomes).await?;
        tx.commit().await?;
        crate::writer::crash_point(&marks);
        Ok((merge_owned(&owned, plan.outcomes), plan.head.position))
    }
}

reservation_writes!(PgConnection, i32);

pub(crate) async fn read_all<'e, E>(
    executor: E,
    after: u64,
    limit: usize,
) -> Result<Vec<RecordedEvent>, StoreError>
where
    E: sqlx::Executor<'e, Database = Postgres>,
{
    let rows = sqlx::query(sql!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2"
    ))
    .bind(to_i64(after))
    .bind(to_i64(limit as u64))
    .fetch_all(executor)
    .await?;
    rows.iter().map(rows::pg::event).collect()
}

/// The stored identities of `ids` and the current versions of `streams`, in one round trip
/// (run after the head lock is held, so it sees every earlier append).
async fn identities_and_versions(
    conn: &mut PgConnection,
    ids: &[Uuid],
    streams: &[String],
) -> Result<(HashMap<Uuid, StoredIdentity>, HashMap<String, u64>), StoreError> {
    let rows = sqlx::query(
        "SELECT event_id, position, stream_id, stream_version, event_type, schema_version, payload, metadata \
         FROM events WHERE event_id = ANY($1) \
         UNION ALL \
         SELECT NULL::uuid, NULL::bigint, s.stream_id, (SELECT e.stream_version FROM events e \
         WHERE e.stream_id = s.stream_id ORDER BY e.stream_version DESC LIMIT 1), \
         NULL::text, NULL::int, NULL::text, NULL::text FROM UNNEST($2::text[]) AS s(stream_id)",
    )
    .bind(ids)
    .bind(streams)
    .fetch_all(&mut *conn)
    .await?;
    let mut found = HashMap::new();
    let mut versions = HashMap::with_capacity(streams.len());
    for row in rows {
        let Some(event_id) = row.try_get::<Option<Uuid>, _>("event_id")? else {
            // A stream version row; NULL version: the stream has no events.
            if let Some(version) = row.try_get::<Option<i64>, _>("stream_version")? {
                versions.insert(
                    row.try_get("stream_id")?,
                    to_u64(version, 0, "stream_version")?,
                );
            }
            continue;
        };
        let position = to_u64(row.try_get("position")?, 0, "position")?;
        found.insert(
            event_id,
            StoredIdentity {
                position,
                stream_id: row.try_get("stream_id")?,
                stream_version: to_u64(row.try_get("stream_version")?, position, "stream_version")?,
                event_type: row.try_get("event_type")?,
                schema_version: schema_version(
                    i64::from(row.try_get::<i32, _>("schema_version")?),
                    position,
                )?,
                payload: row.try_get("payload")?,
                metadata: row.try_get("metadata")?,
            },
        );
    }
    Ok((found, versions))
}

/// Inserts the group's rows, moves the head and notifies listeners, in one statement.
async fn insert_rows_and_move_head(
    conn: &mut PgConnection,
    rows: &[RecordedEvent],
    head: Head,
) -> Result<(), StoreError> {
    let mut columns = EventArrays::with_capacity(rows.len());
    for row in rows {
        columns.push(row);
    }
    let result = sqlx::query(sql!(
        "WITH inserted AS (INSERT INTO events ({EVENT_COLUMNS}) SELECT * FROM UNNEST(\
         $1::bigint[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::int[], $7::bigint[], $8::text[], $9::text[], $10::bytea[]) \
         RETURNING 1), \
         moved AS (UPDATE event_log_head SET last_position = $11, last_hash = $12 WHERE id = 1 RETURNING 1) \
         SELECT (SELECT count(*) FROM inserted) AS inserted, (SELECT count(*) FROM moved) AS moved, \
         pg_notify($13, $11::text) AS notified"
    ))
    .bind(columns.position)
    .bind(columns.event_id)
    .bind(columns.stream_id)
    .bind(columns.stream_version)
    .bind(columns.event_type)
    .bind(columns.schema_version)
    .bind(columns.recorded_at_us)
    .bind(columns.payload)
    .bind(columns.metadata)
    .bind(columns.hash)
    .bind(to_i64(head.position))
    .bind(head.hash.as_slice())
    .bind(NOTIFY_CHANNEL)
    .fetch_one(&mut *conn)
    .await?;
    let inserted: i64 = result.try_get("inserted")?;
    let moved: i64 = result.try_get("moved")?;
    if inserted != rows.len() as i64 || moved != 1 {
        return Err(StoreError::CorruptRow {
            position: head.position,
            reason: format!(
                "append wrote {inserted} of {} rows and moved {moved} head rows",
                rows.len()
            ),
        });
    }
    Ok(())
}

/// The rows of a group as one array per column, for a single `UNNEST` insert.
struct EventArrays<'a> {
    position: Vec<i64>,
    event_id: Vec<Uuid>,
    stream_id: Vec<&'a str>,
    stream_version: Vec<i64>,
    event_type: Vec<&'a str>,
    schema_version: Vec<i32>,
    recorded_at_us: Vec<i64>,
    payload: Vec<&'a str>,
    metadata: Vec<&'a str>,
    hash: Vec<Vec<u8>>,
}

impl<'a> EventArrays<'a> {
    fn with_capacity(n: usize) -> Self {
        EventArrays {
            position: Vec::with_capacity(n),
            event_id: Vec::with_capacity(n),
            stream_id: Vec::with_capacity(n),
            stream_version: Vec::with_capacity(n),
            event_type: Vec::with_capacity(n),
            schema_version: Vec::with_capacity(n),
            recorded_at_us: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
            hash: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, row: &'a RecordedEvent) {
        self.position.push(to_i64(row.position));
        self.event_id.push(row.event_id);
        self.stream_id.push(&row.stream_id);
        self.stream_version.push(to_i64(row.stream_version));
        self.event_type.push(&row.event_type);
        // Catalog versions are small; validation rejected anything unsupported.
        self.schema_version
            .push(i32::try_from(row.schema_version).unwrap_or(i32::MAX));
        self.recorded_at_us.push(row.recorded_at_us);
        self.payload.push(&row.payload);
        self.metadata.push(&row.metadata);
        self.hash.push(row.hash.to_vec());
    }
}

async fn write_ledger_batch(
    conn: &mut PgConnection,
    tables: LedgerTables,
    page: &LedgerRows,
) -> Result<(), StoreError> {
    let rows = &page.journal;
    if !rows.blocks.is_empty() {
        let blocks = &rows.blocks;
        sqlx::query(sql!(
            "INSERT INTO {} (position, first_position, entries) \
             SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::bytea[])",
            tables.journal
        ))
        .bind(
            blocks
                .iter()
                .map(|b| to_i64(b.position))
                .collect::<Vec<_>>(),
        )
        .bind(
            blocks
                .iter()
                .map(|b| to_i64(b.first_position))
                .collect::<Vec<_>>(),
        )
        .bind(
            blocks
                .iter()
                .map(|b| b.entries.as_slice())
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    if !rows.postings.is_empty() {
        let postings = &rows.postings;
        sqlx::query(sql!(
            "INSERT INTO {} (account, last_position, positions) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bytea[])",
            tables.postings
        ))
        .bind(
            postings
                .iter()
                .map(|p| p.account.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            postings
                .iter()
                .map(|p| to_i64(p.last_position))
                .collect::<Vec<_>>(),
        )
        .bind(
            postings
                .iter()
                .map(|p| p.positions.as_slice())
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    if !page.deltas.is_empty() {
        let deltas = &page.deltas;
        sqlx::query(sql!(
            "INSERT INTO {t} (account, debits_micro_usdc, credits_micro_usdc, last_position) \
             SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) \
             ON CONFLICT (account) DO UPDATE SET \
             debits_micro_usdc = {t}.debits_micro_usdc + excluded.debits_micro_usdc, \
             credits_micro_usdc = {t}.credits_micro_usdc + excluded.credits_micro_usdc, \
             last_position = GREATEST({t}.last_position, excluded.last_position)",
            t = tables.balances
        ))
        .bind(deltas.keys().map(ToString::to_string).collect::<Vec<_>>())
        .bind(
            deltas
                .values()
                .map(|t| t.debits.micros())
                .collect::<Vec<_>>(),
        )
        .bind(
            deltas
                .values()
                .map(|t| t.credits.micros())
                .collect::<Vec<_>>(),
        )
        .bind(
            deltas
                .values()
                .map(|t| to_i64(t.last_position))
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The ledger tables of one generation with their keys (see `crate::journal`).
async fn create_ledger_tables(
    conn: &mut PgConnection,
    tables: LedgerTables,
) -> Result<(), StoreError> {
    sqlx::query(sql!(
        "CREATE TABLE {journal} (
            position        BIGINT PRIMARY KEY,
            first_position  BIGINT NOT NULL CHECK (first_position BETWEEN 1 AND position),
            entries         BYTEA  NOT NULL
        )",
        journal = tables.journal
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "CREATE TABLE {postings} (
            account        TEXT   NOT NULL,
            last_position  BIGINT NOT NULL,
            positions      BYTEA  NOT NULL,
            PRIMARY KEY (account, last_position)
        )",
        postings = tables.postings
    ))
    .execute(&mut *conn)
    .await?;
    sqlx::query(sql!(
        "CREATE TABLE {balances} (
            account             TEXT   PRIMARY KEY,
            debits_micro_usdc   BIGINT NOT NULL,
            credits_micro_usdc  BIGINT NOT NULL,
            last_position       BIGINT NOT NULL
        )",
        balances = tables.balances
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn drop_ledger_tables(
    conn: &mut PgConnection,
    tables: LedgerTables,
) -> Result<(), StoreError> {
    for table in tables.all() {
        sqlx::query(sql!("DROP TABLE IF EXISTS {table}"))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}
