//! A PostgreSQL read snapshot for `audit verify`: one `REPEATABLE READ, READ ONLY` transaction,
//! exported to a second connection so journal lines are read while events are (the
//! counterpart of `sqlite_scan` on SQLite).

use std::collections::BTreeMap;

use gpunex_domain::Account;
use gpunex_projections::ledger::{self, AccountTotals, LedgerLine};
use sqlx::{PgPool, Postgres, Row, Transaction};

use crate::audit::AuditSource;
use crate::plan::Head;
use crate::rows::{self, JOURNAL_PG};
use crate::{RecordedEvent, StoreError, to_i64};

pub(crate) struct PgSnapshot {
    tx: Transaction<'static, Postgres>,
    /// A second connection in the same snapshot (`SET TRANSACTION SNAPSHOT`), so journal lines
    /// are read while events are.
    lines_tx: Transaction<'static, Postgres>,
}

impl PgSnapshot {
    pub async fn begin(pool: &PgPool) -> Result<PgSnapshot, StoreError> {
        const SNAPSHOT: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";
        let mut tx = pool.begin_with(SNAPSHOT).await?;
        let snapshot: String = sqlx::query_scalar("SELECT pg_export_snapshot()")
            .fetch_one(&mut *tx)
            .await?;
        // A snapshot id is hex digits and dashes; anything else is not interpolated.
        if snapshot.is_empty() || !snapshot.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(StoreError::CorruptRow {
                position: 0,
                reason: format!("unexpected snapshot id `{snapshot}`"),
            });
        }
        let mut lines_tx = pool.begin_with(SNAPSHOT).await?;
        sqlx::query(sql!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
            .execute(&mut *lines_tx)
            .await?;
        Ok(PgSnapshot { tx, lines_tx })
    }
}

async fn pg_lines(
    conn: &mut sqlx::PgConnection,
    after: u64,
    through: u64,
) -> Result<Vec<LedgerLine>, StoreError> {
    if after >= through {
        return Ok(Vec::new());
    }
    let blocks = sqlx::query_as(JOURNAL_PG.through)
        .bind(to_i64(after))
        .bind(to_i64(through))
        .fetch_all(&mut *conn)
        .await?;
    let entries = crate::journal::block_entries(blocks, |at| at > after && at <= through)?;
    let stamps = sqlx::query_as(JOURNAL_PG.stamps)
        .bind(crate::journal::entry_positions(&entries))
        .fetch_all(&mut *conn)
        .await?;
    let lines = crate::journal::entry_lines(entries, &crate::journal::stamp_map(stamps)?)?;
    Ok(lines)
}

impl AuditSource for PgSnapshot {
    async fn head(&mut self) -> Result<Head, StoreError> {
        let row = sqlx::query("SELECT last_position, last_hash FROM event_log_head WHERE id = 1")
            .fetch_one(&mut *self.tx)
            .await?;
        rows::pg::head(&row)
    }

    async fn checkpoint(&mut self) -> Result<u64, StoreError> {
        let row = sqlx::query("SELECT position FROM projection_checkpoints WHERE projection = $1")
            .bind(ledger::LEDGER)
            .fetch_optional(&mut *self.tx)
            .await?;
        let position: i64 = match row {
            Some(row) => row.try_get("position")?,
            None => 0,
        };
        crate::to_u64(position, 0, "checkpoint")
    }

    async fn page(
        &mut self,
        after: u64,
        limit: usize,
        checkpoint: u64,
    ) -> Result<(Vec<RecordedEvent>, Vec<LedgerLine>), StoreError> {
        // Positions are gapless in a sound log, so the page covers (after, after + limit]: read
        // those lines concurrently, then the rest if gaps made the page reach further.
        let predicted = after.saturating_add(limit as u64).min(checkpoint);
        let (events, lines) = tokio::join!(
            crate::postgres::read_all(&mut *self.tx, after, limit),
            pg_lines(&mut self.lines_tx, after, predicted),
        );
        let (events, mut lines) = (events?, lines?);
        let through = events.last().map_or(after, |e| e.position).min(checkpoint);
        if through > predicted {
            lines.extend(pg_lines(&mut self.lines_tx, predicted, through).await?);
        }
        Ok((events, lines))
    }

    async fn lines(&mut self, after: u64, through: u64) -> Result<Vec<LedgerLine>, StoreError> {
        pg_lines(&mut self.lines_tx, after, through).await
    }

    async fn balances(&mut self) -> Result<BTreeMap<Account, AccountTotals>, StoreError> {
        let rows = sqlx::query("SELECT account, debits_micro_usdc, credits_micro_usdc, last_position FROM ledger_balances")
            .fetch_all(&mut *self.tx)
            .await?;
        rows.iter().map(rows::pg::balance).collect()
    }

    async fn postings(
        &mut self,
        after: (String, u64),
        limit: usize,
    ) -> Result<Vec<(String, u64, Vec<u8>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT account, last_position, positions FROM ledger_postings \
             WHERE (account, last_position) > ($1, $2) ORDER BY account, last_position LIMIT $3",
        )
        .bind(after.0)
        .bind(to_i64(after.1))
        .bind(to_i64(limit as u64))
        .fetch_all(&mut *self.tx)
        .await?;
        rows.iter()
            .map(|row| {
                let last = crate::to_u64(row.try_get("last_position")?, 0, "last_position")?;
                Ok((row.try_get("account")?, last, row.try_get("positions")?))
            })
            .collect()
    }
}
