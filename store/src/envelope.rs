//! What an append carries, how it is validated before any SQL runs, and the canonical bytes that
//! the hash chain covers.

use gpunex_domain::{DecodeError, DomainEvent, StreamId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Most events one append request may carry (over all its streams).
pub const APPEND_EVENTS_MAX: usize = 5_000;
/// Most streams one atomic append may touch: a rental of the most GPUs a machine may have (64)
/// touches its own stream and one lease per GPU, with room to spare.
pub const APPEND_STREAMS_MAX: usize = 128;
/// Largest canonical payload of one event, in bytes. The largest provider application the form's
/// limits allow is about 115 KiB (`the_largest_application_fits_one_event`).
pub const PAYLOAD_BYTES_MAX: usize = 128 * 1024;
/// Longest actor name in metadata, in bytes.
pub const ACTOR_BYTES_MAX: usize = 200;

/// Who caused an event and why: the audit trail of every action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// `user:<id>`, `agent:<id>`, `system:<component>` and so on.
    pub actor: String,
    /// The request or workflow this event belongs to.
    pub correlation_id: Option<Uuid>,
    /// The event or command that caused this one.
    pub causation_id: Option<Uuid>,
    /// Where a sender chose the event id (an agent's delivery), the SHA-256 of what it
    /// delivered: a re-send under the same id must carry the same content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
}

impl Metadata {
    /// Metadata naming who acted, with no correlation or causation.
    pub fn actor(actor: impl Into<String>) -> Metadata {
        Metadata {
            actor: actor.into(),
            correlation_id: None,
            causation_id: None,
            content_sha256: None,
        }
    }

    pub fn system(component: &str) -> Metadata {
        Metadata {
            actor: format!("system:{component}"),
            correlation_id: None,
            causation_id: None,
            content_sha256: None,
        }
    }
}

/// An event to append. `event_id` is chosen by the caller (UUIDv7) and is its idempotency key
/// forever.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: u32,
    pub payload: Value,
    pub metadata: Metadata,
}

impl NewEvent {
    pub fn from_domain(event_id: Uuid, event: &DomainEvent, metadata: Metadata) -> NewEvent {
        NewEvent {
            event_id,
            event_type: event.event_type().to_owned(),
            schema_version: event.schema_version(),
            payload: event.to_payload(),
            metadata,
        }
    }
}

/// What the writer expects a stream's version to be before its events are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "version")]
pub enum ExpectedVersion {
    /// The stream must have no events.
    NoStream,
    /// The stream's last event must have exactly this version (versions start at 1).
    Exact(u64),
    /// No check.
    Any,
}

/// The events for one stream within an append; one append may hold several.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamAppend {
    pub stream_id: StreamId,
    pub expected: ExpectedVersion,
    pub events: Vec<NewEvent>,
}

/// Why an append was refused before touching the database. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAppend {
    #[error("append carries no events")]
    Empty,
    #[error("append carries {events} events, more than the limit of {APPEND_EVENTS_MAX}")]
    TooManyEvents { events: usize },
    #[error("append touches {streams} streams, more than the limit of {APPEND_STREAMS_MAX}")]
    TooManyStreams { streams: usize },
    #[error("stream `{stream_id}` appears twice in one append")]
    DuplicateStream { stream_id: String },
    #[error("event id {event_id} appears twice in one append")]
    DuplicateEventId { event_id: Uuid },
    #[error("event {event_id} (index {index}): event ids must be UUIDv7, got version {version}")]
    EventIdNotV7 {
        index: usize,
        event_id: Uuid,
        version: usize,
    },
    #[error("event {event_id} (index {index}): {source}")]
    Decode {
        index: usize,
        event_id: Uuid,
        source: DecodeError,
    },
    #[error(
        "event {event_id} (index {index}): payload is {bytes} bytes, more than {PAYLOAD_BYTES_MAX}"
    )]
    PayloadTooLarge {
        index: usize,
        event_id: Uuid,
        bytes: usize,
    },
    #[error(
        "event {event_id} (index {index}): actor must be 1..={ACTOR_BYTES_MAX} bytes of printable text"
    )]
    InvalidActor { index: usize, event_id: Uuid },
}

/// An event that passed validation, in the exact form it will be stored and hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CanonicalEvent {
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: u32,
    pub payload: String,
    pub metadata: String,
}

#[derive(Debug, Clone)]
pub(crate) struct ValidatedStream {
    pub stream_id: StreamId,
    pub expected: ExpectedVersion,
    pub events: Vec<CanonicalEvent>,
}

