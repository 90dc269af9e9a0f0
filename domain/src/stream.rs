//! Stream ids: the name of one aggregate's ordered history, e.g. `ledger-<uuid>`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest stream id, in bytes.
pub const STREAM_ID_BYTES_MAX: usize = 128;

/// A validated stream id: 1..=128 bytes of `[A-Za-z0-9_.:-]`. The category is the part before
/// the first `-` (`ledger` in `ledger-0190...`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StreamId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamIdError {
    #[error("stream id is empty")]
    Empty,
    #[error("stream id is {bytes} bytes long, more than {STREAM_ID_BYTES_MAX}")]
    TooLong { bytes: usize },
    #[error("stream id contains `{character}`; allowed are letters, digits and `_.:-`")]
    InvalidCharacter { character: char },
}

impl StreamId {
    pub fn parse(text: impl Into<String>) -> Result<StreamId, StreamIdError> {
        let text = text.into();
        if text.is_empty() {
            return Err(StreamIdError::Empty);
        }
        if text.len() > STREAM_ID_BYTES_MAX {
            return Err(StreamIdError::TooLong { bytes: text.len() });
        }
        if let Some(character) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
        {
            return Err(StreamIdError::InvalidCharacter { character });
        }
        Ok(StreamId(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn category(&self) -> &str {
        self.0
            .split_once('-')
            .map_or(self.0.as_str(), |(category, _)| category)
    }
}

impl TryFrom<String> for StreamId {
    type Error = StreamIdError;

    fn try_from(text: String) -> Result<StreamId, StreamIdError> {
        StreamId::parse(text)
    }
}

impl From<StreamId> for String {
    fn from(id: StreamId) -> String {
        id.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_and_splits_category() {
        let id = StreamId::parse("ledger-01900000-0000-7000-8000-000000000001").unwrap();
        assert_eq!(id.category(), "ledger");
        assert_eq!(StreamId::parse("ops").unwrap().category(), "ops");
        assert_eq!(StreamId::parse(""), Err(StreamIdError::Empty));
        assert_eq!(
            StreamId::parse("a b"),
            Err(StreamIdError::InvalidCharacter { character: ' ' })
        );
        assert_eq!(
            StreamId::parse("x".repeat(129)),
            Err(StreamIdError::TooLong { bytes: 129 })
        );
    }
}
