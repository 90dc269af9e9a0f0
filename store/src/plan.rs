//! Planning one group commit: given the log head, the stored identities of the event ids in the
//! group and the current stream versions (all read under the head lock), decide each request's
//! fate and produce the rows to insert, hash-chained in position order. Pure: the same inputs
//! always give the same rows, on either database.

use std::collections::HashMap;

use uuid::Uuid;

use crate::envelope::{
    CanonicalEvent, ChainedFields, ExpectedVersion, ValidatedStream, chain_hash,
};
use crate::{AppendError, Committed, CommittedEvent, ConflictReason, RecordedEvent, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub position: u64,
    pub hash: [u8; 32],
}

/// The columns of an already stored event that decide whether a retry is identical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredIdentity {
    pub position: u64,
    pub stream_id: String,
    pub stream_version: u64,
    pub event_type: String,
    pub schema_version: u32,
    pub payload: String,
    pub metadata: String,
}

pub(crate) struct Plan {
    pub outcomes: Vec<Result<Committed, AppendError>>,
    /// Rows of `events` to insert, in position order.
    pub rows: Vec<RecordedEvent>,
    pub head: Head,
}

/// Decides every request of a group in arrival order. Later requests see the effects of earlier
/// ones in the same group (versions, ids), exactly as if each had committed on its own.
pub(crate) fn plan_group(
    head: Head,
    requests: &[Vec<ValidatedStream>],
    mut existing: HashMap<Uuid, StoredIdentity>,
    mut versions: HashMap<String, u64>,
    recorded_at_us: i64,
) -> Plan {
    let mut plan = Plan {
        outcomes: Vec::with_capacity(requests.len()),
        rows: Vec::new(),
        head,
    };
    for request in requests {
        let outcome = plan_request(
            &mut plan,
            request,
            &mut existing,
            &mut versions,
            recorded_at_us,
        );
        plan.outcomes.push(outcome);
    }
    plan
}

fn plan_request(
    plan: &mut Plan,
    request: &[ValidatedStream],
    existing: &mut HashMap<Uuid, StoredIdentity>,
    versions: &mut HashMap<String, u64>,
    recorded_at_us: i64,
) -> Result<Committed, AppendError> {
    if let Some(replay) = check_idempotency(request, existing)? {
        return Ok(replay);
    }
    for stream in request {
        let actual = versions
            .get(stream.stream_id.as_str())
            .copied()
            .unwrap_or(0);
        let matches = match stream.expected {
            ExpectedVersion::NoStream => actual == 0,
            ExpectedVersion::Exact(expected) => actual == expected,
            ExpectedVersion::Any => true,
        };
        if !matches {
            return Err(AppendError::WrongExpectedVersion {
                stream_id: stream.stream_id.to_string(),
                expected: stream.expected,
                actual,
            });
        }
    }
    let mut committed = Vec::new();
    for stream in request {
        let version = versions.entry(stream.stream_id.to_string()).or_insert(0);
        for event in &stream.events {
            *version += 1;
            let row = chain_row(
                &mut plan.head,
                stream.stream_id.as_str(),
                *version,
                event,
                recorded_at_us,
            );
            existing.insert(row.event_id, identity_of(&row));
            committed.push(CommittedEvent {
                event_id: row.event_id,
                stream_id: row.stream_id.clone(),
                stream_version: row.stream_version,
                position: row.position,
            });
            plan.rows.push(row);
        }
    }
    Ok(Committed {
        events: committed,
        replayed: false,
    })
}

