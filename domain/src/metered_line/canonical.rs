//! A fast path for reading a stored `rental.usage_metered` payload, exact by construction.
//!
//! The store keeps every payload as canonical JSON (ADR 0002: keys sorted at every level, no
//! insignificant whitespace), so a usage event's bytes have one shape: its keys in order, each
//! value a string with nothing to unescape (ids, accounts, sides), an integer, or `null`, the
//! postings an array of objects of three keys. [`read`] walks that shape byte by byte, parsing
//! each value with the same function serde would call (`Uuid::try_parse`, `Account::from_str`,
//! `i64`/`u64` ranges, `JournalEntry::new`), and gives up (`None`) at the first byte that is not
//! of that shape or a value serde might read differently: an escape or a control character in a
//! string, a number that is not a plain integer (a fraction, an exponent, a leading zero, `-0`),
//! whitespace, a key out of place, trailing bytes. The callers then decode with serde, so an
//! accepted payload decodes exactly as serde decodes it and a refused one gets serde's answer
//! and error (the differential tests in `metered_line.rs` hold the two paths equal, byte
//! mutations included). It is several times faster than serde's decoding of the same struct:
//! the catch-ups read nearly every event through it.

use std::str::FromStr;

use uuid::Uuid;

use crate::ledger::{Account, JournalEntry, Posting, Side};
use crate::metered_line::MeteredLine;
use crate::money::Usdc;
use crate::time::Timestamp;

/// What the fast path reads of a canonical usage payload: the line, and the postings when
/// asked for (the other fields are only checked).
pub(super) struct Usage {
    pub line: MeteredLine,
    pub postings: Option<JournalEntry>,
}

/// A cursor over a canonical payload's bytes.
struct Canon<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Canon<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.at..]
    }

    /// Exactly these bytes next.
    fn lit(&mut self, expected: &[u8]) -> Option<()> {
        self.rest().starts_with(expected).then(|| {
            self.at += expected.len();
        })
    }

    /// `"name":` next.
    fn key(&mut self, name: &str) -> Option<()> {
        let rest = self.rest();
        let len = name.len();
        let matches = rest.len() > len + 2
            && rest[0] == b'"'
            && &rest[1..=len] == name.as_bytes()
            && rest[len + 1] == b'"'
            && rest[len + 2] == b':';
        matches.then(|| {
            self.at += len + 3;
        })
    }

    /// Whether `"name":` is next (an optional field).
    fn has_key(&mut self, name: &str) -> bool {
        let at = self.at;
        let found = self.key(name).is_some();
        self.at = at;
        found
    }

    /// A string with nothing to unescape and no control character: its text, as serde would
    /// borrow it.
    fn plain_str(&mut self) -> Option<&'a str> {
        self.lit(b"\"")?;
        let rest = self.rest();
        let mut len = 0;
        loop {
            match *rest.get(len)? {
                b'"' => break,
                b'\\' | 0..0x20 => return None,
                _ => len += 1,
            }
        }
        // Both ends are ASCII quotes, so the slice is on character boundaries.
        let text = self.text.get(self.at..self.at + len)?;
        self.at += len + 1;
        Some(text)
    }

    /// The digits of a plain integer: `0` or a non-zero digit and more digits.
    fn digits(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if len == 0 || (len > 1 && rest[0] == b'0') {
            return None;
        }
        // A fraction or an exponent: serde reads it as a float, which is not this integer.
        if matches!(rest.get(len), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let digits = self.text.get(self.at..self.at + len)?;
        self.at += len;
        Some(digits)
    }

    fn uint(&mut self) -> Option<u64> {
        self.digits()?.parse().ok()
    }

    /// A signed integer; `-0` is left to serde.
    fn int(&mut self) -> Option<i64> {
        if self.lit(b"-").is_some() {
            let magnitude = self.digits()?;
            if magnitude == "0" {
                return None;
            }
            // Parsed with its sign, so i64::MIN is read.
            let start = self.at - magnitude.len() - 1;
            return self.text.get(start..self.at)?.parse().ok();
        }
        self.digits()?.parse().ok()
    }

    fn uuid(&mut self) -> Option<Uuid> {
        Uuid::try_parse(self.plain_str()?).ok()
    }

    /// `null`, or what `value` reads.
    fn nullable<T>(&mut self, value: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.lit(b"null").is_some() {
            return Some(None);
        }
        value(self).map(Some)
    }

    /// The postings: parsed into a journal entry, or, with `parse` false, only checked to have
    /// the canonical shape.
    fn postings(&mut self, parse: bool) -> Option<Option<JournalEntry>> {
        self.lit(b"[")?;
        let mut lines = Vec::with_capacity(if parse { 3 } else { 0 });
        loop {
            self.lit(b"{")?;
            self.key("account")?;
            let account = self.plain_str()?;
            self.lit(b",")?;
            self.key("amount_micro_usdc")?;
            let amount = self.int()?;
            self.lit(b",")?;
            self.key("side")?;
            let side = match self.plain_str()? {
                "debit" => Side::Debit,
                "credit" => Side::Credit,
                _ => return None,
            };
            self.lit(b"}")?;
            if parse {
                lines.push(Posting {
                    account: Account::from_str(account).ok()?,
                    side,
                    amount_micro_usdc: Usdc::from_micros(amount),
                });
            }
            if self.lit(b"]").is_some() {
                break;
            }
            self.lit(b",")?;
        }
        if parse {
            return JournalEntry::new(lines).ok().map(Some);
        }
        Some(None)
    }
}

