//! Reading and writing the compact stored encodings (the ledger journal's, the earnings
//! runs'): unsigned LEB128 integers, zigzag for signed ones, and a reader that fails as a
//! `CorruptRow` instead of panicking on truncated or malformed bytes.

use crate::StoreError;

/// Appends an unsigned LEB128 integer.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads stored bytes, failing as a corrupt row of `position`.
pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) position: u64,
    pub(crate) what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn corrupt(&self, reason: &str) -> StoreError {
        StoreError::CorruptRow {
            position: self.position,
            reason: format!("{}: {reason}", self.what),
        }
    }

    pub(crate) fn byte(&mut self) -> Result<u8, StoreError> {
        let (&first, rest) = self
            .bytes
            .split_first()
            .ok_or_else(|| self.corrupt("ends early"))?;
        self.bytes = rest;
        Ok(first)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.bytes.len() < n {
            return Err(self.corrupt("ends early"));
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    pub(crate) fn varint(&mut self) -> Result<u64, StoreError> {
        let mut value = 0_u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(self.corrupt("integer overflows"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.corrupt("integer overflows"))
    }

    pub(crate) fn done(&self) -> Result<(), StoreError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(self.corrupt("trailing bytes"))
        }
    }
}

/// Appends a signed integer, zigzag-mapped so small magnitudes of either sign stay short.
pub(crate) fn put_signed(out: &mut Vec<u8>, value: i64) {
    put_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

impl Reader<'_> {
    /// A signed integer written by [`put_signed`].
    pub(crate) fn signed(&mut self) -> Result<i64, StoreError> {
        let raw = self.varint()?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    /// 16 bytes, as a UUID.
    pub(crate) fn uuid(&mut self) -> Result<uuid::Uuid, StoreError> {
        let bytes: [u8; 16] = self
            .take(16)?
            .try_into()
            .map_err(|_| self.corrupt("ends early"))?;
        Ok(uuid::Uuid::from_bytes(bytes))
    }
}