/// `Ok(Some(_))`: every id is stored with identical content, return the original result.
/// `Ok(None)`: no id is stored, append normally. Anything else is a conflict.
fn check_idempotency(
    request: &[ValidatedStream],
    existing: &HashMap<Uuid, StoredIdentity>,
) -> Result<Option<Committed>, AppendError> {
    let mut found = Vec::new();
    let mut missing = None;
    for stream in request {
        for event in &stream.events {
            match existing.get(&event.event_id) {
                Some(stored) => found.push((stream.stream_id.as_str(), event, stored)),
                None => missing = missing.or(Some(event.event_id)),
            }
        }
    }
    if found.is_empty() {
        return Ok(None);
    }
    if missing.is_some() {
        return Err(AppendError::IdempotencyConflict {
            event_id: found[0].1.event_id,
            reason: ConflictReason::PartiallyStored,
        });
    }
    let mut events = Vec::with_capacity(found.len());
    for (stream_id, event, stored) in found {
        let identical = stored.stream_id == stream_id
            && stored.event_type == event.event_type
            && stored.schema_version == event.schema_version
            && stored.payload == event.payload
            && stored.metadata == event.metadata;
        if !identical {
            return Err(AppendError::IdempotencyConflict {
                event_id: event.event_id,
                reason: ConflictReason::DifferentContent,
            });
        }
        events.push(CommittedEvent {
            event_id: event.event_id,
            stream_id: stored.stream_id.clone(),
            stream_version: stored.stream_version,
            position: stored.position,
        });
    }
    Ok(Some(Committed {
        events,
        replayed: true,
    }))
}

fn chain_row(
    head: &mut Head,
    stream_id: &str,
    stream_version: u64,
    event: &CanonicalEvent,
    recorded_at_us: i64,
) -> RecordedEvent {
    let position = head.position + 1;
    let hash = chain_hash(
        &head.hash,
        &ChainedFields {
            position,
            event_id: event.event_id,
            stream_id,
            stream_version,
            event_type: &event.event_type,
            schema_version: event.schema_version,
            recorded_at_us,
            payload: &event.payload,
            metadata: &event.metadata,
        },
    );
    *head = Head { position, hash };
    RecordedEvent {
        position,
        event_id: event.event_id,
        stream_id: stream_id.to_owned(),
        stream_version,
        event_type: event.event_type.clone(),
        schema_version: event.schema_version,
        recorded_at_us,
        payload: event.payload.clone(),
        metadata: event.metadata.clone(),
        hash,
    }
}

fn identity_of(row: &RecordedEvent) -> StoredIdentity {
    StoredIdentity {
        position: row.position,
        stream_id: row.stream_id.clone(),
        stream_version: row.stream_version,
        event_type: row.event_type.clone(),
        schema_version: row.schema_version,
        payload: row.payload.clone(),
        metadata: row.metadata.clone(),
    }
}

/// Every event id and stream a group touches, for the two lookups done under the head lock.
pub(crate) fn group_keys(requests: &[Vec<ValidatedStream>]) -> (Vec<Uuid>, Vec<String>) {
    let mut ids = Vec::new();
    let mut streams = Vec::new();
    for request in requests {
        for stream in request {
            streams.push(stream.stream_id.to_string());
            ids.extend(stream.events.iter().map(|e| e.event_id));
        }
    }
    streams.sort_unstable();
    streams.dedup();
    (ids, streams)
}

