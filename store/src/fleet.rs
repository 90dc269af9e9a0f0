//! Machine presence, GPU telemetry and the platform's own liveness: high-frequency facts kept
//! outside the event log. The SQL uses `$N` placeholders on both databases.

use gpunex_domain::fleet::GpuSample;
use uuid::Uuid;

use crate::{Store, StoreError, to_i64};

/// Ids bound per `IN (...)` list (SQLite allows 32,766 parameters; PostgreSQL 65,535).
const IN_LIST_MAX: usize = 500;

/// One stored telemetry sample: which machine sent it and when the server received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryRow {
    pub machine_id: Uuid,
    pub at_us: i64,
    pub sample: GpuSample,
}

/// One heartbeat to record: the machine, its provider, when the server received it and the
/// GPUs' samples.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat<'a> {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub at_us: i64,
    pub samples: &'a [GpuSample],
}

/// A machine's last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presence {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub last_heartbeat_us: i64,
    pub heartbeats: u64,
}

const SAMPLE_COLUMNS: &str = "gpu_uuid, at_us, machine_id, utilization_pct, memory_used_mib, \
     temperature_c, power_draw_mw, sm_clock_mhz, clock_event_reasons, ecc_corrected, ecc_uncorrected";

type SampleRow = (
    String,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn opt_i64(value: Option<u64>) -> Option<i64> {
    value.map(to_i64)
}

fn to_row(row: SampleRow) -> Result<TelemetryRow, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptRow {
        position: 0,
        reason: format!("gpu_telemetry: {reason}"),
    };
    let unsigned = |v: Option<i64>| v.map(|v| u64::try_from(v).unwrap_or(0));
    let small = |v: Option<i64>| v.map(|v| u32::try_from(v).unwrap_or(0));
    Ok(TelemetryRow {
        machine_id: Uuid::try_parse(&row.2).map_err(|e| corrupt(e.to_string()))?,
        at_us: row.1,
        sample: GpuSample {
            gpu_uuid: row.0,
            utilization_pct: small(row.3),
            memory_used_mib: unsigned(row.4),
            temperature_c: row.5.map(|v| i32::try_from(v).unwrap_or(0)),
            power_draw_mw: unsigned(row.6),
            sm_clock_mhz: small(row.7),
            clock_event_reasons: unsigned(row.8),
            ecc_corrected: unsigned(row.9),
            ecc_uncorrected: unsigned(row.10),
        },
    })
}

macro_rules! bind_sample {
    ($query:expr, $machine:expr, $at:expr, $s:expr) => {
        $query
            .bind(&$s.gpu_uuid)
            .bind($at)
            .bind($machine)
            .bind($s.utilization_pct.map(i64::from))
            .bind(opt_i64($s.memory_used_mib))
            .bind($s.temperature_c.map(i64::from))
            .bind(opt_i64($s.power_draw_mw))
            .bind($s.sm_clock_mhz.map(i64::from))
            .bind(opt_i64($s.clock_event_reasons))
            .bind(opt_i64($s.ecc_corrected))
            .bind(opt_i64($s.ecc_uncorrected))
    };
}

impl Store {
    /// Records a heartbeat received at `at_us`: the machine's presence and one sample per GPU,
    /// in one transaction.
    pub async fn record_heartbeat(
        &self,
        machine_id: Uuid,
        provider_id: Uuid,
        at_us: i64,
        samples: &[GpuSample],
    ) -> Result<(), StoreError> {
        self.record_heartbeats(&[Heartbeat {
            machine_id,
            provider_id,
            at_us,
            samples,
        }])
        .await
    }

