//! The earnings hours' stored form, for both databases (ADR 0017).
//!
//! Each GPU's earnings per UTC hour ([`HourSums`], the fold's rows keyed by [`HourKey`]) are
//! stored one row of `earnings_hours` per provider and hour, holding the GPU rows of that hour
//! in `gpus`, instead of one table row per GPU: a rebuild of the 1.18M-event bench log writes
//! about 40,000 rows instead of 211,000, each under PostgreSQL's 2 KB compression threshold and
//! well inside a 4 KiB SQLite page. A provider's hour is written whole each time a page adds to
//! it (the fold starts from the stored rows of the provider's open hour,
//! [`gpunex_projections::earnings_lines::Before::hours`]), and `through_position`, the last log
//! position folded into any of its GPU rows, tells a reader as of an earlier position to read
//! the hour from its lines instead.
//!
//! `gpus`: the format byte 1; the number of GPU rows (at least 1); then per row, in increasing
//! (GPU, model) order: the GPU UUID (its length, then its UTF-8 bytes), the model (0 when it is
//! the previous row's model, else its length plus one, then its UTF-8 bytes), then as LEB128
//! integers (`s`: signed, zigzag-mapped) gross (`s`), fee (`s`), net (`s`), GPU-seconds, the
//! lines the GPU was in, the model's net (`s`) and lines, and the row's last folded position.
//! Decoding is strict: a malformed or inconsistent row (rows out of order, a last position that
//! is not the hour's, an hour that is not a whole UTC hour) is a `CorruptRow`, never a panic.

use std::collections::BTreeMap;

use gpunex_projections::earnings::Sums;
use gpunex_projections::earnings_lines::{HOUR_US, HourKey, HourSums};
use uuid::Uuid;

use crate::StoreError;
use crate::bytes::{Reader, put_signed, put_varint};

const HOUR_FORMAT: u8 = 1;

/// The columns of a stored hour, in the order [`HourTuple`] reads them.
pub(crate) const HOUR_COLUMNS: &str = "provider_id, hour_us, through_position, gpus";

/// A stored hour as read by sqlx, in the order of [`HOUR_COLUMNS`].
pub(crate) type HourTuple = (String, i64, i64, Vec<u8>);

/// One stored provider's hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HourRow {
    pub provider_id: Uuid,
    /// The hour's first microsecond (UTC, a multiple of [`HOUR_US`]).
    pub hour_us: i64,
    /// The last log position folded into any of its GPU rows.
    pub through_position: u64,
    pub gpus: Vec<u8>,
}

/// One GPU row of a stored hour, borrowing its names from the row's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuHour<'a> {
    pub gpu_uuid: &'a str,
    pub model_id: &'a str,
    pub sums: HourSums,
}

fn corrupt(position: u64, reason: impl std::fmt::Display) -> StoreError {
    StoreError::CorruptRow {
        position,
        reason: format!("earnings hour: {reason}"),
    }
}

impl HourRow {
    /// A row as read, checked for shape (its GPU rows are checked by [`decode_hour`]).
    pub(crate) fn of(row: HourTuple) -> Result<HourRow, StoreError> {
        let through_position =
            u64::try_from(row.2).map_err(|_| corrupt(0, "a negative position"))?;
        let at = through_position;
        if row.1.rem_euclid(HOUR_US) != 0 {
            return Err(corrupt(at, format!("{} is not a whole UTC hour", row.1)));
        }
        Ok(HourRow {
            provider_id: Uuid::try_parse(&row.0).map_err(|e| corrupt(at, e))?,
            hour_us: row.1,
            through_position,
            gpus: row.3,
        })
    }
}

/// A batch's hours (whole, as the fold leaves them) as rows: one per provider and hour.
pub(crate) fn hours_of(hours: &BTreeMap<HourKey, HourSums>) -> Result<Vec<HourRow>, StoreError> {
    let mut rows: Vec<HourRow> = Vec::new();
    let mut gpus: Vec<(&str, &str, &HourSums)> = Vec::new();
    let mut keys = hours.iter().peekable();
    while let Some(((provider, hour, gpu, model), sums)) = keys.next() {
        gpus.push((gpu, model, sums));
        let next_is_another_hour = keys
            .peek()
            .is_none_or(|((p, h, _, _), _)| (p, h) != (provider, hour));
        if next_is_another_hour {
            rows.push(encode_hour(*provider, *hour, &gpus)?);
            gpus.clear();
        }
    }
    Ok(rows)
}

