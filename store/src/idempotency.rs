//! The `Idempotency-Key` table (a reservation before a request is handled, its response after) and
//! the record of notifications sent by SMTP.
//!
//! A reservation belongs to a live owner: the process handling it renews a short lease while the
//! request runs. Every append the request makes (within [`in_request`]) writes, in the same
//! transaction as its events, the position it committed and, if the handler prepared it, the
//! response; and only while this process still owns the reservation. So a retry after a crash
//! finds either nothing committed (and takes over at once, the lease having lapsed), the
//! original response (committed with the events), or a committed request without its response
//! (`Committed`: never run again).
//! The SQL uses `$N` placeholders on both databases (SQLite reads them as numbered parameters).

pub use crate::key_scope::{KeyMark, prepare_response};
use crate::store::Db;
use crate::{Store, StoreError};

/// How long a stored response answers retries.
pub const IDEMPOTENCY_RETENTION_US: i64 = 24 * 3_600 * 1_000_000;
/// How long a reservation stays its owner's without a renewal. The owner renews it every
/// [`IDEMPOTENCY_LEASE_RENEW_US`] while the request runs, so a lapsed lease means the owner died.
pub const IDEMPOTENCY_LEASE_US: i64 = 5 * 1_000_000;
/// How often the owner of a reservation renews its lease.
pub const IDEMPOTENCY_LEASE_RENEW_US: i64 = 1_000_000;

/// What a key holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyState {
    /// Nobody used it, its record expired, or its owner died before committing anything: this
    /// request now holds it.
    Reserved,
    /// Another request with this key is being handled now.
    InProgress { request_sha256: String },
    /// A finished request: its fingerprint, status and response body.
    Done {
        request_sha256: String,
        status: u16,
        body: String,
    },
    /// A request whose owner died after it committed (at `position`) and before its response was
    /// recorded: it must not run again.
    Committed {
        request_sha256: String,
        position: u64,
    },
}

/// Runs `future` (a request's handler) as the request holding `key` for `caller`: each append it
/// makes records its commit on the reservation.
pub async fn in_request<F: std::future::Future>(
    store: &Store,
    caller: &str,
    key: &str,
    future: F,
) -> F::Output {
    crate::key_scope::scoped(caller, key, &store.inner.instance, future).await
}