/// Validates a whole append (every event decodes through the catalog, ids are UUIDv7 and unique,
/// limits hold) and renders each event in canonical form.
pub(crate) fn validate(streams: Vec<StreamAppend>) -> Result<Vec<ValidatedStream>, InvalidAppend> {
    let events: usize = streams.iter().map(|s| s.events.len()).sum();
    if events == 0 {
        return Err(InvalidAppend::Empty);
    }
    if events > APPEND_EVENTS_MAX {
        return Err(InvalidAppend::TooManyEvents { events });
    }
    if streams.len() > APPEND_STREAMS_MAX {
        return Err(InvalidAppend::TooManyStreams {
            streams: streams.len(),
        });
    }
    let mut seen_streams = std::collections::HashSet::with_capacity(streams.len());
    let mut seen_ids = std::collections::HashSet::with_capacity(events);
    let mut index = 0;
    let mut validated = Vec::with_capacity(streams.len());
    for stream in streams {
        if !seen_streams.insert(stream.stream_id.clone()) {
            return Err(InvalidAppend::DuplicateStream {
                stream_id: stream.stream_id.to_string(),
            });
        }
        let mut canonical = Vec::with_capacity(stream.events.len());
        for event in stream.events {
            if !seen_ids.insert(event.event_id) {
                return Err(InvalidAppend::DuplicateEventId {
                    event_id: event.event_id,
                });
            }
            canonical.push(validate_event(index, event)?);
            index += 1;
        }
        validated.push(ValidatedStream {
            stream_id: stream.stream_id,
            expected: stream.expected,
            events: canonical,
        });
    }
    Ok(validated)
}

fn validate_event(index: usize, event: NewEvent) -> Result<CanonicalEvent, InvalidAppend> {
    let event_id = event.event_id;
    let version = event_id.get_version_num();
    if version != 7 {
        return Err(InvalidAppend::EventIdNotV7 {
            index,
            event_id,
            version,
        });
    }
    let actor = &event.metadata.actor;
    if actor.is_empty() || actor.len() > ACTOR_BYTES_MAX || actor.chars().any(char::is_control) {
        return Err(InvalidAppend::InvalidActor { index, event_id });
    }
    DomainEvent::decode(&event.event_type, event.schema_version, &event.payload).map_err(
        |source| InvalidAppend::Decode {
            index,
            event_id,
            source,
        },
    )?;
    let payload = canonical_json(&event.payload);
    if payload.len() > PAYLOAD_BYTES_MAX {
        return Err(InvalidAppend::PayloadTooLarge {
            index,
            event_id,
            bytes: payload.len(),
        });
    }
    Ok(CanonicalEvent {
        event_id,
        event_type: event.event_type,
        schema_version: event.schema_version,
        payload,
        metadata: canonical_json(&serde_json::to_value(&event.metadata).unwrap_or(Value::Null)),
    })
}

/// JSON with object keys sorted at every level and no insignificant whitespace, so equal
/// content always has equal bytes whatever order a client sent its keys in.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(inner) = map.get(key) {
                    write_canonical(inner, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The hash before the first event.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// The fields of a stored event that the chain covers; every column except the hash itself.
#[derive(Debug, Clone, Copy)]
pub struct ChainedFields<'a> {
    pub position: u64,
    pub event_id: Uuid,
    pub stream_id: &'a str,
    pub stream_version: u64,
    pub event_type: &'a str,
    pub schema_version: u32,
    pub recorded_at_us: i64,
    pub payload: &'a str,
    pub metadata: &'a str,
}