/// One provider's hour from its GPU rows, in increasing (GPU, model) order.
fn encode_hour(
    provider_id: Uuid,
    hour_us: i64,
    gpus: &[(&str, &str, &HourSums)],
) -> Result<HourRow, StoreError> {
    let through_position = gpus
        .iter()
        .map(|(_, _, sums)| sums.through_position)
        .max()
        .ok_or_else(|| corrupt(0, "an hour of no GPU row"))?;
    if hour_us.rem_euclid(HOUR_US) != 0 {
        return Err(corrupt(
            through_position,
            format!("{hour_us} is not a whole UTC hour"),
        ));
    }
    let mut out = Vec::with_capacity(8 + gpus.len() * 72);
    out.push(HOUR_FORMAT);
    put_varint(&mut out, gpus.len() as u64);
    let mut previous: Option<(&str, &str)> = None;
    for &(gpu, model, sums) in gpus {
        if previous.is_some_and(|p| p >= (gpu, model)) {
            return Err(corrupt(through_position, "GPU rows out of order"));
        }
        put_varint(&mut out, gpu.len() as u64);
        out.extend_from_slice(gpu.as_bytes());
        if previous.is_some_and(|(_, m)| m == model) {
            put_varint(&mut out, 0);
        } else {
            put_varint(&mut out, model.len() as u64 + 1);
            out.extend_from_slice(model.as_bytes());
        }
        previous = Some((gpu, model));
        for amount in [sums.gpu.gross, sums.gpu.fee, sums.gpu.net] {
            put_signed(&mut out, amount);
        }
        put_varint(&mut out, sums.gpu.gpu_seconds);
        put_varint(&mut out, sums.gpu.lines);
        put_signed(&mut out, sums.model_net);
        put_varint(&mut out, sums.model_lines);
        put_varint(&mut out, sums.through_position);
    }
    Ok(HourRow {
        provider_id,
        hour_us,
        through_position,
        gpus: out,
    })
}

fn text<'a>(reader: &mut Reader<'a>, len: u64) -> Result<&'a str, StoreError> {
    let len = usize::try_from(len).map_err(|_| reader.corrupt("a name's length"))?;
    let bytes = reader.take(len)?;
    std::str::from_utf8(bytes).map_err(|_| reader.corrupt("a name that is not UTF-8"))
}

/// A stored hour's GPU rows, in increasing (GPU, model) order.
pub(crate) fn decode_hour(row: &HourRow) -> Result<Vec<GpuHour<'_>>, StoreError> {
    let mut reader = Reader {
        bytes: &row.gpus,
        position: row.through_position,
        what: "earnings hour",
    };
    if reader.byte()? != HOUR_FORMAT {
        return Err(reader.corrupt("unknown format"));
    }
    let count = reader.varint()?;
    // Every GPU row takes at least 10 bytes: a count past what the bytes can hold is refused
    // before anything is allocated for it.
    if count == 0 || count > reader.bytes.len() as u64 / 10 {
        return Err(reader.corrupt("GPU row count"));
    }
    let mut gpus: Vec<GpuHour<'_>> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = reader.varint()?;
        let gpu_uuid = text(&mut reader, len)?;
        let model_id = match reader.varint()? {
            0 => match gpus.last() {
                Some(previous) => previous.model_id,
                None => return Err(reader.corrupt("a first row with no model")),
            },
            len => text(&mut reader, len - 1)?,
        };
        if gpus
            .last()
            .is_some_and(|p| (p.gpu_uuid, p.model_id) >= (gpu_uuid, model_id))
        {
            return Err(reader.corrupt("GPU rows out of order"));
        }
        let (gross, fee, net) = (reader.signed()?, reader.signed()?, reader.signed()?);
        let sums = HourSums {
            gpu: Sums {
                gross,
                fee,
                net,
                gpu_seconds: reader.varint()?,
                lines: reader.varint()?,
            },
            model_net: reader.signed()?,
            model_lines: reader.varint()?,
            through_position: reader.varint()?,
        };
        gpus.push(GpuHour {
            gpu_uuid,
            model_id,
            sums,
        });
    }
    reader.done()?;
    let last = gpus.iter().map(|g| g.sums.through_position).max();
    if last != Some(row.through_position) {
        return Err(reader.corrupt("a last position that is not the hour's"));
    }
    Ok(gpus)
}