impl Store {
    /// Reserves `key` for `caller`, or reports what it already holds.
    pub async fn reserve_idempotency_key(
        &self,
        caller: &str,
        key: &str,
        request_sha256: &str,
    ) -> Result<KeyState, StoreError> {
        let now = self.now_us();
        let owner = self.inner.instance.as_str();
        // Expired records of every caller go, so the table holds at most a day of keys.
        let sql_delete = "DELETE FROM idempotency_keys WHERE created_at_us < $1";
        let sql_insert = "INSERT INTO idempotency_keys \
                          (caller, key, request_sha256, status, body, created_at_us, owner, lease_until_us, committed_position) \
                          VALUES ($1, $2, $3, 0, '', $4, $5, $6, 0) ON CONFLICT (caller, key) DO NOTHING";
        let sql_select = "SELECT request_sha256, status, body, lease_until_us, committed_position \
                          FROM idempotency_keys WHERE caller = $1 AND key = $2";
        // A lapsed reservation with nothing committed passes to this request (same fingerprint).
        let sql_take_over = "UPDATE idempotency_keys SET owner = $3, lease_until_us = $4 \
                             WHERE caller = $1 AND key = $2 AND status = 0 AND committed_position = 0 \
                             AND lease_until_us < $5 AND request_sha256 = $6";
        let expired = now - IDEMPOTENCY_RETENTION_US;
        let lease = now + IDEMPOTENCY_LEASE_US;
        type Row = (String, i64, String, i64, i64);
        let (inserted, taken_over, row): (u64, u64, Option<Row>) = match &self.inner.db {
            Db::Sqlite(db) => {
                let mut tx = db.write.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query(sql_delete)
                    .bind(expired)
                    .execute(&mut *tx)
                    .await?;
                let inserted = sqlx::query(sql_insert)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .bind(now)
                    .bind(owner)
                    .bind(lease)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                let taken_over = if inserted == 0 {
                    sqlx::query(sql_take_over)
                        .bind(caller)
                        .bind(key)
                        .bind(owner)
                        .bind(lease)
                        .bind(now)
                        .bind(request_sha256)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                } else {
                    0
                };
                let row = sqlx::query_as(sql_select)
                    .bind(caller)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                (inserted, taken_over, row)
            }
            Db::Postgres(db) => {
                let mut tx = db.pool.begin().await?;
                sqlx::query(sql_delete)
                    .bind(expired)
                    .execute(&mut *tx)
                    .await?;
                let inserted = sqlx::query(sql_insert)
                    .bind(caller)
                    .bind(key)
                    .bind(request_sha256)
                    .bind(now)
                    .bind(owner)
                    .bind(lease)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                let taken_over = if inserted == 0 {
                    sqlx::query(sql_take_over)
                        .bind(caller)
                        .bind(key)
                        .bind(owner)
                        .bind(lease)
                        .bind(now)
                        .bind(request_sha256)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                } else {
                    0
                };
                let row: Option<(String, i32, String, i64, i64)> = sqlx::query_as(sql_select)
                    .bind(caller)
                    .bind(key)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                (
                    inserted,
                    taken_over,
                    row.map(|(h, s, b, l, c)| (h, i64::from(s), b, l, c)),
                )
            }
        };
        if inserted == 1 || taken_over == 1 {
            return Ok(KeyState::Reserved);
        }
        Ok(match row {
            Some((request_sha256, 0, _, lease_until, committed))
                if committed > 0 && lease_until < now =>
            {
                KeyState::Committed {
                    request_sha256,
                    position: u64::try_from(committed).unwrap_or(0),
                }
            }
            Some((request_sha256, 0, _, _, _)) => KeyState::InProgress { request_sha256 },
            Some((request_sha256, status, body, _, _)) => KeyState::Done {
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

    /// Renews this process's lease on a reservation its request is still handling.
    pub async fn renew_idempotency_lease(&self, caller: &str, key: &str) -> Result<(), StoreError> {
        let sql = "UPDATE idempotency_keys SET lease_until_us = $1 \
                   WHERE caller = $2 AND key = $3 AND owner = $4 AND status = 0";
        let lease = self.now_us() + IDEMPOTENCY_LEASE_US;
        let owner = self.inner.instance.as_str();
        match &self.inner.db {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(lease)
                    .bind(caller)
                    .bind(key)
                    .bind(owner)
                    .execute(&db.write)
                    .await?;
            }
            Db::Postgres(db) => {
                sqlx::query(sql)
                    .bind(lease)
                    .bind(caller)
                    .bind(key)
                    .bind(owner)
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
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

    /// Releases a reservation whose request failed on the server side, so a retry runs again;
    /// one whose request already committed stays (its lease ended at once), so a retry learns it
    /// was recorded instead of running it twice.
    pub async fn release_idempotency_key(&self, caller: &str, key: &str) -> Result<(), StoreError> {
        let sql_delete = "DELETE FROM idempotency_keys \
                          WHERE caller = $1 AND key = $2 AND status = 0 AND committed_position = 0";
        let sql_end = "UPDATE idempotency_keys SET lease_until_us = 0 \
                       WHERE caller = $1 AND key = $2 AND status = 0";
        match &self.inner.db {
            Db::Sqlite(db) => {
                for sql in [sql_delete, sql_end] {
                    sqlx::query(sql)
                        .bind(caller)
                        .bind(key)
                        .execute(&db.write)
                        .await?;
                }
            }
            Db::Postgres(db) => {
                for sql in [sql_delete, sql_end] {
                    sqlx::query(sql)
                        .bind(caller)
                        .bind(key)
                        .execute(&db.pool)
                        .await?;
                }
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
                    .bind(self.now_us())
                    .execute(&db.write)
                    .await?;
            }
            Db::Postgres(db) => {
                sqlx::query(sql)
                    .bind(message_id.to_string())
                    .bind(self.now_us())
                    .execute(&db.pool)
                    .await?;
            }
        }
        Ok(())
    }
}
