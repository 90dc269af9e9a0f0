//! What the catch-ups read of a `rental.usage_metered` event: the earnings and rentals folds its
//! line without its postings ([`MeteredLine::decode_json`]), the ledger's rebuild its journal
//! entry alone ([`metered_entry`]). Its own module: it reads the catalog (`events`) and the event
//! (`rental`), which import one another in one direction only.

mod canonical;

use serde::Deserialize;
use uuid::Uuid;

use crate::events::USAGE_METERED;
use crate::ledger::JournalEntry;
use crate::money::Usdc;
use crate::rental::UsageMetered;
use crate::time::Timestamp;

/// What an earnings line needs of a `rental.usage_metered` event: all of it but the renter, the
/// postings and the agent's own counter. [`MeteredLine::decode_json`] reads it from stored JSON
/// without decoding the postings (the ledger's part), so the catch-ups that fold a line per
/// usage event decode half as much. `audit verify` folds the same lines from the whole event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeteredLine {
    pub entry_id: Uuid,
    pub rental_id: Uuid,
    pub provider_id: Uuid,
    pub report_id: Uuid,
    pub from_gpu_seconds: u64,
    pub to_gpu_seconds: u64,
    pub price_per_gpu_hour: Usdc,
    pub gross: Usdc,
    pub fee: Usdc,
    pub net: Usdc,
    pub fee_bp: u32,
    pub metered_at: Option<Timestamp>,
}

impl From<&UsageMetered> for MeteredLine {
    fn from(event: &UsageMetered) -> MeteredLine {
        MeteredLine {
            entry_id: event.entry_id,
            rental_id: event.rental_id,
            provider_id: event.provider_id,
            report_id: event.report_id,
            from_gpu_seconds: event.from_gpu_seconds,
            to_gpu_seconds: event.to_gpu_seconds,
            price_per_gpu_hour: event.price_per_gpu_hour,
            gross: event.gross,
            fee: event.fee,
            net: event.net,
            fee_bp: event.fee_bp,
            metered_at: event.metered_at,
        }
    }
}

/// [`UsageMetered`]'s fields, of which the ones a line does not need are only checked to be
/// there and to be JSON: the same fields are required and no other is allowed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MeteredLineJson {
    entry_id: Uuid,
    rental_id: Uuid,
    #[allow(dead_code)]
    renter_id: serde::de::IgnoredAny,
    provider_id: Uuid,
    report_id: Uuid,
    from_gpu_seconds: u64,
    to_gpu_seconds: u64,
    price_per_gpu_hour: Usdc,
    gross: Usdc,
    fee: Usdc,
    net: Usdc,
    fee_bp: u32,
    #[allow(dead_code)]
    postings: serde::de::IgnoredAny,
    #[serde(default)]
    #[allow(dead_code)]
    reported_gpu_seconds: Option<u64>,
    #[serde(default)]
    metered_at: Option<Timestamp>,
}

impl MeteredLine {
    /// Reads a stored `rental.usage_metered` payload of schema `version`. It refuses what
    /// [`crate::DomainEvent::decode_json`] refuses, except postings that are malformed or do not
    /// add up to `gross`: those are not read here. Such an event cannot be appended (appends
    /// decode it whole), and `audit verify` reports any stored one as undecodable.
    pub fn decode_json(version: u32, payload: &str) -> Result<MeteredLine, crate::DecodeError> {
        MeteredLine::decode_json_with(version, payload, true)
    }

    /// [`MeteredLine::decode_json`], with or without the canonical fast path.
    fn decode_json_with(
        version: u32,
        payload: &str,
        fast: bool,
    ) -> Result<MeteredLine, crate::DecodeError> {
        let malformed = |reason: String| crate::DecodeError::MalformedPayload {
            event_type: USAGE_METERED.to_owned(),
            version,
            reason,
        };
        // Version 1 is the only one: a second one is read here too, or upcast, before it ships
        // (a test holds this to the catalog).
        if version != 1 {
            return Err(crate::DecodeError::UnsupportedSchemaVersion {
                event_type: USAGE_METERED.to_owned(),
                version,
                oldest: 1,
                current: 1,
            });
        }
        // A payload in canonical shape is read by the fast path, any other by serde (the same
        // answer, `canonical`).
        let line = match canonical::read(payload, false).filter(|_| fast) {
            Some(usage) => usage.line,
            None => {
                let json: MeteredLineJson =
                    serde_json::from_str(payload).map_err(|e| malformed(e.to_string()))?;
                MeteredLine {
                    entry_id: json.entry_id,
                    rental_id: json.rental_id,
                    provider_id: json.provider_id,
                    report_id: json.report_id,
                    from_gpu_seconds: json.from_gpu_seconds,
                    to_gpu_seconds: json.to_gpu_seconds,
                    price_per_gpu_hour: json.price_per_gpu_hour,
                    gross: json.gross,
                    fee: json.fee,
                    net: json.net,
                    fee_bp: json.fee_bp,
                    metered_at: json.metered_at,
                }
            }
        };
        if line.fee.checked_add(line.net).ok() != Some(line.gross) {
            return Err(malformed(
                "gross must equal fee + net and the posted total".to_owned(),
            ));
        }
        Ok(line)
    }
}

