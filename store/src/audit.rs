//! `audit verify`: proves the log and the read models agree, to the micro-USDC.
//!
//! In one read snapshot it (1) walks the log in position order, recomputing every chain hash and
//! checking positions and stream versions are gapless; (2) replays every event through every
//! projection in memory and compares the journal lines and account totals with the stored read
//! models; (3) checks the trial balance (debits = credits). Every difference is reported, not
//! just the first, up to [`FINDINGS_MAX`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;

use gpunex_domain::Account;
use gpunex_projections::ledger::{self, AccountTotals, LedgerLine};
use serde::Serialize;

use crate::envelope::{ChainedFields, GENESIS_HASH, chain_hash};
use crate::journal::PostingsDigest;
use crate::plan::Head;
use crate::{READ_BATCH_EVENTS_MAX, RecordedEvent, StoreError};

/// Findings kept in a report; the rest are counted.
pub const FINDINGS_MAX: usize = 1_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditFinding {
    PositionGap {
        expected: u64,
        found: u64,
    },
    HashMismatch {
        position: u64,
        stored: String,
        computed: String,
    },
    StreamVersionGap {
        position: u64,
        stream_id: String,
        expected: u64,
        found: u64,
    },
    Undecodable {
        position: u64,
        reason: String,
    },
    ProjectionFailed {
        position: u64,
        reason: String,
    },
    HeadMismatch {
        head_position: u64,
        head_hash: String,
        log_position: u64,
        log_hash: String,
    },
    CheckpointAhead {
        projection: String,
        checkpoint: u64,
        head: u64,
    },
    LineMismatch {
        position: u64,
        line_index: u32,
        stored: Option<String>,
        replayed: Option<String>,
    },
    BalanceMismatch {
        account: String,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// An account's postings rows (where its statement finds its entries) do not list the
    /// positions the replay posts to it up to the checkpoint: `stored_entries` and
    /// `replayed_entries` count them, `reason` says what differs.
    PostingsMismatch {
        account: String,
        stored_entries: u64,
        replayed_entries: u64,
        reason: String,
    },
    Unbalanced {
        source: String,
        debits_micro_usdc: String,
        credits_micro_usdc: String,
    },
    /// A stored earnings line that differs from the replay's (or exists on one side only).
    EarningsLineMismatch {
        position: u64,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// A stored hour of a GPU's earnings (`hour`: its first instant; `gpu_uuid`, `model_id`)
    /// differs from the hour as the provider's stored lines make it (or exists on one side only).
    EarningsHourMismatch {
        provider_id: String,
        hour: String,
        gpu_uuid: String,
        model_id: String,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// The stored snapshot of the in-memory read models differs from the fold of the log up to
    /// its position (`models`), or cannot be used (`reason`).
    SnapshotMismatch {
        position: u64,
        models: Vec<String>,
        reason: Option<String>,
    },
    /// A provider's stored place in the earnings fold differs from the replay's.
    EarningsCursorMismatch {
        provider_id: String,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// A stored rental differs from the replay's (or exists on one side only).
    RentalMismatch {
        rental_id: String,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// A stored payout or payout batch (`row`: "payout <id>" or "batch <id>") differs from the
    /// replay's (or exists on one side only).
    PayoutMismatch {
        row: String,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// A stored presence transition differs from the replay's (or exists on one side only).
    PresenceMismatch {
        position: u64,
        stored: Option<String>,
        replayed: Option<String>,
    },
    /// A stored price differs from the replay's (or exists on one side only).
    PriceMismatch {
        position: u64,
        stored: Option<String>,
        replayed: Option<String>,
    },
}

impl AuditFinding {
    /// The first log position this finding concerns, if any.
    pub fn position(&self) -> Option<u64> {
        match self {
            AuditFinding::PositionGap { expected, .. } => Some(*expected),
            AuditFinding::HashMismatch { position, .. }
            | AuditFinding::StreamVersionGap { position, .. }
            | AuditFinding::Undecodable { position, .. }
            | AuditFinding::ProjectionFailed { position, .. }
            | AuditFinding::LineMismatch { position, .. }
            | AuditFinding::EarningsLineMismatch { position, .. }
            | AuditFinding::PresenceMismatch { position, .. }
            | AuditFinding::PriceMismatch { position, .. } => Some(*position),
            AuditFinding::HeadMismatch { log_position, .. } => Some(*log_position),
            AuditFinding::CheckpointAhead { .. }
            | AuditFinding::BalanceMismatch { .. }
            | AuditFinding::PostingsMismatch { .. }
            | AuditFinding::EarningsCursorMismatch { .. }
            | AuditFinding::EarningsHourMismatch { .. }
            | AuditFinding::RentalMismatch { .. }
            | AuditFinding::PayoutMismatch { .. }
            | AuditFinding::SnapshotMismatch { .. }
            | AuditFinding::Unbalanced { .. } => None,
        }
    }
}

impl fmt::Display for AuditFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuditFinding::PositionGap { expected, found } => {
                write!(
                    f,
                    "position gap: expected {expected}, found {found} (rows deleted or reordered)"
                )
            }
            AuditFinding::HashMismatch {
                position,
                stored,
                computed,
            } => write!(
                f,
                "hash mismatch at position {position}: stored {stored}, recomputed {computed} (row edited)"
            ),
            AuditFinding::StreamVersionGap {
                position,
                stream_id,
                expected,
                found,
            } => write!(
                f,
                "stream `{stream_id}` at position {position}: expected version {expected}, found {found}"
            ),
            AuditFinding::Undecodable { position, reason } => {
                write!(f, "event at position {position} does not decode: {reason}")
            }
            AuditFinding::ProjectionFailed { position, reason } => {
                write!(
                    f,
                    "the ledger projection cannot fold position {position}: {reason}"
                )
            }
            AuditFinding::HeadMismatch {
                head_position,
                head_hash,
                log_position,
                log_hash,
            } => write!(
                f,
                "log head says position {head_position} hash {head_hash}, the log ends at {log_position} hash {log_hash}"
            ),
            AuditFinding::CheckpointAhead {
                projection,
                checkpoint,
                head,
            } => {
                write!(
                    f,
                    "projection `{projection}` checkpoint {checkpoint} is past the log head {head}"
                )
            }
            AuditFinding::LineMismatch {
                position,
                line_index,
                stored,
                replayed,
            } => write!(
                f,
                "journal line {position}/{line_index}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::BalanceMismatch {
                account,
                stored,
                replayed,
            } => write!(
                f,
                "account {account}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::PostingsMismatch {
                account,
                stored_entries,
                replayed_entries,
                reason,
            } => write!(
                f,
                "account {account} postings: {stored_entries} entries stored, {replayed_entries} replayed ({reason})"
            ),
            AuditFinding::Unbalanced {
                source,
                debits_micro_usdc,
                credits_micro_usdc,
            } => write!(
                f,
                "{source} trial balance: debits {debits_micro_usdc} != credits {credits_micro_usdc} micro-USDC"
            ),
            AuditFinding::EarningsLineMismatch {
                position,
                stored,
                replayed,
            } => write!(
                f,
                "earnings line at position {position}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::EarningsHourMismatch {
                provider_id,
                hour,
                gpu_uuid,
                model_id,
                stored,
                replayed,
            } => write!(
                f,
                "earnings of provider {provider_id} in the hour from {hour}, GPU {gpu_uuid:?} \
                 ({model_id}): stored {}, from its lines {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::SnapshotMismatch {
                position,
                models,
                reason,
            } => match reason {
                Some(reason) => write!(f, "read-model snapshot at position {position}: {reason}"),
                None => write!(
                    f,
                    "read-model snapshot at position {position} differs from the log in: {}",
                    models.join(", ")
                ),
            },
            AuditFinding::EarningsCursorMismatch {
                provider_id,
                stored,
                replayed,
            } => write!(
                f,
                "earnings of provider {provider_id}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::RentalMismatch {
                rental_id,
                stored,
                replayed,
            } => write!(
                f,
                "rental {rental_id}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::PayoutMismatch {
                row,
                stored,
                replayed,
            } => write!(
                f,
                "{row}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::PresenceMismatch {
                position,
                stored,
                replayed,
            } => write!(
                f,
                "presence transition at position {position}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
            AuditFinding::PriceMismatch {
                position,
                stored,
                replayed,
            } => write!(
                f,
                "price at position {position}: stored {}, replayed {}",
                stored.as_deref().unwrap_or("(missing)"),
                replayed.as_deref().unwrap_or("(missing)")
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditReport {
    pub events_checked: u64,
    pub head_position: u64,
    pub head_hash: String,
    pub ledger_checkpoint: u64,
    pub journal_lines_checked: u64,
    pub accounts_checked: u64,
    /// Sum of all debits (= sum of all credits when clean), micro-USDC, as a string: may exceed i64.
    pub total_debits_micro_usdc: String,
    /// How far the stored earnings projection had folded, and how many of its lines were
    /// compared with the replay.
    pub earnings_checkpoint: u64,
    pub earnings_lines_checked: u64,
    /// How many stored hours of GPUs' earnings were compared with the hours of the stored lines
    /// (those holding only lines folded by the checkpoint).
    pub earnings_hours_checked: u64,
    /// How far the stored rentals projection had folded, and how many rentals were compared.
    pub rentals_checkpoint: u64,
    pub rentals_checked: u64,
    /// How far the stored payouts projection had folded, and how many payouts and batches were
    /// compared.
    pub payouts_checkpoint: u64,
    pub payouts_checked: u64,
    /// How far the stored presence history had folded, and how many of its transitions were
    /// compared.
    pub presence_checkpoint: u64,
    pub presence_checked: u64,
    /// How far the stored price history had folded, and how many of its prices were compared.
    pub prices_checkpoint: u64,
    pub prices_checked: u64,
    /// What the check of the in-memory read models' snapshot found (set by the caller that
    /// checks it; the store cannot fold those models).
    pub snapshot: String,
    pub findings: Vec<AuditFinding>,
    pub findings_omitted: u64,
}

impl AuditReport {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty() && self.findings_omitted == 0
    }

    /// The first log position any finding concerns: where tampering or drift begins.
    pub fn first_bad_position(&self) -> Option<u64> {
        self.findings
            .iter()
            .filter_map(AuditFinding::position)
            .min()
    }
}

/// Progress of a running audit, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct AuditProgress {
    pub position: u64,
    pub head: u64,
}

/// A consistent read snapshot of the log and read models.
pub(crate) trait AuditSource {
    fn head(&mut self) -> impl Future<Output = Result<Head, StoreError>> + Send;
    fn checkpoint(&mut self) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Up to `limit` events after `after`, and the stored journal lines of the same positions
    /// up to `checkpoint` (plus any stored past the last event, which are strays to report).
    fn page(
        &mut self,
        after: u64,
        limit: usize,
        checkpoint: u64,
    ) -> impl Future<Output = Result<(Vec<RecordedEvent>, Vec<LedgerLine>), StoreError>> + Send;
    /// Journal lines with `after < position <= through`, in (position, line_index) order.
    fn lines(
        &mut self,
        after: u64,
        through: u64,
    ) -> impl Future<Output = Result<Vec<LedgerLine>, StoreError>> + Send;
    fn balances(
        &mut self,
    ) -> impl Future<Output = Result<BTreeMap<Account, AccountTotals>, StoreError>> + Send;
    /// Up to `limit` postings rows after `after` (account, last position), in that order:
    /// each row's account, last position and stored positions.
    fn postings(
        &mut self,
        after: (String, u64),
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(String, u64, Vec<u8>)>, StoreError>> + Send;
}

pub(crate) struct Findings {
    pub(crate) kept: Vec<AuditFinding>,
    pub(crate) omitted: u64,
}

impl Findings {
    pub(crate) fn push(&mut self, finding: AuditFinding) {
        if self.kept.len() < FINDINGS_MAX {
            self.kept.push(finding);
        } else {
            self.omitted += 1;
        }
    }
}

pub(crate) async fn run<S: AuditSource>(
    mut source: S,
    progress: &(dyn Fn(AuditProgress) + Sync),
) -> Result<AuditReport, StoreError> {
    let head = source.head().await?;
    let checkpoint = source.checkpoint().await?;
    let mut state = Replay {
        checkpoint,
        chain: ChainWalk {
            expected_position: 1,
            previous_hash: GENESIS_HASH,
            stream_versions: HashMap::new(),
        },
        totals: BTreeMap::new(),
        postings: BTreeMap::new(),
        findings: Findings {
            kept: Vec::new(),
            omitted: 0,
        },
        events_checked: 0,
        lines_checked: 0,
    };
    if checkpoint > head.position {
        state.findings.push(AuditFinding::CheckpointAhead {
            projection: ledger::LEDGER.to_owned(),
            checkpoint,
            head: head.position,
        });
    }
    // A two-stage pipeline: while one page is hashed, decoded, folded and compared on a blocking
    // thread, the next page is read from the database.
    let mut stage = Stage::Idle(Box::new(state));
    let mut after = 0;
    loop {
        let (events, stored_lines) = source
            .page(after, READ_BATCH_EVENTS_MAX, checkpoint)
            .await?;
        let Some(last) = events.last().map(|e| e.position) else {
            break;
        };
        let mut state = stage.finish().await?;
        stage = Stage::Busy(tokio::task::spawn_blocking(move || {
            state.page(&events, &stored_lines)?;
            Ok(state)
        }));
        after = last;
        progress(AuditProgress {
            position: after,
            head: head.position,
        });
    }
    let Replay {
        chain,
        totals: replayed_totals,
        postings: replayed_postings,
        mut findings,
        events_checked,
        lines_checked,
        ..
    } = *stage.finish().await?;
    let log_end = chain.expected_position - 1;
    if log_end != head.position || chain.previous_hash != head.hash {
        findings.push(AuditFinding::HeadMismatch {
            head_position: head.position,
            head_hash: hex::encode(head.hash),
            log_position: log_end,
            log_hash: hex::encode(chain.previous_hash),
        });
    }
    // Lines stored past the checkpoint would be rows without a committed checkpoint.
    let stray = source.lines(checkpoint, u64::MAX >> 1).await?;
    compare_lines(&stray, &[], &mut findings);
    let stored_postings = stored_postings(&mut source, checkpoint, &mut findings).await?;
    compare_postings(&stored_postings, &replayed_postings, &mut findings);
    let stored_totals = source.balances().await?;
    compare_balances(&stored_totals, &replayed_totals, &mut findings);
    let (debits, credits) = ledger::trial_balance(&replayed_totals);
    for (source_name, (d, c)) in [
        ("replayed", (debits, credits)),
        ("stored", ledger::trial_balance(&stored_totals)),
    ] {
        if d != c {
            findings.push(AuditFinding::Unbalanced {
                source: source_name.to_owned(),
                debits_micro_usdc: d.to_string(),
                credits_micro_usdc: c.to_string(),
            });
        }
    }
    Ok(AuditReport {
        events_checked,
        head_position: head.position,
        head_hash: hex::encode(head.hash),
        ledger_checkpoint: checkpoint,
        journal_lines_checked: lines_checked,
        accounts_checked: replayed_totals.len().max(stored_totals.len()) as u64,
        total_debits_micro_usdc: debits.to_string(),
        earnings_checkpoint: 0,
        earnings_lines_checked: 0,
        earnings_hours_checked: 0,
        rentals_checkpoint: 0,
        rentals_checked: 0,
        payouts_checkpoint: 0,
        payouts_checked: 0,
        presence_checkpoint: 0,
        presence_checked: 0,
        prices_checkpoint: 0,
        prices_checked: 0,
        snapshot: "not checked".to_owned(),
        findings: findings.kept,
        findings_omitted: findings.omitted,
    })
}

/// The replay state is either here, or being worked on by the page in flight.
enum Stage {
    Idle(Box<Replay>),
    Busy(tokio::task::JoinHandle<Result<Box<Replay>, StoreError>>),
}

impl Stage {
    async fn finish(self) -> Result<Box<Replay>, StoreError> {
        match self {
            Stage::Idle(state) => Ok(state),
            Stage::Busy(handle) => handle.await.map_err(|e| StoreError::CorruptRow {
                position: 0,
                reason: format!("audit worker failed: {e}"),
            })?,
        }
    }
}

/// Everything the audit accumulates while walking the log.
struct Replay {
    checkpoint: u64,
    chain: ChainWalk,
    totals: BTreeMap<Account, AccountTotals>,
    /// Per account: the last position posted to it, and the digest of its positions.
    postings: BTreeMap<Account, (u64, PostingsDigest)>,
    findings: Findings,
    events_checked: u64,
    lines_checked: u64,
}

impl Replay {
    /// Checks one page of the log and compares its replayed journal lines with `stored_lines`
    /// (the stored lines of the same positions, up to the checkpoint).
    fn page(
        &mut self,
        events: &[RecordedEvent],
        stored_lines: &[LedgerLine],
    ) -> Result<(), StoreError> {
        let mut projected = Vec::with_capacity(events.len());
        for event in events {
            self.chain.check(event, &mut self.findings);
            // Decode every event, also those past the checkpoint and of types the ledger does
            // not read: one that cannot be decoded is what would stop a projection that reads it.
            match event.to_projected() {
                Ok(p) if p.position <= self.checkpoint => projected.push(p),
                Ok(_) => {}
                Err(error) => self.findings.push(AuditFinding::Undecodable {
                    position: event.position,
                    reason: error.to_string(),
                }),
            }
        }
        self.events_checked += events.len() as u64;
        let replayed = match ledger::fold_batch(&projected) {
            Ok(replayed) => replayed,
            Err(error) => {
                self.findings.push(AuditFinding::ProjectionFailed {
                    position: error.position(),
                    reason: error.to_string(),
                });
                return Ok(());
            }
        };
        self.lines_checked += stored_lines.len().max(replayed.lines.len()) as u64;
        compare_lines(stored_lines, &replayed.lines, &mut self.findings);
        for line in &replayed.lines {
            let (last, digest) = self.postings.entry(line.account).or_default();
            if *last != line.position {
                *last = line.position;
                digest.add(line.position);
            }
        }
        if let Err(error) = ledger::merge_totals(&mut self.totals, &replayed.deltas) {
            self.findings.push(AuditFinding::ProjectionFailed {
                position: error.position(),
                reason: error.to_string(),
            });
        }
        Ok(())
    }
}

struct ChainWalk {
    expected_position: u64,
    previous_hash: [u8; 32],
    stream_versions: HashMap<String, u64>,
}

impl ChainWalk {
    fn check(&mut self, event: &RecordedEvent, findings: &mut Findings) {
        if event.position != self.expected_position {
            findings.push(AuditFinding::PositionGap {
                expected: self.expected_position,
                found: event.position,
            });
        }
        let computed = chain_hash(
            &self.previous_hash,
            &ChainedFields {
                position: event.position,
                event_id: event.event_id,
                stream_id: &event.stream_id,
                stream_version: event.stream_version,
                event_type: &event.event_type,
                schema_version: event.schema_version,
                recorded_at_us: event.recorded_at_us,
                payload: &event.payload,
                metadata: &event.metadata,
            },
        );
        if computed != event.hash {
            findings.push(AuditFinding::HashMismatch {
                position: event.position,
                stored: hex::encode(event.hash),
                computed: hex::encode(computed),
            });
        }
        let version = self
            .stream_versions
            .entry(event.stream_id.clone())
            .or_insert(0);
        if event.stream_version != *version + 1 {
            findings.push(AuditFinding::StreamVersionGap {
                position: event.position,
                stream_id: event.stream_id.clone(),
                expected: *version + 1,
                found: event.stream_version,
            });
        }
        *version = event.stream_version;
        // Continue from the stored hash, so one edited row is reported once, not at every row after it.
        self.previous_hash = event.hash;
        self.expected_position = event.position + 1;
    }
}

/// Postings rows read per page by the audit.
const POSTINGS_PAGE: usize = 1_000;

/// Reads every stored postings row and digests each account's positions up to `checkpoint`,
/// reporting rows whose positions overlap the account's earlier rows or pass the checkpoint.
async fn stored_postings<S: AuditSource>(
    source: &mut S,
    checkpoint: u64,
    findings: &mut Findings,
) -> Result<BTreeMap<String, (u64, PostingsDigest)>, StoreError> {
    let mut stored: BTreeMap<String, (u64, PostingsDigest)> = BTreeMap::new();
    let mut after = (String::new(), 0);
    loop {
        let rows = source.postings(after.clone(), POSTINGS_PAGE).await?;
        let full = rows.len() == POSTINGS_PAGE;
        for (account, last_position, bytes) in rows {
            let positions = crate::journal::decode_positions(last_position, &bytes)?;
            let (last, digest) = stored.entry(account.clone()).or_default();
            let mut problem = None;
            for position in positions {
                if position <= *last {
                    problem = Some(format!("position {position} listed twice or out of order"));
                } else if position > checkpoint {
                    problem = Some(format!(
                        "position {position} past the checkpoint {checkpoint}"
                    ));
                } else {
                    digest.add(position);
                }
                *last = (*last).max(position);
            }
            if let Some(reason) = problem {
                findings.push(AuditFinding::PostingsMismatch {
                    account: account.clone(),
                    stored_entries: digest.entries(),
                    replayed_entries: 0,
                    reason,
                });
            }
            after = (account, last_position);
        }
        if !full {
            return Ok(stored);
        }
    }
}

fn compare_postings(
    stored: &BTreeMap<String, (u64, PostingsDigest)>,
    replayed: &BTreeMap<Account, (u64, PostingsDigest)>,
    findings: &mut Findings,
) {
    let replayed: BTreeMap<String, PostingsDigest> = replayed
        .iter()
        .map(|(account, (_, digest))| (account.to_string(), *digest))
        .collect();
    let accounts: std::collections::BTreeSet<&String> =
        stored.keys().chain(replayed.keys()).collect();
    for account in accounts {
        let stored = stored.get(account).map(|(_, d)| *d).unwrap_or_default();
        let replayed = replayed.get(account).copied().unwrap_or_default();
        if stored != replayed {
            findings.push(AuditFinding::PostingsMismatch {
                account: account.clone(),
                stored_entries: stored.entries(),
                replayed_entries: replayed.entries(),
                reason: "the positions listed differ from those posted to".to_owned(),
            });
        }
    }
}

fn describe_line(line: &LedgerLine) -> String {
    format!(
        "{} {} {} (event {}, entry {})",
        line.account,
        crate::rows::side_text(line.side),
        line.amount,
        line.event_id,
        line.entry_id
    )
}

fn compare_lines(stored: &[LedgerLine], replayed: &[LedgerLine], findings: &mut Findings) {
    let key = |line: &LedgerLine| (line.position, line.line_index);
    let mismatch = |stored: Option<&LedgerLine>, replayed: Option<&LedgerLine>| {
        let at = stored.or(replayed).map_or((0, 0), key);
        AuditFinding::LineMismatch {
            position: at.0,
            line_index: at.1,
            stored: stored.map(describe_line),
            replayed: replayed.map(describe_line),
        }
    };
    let (mut s, mut r) = (0, 0);
    loop {
        match (stored.get(s), replayed.get(r)) {
            (Some(a), Some(b)) if key(a) == key(b) => {
                if a != b {
                    findings.push(mismatch(Some(a), Some(b)));
                }
                s += 1;
                r += 1;
            }
            (Some(a), Some(b)) if key(b) < key(a) => {
                findings.push(mismatch(None, Some(b)));
                r += 1;
            }
            (Some(a), _) => {
                findings.push(mismatch(Some(a), None));
                s += 1;
            }
            (None, Some(b)) => {
                findings.push(mismatch(None, Some(b)));
                r += 1;
            }
            (None, None) => break,
        }
    }
}

fn describe_totals(totals: &AccountTotals) -> String {
    format!(
        "debits {} credits {} (last position {})",
        totals.debits, totals.credits, totals.last_position
    )
}

fn compare_balances(
    stored: &BTreeMap<Account, AccountTotals>,
    replayed: &BTreeMap<Account, AccountTotals>,
    findings: &mut Findings,
) {
    let mut accounts: Vec<&Account> = stored.keys().chain(replayed.keys()).collect();
    accounts.sort_unstable();
    accounts.dedup();
    for account in accounts {
        let (a, b) = (stored.get(account), replayed.get(account));
        if a != b {
            findings.push(AuditFinding::BalanceMismatch {
                account: account.to_string(),
                stored: a.map(describe_totals),
                replayed: b.map(describe_totals),
            });
        }
    }
}

/// PostgreSQL: a REPEATABLE READ, READ ONLY transaction sees one snapshot throughout.
#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::{Side, Usdc};
    use uuid::Uuid;

    fn line(position: u64, line_index: u32, amount: i64) -> LedgerLine {
        LedgerLine {
            position,
            line_index,
            event_id: Uuid::nil(),
            entry_id: Uuid::nil(),
            account: Account::Treasury,
            side: Side::Debit,
            amount: Usdc::from_micros(amount),
            recorded_at_us: 0,
        }
    }

    /// (position, line_index, present in stored, present in replayed) per finding.
    type Diff = Vec<(u64, u32, bool, bool)>;

    fn diff(stored: &[LedgerLine], replayed: &[LedgerLine]) -> Diff {
        let mut findings = Findings {
            kept: Vec::new(),
            omitted: 0,
        };
        compare_lines(stored, replayed, &mut findings);
        findings
            .kept
            .into_iter()
            .map(|f| match f {
                AuditFinding::LineMismatch {
                    position,
                    line_index,
                    stored,
                    replayed,
                } => (position, line_index, stored.is_some(), replayed.is_some()),
                other => panic!("unexpected finding {other:?}"),
            })
            .collect()
    }

    #[test]
    fn line_comparison_reports_each_difference_once() {
        let replayed = [line(1, 0, 5), line(1, 1, 5), line(2, 0, 7), line(2, 1, 7)];
        assert!(diff(&replayed, &replayed).is_empty());
        let cases: [(&[LedgerLine], Diff); 4] = [
            (
                &[line(1, 0, 5), line(2, 0, 7), line(2, 1, 7)],
                vec![(1, 1, false, true)],
            ),
            (
                &[
                    line(1, 0, 5),
                    line(1, 1, 5),
                    line(1, 2, 1),
                    line(2, 0, 7),
                    line(2, 1, 7),
                ],
                vec![(1, 2, true, false)],
            ),
            (
                &[line(1, 0, 5), line(1, 1, 6), line(2, 0, 7), line(2, 1, 7)],
                vec![(1, 1, true, true)],
            ),
            (
                &[],
                vec![
                    (1, 0, false, true),
                    (1, 1, false, true),
                    (2, 0, false, true),
                    (2, 1, false, true),
                ],
            ),
        ];
        for (stored, expected) in cases {
            assert_eq!(diff(stored, &replayed), expected);
        }
    }
}