/// A stored hour's GPU rows under their fold keys.
pub(crate) fn hour_keys(row: &HourRow) -> Result<Vec<(HourKey, HourSums)>, StoreError> {
    Ok(decode_hour(row)?
        .into_iter()
        .map(|g| {
            let key = (
                row.provider_id,
                row.hour_us,
                g.gpu_uuid.to_owned(),
                g.model_id.to_owned(),
            );
            (key, g.sums)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = HOUR_US;

    fn sums(gross: i64, through_position: u64) -> HourSums {
        HourSums {
            gpu: Sums {
                gross,
                fee: gross / 5,
                net: gross - gross / 5,
                gpu_seconds: 3_600,
                lines: 12,
            },
            model_net: -7,
            model_lines: 3,
            through_position,
        }
    }

    fn hours() -> BTreeMap<HourKey, HourSums> {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let key =
            |p: Uuid, h: i64, gpu: &str, model: &str| (p, h, gpu.to_owned(), model.to_owned());
        BTreeMap::from([
            (key(a, 0, "GPU-a", "h100-80gb"), sums(1_001, 7)),
            (key(a, 0, "GPU-b", "h100-80gb"), sums(1_000, 9)),
            (key(a, 0, "GPU-c", "a100-40gb"), sums(i64::MAX, 8)),
            (key(a, -HOUR, "", "h100-80gb"), sums(i64::MIN, 2)),
            (key(a, 5 * HOUR, "GPU-ä", ""), sums(0, 11)),
            (key(b, 0, "GPU-c", "l4"), sums(3, 10)),
        ])
    }

    #[test]
    fn hours_round_trip_one_row_per_provider_and_hour() {
        let hours = hours();
        let rows = hours_of(&hours).unwrap();
        assert_eq!(rows.len(), 4);
        let first = &rows[1];
        assert_eq!((first.hour_us, first.through_position), (0, 9));
        let mut back = BTreeMap::new();
        for row in &rows {
            let stored = HourRow::of((
                row.provider_id.to_string(),
                row.hour_us,
                row.through_position as i64,
                row.gpus.clone(),
            ))
            .unwrap();
            assert_eq!(&stored, row);
            back.extend(hour_keys(&stored).unwrap());
        }
        assert_eq!(back, hours);
        assert!(hours_of(&BTreeMap::new()).unwrap().is_empty());
        // The second row's model is the first's, written as 0.
        let gpus = decode_hour(first).unwrap();
        assert_eq!(gpus[1].model_id, "h100-80gb");
        assert!(first.gpus.len() < 3 * 40, "{} bytes", first.gpus.len());
    }

    #[test]
    fn malformed_hours_are_corrupt_not_panics() {
        let rows = hours_of(&hours()).unwrap();
        let row = &rows[1];
        let with = |gpus: Vec<u8>| HourRow {
            gpus,
            ..row.clone()
        };
        for cut in 0..row.gpus.len() {
            let short = with(row.gpus[..cut].to_vec());
            assert!(
                matches!(decode_hour(&short), Err(StoreError::CorruptRow { .. })),
                "cut at {cut}"
            );
        }
        let mut longer = row.gpus.clone();
        longer.push(0);
        assert!(decode_hour(&with(longer)).is_err(), "trailing bytes");
        let mut format = row.gpus.clone();
        format[0] = 2;
        assert!(decode_hour(&with(format)).is_err(), "unknown format");
        for count in [0_u8, 100] {
            let mut counted = row.gpus.clone();
            counted[1] = count;
            assert!(decode_hour(&with(counted)).is_err(), "count {count}");
        }
        let later = HourRow {
            through_position: row.through_position + 1,
            ..row.clone()
        };
        assert!(decode_hour(&later).is_err(), "the hour's last position");
        // A first row naming "the previous row's model".
        let mut first_model = vec![HOUR_FORMAT, 1, 1, b'G', 0];
        first_model.extend([0; 8]);
        assert!(decode_hour(&with(first_model)).is_err());
        // Bytes that are not UTF-8, and rows out of order.
        let bad = |gpu: &[u8], second: &[u8]| {
            let mut out = vec![HOUR_FORMAT, 2];
            for name in [gpu, second] {
                out.push(name.len() as u8);
                out.extend_from_slice(name);
                out.extend([2, b'm', 0, 0, 0, 0, 0, 0, 0, 0]);
            }
            HourRow {
                through_position: 0,
                gpus: out,
                ..row.clone()
            }
        };
        assert_eq!(decode_hour(&bad(b"G", b"H")).unwrap().len(), 2);
        assert!(decode_hour(&bad(b"\xff", b"G")).is_err());
        assert!(decode_hour(&bad(b"G", b"G")).is_err());
        assert!(decode_hour(&bad(b"H", b"G")).is_err());
        assert!(
            HourRow::of((row.provider_id.to_string(), 5, 9, row.gpus.clone())).is_err(),
            "not a whole hour"
        );
        assert!(HourRow::of(("x".to_owned(), 0, 9, row.gpus.clone())).is_err());
        assert!(HourRow::of((row.provider_id.to_string(), 0, -1, row.gpus.clone())).is_err());
        // Rows the encoder is given out of order are refused too.
        let sums = sums(1, 1);
        assert!(encode_hour(row.provider_id, 0, &[("B", "m", &sums), ("A", "m", &sums)]).is_err());
        assert!(encode_hour(row.provider_id, 1, &[("A", "m", &sums)]).is_err());
    }
}
