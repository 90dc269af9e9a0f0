//! A fast path for reading a stored `rental.usage_metered` payload, exact by construction.
//!
//! The store keeps every payload as canonical JSON (ADR 0002: keys sorted at every level, no
//! insignificant whitespace), so a usage event's bytes have one shape: its keys in order, each
//! value a string with nothing to unescape (ids, accounts, sides), an integer, or `null`, the
//! postings an array of objects of three keys. [`read`] walks that shape byte by byte, parsing
//! each value with the same function serde would call (`Uuid::try_parse`, `Account::from_str`,
//! `i64`/`u64` ranges, `JournalEntry::new`; ids and accounts in the canonical spelling the domain
//! writes are read by hand into the same values, any other spelling by those functions), and
//! gives up (`None`) at the first byte that is not of that shape or a value serde might read
//! differently: an escape or a control character in a string, a number that is not a plain
//! integer (a fraction, an exponent, a leading zero, `-0`), whitespace, a key out of place,
//! trailing bytes. The callers then decode with serde, so an accepted payload decodes exactly as
//! serde decodes it and a refused one gets serde's answer and error (the differential tests in
//! `metered_line.rs` hold the two paths equal, byte mutations included). It is several times
//! faster than serde's decoding of the same struct: the catch-ups read nearly every event
//! through it.

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
        let len = first_stop(self.rest())?;
        if self.rest()[len] != b'"' {
            return None;
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

    /// A string that `Uuid::try_parse` reads as an id. Its canonical spelling (lower-case,
    /// hyphenated: how the domain writes every id) is read here, any other by `try_parse`.
    fn uuid(&mut self) -> Option<Uuid> {
        let rest = self.rest();
        if rest.get(37) == Some(&b'"')
            && rest[0] == b'"'
            && let Some(id) = hyphenated_lower(&rest[1..37])
        {
            self.at += 38;
            return Some(id);
        }
        Uuid::try_parse(self.plain_str()?).ok()
    }

    /// A string that `Account::from_str` reads as an account. The spellings a usage entry posts
    /// to (a kind, with its owner's id in canonical spelling) are read here, any other by
    /// `from_str`.
    fn account(&mut self) -> Option<Account> {
        let rest = self.rest();
        for (spelling, account) in [
            (&b"\"platform_revenue\""[..], Account::PlatformRevenue),
            (&b"\"treasury\""[..], Account::Treasury),
            (
                &b"\"platform_adjustments\""[..],
                Account::PlatformAdjustments,
            ),
        ] {
            if rest.starts_with(spelling) {
                self.at += spelling.len();
                return Some(account);
            }
        }
        type Owned = fn(Uuid) -> Account;
        let owned: [(&[u8], Owned); 3] = [
            (b"\"renter_receivable:", Account::RenterReceivable),
            (b"\"provider_payable:", Account::ProviderPayable),
            (b"\"payout_clearing:", Account::PayoutClearing),
        ];
        for (kind, account) in owned {
            if let Some(owner) = rest.strip_prefix(kind) {
                if owner.get(36) == Some(&b'"')
                    && let Some(id) = hyphenated_lower(&owner[..36])
                {
                    self.at += kind.len() + 37;
                    return Some(account(id));
                }
                break;
            }
        }
        Account::from_str(self.plain_str()?).ok()
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
            let account = if parse {
                Some(self.account()?)
            } else {
                self.plain_str()?;
                None
            };
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
            if let Some(account) = account {
                lines.push(Posting {
                    account,
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

/// Where a plain string's scan stops in `bytes`: the index of the first closing quote,
/// backslash or control character (`None`: none of them). Eight bytes at a time: in each 64-bit
/// word, a byte equal to the quote or the backslash XORs to zero, and a byte below `0x20`
/// borrows when `0x20` is subtracted from it; the usual zero-byte test (`(x - 0x01..) & !x &
/// 0x80..`) flags such bytes. A borrow can flag a byte above a flagged one, never below it, so
/// the lowest flag (the first byte, read little-endian) is exact.
fn first_stop(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in words.by_ref() {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let flags = ((quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (word.wrapping_sub(ONES * 0x20) & !word))
            & HIGHS;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = words.remainder();
    tail.iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// Each byte's value as a lower-case hex digit; `0xff` for any other byte.
const HEX: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut digit = 0;
    while digit < 16 {
        table[b"0123456789abcdef"[digit] as usize] = digit as u8;
        digit += 1;
    }
    table
};

/// The id `text` spells in canonical form (36 bytes: lower-case hex digits, hyphens after the
/// 8th, 12th, 16th and 20th), which is the id `Uuid::try_parse` reads from it; `None` for any
/// other bytes.
fn hyphenated_lower(text: &[u8]) -> Option<Uuid> {
    let text: &[u8; 36] = text.try_into().ok()?;
    if text[8] != b'-' || text[13] != b'-' || text[18] != b'-' || text[23] != b'-' {
        return None;
    }
    let mut bytes = [0_u8; 16];
    let mut invalid = 0;
    let mut at = 0;
    for byte in &mut bytes {
        if matches!(at, 8 | 13 | 18 | 23) {
            at += 1;
        }
        let (high, low) = (HEX[usize::from(text[at])], HEX[usize::from(text[at + 1])]);
        invalid |= high | low;
        *byte = (high << 4) | (low & 0x0f);
        at += 2;
    }
    (invalid & 0xf0 == 0).then(|| Uuid::from_bytes(bytes))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts made of every byte class the scans and parsers tell apart, at every place.
    fn mutations(text: &str, bytes: &[u8]) -> Vec<Vec<u8>> {
        let text = text.as_bytes();
        let mut out = vec![text.to_vec()];
        for at in 0..=text.len() {
            out.push([&text[..at], &text[(at + 1).min(text.len())..]].concat());
            for &b in bytes {
                out.push([&text[..at], &[b][..], &text[at..]].concat());
                if at < text.len() {
                    out.push([&text[..at], &[b][..], &text[at + 1..]].concat());
                }
            }
        }
        out
    }

    #[test]
    fn the_word_scan_stops_where_a_byte_scan_does() {
        let naive = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        };
        let stops: &[u8] = b"\"\\\x00\x01\x1f";
        let others: &[u8] = b"\x20\x21\x5b\x5d\x7f\x80\x9f\xa0\xdc\xe2\xff0a-";
        let mut checked = 0;
        for len in 0..=40 {
            for &filler in others {
                let base = vec![filler; len];
                assert_eq!(first_stop(&base), None);
                for first in 0..len {
                    for &stop in stops {
                        let mut bytes = base.clone();
                        bytes[first] = stop;
                        assert_eq!(first_stop(&bytes), naive(&bytes), "{bytes:?}");
                        // A second stop above the first, and bytes that borrow, around it.
                        for second in first + 1..len {
                            let mut two = bytes.clone();
                            two[second] = b'"';
                            if second + 1 < len {
                                two[second + 1] = 0x00;
                            }
                            assert_eq!(first_stop(&two), Some(first), "{two:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        // Pseudo-random bytes (a fixed xorshift), every length to 64.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 65) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| {
                    let b = (state >> (i % 8 * 8)) as u8 ^ (i as u8).wrapping_mul(97);
                    // Mostly printable, as strings are, with a stop now and then.
                    if b.is_multiple_of(29) {
                        b % 0x20
                    } else {
                        b | 0x20
                    }
                })
                .collect();
            assert_eq!(first_stop(&bytes), naive(&bytes), "{bytes:?}");
            checked += 1;
        }
        assert!(checked > 100_000, "{checked}");
    }

    #[test]
    fn canonical_ids_read_as_try_parse_reads_them() {
        let id = Uuid::from_u128(0x01a1_b389_9260_710a_bdc0_53ca_91b8_ee24);
        let bytes: &[u8] = b"09afAFgG-_{}: \"\\\x00";
        for id in [
            id,
            Uuid::nil(),
            Uuid::max(),
            Uuid::from_u128(0x0123_4567_89ab_cdef),
        ] {
            let text = id.hyphenated().to_string();
            assert_eq!(hyphenated_lower(text.as_bytes()), Some(id));
            for variant in mutations(&text, bytes) {
                let parsed = std::str::from_utf8(&variant)
                    .ok()
                    .and_then(|t| Uuid::try_parse(t).ok().filter(|id| *t == id.to_string()));
                assert_eq!(hyphenated_lower(&variant), parsed, "{variant:?}");
            }
        }
    }

    #[test]
    fn accounts_read_as_from_str_reads_them() {
        let owner = "01a1a901-5800-7c08-be8d-d4a6211aac3a";
        let bytes: &[u8] = b"09afAF-_:x \"\\\x01";
        let mut checked = 0;
        for spelling in [
            format!("renter_receivable:{owner}"),
            format!("provider_payable:{owner}"),
            format!("payout_clearing:{owner}"),
            "platform_revenue".to_owned(),
            "treasury".to_owned(),
            "platform_adjustments".to_owned(),
        ] {
            for inner in mutations(&spelling, bytes) {
                let text = [&b"\""[..], &inner, b"\",x"].concat();
                let Ok(text) = std::str::from_utf8(&text) else {
                    continue;
                };
                let mut canon = Canon { text, at: 0 };
                let read = canon.account();
                // As a byte-by-byte reading would: the string up to its first stop, if that is
                // its closing quote, through `from_str`.
                let body = &text.as_bytes()[1..];
                let end = body
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .filter(|&end| body[end] == b'"');
                let expected = end.and_then(|end| Account::from_str(&text[1..=end]).ok());
                assert_eq!(read, expected, "{text}");
                if let Some(end) = end.filter(|_| read.is_some()) {
                    assert_eq!(canon.at, end + 2, "{text}");
                }
                checked += 1;
            }
        }
        assert!(checked > 5_000, "{checked}");
    }
}
