//! Row decoding, for both databases, in one place: stored columns become events, journal lines,
//! balances and the log head here and nowhere else. The decoders are written once and
//! instantiated per backend (the databases differ only in the width of small integers).

use gpunex_domain::{Account, Side, Usdc};
use gpunex_projections::ledger::{AccountTotals, LedgerLine};

use crate::plan::Head;
use crate::{RecordedEvent, StoreError, to_u64};

/// The columns every event query selects, in the order the decoders read them.
pub(crate) const EVENT_COLUMNS: &str = "position, event_id, stream_id, stream_version, event_type, schema_version, recorded_at_us, payload, metadata, hash";

/// The columns every journal query selects, in the order the decoders read them.
pub(crate) const LINE_COLUMNS: &str =
    "position, line_index, event_id, entry_id, account, side, amount_micro_usdc, recorded_at_us";

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

pub(crate) fn parse_side(text: &str) -> Option<Side> {
    match text {
        "debit" => Some(Side::Debit),
        "credit" => Some(Side::Credit),
        _ => None,
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

fn line_index(value: i64, position: u64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::CorruptRow {
        position,
        reason: format!("line_index {value}"),
    })
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

            /// Columns by index, in [`LINE_COLUMNS`] order.
            pub(crate) fn line(row: &$row) -> Result<LedgerLine, StoreError> {
                let position = to_u64(row.try_get(0)?, 0, "position")?;
                let side: String = row.try_get(5)?;
                Ok(LedgerLine {
                    position,
                    line_index: line_index(i64::from(row.try_get::<$int4, _>(1)?), position)?,
                    event_id: row.try_get(2)?,
                    entry_id: row.try_get(3)?,
                    account: account(&row.try_get::<String, _>(4)?, position)?,
                    side: parse_side(&side).ok_or_else(|| StoreError::CorruptRow {
                        position,
                        reason: format!("side `{side}`"),
                    })?,
                    amount: Usdc::from_micros(row.try_get(6)?),
                    recorded_at_us: row.try_get(7)?,
                })
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
