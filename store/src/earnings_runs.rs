//! The earnings lines' stored form, for both databases (ADR 0013).
//!
//! A provider's lines are stored in runs: one row of `earnings_line_runs` per provider and per
//! written page (a rebuild's page of events, or a live batch), holding that page's lines of the
//! provider in position order. Within a provider dates never go backwards
//! ([`gpunex_projections::earnings_lines`]), so consecutive runs cover consecutive ranges of
//! both positions and dates: a date range or a position range of a provider's lines is a range
//! of its runs, found through the key `(provider_id, first_position)` or the index
//! `(provider_id, first_at_us, first_position)`. A rebuild so writes one row per provider and
//! page instead of one row per line plus two sorted indexes over all of them.
//!
//! The running sums are not stored per line: a run holds the provider's sums before its first
//! line, and the reader adds the lines up ([`decode_run`]), with the same rule as the fold.
//!
//! `lines`: the format byte 1; the number of lines (at least 1); the number of distinct rentals
//! and each one's 16-byte id; then per line, as LEB128 integers (`s`: signed, zigzag-mapped):
//! the position (the first as is, each next as its non-zero distance from the one before), the
//! date in microseconds (`s`: the first as is, each next as its distance from the one before,
//! never negative), the entry's and the report's 16-byte ids, the rental's index in the run's
//! list, the GPU-seconds from and to, the price per GPU-hour (`s`), gross (`s`), fee (`s`),
//! net (`s`) and the fee in basis points. Decoding is strict: a malformed or inconsistent row is
//! a `CorruptRow`, never a panic.

use std::collections::{BTreeMap, HashMap};

use gpunex_projections::earnings::Sums;
use gpunex_projections::earnings_lines::LineRow;
use uuid::Uuid;

use crate::StoreError;
use crate::bytes::{Reader, put_signed, put_varint};

const RUN_FORMAT: u8 = 1;

/// The columns of a run, in the order [`RunTuple`] reads them.
pub(crate) const RUN_COLUMNS: &str = "provider_id, first_position, last_position, first_at_us, \
     last_at_us, before_gross, before_fee, before_net, before_gpu_seconds, before_lines, lines";

/// A run as read by sqlx, in the order of [`RUN_COLUMNS`].
pub(crate) type RunTuple = (String, i64, i64, i64, i64, i64, i64, i64, i64, i64, Vec<u8>);

/// One stored run of a provider's lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunRow {
    pub provider_id: Uuid,
    pub first_position: u64,
    pub last_position: u64,
    pub first_at_us: i64,
    pub last_at_us: i64,
    /// The provider's sums through the line before the run's first.
    pub before: Sums,
    pub lines: Vec<u8>,
}

fn corrupt(position: u64, reason: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow {
        position,
        reason: format!("earnings run: {reason}"),
    }
}

fn non_negative(value: i64, position: u64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| corrupt(position, format!("negative {what}")))
}

impl RunRow {
    /// A row as read, checked for shape (the lines are checked by [`decode_run`]).
    pub(crate) fn of(row: RunTuple) -> Result<RunRow, StoreError> {
        let first_position = non_negative(row.1, 0, "position")?;
        let at = first_position;
        Ok(RunRow {
            provider_id: Uuid::try_parse(&row.0).map_err(|e| corrupt(at, e))?,
            first_position,
            last_position: non_negative(row.2, at, "position")?,
            first_at_us: row.3,
            last_at_us: row.4,
            before: Sums {
                gross: row.5,
                fee: row.6,
                net: row.7,
                gpu_seconds: non_negative(row.8, at, "GPU-seconds")?,
                lines: non_negative(row.9, at, "line count")?,
            },
            lines: row.10,
        })
    }
}

/// What one line adds to its provider's running sums (the fold's rule).
fn line_sums(line: &LineRow) -> Sums {
    Sums {
        gross: line.gross,
        fee: line.fee,
        net: line.net,
        gpu_seconds: line.to_gpu_seconds.saturating_sub(line.from_gpu_seconds),
        lines: 1,
    }
}

fn checked_add(a: Sums, b: Sums) -> Option<Sums> {
    Some(Sums {
        gross: a.gross.checked_add(b.gross)?,
        fee: a.fee.checked_add(b.fee)?,
        net: a.net.checked_add(b.net)?,
        gpu_seconds: a.gpu_seconds.checked_add(b.gpu_seconds)?,
        lines: a.lines.checked_add(b.lines)?,
    })
}

fn checked_sub(a: Sums, b: Sums) -> Option<Sums> {
    Some(Sums {
        gross: a.gross.checked_sub(b.gross)?,
        fee: a.fee.checked_sub(b.fee)?,
        net: a.net.checked_sub(b.net)?,
        gpu_seconds: a.gpu_seconds.checked_sub(b.gpu_seconds)?,
        lines: a.lines.checked_sub(b.lines)?,
    })
}

