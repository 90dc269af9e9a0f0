//! Copying a log into another database (`gpunex events copy`): the events exactly as recorded
//! (positions, ids, times, payload bytes, hashes), then the two tables whose rows change what the
//! platform does next: idempotency records (a client's retry after the move gets the answer it
//! got before) and SMTP deliveries (the outbox does not send a notification twice).
//!
//! Every imported page must continue (`plan::continue_chain`) the target's chain: its first position follows the target's
//! head and every hash is recomputed from the one before it, inside the transaction that writes
//! it, so a copy can only ever extend the target with the source's exact bytes, and a copy that
//! stopped halfway resumes where the target's head is.

use crate::{RecordedEvent, Store, StoreError, to_i64};

/// One row of `idempotency_keys`, every column.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IdempotencyRecord {
    pub caller: String,
    pub key: String,
    pub request_sha256: String,
    pub status: i32,
    pub body: String,
    pub created_at_us: i64,
    pub owner: String,
    pub lease_until_us: i64,
    pub committed_position: i64,
}

/// One row of `notification_deliveries`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Delivery {
    pub message_id: String,
    pub delivered_at_us: i64,
}

const IDEMPOTENCY_COLUMNS: &str = "caller, key, request_sha256, status, body, created_at_us, \
                                   owner, lease_until_us, committed_position";

impl Store {
    /// Appends events exactly as another log recorded them. They must continue this log's
    /// chain (checked in the transaction that writes them); returns the new head position.
    /// Bypasses the writer task: meant for a target no server is appending to.
    pub async fn import_events(&self, rows: &[RecordedEvent]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return self.head_position().await;
        }
        match &self.inner.db {
            crate::store::Db::Sqlite(db) => db.import_events(rows).await,
            crate::store::Db::Postgres(db) => db.import_events(rows).await,
        }
    }

    /// The log's event at `position`, if it holds one.
    pub async fn event_at(&self, position: u64) -> Result<Option<RecordedEvent>, StoreError> {
        if position == 0 {
            return Ok(None);
        }
        let mut page = self.read_all(position - 1, 1).await?;
        Ok(page.pop().filter(|event| event.position == position))
    }

    /// Idempotency records after `(caller, key)` in key order, at most `limit`.
    pub async fn idempotency_records(
        &self,
        after: Option<(&str, &str)>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        let limit = to_i64(limit as u64);
        let (caller, key, first) = match after {
            Some((caller, key)) => (caller, key, false),
            None => ("", "", true),
        };
        Ok(on_reader!(self, |conn| sqlx::query_as(sql!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency_keys \
             WHERE $1 OR caller > $2 OR (caller = $2 AND key > $3) \
             ORDER BY caller, key LIMIT $4"
        ))
        .bind(first)
        .bind(caller)
        .bind(key)
        .bind(limit)
        .fetch_all(conn)
        .await?))
    }

    /// Writes idempotency records another database holds; a key this one already has is kept.
    /// Returns how many were new.
    pub async fn import_idempotency_records(
        &self,
        records: &[IdempotencyRecord],
    ) -> Result<u64, StoreError> {
        let mut written = 0;
        in_transaction!(self, |tx| {
            for record in records {
                written += sqlx::query(sql!(
                    "INSERT INTO idempotency_keys ({IDEMPOTENCY_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (caller, key) DO NOTHING"
                ))
                .bind(&record.caller)
                .bind(&record.key)
                .bind(&record.request_sha256)
                .bind(record.status)
                .bind(&record.body)
                .bind(record.created_at_us)
                .bind(&record.owner)
                .bind(record.lease_until_us)
                .bind(record.committed_position)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
        });
        Ok(written)
    }

    /// SMTP deliveries after `message_id` in id order, at most `limit`.
    pub async fn deliveries(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let limit = to_i64(limit as u64);
        Ok(on_reader!(self, |conn| sqlx::query_as(
            "SELECT message_id, delivered_at_us FROM notification_deliveries \
             WHERE $1 OR message_id > $2 ORDER BY message_id LIMIT $3"
        )
        .bind(after.is_none())
        .bind(after.unwrap_or(""))
        .bind(limit)
        .fetch_all(conn)
        .await?))
    }

    /// Records SMTP deliveries another database holds; returns how many were new.
    pub async fn import_deliveries(&self, deliveries: &[Delivery]) -> Result<u64, StoreError> {
        let mut written = 0;
        in_transaction!(self, |tx| {
            for delivery in deliveries {
                written += sqlx::query(
                    "INSERT INTO notification_deliveries (message_id, delivered_at_us) \
                     VALUES ($1, $2) ON CONFLICT (message_id) DO NOTHING",
                )
                .bind(&delivery.message_id)
                .bind(delivery.delivered_at_us)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
        });
        Ok(written)
    }
}
