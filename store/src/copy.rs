//! Copying a log into another database (`gpunex events copy`): the events exactly as recorded
//! (positions, ids, times, payload bytes, hashes), then the tables outside the log whose rows
//! change what the platform does next: idempotency records (a client's retry after the move gets
//! the answer it got before), SMTP deliveries (the outbox does not send a notification twice),
//! machines' last heartbeats and the platform's liveness tick (without them the presence
//! watchdog would date a machine's going offline from its last `machine_online` event, before
//! usage it metered afterwards, and a platform outage would go unrecorded), and the GPU
//! telemetry series and latest samples (the console's charts).
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

/// One row of `machine_presence`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PresenceRow {
    pub machine_id: String,
    pub provider_id: String,
    pub last_heartbeat_us: i64,
    pub heartbeats: i64,
}

/// One row of `gpu_telemetry` or `gpu_telemetry_latest`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TelemetryRow {
    pub gpu_uuid: String,
    pub at_us: i64,
    pub machine_id: String,
    pub utilization_pct: Option<i64>,
    pub memory_used_mib: Option<i64>,
    pub temperature_c: Option<i64>,
    pub power_draw_mw: Option<i64>,
    pub sm_clock_mhz: Option<i64>,
    pub clock_event_reasons: Option<i64>,
    pub ecc_corrected: Option<i64>,
    pub ecc_uncorrected: Option<i64>,
}

/// Which telemetry table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TelemetryTable {
    /// Every sample in the retained window.
    Series,
    /// The latest sample of each GPU.
    Latest,
}

impl TelemetryTable {
    fn name(self) -> &'static str {
        match self {
            TelemetryTable::Series => "gpu_telemetry",
            TelemetryTable::Latest => "gpu_telemetry_latest",
        }
    }
}

const TELEMETRY_COLUMNS: &str = "gpu_uuid, at_us, machine_id, utilization_pct, memory_used_mib, \
                                 temperature_c, power_draw_mw, sm_clock_mhz, \
                                 clock_event_reasons, ecc_corrected, ecc_uncorrected";

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

    /// Machines' last heartbeats after `machine_id` in id order, at most `limit`.
    pub async fn presence_rows(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<PresenceRow>, StoreError> {
        let limit = to_i64(limit as u64);
        Ok(on_reader!(self, |conn| sqlx::query_as(
            "SELECT machine_id, provider_id, last_heartbeat_us, heartbeats FROM machine_presence \
             WHERE $1 OR machine_id > $2 ORDER BY machine_id LIMIT $3"
        )
        .bind(after.is_none())
        .bind(after.unwrap_or(""))
        .bind(limit)
        .fetch_all(conn)
        .await?))
    }

    /// Records machines' last heartbeats another database holds; a later heartbeat this one
    /// has is kept. Returns how many rows were written.
    pub async fn import_presence(&self, rows: &[PresenceRow]) -> Result<u64, StoreError> {
        let mut written = 0;
        in_transaction!(self, |tx| {
            for row in rows {
                written += sqlx::query(
                    "INSERT INTO machine_presence (machine_id, provider_id, last_heartbeat_us, \
                     heartbeats) VALUES ($1, $2, $3, $4) ON CONFLICT (machine_id) DO UPDATE SET \
                     provider_id = excluded.provider_id, \
                     last_heartbeat_us = excluded.last_heartbeat_us, \
                     heartbeats = excluded.heartbeats \
                     WHERE machine_presence.last_heartbeat_us < excluded.last_heartbeat_us",
                )
                .bind(&row.machine_id)
                .bind(&row.provider_id)
                .bind(row.last_heartbeat_us)
                .bind(row.heartbeats)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
        });
        Ok(written)
    }

    /// Telemetry rows after `(gpu_uuid, at_us)` in that order, at most `limit`.
    pub async fn telemetry_rows(
        &self,
        table: TelemetryTable,
        after: Option<(&str, i64)>,
        limit: usize,
    ) -> Result<Vec<TelemetryRow>, StoreError> {
        let limit = to_i64(limit as u64);
        let (gpu, at, first) = match after {
            Some((gpu, at)) => (gpu, at, false),
            None => ("", 0, true),
        };
        let sql = format!(
            "SELECT {TELEMETRY_COLUMNS} FROM {} \
             WHERE $1 OR gpu_uuid > $2 OR (gpu_uuid = $2 AND at_us > $3) \
             ORDER BY gpu_uuid, at_us LIMIT $4",
            table.name()
        );
        Ok(on_reader!(self, |conn| sqlx::query_as(
            sqlx::AssertSqlSafe(sql.clone())
        )
        .bind(first)
        .bind(gpu)
        .bind(at)
        .bind(limit)
        .fetch_all(conn)
        .await?))
    }

    /// Writes telemetry rows another database holds: series samples this one lacks, and
    /// latest samples newer than this one's. Returns how many rows were written.
    pub async fn import_telemetry(
        &self,
        table: TelemetryTable,
        rows: &[TelemetryRow],
    ) -> Result<u64, StoreError> {
        let conflict = match table {
            TelemetryTable::Series => "ON CONFLICT (gpu_uuid, at_us) DO NOTHING".to_owned(),
            TelemetryTable::Latest => format!(
                "ON CONFLICT (gpu_uuid) DO UPDATE SET at_us = excluded.at_us, \
                 machine_id = excluded.machine_id, utilization_pct = excluded.utilization_pct, \
                 memory_used_mib = excluded.memory_used_mib, \
                 temperature_c = excluded.temperature_c, power_draw_mw = excluded.power_draw_mw, \
                 sm_clock_mhz = excluded.sm_clock_mhz, \
                 clock_event_reasons = excluded.clock_event_reasons, \
                 ecc_corrected = excluded.ecc_corrected, \
                 ecc_uncorrected = excluded.ecc_uncorrected WHERE {}.at_us < excluded.at_us",
                table.name()
            ),
        };
        let sql = format!(
            "INSERT INTO {} ({TELEMETRY_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) {conflict}",
            table.name()
        );
        let mut written = 0;
        in_transaction!(self, |tx| {
            for row in rows {
                written += sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(&row.gpu_uuid)
                    .bind(row.at_us)
                    .bind(&row.machine_id)
                    .bind(row.utilization_pct)
                    .bind(row.memory_used_mib)
                    .bind(row.temperature_c)
                    .bind(row.power_draw_mw)
                    .bind(row.sm_clock_mhz)
                    .bind(row.clock_event_reasons)
                    .bind(row.ecc_corrected)
                    .bind(row.ecc_uncorrected)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
        });
        Ok(written)
    }

    /// The platform's last liveness tick, if it has one.
    pub async fn liveness_tick(&self) -> Result<Option<i64>, StoreError> {
        Ok(on_reader!(self, |conn| sqlx::query_scalar(
            "SELECT last_tick_us FROM platform_liveness WHERE id = 1"
        )
        .fetch_optional(conn)
        .await?))
    }

    /// Records another database's liveness tick, unless this one's is later.
    pub async fn import_liveness_tick(&self, tick_us: i64) -> Result<(), StoreError> {
        in_transaction!(self, |tx| {
            sqlx::query(
                "INSERT INTO platform_liveness (id, last_tick_us) VALUES (1, $1) \
                 ON CONFLICT (id) DO UPDATE SET last_tick_us = excluded.last_tick_us \
                 WHERE platform_liveness.last_tick_us < excluded.last_tick_us",
            )
            .bind(tick_us)
            .execute(&mut *tx)
            .await?;
        });
        Ok(())
    }
}