/// A batch's lines (in increasing position) as runs: one per provider.
pub(crate) fn runs_of(lines: &[LineRow]) -> Result<Vec<RunRow>, StoreError> {
    let mut by_provider: BTreeMap<Uuid, Vec<&LineRow>> = BTreeMap::new();
    for line in lines {
        by_provider.entry(line.provider_id).or_default().push(line);
    }
    by_provider
        .into_iter()
        .map(|(provider_id, lines)| encode_run(provider_id, &lines))
        .collect()
}

fn encode_run(provider_id: Uuid, lines: &[&LineRow]) -> Result<RunRow, StoreError> {
    let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
        return Err(corrupt(0, "a run of no line"));
    };
    let before = checked_sub(first.through, line_sums(first))
        .ok_or_else(|| corrupt(first.position, "running sums out of range"))?;
    let mut rentals: Vec<Uuid> = Vec::new();
    let mut index: HashMap<Uuid, u64> = HashMap::new();
    for line in lines {
        index.entry(line.rental_id).or_insert_with(|| {
            rentals.push(line.rental_id);
            rentals.len() as u64 - 1
        });
    }
    let mut out = Vec::with_capacity(16 + rentals.len() * 16 + lines.len() * 64);
    out.push(RUN_FORMAT);
    put_varint(&mut out, lines.len() as u64);
    put_varint(&mut out, rentals.len() as u64);
    for rental in &rentals {
        out.extend_from_slice(rental.as_bytes());
    }
    let (mut position, mut at_us) = (0_u64, 0_i64);
    for (n, line) in lines.iter().enumerate() {
        if n > 0 && (line.position <= position || line.at_us < at_us) {
            return Err(corrupt(line.position, "lines out of order"));
        }
        put_varint(&mut out, line.position - position);
        put_signed(&mut out, line.at_us.wrapping_sub(at_us));
        (position, at_us) = (line.position, line.at_us);
        out.extend_from_slice(line.entry_id.as_bytes());
        out.extend_from_slice(line.report_id.as_bytes());
        put_varint(&mut out, index[&line.rental_id]);
        put_varint(&mut out, line.from_gpu_seconds);
        put_varint(&mut out, line.to_gpu_seconds);
        for amount in [line.price_per_gpu_hour, line.gross, line.fee, line.net] {
            put_signed(&mut out, amount);
        }
        put_varint(&mut out, u64::from(line.fee_bp));
    }
    Ok(RunRow {
        provider_id,
        first_position: first.position,
        last_position: last.position,
        first_at_us: first.at_us,
        last_at_us: last.at_us,
        before,
        lines: out,
    })
}

