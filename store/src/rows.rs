//! Row decoding, for both databases, in one place: stored columns become events, journal lines,
//! balances and the log head here and nowhere else. The decoders are written once and
//! instantiated per backend (the databases differ only in the width of small integers).

use gpunex_domain::{Account, Side, Usdc};
use gpunex_projections::ledger::AccountTotals;

use crate::plan::Head;
use crate::{RecordedEvent, StoreError, to_u64};

/// The columns every event query selects, in the order the decoders read them.
pub(crate) const EVENT_COLUMNS: &str = "position, event_id, stream_id, stream_version, event_type, schema_version, recorded_at_us, payload, metadata, hash";

/// The columns a projection reads of an event ([`crate::EventRow`]): [`EVENT_COLUMNS`] less the
/// metadata and the hash, in the same order.
pub(crate) const EVENT_ROW_COLUMNS: &str = "position, event_id, stream_id, stream_version, event_type, schema_version, recorded_at_us, payload";

/// Reads of the live journal's blocks (`crate::journal`), each selecting `position,
/// first_position, entries` in key order, and of the ids and recorded times of the events its
/// entries belong to, for either database.
pub(crate) struct JournalSql {
    /// The blocks after `1`, at most `2` of them.
    pub after: &'static str,
    /// The blocks that hold the positions after `1` through `2`: a block may begin before `1`
    /// or end after `2` (its entries are filtered when decoded).
    pub through: &'static str,
    /// The blocks that hold the positions of the list `1`.
    pub at: &'static str,
    /// `position, event_id, recorded_at_us` of the events at the positions of the list `1`.
    pub stamps: &'static str,
}

pub(crate) const JOURNAL_SQLITE: JournalSql = JournalSql {
    after: "SELECT position, first_position, entries FROM ledger_journal_blocks \
            WHERE position > ?1 ORDER BY position LIMIT ?2",
    through: "SELECT position, first_position, entries FROM ledger_journal_blocks \
              WHERE position > ?1 AND first_position <= ?2 AND position <= coalesce(\
              (SELECT min(position) FROM ledger_journal_blocks WHERE position >= ?2), ?2) \
              ORDER BY position",
    at: "SELECT position, first_position, entries FROM ledger_journal_blocks \
         WHERE position IN (SELECT (SELECT min(b.position) FROM ledger_journal_blocks b \
         WHERE b.position >= p.value) FROM json_each(?1) p) ORDER BY position",
    stamps: "SELECT position, event_id, recorded_at_us FROM events \
             WHERE position IN (SELECT value FROM json_each(?1))",
};

pub(crate) const JOURNAL_PG: JournalSql = JournalSql {
    after: "SELECT position, first_position, entries FROM ledger_journal_blocks \
            WHERE position > $1 ORDER BY position LIMIT $2",
    through: "SELECT position, first_position, entries FROM ledger_journal_blocks \
              WHERE position > $1 AND first_position <= $2 AND position <= coalesce(\
              (SELECT min(position) FROM ledger_journal_blocks WHERE position >= $2), $2) \
              ORDER BY position",
    at: "SELECT position, first_position, entries FROM ledger_journal_blocks \
         WHERE position IN (SELECT (SELECT min(b.position) FROM ledger_journal_blocks b \
         WHERE b.position >= p) FROM unnest($1::bigint[]) p) ORDER BY position",
    stamps: "SELECT position, event_id, recorded_at_us FROM events WHERE position = ANY($1)",
};

pub(crate) fn hash32(bytes: Vec<u8>, position: u64) -> Result<[u8; 32], StoreError> {
    <[u8; 32]>::try_from(bytes).map_err(|bytes| StoreError::CorruptRow {
        position,
        reason: format!("hash is {} bytes, not 32", bytes.len()),
    })
}

pub(crate) fn schema_version(value: i64, position: u64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::CorruptRow {
        position,
        reason: format!("schema_version {value}"),
    })
}

pub(crate) fn side_text(side: Side) -> &'static str {
    match side {
        Side::Debit => "debit",
        Side::Credit => "credit",
    }
}

fn account(text: &str, position: u64) -> Result<Account, StoreError> {
    text.parse().map_err(
        |e: gpunex_domain::ledger::AccountParseError| StoreError::CorruptRow {
            position,
            reason: e.to_string(),
        },
    )
}

/// The decoders of one backend's row type; `$int4` is how it stores small integers.
macro_rules! decoders {
    ($backend:ident, $row:ty, $int4:ty) => {
        pub(crate) mod $backend {
            use sqlx::Row;

            use super::*;

            pub(crate) fn head(row: &$row) -> Result<Head, StoreError> {
                let position = to_u64(row.try_get("last_position")?, 0, "last_position")?;
                Ok(Head {
                    position,
                    hash: hash32(row.try_get("last_hash")?, position)?,
                })
            }

            /// Columns by index, in [`EVENT_COLUMNS`] order: name look-ups cost more than the
            /// decode.
            pub(crate) fn event(row: &$row) -> Result<RecordedEvent, StoreError> {
                let position = to_u64(row.try_get(0)?, 0, "position")?;
                Ok(RecordedEvent {
                    position,
                    event_id: row.try_get(1)?,
                    stream_id: row.try_get(2)?,
                    stream_version: to_u64(row.try_get(3)?, position, "stream_version")?,
                    event_type: row.try_get(4)?,
                    schema_version: schema_version(
                        i64::from(row.try_get::<$int4, _>(5)?),
                        position,
                    )?,
                    recorded_at_us: row.try_get(6)?,
                    payload: row.try_get(7)?,
                    metadata: row.try_get(8)?,
                    hash: hash32(row.try_get(9)?, position)?,
                })
            }

            /// A postings row (`last_position, positions`): its last position and positions.
            pub(crate) fn postings(row: &$row) -> Result<(u64, Vec<u64>), StoreError> {
                let last = to_u64(row.try_get(0)?, 0, "last_position")?;
                let positions: Vec<u8> = row.try_get(1)?;
                Ok((last, crate::journal::decode_positions(last, &positions)?))
            }

            pub(crate) fn balance(row: &$row) -> Result<(Account, AccountTotals), StoreError> {
                let last_position = to_u64(row.try_get("last_position")?, 0, "last_position")?;
                Ok((
                    account(&row.try_get::<String, _>("account")?, last_position)?,
                    AccountTotals {
                        debits: Usdc::from_micros(row.try_get("debits_micro_usdc")?),
                        credits: Usdc::from_micros(row.try_get("credits_micro_usdc")?),
                        last_position,
                    },
                ))
            }
        }
    };
}

decoders!(sqlite, sqlx::sqlite::SqliteRow, i64);
decoders!(pg, sqlx::postgres::PgRow, i32);

/// The columns of [`EVENT_ROW_COLUMNS`], borrowed from a PostgreSQL row (SQLite's catch-ups
/// read through rusqlite, `sqlite_scan.rs`).
pub(crate) fn pg_event_row(row: &sqlx::postgres::PgRow) -> Result<crate::EventRow<'_>, StoreError> {
    use sqlx::Row;
    let position = to_u64(row.try_get(0)?, 0, "position")?;
    Ok(crate::EventRow {
        position,
        event_id: row.try_get(1)?,
        stream_id: row.try_get(2)?,
        stream_version: to_u64(row.try_get(3)?, position, "stream_version")?,
        event_type: row.try_get(4)?,
        schema_version: schema_version(i64::from(row.try_get::<i32, _>(5)?), position)?,
        recorded_at_us: row.try_get(6)?,
        payload: row.try_get(7)?,
    })
}