/// [`UsageMetered`]'s fields, of which the ones its journal entry does not need are only checked
/// to be there and to be JSON: the same fields are required and no other is allowed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct MeteredEntryJson {
    entry_id: Uuid,
    rental_id: serde::de::IgnoredAny,
    renter_id: serde::de::IgnoredAny,
    provider_id: serde::de::IgnoredAny,
    report_id: serde::de::IgnoredAny,
    from_gpu_seconds: serde::de::IgnoredAny,
    to_gpu_seconds: serde::de::IgnoredAny,
    price_per_gpu_hour: serde::de::IgnoredAny,
    gross: Usdc,
    fee: Usdc,
    net: Usdc,
    fee_bp: serde::de::IgnoredAny,
    postings: JournalEntry,
    #[serde(default)]
    reported_gpu_seconds: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    metered_at: Option<serde::de::IgnoredAny>,
}

/// Reads the journal entry (its id and postings) of a stored `rental.usage_metered` payload of
/// schema `version`: what the ledger folds of it. The postings are decoded and checked as the
/// whole event's are (balanced, adding up to `gross` = `fee` + `net`); the other fields are only
/// checked to be there and to be JSON. Such an event that is malformed elsewhere cannot be
/// appended (appends decode it whole), and `audit verify` replays the ledger from whole events.
pub fn metered_entry(
    version: u32,
    payload: &str,
) -> Result<(Uuid, JournalEntry), crate::DecodeError> {
    metered_entry_with(version, payload, true)
}