/// `SHA-256(domain tag || previous hash || canonical bytes of the event)`. Variable-length fields
/// are length-prefixed so no two different events share bytes. Documented in `docs/events.md`.
pub fn chain_hash(previous: &[u8; 32], fields: &ChainedFields<'_>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"gpunex-event-chain-v1");
    hasher.update(previous);
    hasher.update(fields.position.to_be_bytes());
    hasher.update(fields.event_id.as_bytes());
    for text in [fields.stream_id, fields.event_type] {
        hasher.update((text.len() as u64).to_be_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.update(fields.stream_version.to_be_bytes());
    hasher.update(fields.schema_version.to_be_bytes());
    hasher.update(fields.recorded_at_us.to_be_bytes());
    for text in [fields.payload, fields.metadata] {
        hasher.update((text.len() as u64).to_be_bytes());
        hasher.update(text.as_bytes());
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every application the form's limits accept can be recorded: the largest (every text at
    /// its longest, in four-byte characters; every list at its longest) fits one event.
    #[test]
    fn the_largest_application_fits_one_event() {
        use gpunex_domain::onboarding::{self as o, ApplicationInput};
        let wide = |chars: usize| "😀".repeat(chars);
        let windows: Vec<serde_json::Value> = gpunex_domain::time::Weekday::ALL
            .iter()
            .flat_map(|day| {
                [(0, 300), (360, 700), (800, 1100), (1200, 1440)].map(
                    |(start, end)| json!({"day": day, "start_minute": start, "end_minute": end}),
                )
            })
            .collect();
        assert_eq!(windows.len(), o::WEEKLY_WINDOWS_MAX);
        let entry = json!({
            "model": wide(o::MODEL_NAME_CHARS_MAX),
            "quantity": o::GPU_QUANTITY_MAX,
            "system_ram_gb": o::SYSTEM_RAM_GB_MAX,
            "upload_gbps": "400",
            "download_gbps": "400",
            "availability": {"kind": "weekly", "time_zone": "America/Argentina/ComodRivadavia", "windows": windows},
            "location": {"city": wide(o::LOCATION_CHARS_MAX), "country": "AR", "region": wide(o::LOCATION_CHARS_MAX)},
        });
        let local = "a".repeat(64);
        let domain = format!(
            "{}.{}.{}.example",
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(50)
        );
        let input: ApplicationInput = serde_json::from_value(json!({
            "full_legal_name": wide(o::NAME_CHARS_MAX),
            "email": format!("{local}@{domain}"),
            "company_name": wide(o::NAME_CHARS_MAX),
            "gpus": vec![entry; o::GPU_ENTRIES_MAX],
            "ups_protected": true,
            "commitment_months": o::COMMITMENT_MONTHS_MAX,
            "maintenance_notes": wide(o::TEXT_CHARS_MAX),
        }))
        .unwrap();
        let form = o::validate_application(&input, &gpunex_domain::gpu::Catalog::BUILT_IN)
            .unwrap_or_else(|errors| panic!("{errors:?}"));
        let event =
            DomainEvent::Application(o::ApplicationEvent::Submitted(o::ApplicationSubmitted {
                application_id: Uuid::now_v7(),
                applicant_user_id: Uuid::now_v7(),
                form,
                submitted_at: gpunex_domain::Timestamp::from_unix_micros(0),
            }));
        let new = NewEvent::from_domain(Uuid::now_v7(), &event, Metadata::actor("test"));
        let bytes = canonical_json(&new.payload).len();
        assert!(bytes <= PAYLOAD_BYTES_MAX, "{bytes} bytes");
        assert!(
            bytes > PAYLOAD_BYTES_MAX / 2,
            "{bytes} bytes: the case is the largest one"
        );
        let stream = crate::StreamAppend {
            stream_id: gpunex_domain::StreamId::parse("application-x").unwrap(),
            expected: ExpectedVersion::Any,
            events: vec![new],
        };
        assert!(validate(vec![stream]).is_ok());
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"z": [1, {"y": 2, "x": 1}], "c": "é\"q"}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":"é\"q","z":[1,{"x":1,"y":2}]},"b":1}"#
        );
    }

    #[test]
    fn chain_hash_covers_every_field() {
        let base = ChainedFields {
            position: 1,
            event_id: Uuid::from_u128(1),
            stream_id: "s",
            stream_version: 1,
            event_type: "t",
            schema_version: 1,
            recorded_at_us: 0,
            payload: "{}",
            metadata: "{}",
        };
        let reference = chain_hash(&GENESIS_HASH, &base);
        let variants = [
            ChainedFields {
                position: 2,
                ..base
            },
            ChainedFields {
                event_id: Uuid::from_u128(2),
                ..base
            },
            ChainedFields {
                stream_id: "s2",
                ..base
            },
            ChainedFields {
                stream_version: 2,
                ..base
            },
            ChainedFields {
                event_type: "u",
                ..base
            },
            ChainedFields {
                schema_version: 2,
                ..base
            },
            ChainedFields {
                recorded_at_us: 1,
                ..base
            },
            ChainedFields {
                payload: "{ }",
                ..base
            },
            ChainedFields {
                metadata: "[]",
                ..base
            },
            // Moving bytes between adjacent fields must change the hash too.
            ChainedFields {
                stream_id: "st",
                event_type: "",
                ..base
            },
        ];
        for variant in variants {
            assert_ne!(
                chain_hash(&GENESIS_HASH, &variant),
                reference,
                "{variant:?}"
            );
        }
        assert_ne!(chain_hash(&[1; 32], &base), reference);
    }
}