/// A run's lines, with the provider's running sums through each.
pub(crate) fn decode_run(row: &RunRow) -> Result<Vec<LineRow>, StoreError> {
    let mut reader = Reader {
        bytes: &row.lines,
        position: row.first_position,
        what: "earnings run",
    };
    if reader.byte()? != RUN_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let count = reader.varint()?;
    // Every line takes at least 40 bytes and every rental 16: a count past what the bytes can
    // hold is refused before anything is allocated for it.
    if count == 0 || count > reader.bytes.len() as u64 / 40 {
        return Err(reader.corrupt("line count"));
    }
    let rental_count = reader.varint()?;
    if rental_count == 0 || rental_count > count || rental_count > reader.bytes.len() as u64 / 16 {
        return Err(reader.corrupt("rental count"));
    }
    let rentals = (0..rental_count)
        .map(|_| reader.uuid())
        .collect::<Result<Vec<_>, _>>()?;
    let mut lines = Vec::with_capacity(count as usize);
    let (mut position, mut at_us, mut through) = (0_u64, 0_i64, row.before);
    for n in 0..count {
        let step = reader.varint()?;
        let moved = reader.signed()?;
        if n > 0 && (step == 0 || moved < 0) {
            return Err(reader.corrupt("lines out of order"));
        }
        position = position
            .checked_add(step)
            .ok_or_else(|| reader.corrupt("position out of range"))?;
        at_us = at_us
            .checked_add(moved)
            .ok_or_else(|| reader.corrupt("date out of range"))?;
        let entry_id = reader.uuid()?;
        let report_id = reader.uuid()?;
        let rental_id = usize::try_from(reader.varint()?)
            .ok()
            .and_then(|i| rentals.get(i).copied())
            .ok_or_else(|| reader.corrupt("rental index"))?;
        let from_gpu_seconds = reader.varint()?;
        let to_gpu_seconds = reader.varint()?;
        let [price_per_gpu_hour, gross, fee, net] = [
            reader.signed()?,
            reader.signed()?,
            reader.signed()?,
            reader.signed()?,
        ];
        let fee_bp = u32::try_from(reader.varint()?).map_err(|_| reader.corrupt("fee"))?;
        let mut line = LineRow {
            position,
            provider_id: row.provider_id,
            at_us,
            entry_id,
            report_id,
            rental_id,
            from_gpu_seconds,
            to_gpu_seconds,
            price_per_gpu_hour,
            gross,
            fee,
            net,
            fee_bp,
            through,
        };
        through = checked_add(through, line_sums(&line))
            .ok_or_else(|| reader.corrupt("running sums out of range"))?;
        line.through = through;
        lines.push(line);
    }
    reader.done()?;
    let ends = lines.first().zip(lines.last());
    if ends.is_none_or(|(first, last)| {
        (first.position, last.position, first.at_us, last.at_us)
            != (
                row.first_position,
                row.last_position,
                row.first_at_us,
                row.last_at_us,
            )
    }) {
        return Err(reader.corrupt("its key columns differ from its lines"));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    /// Lines of two providers as the fold makes them: running sums per provider.
    fn lines() -> Vec<LineRow> {
        let mut sums: HashMap<Uuid, Sums> = HashMap::new();
        let mut out = Vec::new();
        for (n, position) in [3_u64, 4, 9, 10, 200, 201, 70_000].into_iter().enumerate() {
            let provider_id = id(1 + (n as u128 % 2));
            let mut line = LineRow {
                position,
                provider_id,
                at_us: 1_700_000_000_000_000 + (n as i64 / 2) * 60_000_000,
                entry_id: id(100 + n as u128),
                report_id: id(u128::MAX - n as u128),
                rental_id: id(10 + (n as u128 % 3)),
                from_gpu_seconds: 60 * n as u64,
                to_gpu_seconds: 60 * n as u64 + 480,
                price_per_gpu_hour: 2_000_000,
                gross: if n == 6 { i64::MAX / 4 } else { 266_667 },
                fee: 53_333,
                net: if n == 6 {
                    i64::MAX / 4 - 53_333
                } else {
                    213_334
                },
                fee_bp: 2_000,
                through: Sums::default(),
            };
            let before = sums.entry(provider_id).or_insert(Sums {
                gross: -5,
                fee: 0,
                net: -5,
                gpu_seconds: 7,
                lines: 3,
            });
            *before = checked_add(*before, line_sums(&line)).unwrap();
            line.through = *before;
            out.push(line);
        }
        out
    }

    #[test]
    fn runs_round_trip_with_their_running_sums() {
        let lines = lines();
        let runs = runs_of(&lines).unwrap();
        assert_eq!(runs.len(), 2);
        let mut decoded: Vec<LineRow> = runs.iter().flat_map(|r| decode_run(r).unwrap()).collect();
        decoded.sort_by_key(|l| l.position);
        assert_eq!(decoded, lines);
        let first = &runs[0];
        assert_eq!((first.first_position, first.last_position), (3, 70_000));
        assert_eq!(first.before.lines, 3);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused_or_decodes_cleanly() {
        let run = runs_of(&lines()).unwrap().remove(0);
        for end in 0..run.lines.len() {
            let cut = RunRow {
                lines: run.lines[..end].to_vec(),
                ..run.clone()
            };
            assert!(matches!(
                decode_run(&cut),
                Err(StoreError::CorruptRow { .. })
            ));
        }
        // A changed byte either fails to decode or decodes to different lines; it never panics.
        for i in 0..run.lines.len() {
            for flip in [0x01_u8, 0x80, 0xff] {
                let mut bytes = run.lines.clone();
                bytes[i] ^= flip;
                let changed = RunRow {
                    lines: bytes,
                    ..run.clone()
                };
                if let Ok(lines) = decode_run(&changed) {
                    assert_ne!(lines, decode_run(&run).unwrap());
                }
            }
        }
        let mut trailing = run.clone();
        trailing.lines.push(0);
        assert!(decode_run(&trailing).is_err());
    }

    #[test]
    fn key_columns_must_match_the_lines() {
        let run = runs_of(&lines()).unwrap().remove(0);
        for changed in [
            RunRow {
                first_position: 2,
                ..run.clone()
            },
            RunRow {
                last_position: 201,
                ..run.clone()
            },
            RunRow {
                last_at_us: run.last_at_us + 1,
                ..run.clone()
            },
        ] {
            assert!(decode_run(&changed).is_err());
        }
        let overflowing = RunRow {
            before: Sums {
                gross: i64::MAX,
                ..run.before
            },
            ..run.clone()
        };
        assert!(decode_run(&overflowing).is_err());
    }
}
