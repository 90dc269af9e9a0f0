//! Snapshots of in-memory read models (`read_model_snapshots`): written by the process that
//! folded them, read at start. The SQL uses `$N` placeholders on both databases.

use crate::{Store, StoreError, to_i64, to_u64};

/// One stored snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub position: u64,
    pub format: u32,
    pub body: String,
}

impl Store {
    /// Stores a snapshot of `name` folded through `position`, unless a more recent one is there
    /// already (another process may have written a newer one). Says whether it was stored.
    pub async fn write_snapshot(
        &self,
        name: &str,
        position: u64,
        format: u32,
        body: &str,
    ) -> Result<bool, StoreError> {
        let now = self.now_us();
        let written = in_transaction!(self, |tx| {
            sqlx::query(
                "INSERT INTO read_model_snapshots (name, position, format, body, written_at_us) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET \
                 position = excluded.position, format = excluded.format, body = excluded.body, \
                 written_at_us = excluded.written_at_us \
                 WHERE excluded.position >= read_model_snapshots.position \
                 OR excluded.format <> read_model_snapshots.format",
            )
            .bind(name)
            .bind(to_i64(position))
            .bind(i64::from(format))
            .bind(body)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        });
        Ok(written == 1)
    }

    /// The stored snapshot of `name`, if any.
    /// Deletes the snapshot `name` (the next start folds the whole log and writes a new one);
    /// returns whether one was stored.
    pub async fn delete_snapshot(&self, name: &str) -> Result<bool, StoreError> {
        let deleted = in_transaction!(self, |tx| {
            sqlx::query("DELETE FROM read_model_snapshots WHERE name = $1")
                .bind(name)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        });
        Ok(deleted > 0)
    }

    pub async fn read_snapshot(&self, name: &str) -> Result<Option<StoredSnapshot>, StoreError> {
        let row: Option<(i64, i64, String)> = on_reader!(self, |conn| {
            sqlx::query_as(
                "SELECT position, format, body FROM read_model_snapshots WHERE name = $1",
            )
            .bind(name)
            .fetch_optional(conn)
            .await?
        });
        row.map(|(position, format, body)| {
            Ok(StoredSnapshot {
                position: to_u64(position, 0, "snapshot position")?,
                format: u32::try_from(format).map_err(|e| StoreError::CorruptRow {
                    position: 0,
                    reason: format!("read_model_snapshots.format: {e}"),
                })?,
                body,
            })
        })
        .transpose()
    }
}

impl Store {
    /// Whether the event at `position` has this hash (hex); `false` when there is no such event.
    pub async fn event_hash_is(&self, position: u64, hash: &str) -> Result<bool, StoreError> {
        if position == 0 {
            return Ok(false);
        }
        let events = self.read_all(position - 1, 1).await?;
        Ok(events.first().is_some_and(|e| {
            e.position == position && hex::encode(e.hash).eq_ignore_ascii_case(hash)
        }))
    }
}