/// Checks that `rows` continue the chain ending at `head`; returns the head after them.
/// (`gpunex events copy`: the rows come from another log.)
pub(crate) fn continue_chain(head: Head, rows: &[RecordedEvent]) -> Result<Head, StoreError> {
    let mut head = head;
    for row in rows {
        if row.position != head.position + 1 {
            return Err(StoreError::ImportRefused(format!(
                "event at position {} does not follow the target's head at {}",
                row.position, head.position
            )));
        }
        let computed = chain_hash(
            &head.hash,
            &ChainedFields {
                position: row.position,
                event_id: row.event_id,
                stream_id: &row.stream_id,
                stream_version: row.stream_version,
                event_type: &row.event_type,
                schema_version: row.schema_version,
                recorded_at_us: row.recorded_at_us,
                payload: &row.payload,
                metadata: &row.metadata,
            },
        );
        if computed != row.hash {
            return Err(StoreError::ImportRefused(format!(
                "event at position {} does not chain from the one before it (stored hash {}, \
                 computed {})",
                row.position,
                hex::encode(row.hash),
                hex::encode(computed)
            )));
        }
        head = Head {
            position: row.position,
            hash: row.hash,
        };
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    //! Group commit must be invisible: deciding requests together in one group gives exactly the
    //! outcomes and rows of deciding them one by one. Checked over random workloads of appends,
    //! retries, conflicting retries and stale expectations.
    use super::*;
    use crate::envelope::GENESIS_HASH;
    use gpunex_domain::StreamId;
    use proptest::prelude::*;

    fn event(id: u8, variant: u8) -> CanonicalEvent {
        CanonicalEvent {
            event_id: Uuid::from_u128(u128::from(id) + 1),
            event_type: "t".to_owned(),
            schema_version: 1,
            payload: format!("{{\"v\":{variant}}}"),
            metadata: "{}".to_owned(),
        }
    }

    fn request_strategy() -> impl Strategy<Value = Vec<ValidatedStream>> {
        let expected = prop_oneof![
            Just(ExpectedVersion::NoStream),
            Just(ExpectedVersion::Any),
            (0u64..5).prop_map(ExpectedVersion::Exact),
        ];
        let stream = (
            0u8..4,
            expected,
            prop::collection::vec((0u8..16, 0u8..2), 1..4),
        );
        prop::collection::vec(stream, 1..3).prop_map(|streams| {
            let mut seen_streams = std::collections::HashSet::new();
            let mut seen_ids = std::collections::HashSet::new();
            streams
                .into_iter()
                .filter(|(s, _, _)| seen_streams.insert(*s))
                .filter_map(|(s, expected, events)| {
                    let events: Vec<_> = events
                        .into_iter()
                        .filter(|(id, _)| seen_ids.insert(*id))
                        .map(|(id, variant)| event(id, variant))
                        .collect();
                    (!events.is_empty()).then(|| ValidatedStream {
                        stream_id: StreamId::parse(format!("s-{s}")).unwrap(),
                        expected,
                        events,
                    })
                })
                .collect()
        })
    }

    fn remember(
        rows: &[RecordedEvent],
        existing: &mut HashMap<Uuid, StoredIdentity>,
        versions: &mut HashMap<String, u64>,
    ) {
        for row in rows {
            existing.insert(row.event_id, identity_of(row));
            versions.insert(row.stream_id.clone(), row.stream_version);
        }
    }

    proptest! {
        #[test]
        fn one_group_equals_one_by_one(requests in prop::collection::vec(request_strategy(), 1..12)) {
            let genesis = Head { position: 0, hash: GENESIS_HASH };
            let grouped = plan_group(genesis, &requests, HashMap::new(), HashMap::new(), 7);

            let mut head = genesis;
            let mut existing = HashMap::new();
            let mut versions = HashMap::new();
            let mut outcomes = Vec::new();
            let mut rows = Vec::new();
            for request in &requests {
                let single = plan_group(head, std::slice::from_ref(request), existing.clone(), versions.clone(), 7);
                remember(&single.rows, &mut existing, &mut versions);
                head = single.head;
                outcomes.extend(single.outcomes);
                rows.extend(single.rows);
            }
            prop_assert_eq!(format!("{:?}", grouped.outcomes), format!("{:?}", outcomes));
            prop_assert_eq!(grouped.head, head);
            prop_assert_eq!(grouped.rows.len(), rows.len());
            // Rows are gapless, chained, and versions climb by one per stream.
            let mut previous = GENESIS_HASH;
            let mut stream_versions: HashMap<&str, u64> = HashMap::new();
            for (i, row) in grouped.rows.iter().enumerate() {
                prop_assert_eq!(row.position, i as u64 + 1);
                let expected_hash = chain_hash(&previous, &ChainedFields {
                    position: row.position,
                    event_id: row.event_id,
                    stream_id: &row.stream_id,
                    stream_version: row.stream_version,
                    event_type: &row.event_type,
                    schema_version: row.schema_version,
                    recorded_at_us: row.recorded_at_us,
                    payload: &row.payload,
                    metadata: &row.metadata,
                });
                prop_assert_eq!(row.hash, expected_hash);
                previous = row.hash;
                let version = stream_versions.entry(row.stream_id.as_str()).or_insert(0);
                prop_assert_eq!(row.stream_version, *version + 1);
                *version = row.stream_version;
            }
            // An id is written at most once, whatever the retries.
            let ids: std::collections::HashSet<_> = grouped.rows.iter().map(|r| r.event_id).collect();
            prop_assert_eq!(ids.len(), grouped.rows.len());
        }
    }
}

#[cfg(test)]
mod continue_chain_tests {
    use super::*;
    use crate::envelope::GENESIS_HASH;
    use uuid::Uuid;

    fn chained(previous: &Head, stream_version: u64) -> RecordedEvent {
        let row = RecordedEvent {
            position: previous.position + 1,
            event_id: Uuid::from_u128(u128::from(previous.position) + 1),
            stream_id: "test-1".to_owned(),
            stream_version,
            event_type: "TestEvent".to_owned(),
            schema_version: 1,
            recorded_at_us: 1_700_000_000_000_000,
            payload: "{}".to_owned(),
            metadata: "{}".to_owned(),
            hash: [0; 32],
        };
        rechain(previous, row)
    }

    fn rechain(previous: &Head, mut row: RecordedEvent) -> RecordedEvent {
        row.hash = chain_hash(
            &previous.hash,
            &ChainedFields {
                position: row.position,
                event_id: row.event_id,
                stream_id: &row.stream_id,
                stream_version: row.stream_version,
                event_type: &row.event_type,
                schema_version: row.schema_version,
                recorded_at_us: row.recorded_at_us,
                payload: &row.payload,
                metadata: &row.metadata,
            },
        );
        row
    }

    fn log(n: u64, at_us: i64) -> Vec<RecordedEvent> {
        let mut head = Head {
            position: 0,
            hash: GENESIS_HASH,
        };
        let mut rows = Vec::new();
        for version in 1..=n {
            let mut row = chained(&head, version);
            if at_us != row.recorded_at_us {
                row.recorded_at_us = at_us;
                row = rechain(&head, row);
            }
            head = Head {
                position: row.position,
                hash: row.hash,
            };
            rows.push(row);
        }
        rows
    }

    #[test]
    fn a_chain_continues_from_genesis_and_from_its_own_prefix() {
        let rows = log(5, 1_700_000_000_000_000);
        let genesis = Head {
            position: 0,
            hash: GENESIS_HASH,
        };
        let end = continue_chain(genesis, &rows).unwrap();
        assert_eq!((end.position, end.hash), (5, rows[4].hash));
        let middle = continue_chain(genesis, &rows[..2]).unwrap();
        assert_eq!(continue_chain(middle, &rows[2..]).unwrap(), end);
    }

    #[test]
    fn a_gap_an_overlap_or_changed_bytes_are_refused() {
        let rows = log(4, 1_700_000_000_000_000);
        let genesis = Head {
            position: 0,
            hash: GENESIS_HASH,
        };
        let refused =
            |rows: &[RecordedEvent], head| continue_chain(head, rows).unwrap_err().to_string();
        assert!(refused(&rows[1..], genesis).contains("does not follow"));
        let after_two = continue_chain(genesis, &rows[..2]).unwrap();
        assert!(refused(&rows[1..], after_two).contains("does not follow"));
        let mut edited = rows.clone();
        edited[2].payload = r#"{"x":1}"#.to_owned();
        assert!(refused(&edited, genesis).contains("position 3 does not chain"));
        // Another log's events, each chained to its own predecessor, do not continue this one.
        let other = log(4, 1_700_000_000_000_001);
        assert!(refused(&other[2..], after_two).contains("position 3 does not chain"));
    }
}