/// Reads a canonical `rental.usage_metered` payload (schema 1), parsing its postings when
/// `postings` is true; `None` when it is not in canonical shape or a value does not parse, for
/// the caller to decode with serde.
pub(super) fn read(payload: &str, postings: bool) -> Option<Usage> {
    let mut c = Canon {
        text: payload,
        at: 0,
    };
    c.lit(b"{")?;
    c.key("entry_id")?;
    let entry_id = c.uuid()?;
    c.lit(b",")?;
    c.key("fee")?;
    let fee = Usdc::from_micros(c.int()?);
    c.lit(b",")?;
    c.key("fee_bp")?;
    let fee_bp = u32::try_from(c.uint()?).ok()?;
    c.lit(b",")?;
    c.key("from_gpu_seconds")?;
    let from_gpu_seconds = c.uint()?;
    c.lit(b",")?;
    c.key("gross")?;
    let gross = Usdc::from_micros(c.int()?);
    c.lit(b",")?;
    let mut metered_at = None;
    if c.has_key("metered_at") {
        c.key("metered_at")?;
        metered_at = c.nullable(Canon::int)?;
        c.lit(b",")?;
    }
    c.key("net")?;
    let net = Usdc::from_micros(c.int()?);
    c.lit(b",")?;
    c.key("postings")?;
    let entry = c.postings(postings)?;
    c.lit(b",")?;
    c.key("price_per_gpu_hour")?;
    let price_per_gpu_hour = Usdc::from_micros(c.int()?);
    c.lit(b",")?;
    c.key("provider_id")?;
    let provider_id = c.uuid()?;
    c.lit(b",")?;
    c.key("rental_id")?;
    let rental_id = c.uuid()?;
    c.lit(b",")?;
    c.key("renter_id")?;
    c.plain_str()?;
    c.lit(b",")?;
    c.key("report_id")?;
    let report_id = c.uuid()?;
    c.lit(b",")?;
    if c.has_key("reported_gpu_seconds") {
        c.key("reported_gpu_seconds")?;
        c.nullable(Canon::uint)?;
        c.lit(b",")?;
    }
    c.key("to_gpu_seconds")?;
    let to_gpu_seconds = c.uint()?;
    c.lit(b"}")?;
    if c.at != payload.len() {
        return None;
    }
    Some(Usage {
        line: MeteredLine {
            entry_id,
            rental_id,
            provider_id,
            report_id,
            from_gpu_seconds,
            to_gpu_seconds,
            price_per_gpu_hour,
            gross,
            fee,
            net,
            fee_bp,
            metered_at: metered_at.map(Timestamp::from_unix_micros),
        },
        postings: entry,
    })
}
