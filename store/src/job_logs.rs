//! Renters' job output: the latest part of each job's output, as the agent running it ships it
//! in chunks, kept outside the event log (it is the renter's data, not a fact the ledger
//! proves) and bounded per rental. The SQL uses `$N` placeholders on both databases.

use uuid::Uuid;

use crate::{Store, StoreError, to_i64};

/// The most of a rental's output the platform keeps: when a chunk arrives, every chunk that
/// ends more than this many bytes before the newest byte is deleted.
pub const KEEP_BYTES: u64 = 16 << 20;

/// How long output is kept after it arrived: the watchdog deletes older chunks.
pub const RETENTION_DAYS: i64 = 30;

/// Contiguous output read from a rental's stored chunks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobLogRead {
    /// Where `data` starts in the job's output: the offset asked for, or later when the output
    /// before it is no longer kept (or was never shipped).
    pub from: u64,
    pub data: Vec<u8>,
    /// The earliest byte still kept, and the end of what was shipped (0 and 0: nothing yet).
    pub first_kept: u64,
    pub end: u64,
}

impl Store {
    /// Stores a chunk of `rental_id`'s output that starts at `offset`, received at
    /// `received_us`, then forgets the chunks that end more than [`KEEP_BYTES`] before the
    /// newest byte, in one transaction. A chunk already stored at that offset is kept as it is:
    /// an agent that did not hear the answer sends the same chunk again.
    pub async fn append_job_log(
        &self,
        rental_id: Uuid,
        offset: u64,
        data: &[u8],
        received_us: i64,
    ) -> Result<(), StoreError> {
        let insert = "INSERT INTO job_log_chunks (rental_id, byte_offset, data, received_us) \
                      VALUES ($1, $2, $3, $4) ON CONFLICT (rental_id, byte_offset) DO NOTHING";
        let end = "SELECT MAX(byte_offset + length(data)) FROM job_log_chunks WHERE rental_id = $1";
        let trim =
            "DELETE FROM job_log_chunks WHERE rental_id = $1 AND byte_offset + length(data) <= $2";
        let rental = rental_id.to_string();
        in_transaction!(self, |tx| {
            sqlx::query(insert)
                .bind(&rental)
                .bind(to_i64(offset))
                .bind(data)
                .bind(received_us)
                .execute(&mut *tx)
                .await?;
            let (newest,): (Option<i64>,) = sqlx::query_as(end)
                .bind(&rental)
                .fetch_one(&mut *tx)
                .await?;
            let keep_from = newest.unwrap_or(0) - to_i64(KEEP_BYTES);
            if keep_from > 0 {
                sqlx::query(trim)
                    .bind(&rental)
                    .bind(keep_from)
                    .execute(&mut *tx)
                    .await?;
            }
        });
        Ok(())
    }

    /// Deletes the chunks received before `before_us`; returns how many.
    pub async fn prune_job_logs(&self, before_us: i64) -> Result<u64, StoreError> {
        self.delete_before(
            "DELETE FROM job_log_chunks WHERE received_us < $1",
            before_us,
        )
        .await
    }

    /// Up to `limit` contiguous bytes of `rental_id`'s output from `from` (or from the earliest
    /// byte kept after it), stopping at a gap in what was shipped.
    pub async fn read_job_log(
        &self,
        rental_id: Uuid,
        from: u64,
        limit: usize,
    ) -> Result<JobLogRead, StoreError> {
        let bounds = "SELECT MIN(byte_offset), MAX(byte_offset + length(data)) \
                      FROM job_log_chunks WHERE rental_id = $1";
        // 64 chunks a query; the loop reads on until it has `limit` bytes or reaches the end.
        let chunks = "SELECT byte_offset, data FROM job_log_chunks \
                      WHERE rental_id = $1 AND byte_offset + length(data) > $2 \
                      ORDER BY byte_offset LIMIT 64";
        let rental = rental_id.to_string();
        let (first, end): (Option<i64>, Option<i64>) =
            on_reader!(self, |pool| sqlx::query_as(bounds)
                .bind(&rental)
                .fetch_one(pool)
                .await?);
        let unsigned = |v: Option<i64>| v.map_or(0, |v| u64::try_from(v).unwrap_or(0));
        let (first_kept, end) = (unsigned(first), unsigned(end));
        let mut read = JobLogRead {
            from: from.max(first_kept).min(end),
            data: Vec::new(),
            first_kept,
            end,
        };
        let mut cursor = read.from;
        while read.data.len() < limit && cursor < end {
            let rows: Vec<(i64, Vec<u8>)> = on_reader!(self, |pool| sqlx::query_as(chunks)
                .bind(&rental)
                .bind(to_i64(cursor))
                .fetch_all(pool)
                .await?);
            if rows.is_empty() {
                break;
            }
            for (offset, data) in rows {
                let offset = u64::try_from(offset).unwrap_or(0);
                if offset > cursor {
                    if read.data.is_empty() {
                        // What was asked for is gone (or never came): start at what is kept.
                        read.from = offset;
                        cursor = offset;
                    } else {
                        return Ok(read);
                    }
                }
                let skip = usize::try_from(cursor - offset).unwrap_or(usize::MAX);
                let Some(rest) = data.get(skip..) else {
                    continue;
                };
                let take = rest.len().min(limit - read.data.len());
                read.data.extend_from_slice(&rest[..take]);
                cursor += take as u64;
                if read.data.len() >= limit {
                    return Ok(read);
                }
            }
        }
        Ok(read)
    }
}