/// [`metered_entry`], with or without the canonical fast path.
fn metered_entry_with(
    version: u32,
    payload: &str,
    fast: bool,
) -> Result<(Uuid, JournalEntry), crate::DecodeError> {
    let malformed = |reason: String| crate::DecodeError::MalformedPayload {
        event_type: USAGE_METERED.to_owned(),
        version,
        reason,
    };
    if version != 1 {
        return Err(crate::DecodeError::UnsupportedSchemaVersion {
            event_type: USAGE_METERED.to_owned(),
            version,
            oldest: 1,
            current: 1,
        });
    }
    // A payload in canonical shape is read by the fast path, any other by serde (the same
    // answer, `canonical`).
    let (entry_id, gross, fee, net, postings) =
        match canonical::read(payload, true).filter(|_| fast) {
            Some(canonical::Usage {
                line,
                postings: Some(postings),
            }) => (line.entry_id, line.gross, line.fee, line.net, postings),
            _ => {
                let json: MeteredEntryJson =
                    serde_json::from_str(payload).map_err(|e| malformed(e.to_string()))?;
                (json.entry_id, json.gross, json.fee, json.net, json.postings)
            }
        };
    let sums = fee.checked_add(net).ok() == Some(gross) && postings.total() == gross;
    if !sums {
        return Err(malformed(
            "gross must equal fee + net and the posted total".to_owned(),
        ));
    }
    Ok((entry_id, postings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::JournalEntry;
    use crate::rental::RentalEvent;

    fn usage(n: u128, fee: i64, net: i64, metered_at: Option<i64>) -> UsageMetered {
        use crate::ledger::{Account, Posting};
        let id = |k: u128| Uuid::from_u128(n * 16 + k);
        let gross = Usdc::from_micros(fee + net);
        let mut lines = vec![
            Posting::debit(Account::RenterReceivable(id(3)), gross),
            Posting::credit(Account::ProviderPayable(id(4)), Usdc::from_micros(net)),
        ];
        if fee > 0 {
            lines.push(Posting::credit(
                Account::PlatformRevenue,
                Usdc::from_micros(fee),
            ));
        }
        UsageMetered {
            entry_id: id(1),
            rental_id: id(2),
            renter_id: id(3),
            provider_id: id(4),
            report_id: id(5),
            from_gpu_seconds: 900 * u64::try_from(n).unwrap(),
            to_gpu_seconds: 900 * u64::try_from(n + 1).unwrap(),
            price_per_gpu_hour: Usdc::from_micros(350_000 + i64::try_from(n).unwrap()),
            gross,
            fee: Usdc::from_micros(fee),
            net: Usdc::from_micros(net),
            fee_bp: 2_000,
            postings: JournalEntry::new(lines).unwrap(),
            reported_gpu_seconds: n.is_multiple_of(2).then_some(10_000),
            metered_at: metered_at.map(Timestamp::from_unix_micros),
        }
    }

    type Fields = serde_json::Map<String, serde_json::Value>;

    /// A stored usage payload the whole event's decoder accepts.
    fn good_payload() -> serde_json::Value {
        crate::DomainEvent::Rental(RentalEvent::UsageMetered(usage(3, 17_500, 70_000, None)))
            .to_payload()
    }

    /// `good` with `edit` applied to its fields, as stored text.
    fn edited_payload(good: &serde_json::Value, edit: &dyn Fn(&mut Fields)) -> String {
        let mut payload = good.clone();
        edit(payload.as_object_mut().unwrap());
        payload.to_string()
    }

    #[test]
    fn a_metered_line_reads_what_the_whole_event_reads() {
        for (n, fee, net, at) in [
            (0, 17_500, 70_000, Some(1_794_013_500_000_000)),
            (1, 0, 3, None),
            (7, 1, 1, Some(0)),
        ] {
            let event = usage(n, fee, net, at);
            let payload =
                crate::DomainEvent::Rental(RentalEvent::UsageMetered(event.clone())).to_payload();
            let text = payload.to_string();
            let line = MeteredLine::decode_json(1, &text).unwrap();
            assert_eq!(line, MeteredLine::from(&event));
            let whole = crate::DomainEvent::decode_json(USAGE_METERED, 1, &text).unwrap();
            assert_eq!(
                whole,
                crate::DomainEvent::Rental(RentalEvent::UsageMetered(event))
            );
        }
        // The catalog's versions are the ones `decode_json` reads.
        let spec = crate::events::spec(USAGE_METERED).unwrap();
        assert_eq!((spec.oldest_version, spec.current_version), (1, 1));
    }

    #[test]
    fn a_metered_line_refuses_what_the_whole_event_refuses_but_the_postings() {
        let good = good_payload();
        let edited = |edit: &dyn Fn(&mut Fields)| edited_payload(&good, edit);
        let refused = [
            edited(&|p| {
                p.insert("extra".to_owned(), 1.into());
            }),
            edited(&|p| {
                p.remove("postings");
            }),
            edited(&|p| {
                p.remove("renter_id");
            }),
            edited(&|p| {
                p.remove("gross");
            }),
            edited(&|p| {
                p.insert("net".to_owned(), 70_001.into());
            }),
            edited(&|p| {
                p.insert("provider_id".to_owned(), "not an id".into());
            }),
            edited(&|p| {
                p.insert("gross".to_owned(), (-1).into());
            }),
            "[]".to_owned(),
            "{".to_owned(),
        ];
        for text in &refused {
            assert!(MeteredLine::decode_json(1, text).is_err(), "{text}");
            assert!(
                crate::DomainEvent::decode_json(USAGE_METERED, 1, text).is_err(),
                "{text}"
            );
        }
        assert!(matches!(
            MeteredLine::decode_json(2, &good.to_string()),
            Err(crate::DecodeError::UnsupportedSchemaVersion { version: 2, .. })
        ));
        // What only the whole event checks: the postings.
        let unposted = edited(&|p| {
            p.insert("postings".to_owned(), serde_json::json!([]));
        });
        assert!(MeteredLine::decode_json(1, &unposted).is_ok());
        assert!(crate::DomainEvent::decode_json(USAGE_METERED, 1, &unposted).is_err());
    }

    #[test]
    fn a_metered_entry_is_the_whole_events_journal_entry() {
        for (n, fee, net, at) in [
            (0, 17_500, 70_000, Some(1_794_013_500_000_000)),
            (1, 0, 3, None),
            (7, 1, 1, Some(0)),
        ] {
            let event = usage(n, fee, net, at);
            let whole = crate::DomainEvent::Rental(RentalEvent::UsageMetered(event.clone()));
            let text = whole.to_payload().to_string();
            let (entry_id, entry) = metered_entry(1, &text).unwrap();
            assert_eq!(Some((entry_id, &entry)), whole.journal_entry());
        }
    }

    #[test]
    fn a_metered_entry_refuses_what_the_whole_event_refuses_in_its_entry() {
        let good = good_payload();
        let edited = |edit: &dyn Fn(&mut Fields)| edited_payload(&good, edit);
        let refused = [
            edited(&|p| {
                p.insert("extra".to_owned(), 1.into());
            }),
            edited(&|p| {
                p.remove("postings");
            }),
            edited(&|p| {
                p.remove("renter_id");
            }),
            edited(&|p| {
                p.insert("net".to_owned(), 70_001.into());
            }),
            edited(&|p| {
                p.insert("entry_id".to_owned(), "not an id".into());
            }),
            edited(&|p| {
                p.insert("postings".to_owned(), serde_json::json!([]));
            }),
            // Balanced postings that do not add up to the gross.
            edited(&|p| {
                p.insert("gross".to_owned(), 87_501.into());
                p.insert("fee".to_owned(), 17_501.into());
            }),
            "[]".to_owned(),
            "{".to_owned(),
        ];
        for text in &refused {
            assert!(metered_entry(1, text).is_err(), "{text}");
            assert!(
                crate::DomainEvent::decode_json(USAGE_METERED, 1, text).is_err(),
                "{text}"
            );
        }
        assert!(matches!(
            metered_entry(2, &good.to_string()),
            Err(crate::DecodeError::UnsupportedSchemaVersion { version: 2, .. })
        ));
        // What only the whole event checks: the fields outside the entry.
        let misnamed = edited(&|p| {
            p.insert("provider_id".to_owned(), "not an id".into());
        });
        assert!(metered_entry(1, &misnamed).is_ok());
        assert!(crate::DomainEvent::decode_json(USAGE_METERED, 1, &misnamed).is_err());
    }

    /// Canonical payloads of every optional-field combination: the fast path reads each (so the
    /// catch-ups take it), with the answers serde gives.
    #[test]
    fn canonical_payloads_take_the_fast_path() {
        for (n, fee, net, at) in [
            (0, 17_500, 70_000, Some(1_794_013_500_000_000)),
            (1, 0, 3, None),
            (2, 1, 1, Some(0)),
            (3, 5, 999_999_999_999_995, Some(-1)),
        ] {
            let event = usage(n, fee, net, at);
            let text = crate::DomainEvent::Rental(RentalEvent::UsageMetered(event.clone()))
                .to_payload()
                .to_string();
            assert!(canonical::read(&text, true).is_some(), "{text}");
            assert!(canonical::read(&text, false).is_some(), "{text}");
            assert_eq!(
                metered_entry_with(1, &text, true),
                metered_entry_with(1, &text, false)
            );
            assert_eq!(
                MeteredLine::decode_json_with(1, &text, true),
                MeteredLine::decode_json_with(1, &text, false)
            );
            assert_eq!(
                MeteredLine::decode_json_with(1, &text, true),
                Ok(MeteredLine::from(&event))
            );
        }
    }

    /// Both readings answer as serde does, errors included, whatever the bytes: every
    /// single-byte deletion, replacement and insertion of canonical payloads, and values
    /// serde reads in its own way (escapes, `-0`, exponents, leading zeros, `null`, upper-case
    /// ids, whitespace, keys out of order, extremes of each integer type).
    #[test]
    fn the_fast_path_answers_as_serde_does_on_any_bytes() {
        let same = |text: &str| {
            assert_eq!(
                metered_entry_with(1, text, true),
                metered_entry_with(1, text, false),
                "{text}"
            );
            assert_eq!(
                MeteredLine::decode_json_with(1, text, true),
                MeteredLine::decode_json_with(1, text, false),
                "{text}"
            );
        };
        let replacements: &[u8] = b"\"\\0123456789-+.eE ,:{}[]anul\x01\x7f";
        let mut checked = 0;
        for (n, fee, net, at) in [
            (0, 17_500, 70_000, Some(1_794_013_500_000_000)),
            (1, 0, 3, None),
        ] {
            let text =
                crate::DomainEvent::Rental(RentalEvent::UsageMetered(usage(n, fee, net, at)))
                    .to_payload()
                    .to_string();
            let bytes = text.as_bytes();
            for at in 0..=bytes.len() {
                let mut variants =
                    vec![[&bytes[..at], &bytes[(at + 1).min(bytes.len())..]].concat()];
                for &b in replacements {
                    variants.push([&bytes[..at], &[b][..], &bytes[at..]].concat());
                    if at < bytes.len() {
                        variants.push([&bytes[..at], &[b][..], &bytes[at + 1..]].concat());
                    }
                }
                variants.push(bytes[..at].to_vec());
                for variant in variants {
                    same(std::str::from_utf8(&variant).unwrap());
                    checked += 1;
                }
            }
        }
        assert!(checked > 30_000, "{checked}");
        let good = good_payload();
        let edited = |edit: &dyn Fn(&mut Fields)| edited_payload(&good, edit);
        let text = good.to_string();
        let swap = |from: &str, to: &str| text.replacen(from, to, 1);
        let entry = metered_entry(1, &text).unwrap().0.to_string();
        for variant in [
            swap("\"fee\":17500", "\"fee\":-0"),
            swap("\"fee\":17500", "\"fee\":017500"),
            swap("\"fee\":17500", "\"fee\":1.75e4"),
            swap("\"fee\":17500", "\"fee\":17500.0"),
            swap("\"fee_bp\":2000", "\"fee_bp\":4294967296"),
            swap("\"fee_bp\":2000", "\"fee_bp\":4294967295"),
            swap(
                "\"from_gpu_seconds\":2700",
                "\"from_gpu_seconds\":18446744073709551615",
            ),
            swap(
                "\"from_gpu_seconds\":2700",
                "\"from_gpu_seconds\":18446744073709551616",
            ),
            swap("\"from_gpu_seconds\":2700", "\"from_gpu_seconds\":-1"),
            swap(
                "\"price_per_gpu_hour\":350003",
                "\"price_per_gpu_hour\":-9223372036854775808",
            ),
            swap(
                "\"price_per_gpu_hour\":350003",
                "\"price_per_gpu_hour\":9223372036854775808",
            ),
            swap("\"renter_id\":\"", "\"renter_id\":\"\\u0030"),
            swap("\"renter_id\":\"", "\"renter_id\":\"é"),
            swap(&entry, "ABCDEF01-2345-6789-ABCD-EF0123456789"),
            swap(&entry, "abcdef0123456789abcdef0123456789"),
            swap(&entry, "{abcdef01-2345-6789-abcd-ef0123456789}"),
            swap("\"entry_id\"", "\"entry\\u005fid\""),
            swap("{", "{ "),
            format!("{text} "),
            format!("{text}\n"),
            swap("\"side\":\"debit\"", "\"side\":\"Debit\""),
            swap(
                "\"account\":\"platform_revenue\"",
                "\"account\":\"treasury\"",
            ),
            swap(
                "\"account\":\"platform_revenue\"",
                "\"account\":\"platform_revenue:x\"",
            ),
            swap("\"amount_micro_usdc\":17500", "\"amount_micro_usdc\":0"),
            swap(
                ",\"to_gpu_seconds\"",
                ",\"metered_at\":null,\"to_gpu_seconds\"",
            ),
            swap("\"net\"", "\"metered_at\":null,\"net\""),
            swap("\"net\"", "\"metered_at\":-5,\"net\""),
            swap("\"net\"", "\"metered_at\":\"x\",\"net\""),
            swap(
                "\"to_gpu_seconds\"",
                "\"reported_gpu_seconds\":null,\"to_gpu_seconds\"",
            ),
            swap(
                "\"to_gpu_seconds\"",
                "\"reported_gpu_seconds\":[],\"to_gpu_seconds\"",
            ),
            edited(&|p| {
                p.insert("extra".to_owned(), 1.into());
            }),
            edited(&|p| {
                p.insert("postings".to_owned(), serde_json::json!([]));
            }),
            edited(&|p| {
                p.insert("postings".to_owned(), serde_json::json!({"a": 1}));
            }),
        ] {
            assert_ne!(variant, text, "each variant changes the payload");
            same(&variant);
        }
        // Some of them decode, so the comparison is not only of errors.
        assert!(metered_entry(1, &swap(&entry, "ABCDEF01-2345-6789-ABCD-EF0123456789")).is_ok());
        assert!(MeteredLine::decode_json(1, &format!("{text} ")).is_ok());
    }
}
