//! Row decoding, for both databases, in one place: stored columns become events, journal lines,
//! balances and the log head here and nowhere else. The decoders are written once and
//! instantiated per backend (the databases differ only in the width of small integers).

use gpunex_domain::{Account, Side, Usdc};
use gpunex_projections::ledger::{AccountTotals, LedgerLine};

use crate::plan::Head;
use crate::{RecordedEvent, StoreError, to_u64};

/// The columns every event query selects, in the order the decoders read them.
pub(crate) const EVENT_COLUMNS: &str = "position, event_id, stream_id, stream_version, event_type, schema_version, recorded_at_us, payload, metadata, hash";

/// The columns a projection reads of an event ([`crate::EventRow`]): [`EVENT_COLUMNS`] less the
/// metadata and the hash, in the same order.
pub(crate) const EVENT_ROW_COLUMNS: &str = "position, event_id, stream_id, stream_version, event_type, schema_version, recorded_at_us, payload";

/// The start of every read of live journal entries: each with its event's id and recorded
/// time, in the order [`sqlite::journal_entry`] reads them (`j`: the entry, `e`: its event).
pub(crate) const JOURNAL_SELECT: &str = "SELECT j.position, j.entry_id, j.lines, e.event_id, e.recorded_at_us \
     FROM ledger_journal j LEFT JOIN events e ON e.position = j.position";

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

            /// A journal entry's lines, from the columns of [`JOURNAL_SELECT`] (an entry
            /// without its event gets a nil event id and time 0, which no replay matches).
            pub(crate) fn journal_entry(row: &$row) -> Result<Vec<LedgerLine>, StoreError> {
                let position = to_u64(row.try_get(0)?, 0, "position")?;
                let lines: Vec<u8> = row.try_get(2)?;
                crate::journal::decode_lines(
                    position,
                    row.try_get::<Option<uuid::Uuid>, _>(3)?.unwrap_or_default(),
                    row.try_get::<Option<i64>, _>(4)?.unwrap_or_default(),
                    row.try_get(1)?,
                    &lines,
                )
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