    /// Records heartbeats that arrived together (a simulated fleet's step) in one transaction:
    /// each exactly as `record_heartbeat` would, one commit for all.
    pub async fn record_heartbeats(&self, beats: &[Heartbeat<'_>]) -> Result<(), StoreError> {
        let presence = "INSERT INTO machine_presence (machine_id, provider_id, last_heartbeat_us, heartbeats) \
                        VALUES ($1, $2, $3, 1) ON CONFLICT (machine_id) DO UPDATE SET \
                        last_heartbeat_us = CASE WHEN excluded.last_heartbeat_us > machine_presence.last_heartbeat_us \
                        THEN excluded.last_heartbeat_us ELSE machine_presence.last_heartbeat_us END, \
                        heartbeats = machine_presence.heartbeats + 1";
        let values = "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
        let insert = format!(
            "INSERT INTO gpu_telemetry ({SAMPLE_COLUMNS}) VALUES {values} \
             ON CONFLICT (gpu_uuid, at_us) DO NOTHING"
        );
        let latest = format!(
            "INSERT INTO gpu_telemetry_latest ({SAMPLE_COLUMNS}) VALUES {values} \
             ON CONFLICT (gpu_uuid) DO UPDATE SET at_us = excluded.at_us, machine_id = excluded.machine_id, \
             utilization_pct = excluded.utilization_pct, memory_used_mib = excluded.memory_used_mib, \
             temperature_c = excluded.temperature_c, power_draw_mw = excluded.power_draw_mw, \
             sm_clock_mhz = excluded.sm_clock_mhz, clock_event_reasons = excluded.clock_event_reasons, \
             ecc_corrected = excluded.ecc_corrected, ecc_uncorrected = excluded.ecc_uncorrected \
             WHERE excluded.at_us >= gpu_telemetry_latest.at_us"
        );
        if beats.is_empty() {
            return Ok(());
        }
        in_transaction!(self, |tx| {
            for beat in beats {
                let machine = beat.machine_id.to_string();
                sqlx::query(presence)
                    .bind(&machine)
                    .bind(beat.provider_id.to_string())
                    .bind(beat.at_us)
                    .execute(&mut *tx)
                    .await?;
                for sample in beat.samples {
                    bind_sample!(
                        sqlx::query(sqlx::AssertSqlSafe(insert.clone())),
                        &machine,
                        beat.at_us,
                        sample
                    )
                    .execute(&mut *tx)
                    .await?;
                    bind_sample!(
                        sqlx::query(sqlx::AssertSqlSafe(latest.clone())),
                        &machine,
                        beat.at_us,
                        sample
                    )
                    .execute(&mut *tx)
                    .await?;
                }
            }
        });
        Ok(())
    }

    /// Every machine's last heartbeat (`None`), or those of the given machines.
    pub async fn presences(&self, machines: Option<&[Uuid]>) -> Result<Vec<Presence>, StoreError> {
        let columns =
            "SELECT machine_id, provider_id, last_heartbeat_us, heartbeats FROM machine_presence";
        let mut rows: Vec<(String, String, i64, i64)> = Vec::new();
        match machines {
            None => {
                let sql = sqlx::AssertSqlSafe(columns.to_owned());
                rows = on_reader!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?);
            }
            Some(ids) => {
                for chunk in ids.chunks(IN_LIST_MAX) {
                    let sql = format!(
                        "{columns} WHERE machine_id IN ({})",
                        crate::sql::placeholders(self.backend(), chunk.len())
                    );
                    let found: Vec<(String, String, i64, i64)> = on_reader!(self, |pool| {
                        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()));
                        for id in chunk {
                            query = query.bind(id.to_string());
                        }
                        query.fetch_all(pool).await?
                    });
                    rows.extend(found);
                }
            }
        }
        rows.into_iter()
            .map(|(machine, provider, last, count)| {
                let parse = |text: &str| {
                    Uuid::try_parse(text).map_err(|e| StoreError::CorruptRow {
                        position: 0,
                        reason: format!("machine_presence: {e}"),
                    })
                };
                Ok(Presence {
                    machine_id: parse(&machine)?,
                    provider_id: parse(&provider)?,
                    last_heartbeat_us: last,
                    heartbeats: u64::try_from(count).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The latest sample of each GPU of the given machines (all machines when `None`), read by
    /// the machine index.
    pub async fn latest_telemetry(
        &self,
        machines: Option<&[Uuid]>,
    ) -> Result<Vec<TelemetryRow>, StoreError> {
        let mut rows: Vec<SampleRow> = Vec::new();
        match machines {
            None => {
                let sql = sql!("SELECT {SAMPLE_COLUMNS} FROM gpu_telemetry_latest");
                rows = on_reader!(self, |pool| sqlx::query_as(sql).fetch_all(pool).await?);
            }
            Some(ids) => {
                for chunk in ids.chunks(IN_LIST_MAX) {
                    let sql = format!(
                        "SELECT {SAMPLE_COLUMNS} FROM gpu_telemetry_latest WHERE machine_id IN ({})",
                        crate::sql::placeholders(self.backend(), chunk.len())
                    );
                    let found: Vec<SampleRow> = on_reader!(self, |pool| {
                        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql.clone()));
                        for id in chunk {
                            query = query.bind(id.to_string());
                        }
                        query.fetch_all(pool).await?
                    });
                    rows.extend(found);
                }
            }
        }
        rows.into_iter().map(to_row).collect()
    }

    /// One GPU's samples received in `[from_us, until_us)`, oldest first, at most `limit`.
    pub async fn telemetry_series(
        &self,
        gpu_uuid: &str,
        from_us: i64,
        until_us: i64,
        limit: u32,
    ) -> Result<Vec<TelemetryRow>, StoreError> {
        let sql = sql!(
            "SELECT {SAMPLE_COLUMNS} FROM gpu_telemetry \
             WHERE gpu_uuid = $1 AND at_us >= $2 AND at_us < $3 ORDER BY at_us LIMIT $4"
        );
        let rows: Vec<SampleRow> = on_reader!(self, |pool| sqlx::query_as(sql)
            .bind(gpu_uuid)
            .bind(from_us)
            .bind(until_us)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?);
        rows.into_iter().map(to_row).collect()
    }

    /// Deletes samples received before `before_us`; returns how many.
    pub async fn prune_telemetry(&self, before_us: i64) -> Result<u64, StoreError> {
        self.delete_before("DELETE FROM gpu_telemetry WHERE at_us < $1", before_us)
            .await
    }

    /// Runs `delete` (one `DELETE` with `$1` the instant) in a transaction; returns how many
    /// rows went.
    pub(crate) async fn delete_before(
        &self,
        delete: &'static str,
        before_us: i64,
    ) -> Result<u64, StoreError> {
        let deleted = in_transaction!(self, |tx| {
            sqlx::query(delete)
                .bind(before_us)
                .execute(&mut *tx)
                .await?
                .rows_affected()
        });
        Ok(deleted)
    }

    /// The platform's last liveness tick (none before the very first watchdog pass).
    pub async fn platform_tick(&self) -> Result<Option<i64>, StoreError> {
        let select = "SELECT last_tick_us FROM platform_liveness WHERE id = 1";
        let row: Option<(i64,)> = on_reader!(self, |pool| sqlx::query_as(select)
            .fetch_optional(pool)
            .await?);
        Ok(row.map(|(tick,)| tick))
    }

    /// Records a liveness tick at `now_us`. Ticks never move backwards. The watchdog records a
    /// tick only after any outage the previous tick shows is stored, so a failure in between
    /// finds the same gap on the next pass instead of losing it.
    pub async fn record_platform_tick(&self, now_us: i64) -> Result<(), StoreError> {
        let upsert = "INSERT INTO platform_liveness (id, last_tick_us) VALUES (1, $1) \
                      ON CONFLICT (id) DO UPDATE SET last_tick_us = CASE \
                      WHEN excluded.last_tick_us > platform_liveness.last_tick_us \
                      THEN excluded.last_tick_us ELSE platform_liveness.last_tick_us END";
        in_transaction!(self, |tx| {
            sqlx::query(upsert).bind(now_us).execute(&mut *tx).await?;
        });
        Ok(())
    }

    /// Whether an event with this id is stored, and at which position.
    /// The position of the event `event_id` and the content fingerprint its sender recorded
    /// (`Metadata::content_sha256`), if it is stored.
    pub async fn event_delivery(
        &self,
        event_id: Uuid,
    ) -> Result<Option<(u64, Option<String>)>, StoreError> {
        let sql = "SELECT position, metadata FROM events WHERE event_id = $1";
        let row: Option<(i64, String)> = on_reader!(self, |pool| sqlx::query_as(sql)
            .bind(event_id)
            .fetch_optional(pool)
            .await?);
        Ok(row.map(|(position, metadata)| {
            let fingerprint = serde_json::from_str::<crate::Metadata>(&metadata)
                .ok()
                .and_then(|m| m.content_sha256);
            (u64::try_from(position).unwrap_or(0), fingerprint)
        }))
    }

    pub async fn event_position(&self, event_id: Uuid) -> Result<Option<u64>, StoreError> {
        let sql = "SELECT position FROM events WHERE event_id = $1";
        let row: Option<(i64,)> = on_reader!(self, |pool| sqlx::query_as(sql)
            .bind(event_id)
            .fetch_optional(pool)
            .await?);
        Ok(row.map(|(position,)| u64::try_from(position).unwrap_or(0)))
    }
}
