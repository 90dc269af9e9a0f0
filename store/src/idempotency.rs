//! The `Idempotency-Key` table (a reservation before a POST is handled, its response after) and
//! the record of notifications sent by SMTP.
//! The SQL uses `$N` placeholders on both databases (SQLite reads them as numbered parameters).

use crate::store::{Db, now_us};
use crate::{Store, StoreError};

/// How long a stored response answers retries.
pub const IDEMPOTENCY_RETENTION_US: i64 = 24 * 3_600 * 1_000_000;
/// A reservation older than this is from a request that died mid-way: it may be taken over.
/// Handlers finish even when the client goes away (the middleware runs them detached), so a
/// reservation this old means the process died mid-request.
pub const IDEMPOTENCY_PENDING_STALE_US: i64 = 10 * 60 * 1_000_000;

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// Nobody used it (or its record expired): this request now holds it.
    Reserved,
    /// Another request with this key is being handled now.
    InProgress { request_sha256: String },
    /// A finished request: its fingerprint, status and response body.
    Done {
        request_sha256: String,
        status: u16,
        body: String,
    },
}

impl Store {
    /// Reserves `key` for `caller`, or reports what it already holds.
    pub async fn reserve_idempotency_key(
        &self,
        caller: &str,
        key: &str,
        request_sha256: &str,
    ) -> Result<KeyState, StoreError> {
        let now = now_us();
        // Expired records and stale reservations give way to this request.
        // Expired records of every caller go too, so the table holds at most a day of keys.
        let sql_delete = "DELETE FROM idempotency_keys WHERE created_at_us < $3 OR \
                          (caller = $1 AND key = $2 AND status = 0 AND created_at_us < $4)";
        let sql_insert = "INSERT INTO idempotency_keys (caller, key, request_sha256, status, body, created_at_us) \
                          VALUES ($1, $2, $3, 0, '', $4) ON CONFLICT (caller, key) DO NOTHING";
        let sql_select = "SELECT request_sha256, status, body FROM idempotency_keys WHERE caller = $1 AND key = $2";
        let expired = now - IDEMPOTENCY_RETENTION_US;
        let stale = now - IDEMPOTENCY_PENDING_STALE_US;
        let (inserted, row): (u64, Option<(String, i64, String)>) = match &self.inner.db {
            Db::Sqlite(db) => {
                let mut tx = db.write.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query(sql_delete)
                    .bind(caller)
                    .bind(key)
                    .bind(expired)
                    .bind(stale)
                    .execute(&mut *tx)
                    .await?;
                let inserted = sqlx::query(sql_insert)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                let row = sqlx::query_as(sql_select)
                    .bind(caller)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                (inserted, row)
            }
            Db::Postgres(db) => {
                let mut tx = db.pool.begin().await?;
                sqlx::query(sql_delete)
                    .bind(caller)
                    .bind(key)
                    .bind(expired)
                    .bind(stale)
                    .execute(&mut *tx)
                    .await?;
                let inserted = sqlx::query(sql_insert)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                let row: Option<(String, i32, String)> = sqlx::query_as(sql_select)
                    .bind(caller)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                (inserted, row.map(|(h, s, b)| (h, i64::from(s), b)))
            }
        };
        if inserted == 1 {
            return Ok(KeyState::Reserved);
        }
        Ok(match row {
            Some((request_sha256, 0, _)) => KeyState::InProgress { request_sha256 },
            Some((request_sha256, status, body)) => KeyState::Done {
                request_sha256,
                status: u16::try_from(status).unwrap_or(500),
                body,
            },
            // Deleted between statements cannot happen inside the transaction; be safe anyway.
            None => KeyState::InProgress {
                request_sha256: String::new(),
            },
        })
    }

    /// Stores the response of a reserved key.
    pub async fn complete_idempotency_key(
        &self,
        caller: &str,
        key: &str,
        request_sha256: &str,
        status: u16,
        body: &str,
    ) -> Result<(), StoreError> {
        // Only the reservation this request holds: never overwrite a settled answer.
        let sql = "UPDATE idempotency_keys SET status = $1, body = $2 \
                   WHERE caller = $3 AND key = $4 AND request_sha256 = $5 AND status = 0";
        match &self.inner.db {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(i64::from(status))
                    .bind(body)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .execute(&db.write)
                    .await?;
            }
            Db::Postgres(db) => {
                sqlx::query(sql)
                    .bind(i32::from(status))
                    .bind(body)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Releases a reservation whose request failed on the server side, so a retry runs again.
    pub async fn release_idempotency_key(&self, caller: &str, key: &str) -> Result<(), StoreError> {
        let sql = "DELETE FROM idempotency_keys WHERE caller = $1 AND key = $2 AND status = 0";
        match &self.inner.db {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(caller)
                    .bind(key)
                    .execute(&db.write)
                    .await?;
            }
            Db::Postgres(db) => {
                sqlx::query(sql)
                    .bind(caller)
                    .bind(key)
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
    }
}

impl Store {
    /// Whether notification `message_id` was already sent.
    pub async fn notification_delivered(&self, message_id: uuid::Uuid) -> Result<bool, StoreError> {
        let sql = "SELECT count(*) FROM notification_deliveries WHERE message_id = $1";
        let count: i64 = match &self.inner.db {
            Db::Sqlite(db) => {
                sqlx::query_scalar(sql)
                    .bind(message_id.to_string())
                    .fetch_one(&db.read)
                    .await?
            }
            Db::Postgres(db) => {
                sqlx::query_scalar(sql)
                    .bind(message_id.to_string())
                    .fetch_one(&db.pool)
                    .await?
            }
        };
        Ok(count > 0)
    }

    /// Records that notification `message_id` was sent.
    pub async fn record_notification(&self, message_id: uuid::Uuid) -> Result<(), StoreError> {
        let sql = "INSERT INTO notification_deliveries (message_id, delivered_at_us) VALUES ($1, $2) \
                   ON CONFLICT (message_id) DO NOTHING";
        match &self.inner.db {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(message_id.to_string())
                    .bind(now_us())
                    .execute(&db.write)
                    .await?;
            }
            Db::Postgres(db) => {
                sqlx::query(sql)
                    .bind(message_id.to_string())
                    .bind(now_us())
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
    }
}
