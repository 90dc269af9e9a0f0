//! The agent's durable outbox: every event it must deliver is written here first (SQLite in the
//! state directory, WAL, `synchronous = FULL`), then sent with its event id until the platform
//! answers. A platform outage or an agent restart loses nothing; a re-sent event is absorbed by
//! the platform's idempotency. The same file keeps the agent's small state (its identity, the
//! inventory it last registered).

use crate::clock::now_text;
use std::path::Path;

use gpunex_wire::fleet::AgentEvent;
use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

/// Delivered and rejected events are kept this long for `status` and forensics, then deleted.
pub const DONE_RETENTION_DAYS: i64 = 7;

pub struct Queue {
    conn: Connection,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueCounts {
    pub pending: u64,
    pub delivered: u64,
    pub rejected: u64,
    /// When the oldest pending event was queued (RFC 3339).
    pub oldest_pending: Option<String>,
}

/// An event that the platform refused for good, with its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub event_id: Uuid,
    pub kind: String,
    pub error: String,
}

impl Queue {
    pub fn open(state_dir: &Path) -> anyhow::Result<Queue> {
        std::fs::create_dir_all(state_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the state directory {}: {e}",
                state_dir.display()
            )
        })?;
        let path = state_dir.join("agent.sqlite");
        let conn = Connection::open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS outbox (
                 seq          INTEGER PRIMARY KEY AUTOINCREMENT,
                 event_id     TEXT    NOT NULL UNIQUE,
                 kind         TEXT    NOT NULL,
                 event        TEXT    NOT NULL,
                 queued_at    TEXT    NOT NULL,
                 attempts     INTEGER NOT NULL DEFAULT 0,
                 status       TEXT    NOT NULL DEFAULT 'pending'
                              CHECK (status IN ('pending', 'delivered', 'rejected')),
                 position     INTEGER,
                 answer       TEXT,
                 settled_at   TEXT
             );
             CREATE INDEX IF NOT EXISTS outbox_pending ON outbox (status, seq);
             CREATE TABLE IF NOT EXISTS agent_state (
                 key   TEXT NOT NULL PRIMARY KEY,
                 value TEXT NOT NULL
             );",
        )?;
        Ok(Queue { conn })
    }

    /// The oldest pending events, in the order they were queued.
    pub fn pending(&self, limit: usize) -> anyhow::Result<Vec<AgentEvent>> {
        let mut statement = self.conn.prepare_cached(
            "SELECT event FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT ?1",
        )?;
        let rows = statement.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
            row.get::<_, String>(0)
        })?;
        let mut events = Vec::new();
        for row in rows {
            events.push(serde_json::from_str(&row?)?);
        }
        Ok(events)
    }

    pub fn count_attempt(&self, event_ids: &[Uuid]) -> anyhow::Result<()> {
        for id in event_ids {
            self.conn.execute(
                "UPDATE outbox SET attempts = attempts + 1 WHERE event_id = ?1",
                [id.to_string()],
            )?;
        }
        Ok(())
    }

    /// The platform stored the event (now or on an earlier attempt).
    pub fn mark_delivered(
        &mut self,
        delivered: &[(Uuid, Option<u64>, String)],
    ) -> anyhow::Result<()> {
        let tx = self.conn.transaction()?;
        for (id, position, answer) in delivered {
            tx.execute(
                "UPDATE outbox SET status = 'delivered', position = ?2, answer = ?3, settled_at = ?4 \
                 WHERE event_id = ?1 AND status = 'pending'",
                params![
                    id.to_string(),
                    position.and_then(|p| i64::try_from(p).ok()),
                    answer,
                    now_text()
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The platform refused the event for good: it is set aside so the rest can flow.
    pub fn mark_rejected(&self, event_id: Uuid, answer: &str) -> anyhow::Result<()> {
        self.conn.execute(
            "UPDATE outbox SET status = 'rejected', answer = ?2, settled_at = ?3 \
             WHERE event_id = ?1 AND status = 'pending'",
            params![event_id.to_string(), answer, now_text()],
        )?;
        Ok(())
    }

    pub fn counts(&self) -> anyhow::Result<QueueCounts> {
        let mut counts = QueueCounts::default();
        let mut statement = self
            .conn
            .prepare("SELECT status, COUNT(*) FROM outbox GROUP BY status")?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })?;
        for row in rows {
            let (status, count) = row?;
            let count = u64::try_from(count).unwrap_or(0);
            match status.as_str() {
                "pending" => counts.pending = count,
                "delivered" => counts.delivered = count,
                _ => counts.rejected = count,
            }
        }
        counts.oldest_pending = self
            .conn
            .query_row(
                "SELECT queued_at FROM outbox WHERE status = 'pending' ORDER BY seq LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()?;
        Ok(counts)
    }

    /// The most recently rejected events, newest first.
    pub fn rejected(&self, limit: usize) -> anyhow::Result<Vec<Rejected>> {
        let mut statement = self.conn.prepare(
            "SELECT event_id, kind, COALESCE(answer, '') FROM outbox WHERE status = 'rejected' \
             ORDER BY seq DESC LIMIT ?1",
        )?;
        let rows = statement.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut found = Vec::new();
        for row in rows {
            let (id, kind, error) = row?;
            found.push(Rejected {
                event_id: Uuid::try_parse(&id)?,
                kind,
                error,
            });
        }
        Ok(found)
    }

    /// Deletes settled events older than [`DONE_RETENTION_DAYS`].
    pub fn forget_settled(&self) -> anyhow::Result<usize> {
        let horizon = crate::clock::now() - chrono::Duration::days(DONE_RETENTION_DAYS);
        Ok(self.conn.execute(
            "DELETE FROM outbox WHERE status != 'pending' AND settled_at < ?1",
            [horizon.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)],
        )?)
    }

    pub fn get_state(&self, key: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT value FROM agent_state WHERE key = ?1",
                [key],
                |row| row.get(0),
            )
            .optional()?)
    }

    pub fn set_state(&self, key: &str, value: &str) -> anyhow::Result<()> {
        self.conn.execute(
            "INSERT INTO agent_state (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }

    /// Queues an event and records `state` in one transaction (a registration and the inventory
    /// it registers, say), so a crash cannot keep one without the other.
    pub fn enqueue_with_state(
        &mut self,
        event: &AgentEvent,
        key: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO outbox (event_id, kind, event, queued_at) VALUES (?1, ?2, ?3, ?4)",
            params![
                event.event_id.to_string(),
                kind_of(event),
                serde_json::to_string(event)?,
                now_text()
            ],
        )?;
        tx.execute(
            "INSERT INTO agent_state (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        tx.commit()?;
        Ok(())
    }
}

fn kind_of(event: &AgentEvent) -> &'static str {
    match &event.body {
        gpunex_wire::fleet::AgentEventBody::Registration(_) => "registration",
        gpunex_wire::fleet::AgentEventBody::GpuCondition(_) => "gpu_condition",
        gpunex_wire::fleet::AgentEventBody::Usage(_) => "usage",
        gpunex_wire::fleet::AgentEventBody::JobStarted(_) => "job_started",
        gpunex_wire::fleet::AgentEventBody::JobEnded(_) => "job_ended",
        gpunex_wire::fleet::AgentEventBody::BenchmarkRun(_) => "benchmark_run",
        gpunex_wire::fleet::AgentEventBody::BenchmarkSkipped(_) => "benchmark_skipped",
    }
}
