//! Payout batches: the payout rules in force, a date's batch planned from the earnings projection
//! and written as events, and the scheduler that runs it every payout date.
//!
//! A run first claims the stream `payout_runs` (`payout.batch_started`, at the version it
//! planned from) in the same append as its first payouts, so only one batch is written at a
//! time. The batch is written in appends of at most 62 payouts (`payout.scheduled`, each on its
//! own stream `payout-<id>`, which must not exist) and ends with the balances rolled forward
//! (`payout.rolled_forward`, 200 providers an event) and `payout.batch_created` on
//! `payout_batch-<date>` (which must not exist either). A rerun of a finished date creates
//! nothing; a rerun after a crash part-way keeps the payouts already written and finishes the
//! batch, and until then no other date may start.

use gpunex_domain::codes::ErrorCode;

use chrono::NaiveDate;
use gpunex_domain::money::Usdc;
use gpunex_domain::payouts::{
    self as rules, BatchCreated, BatchStarted, PayoutEvent, PayoutPolicy, PayoutScheduled,
    RolledForward, RolledForwardRecorded,
};
use gpunex_domain::time::Timestamp;
use gpunex_domain::{DomainEvent, StreamId};
use std::collections::HashMap;

use gpunex_projections::earnings::{Earnings, StoredRange};
use gpunex_projections::payouts::{BatchRecord, PayoutRecord};
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use gpunex_wire::payouts as wp;
use uuid::Uuid;

use crate::error::{ApiError, append_failure};
use crate::server::timestamp;
use gpunex_app::ReadModels;

/// Times a batch is planned again when payouts settle meanwhile.
const PLAN_ATTEMPTS: usize = 5;

/// What the stored earnings lines say about every provider for a cutoff, read as of the
/// in-memory earnings' position and for each provider's settlements at that position.
pub async fn stored_ranges(
    store: &Store,
    credentials: &ReadModels,
    cutoff: Timestamp,
) -> Result<HashMap<Uuid, StoredRange>, ApiError> {
    let (as_of, providers) = credentials.with_earnings(|e| {
        let providers: Vec<(Uuid, u64)> = e
            .providers()
            .into_iter()
            .map(|p| (p, e.settled_through(p)))
            .collect();
        (e.position(), providers)
    });
    store.earnings_reached(as_of).await?;
    let mut ranges = HashMap::with_capacity(providers.len());
    for (provider_id, settled_through) in providers {
        let settled = store.earnings_through(provider_id, settled_through).await?;
        let (before_cutoff, position) = store.earnings_before(provider_id, cutoff, as_of).await?;
        ranges.insert(
            provider_id,
            StoredRange {
                settled_through,
                settled,
                before_cutoff,
                before_cutoff_position: position,
            },
        );
    }
    Ok(ranges)
}

/// Payouts written per append (each on its own stream, with the runs' and the batch's streams:
/// 64 at most).
const PAYOUTS_PER_APPEND: usize = 62;

/// What the server needs for payouts: the rules, and the platform's bank account for SEPA files.
#[derive(Debug, Clone, Default)]
pub struct PayoutConfig {
    pub policy: PayoutPolicy,
    pub debtor: Option<gpunex_domain::payouts::BankDetails>,
}

impl PayoutConfig {
    /// Reads and checks the bank account file, if one is given.
    pub fn new(
        policy: PayoutPolicy,
        debtor: Option<&std::path::Path>,
    ) -> anyhow::Result<PayoutConfig> {
        let debtor = match debtor {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("--sepa-debtor {}: {e}", path.display()))?;
                let details: gpunex_domain::payouts::BankDetails = serde_json::from_str(&text)
                    .map_err(|e| anyhow::anyhow!("--sepa-debtor {}: {e}", path.display()))?;
                let details = gpunex_payouts::check_bank(&details).map_err(|errors| {
                    let list: Vec<String> = errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.message))
                        .collect();
                    anyhow::anyhow!("--sepa-debtor {}: {}", path.display(), list.join("; "))
                })?;
                gpunex_payouts::sepa_file::check_debtor(&details)?;
                Some(details)
            }
        };
        Ok(PayoutConfig { policy, debtor })
    }
}

/// A date's batch as planned from the projection.
#[derive(Debug, Clone)]
pub struct Planned {
    pub date: NaiveDate,
    pub batch_id: Uuid,
    pub cutoff: Timestamp,
    pub payouts: Vec<PayoutScheduled>,
    /// Payouts of this date already written by an earlier, interrupted run.
    pub existing: Vec<Uuid>,
    pub rolled_forward: Vec<RolledForward>,
    pub without_method: Vec<Uuid>,
}

fn money(error: impl std::fmt::Display) -> ApiError {
    ApiError::Refused {
        code: ErrorCode::AmountOutOfRange,
        detail: error.to_string(),
    }
}

/// Plans `date`'s batch: every provider whose schedule pays on `date` is paid what is available
/// at the cutoff (at or above its minimum; bank transfers in whole cents) or rolls forward.
pub fn plan(
    earnings: &Earnings,
    stored: &HashMap<Uuid, StoredRange>,
    policy: &PayoutPolicy,
    date: NaiveDate,
    now: Timestamp,
) -> Result<Planned, ApiError> {
    let cutoff = policy.cutoff(date);
    let batch_id = rules::batch_id(date);
    let mut planned = Planned {
        date,
        batch_id,
        cutoff,
        payouts: Vec::new(),
        // An interrupted run's payouts belong to the batch whatever the settings say now.
        existing: earnings.payouts().forming_payouts(batch_id).to_vec(),
        rolled_forward: Vec::new(),
        without_method: Vec::new(),
    };
    for provider_id in earnings.providers() {
        let range = stored.get(&provider_id).copied().unwrap_or_default();
        let payable = earnings.payable(provider_id, &range);
        let Some(settings) = earnings.payout_settings(provider_id) else {
            if payable.available.is_positive() {
                planned.without_method.push(provider_id);
            }
            continue;
        };
        if !policy.is_payout_date(settings.schedule, date) {
            continue;
        }
        let period = rules::period_key(settings.schedule, date);
        let payout_id = rules::payout_id(provider_id, &period);
        if earnings.payouts().payout(payout_id).is_some() {
            // Scheduled already: by an interrupted run of this batch (in `existing`), or for
            // the same period on another date (a monthly date moved by a new holiday).
            continue;
        }
        let minimum = policy.minimum(settings.schedule);
        match rules::plan(payable.available, minimum, settings.method.rail()).map_err(money)? {
            Some(amount) => planned.payouts.push(PayoutScheduled {
                payout_id,
                batch_id,
                provider_id,
                payout_date: date,
                period,
                schedule: settings.schedule,
                method: settings.method.clone(),
                cutoff,
                lines: payable.lines,
                brought_forward: payable.brought_forward,
                amount: amount.paid,
                carried: amount.carried,
                postings: rules::schedule_entry(provider_id, amount.paid).map_err(money)?,
                scheduled_at: now,
            }),
            None if payable.available.is_positive() => {
                planned.rolled_forward.push(RolledForward {
                    provider_id,
                    schedule: settings.schedule,
                    available: payable.available,
                    minimum,
                });
            }
            None => {}
        }
    }
    Ok(planned)
}

fn stream(text: String) -> StreamId {
    StreamId::parse(text).unwrap_or_else(|_| unreachable!("ids make valid stream ids"))
}

pub fn payout_stream(payout_id: Uuid) -> StreamId {
    stream(format!("payout-{payout_id}"))
}

pub fn batch_stream(date: NaiveDate) -> StreamId {
    stream(format!("payout_batch-{date}"))
}

/// The date in UTC at `now`: the server's payout calendar.
pub fn today_utc(now: Timestamp) -> NaiveDate {
    chrono::DateTime::from_timestamp_micros(now.unix_micros())
        .map_or(NaiveDate::MIN, |t| t.date_naive())
}

/// Builds (or, with `dry_run`, shows) the batch of `date`. A date whose batch exists returns it
/// unchanged (`created: false`).
pub async fn run_batch(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    date: NaiveDate,
    dry_run: bool,
    actor: &str,
) -> Result<wp::BatchView, ApiError> {
    if date > today_utc(store.clock().now()) {
        return Err(ApiError::Refused {
            code: ErrorCode::DateInFuture,
            detail: format!("{date} is in the future: a batch pays what was earned up to its date"),
        });
    }
    if !policy.is_payout_date(rules::Schedule::Weekly, date)
        && !policy.is_payout_date(rules::Schedule::Monthly, date)
    {
        return Err(ApiError::Refused {
            code: ErrorCode::NotAPayoutDate,
            detail: format!(
                "{date} is neither a Monday (weekly payouts) nor the first business day of its month (monthly payouts, first {})",
                policy.first_business_day(date)
            ),
        });
    }
    credentials.wait_for(store.head_position().await?).await?;
    let existing = credentials.with_earnings(|e| {
        e.payouts()
            .batch_on(date)
            .map(|batch| batch_view(e, batch, false, Page::ALL))
    });
    if let Some(view) = existing {
        return view;
    }
    let now = store.clock().now();
    let cutoff = policy.cutoff(date);
    let mut attempt = 0;
    let (planned, runs_version, unfinished) = loop {
        attempt += 1;
        let stored = stored_ranges(store, credentials, cutoff).await?;
        let planned = credentials.with_earnings(|e| {
            // Plan only from stored figures read for the settlements in force now.
            let current = e.providers().iter().all(|p| {
                stored
                    .get(p)
                    .is_some_and(|r| r.settled_through == e.settled_through(*p))
            });
            current.then(|| {
                plan(e, &stored, policy, date, now).map(|planned| {
                    let book = e.payouts();
                    (planned, book.runs_version(), book.unfinished())
                })
            })
        });
        match planned {
            Some(planned) => break planned?,
            None if attempt < PLAN_ATTEMPTS => {}
            None => {
                return Err(ApiError::Refused {
                    code: ErrorCode::BatchInProgress,
                    detail: format!(
                        "payouts kept changing while the batch of {date} was planned; run it again"
                    ),
                });
            }
        }
    };
    // A new run claims `payout_runs` at the version it planned from; resuming this date's
    // interrupted run holds that claim already.
    let claim = (unfinished != Some(date)).then(|| StreamAppend {
        stream_id: stream("payout_runs".to_owned()),
        expected: if runs_version == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exact(runs_version)
        },
        events: vec![NewEvent::from_domain(
            Uuid::now_v7(),
            &DomainEvent::Payout(PayoutEvent::BatchStarted(BatchStarted {
                batch_id: planned.batch_id,
                payout_date: date,
                cutoff: planned.cutoff,
                started_at: now,
            })),
            Metadata::actor(actor),
        )],
    });
    let nothing = planned.payouts.is_empty()
        && planned.existing.is_empty()
        && planned.rolled_forward.is_empty();
    if dry_run || nothing {
        // Nothing due on this date: no batch is recorded (a later run that day may have one).
        let mut view = credentials.with_earnings(|e| planned_view(e, &planned));
        view.dry_run = dry_run;
        return Ok(view);
    }
    if let Some(other) = unfinished.filter(|d| *d != date) {
        return Err(ApiError::Refused {
            code: ErrorCode::BatchInProgress,
            detail: format!(
                "the batch of {other} was started and not finished: finish it first (gpunex payouts run --date {other})"
            ),
        });
    }
    let mut ids: Vec<Uuid> = planned.existing.clone();
    ids.extend(planned.payouts.iter().map(|p| p.payout_id));
    let total = credentials.with_earnings(|e| {
        ids.iter()
            .filter_map(|id| e.payouts().payout(*id))
            .map(|r| r.scheduled.amount.micros())
            .sum::<i64>()
    }) + planned
        .payouts
        .iter()
        .map(|p| p.amount.micros())
        .sum::<i64>();
    let batch = BatchCreated {
        batch_id: planned.batch_id,
        payout_date: date,
        cutoff: planned.cutoff,
        payout_count: ids.len() as u64,
        total: Usdc::from_micros(total),
        rolled_forward_count: planned.rolled_forward.len() as u64,
        rolled_forward: Vec::new(),
        created_at: now,
    };
    let event = |e: DomainEvent| NewEvent::from_domain(Uuid::now_v7(), &e, Metadata::actor(actor));
    let mut chunks: Vec<&[PayoutScheduled]> = planned.payouts.chunks(PAYOUTS_PER_APPEND).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    let mut position = 0;
    let mut claim = claim;
    for (index, chunk) in chunks.into_iter().enumerate() {
        let mut streams: Vec<StreamAppend> = claim.take().into_iter().collect();
        streams.extend(chunk.iter().map(|payout| StreamAppend {
            stream_id: payout_stream(payout.payout_id),
            expected: ExpectedVersion::NoStream,
            events: vec![event(DomainEvent::Payout(PayoutEvent::Scheduled(
                payout.clone(),
            )))],
        }));
        if index == last {
            let mut events: Vec<NewEvent> = planned
                .rolled_forward
                .chunks(rules::ROLLED_FORWARD_PER_EVENT)
                .map(|providers| {
                    event(DomainEvent::Payout(PayoutEvent::RolledForward(
                        RolledForwardRecorded {
                            batch_id: planned.batch_id,
                            payout_date: date,
                            providers: providers.to_vec(),
                        },
                    )))
                })
                .collect();
            events.push(event(DomainEvent::Payout(PayoutEvent::BatchCreated(
                batch.clone(),
            ))));
            streams.push(StreamAppend {
                stream_id: batch_stream(date),
                expected: ExpectedVersion::NoStream,
                events,
            });
        }
        position = store
            .append_streams(streams)
            .await
            .map_err(|e| match e {
                // Another run claimed the runs' stream, or wrote these payouts, first.
                gpunex_store::AppendError::WrongExpectedVersion { .. } => ApiError::Refused {
                    code: ErrorCode::BatchInProgress,
                    detail: format!(
                        "another payout run wrote meanwhile; run the batch of {date} again"
                    ),
                },
                other => append_failure(other),
            })?
            .last_position();
    }
    credentials.wait_for(position).await?;
    tracing::info!(%date, payouts = batch.payout_count, total = %batch.total, "payout batch created");
    credentials.with_earnings(|e| {
        e.payouts()
            .batch_on(date)
            .ok_or(ApiError::NotFound("payout_batch"))
            .and_then(|b| batch_view(e, b, true, Page::ALL))
    })
}

/// A payout as the API shows it.
pub fn payout_view(record: &PayoutRecord) -> wp::PayoutView {
    let scheduled = &record.scheduled;
    let last = record.submissions.last();
    let signature = last.map(|s| match &s.submission {
        rules::Submission::Solana { signature, .. } => signature.clone(),
    });
    let (slot, bank_reference) = match record.confirmed.as_ref().map(|c| &c.confirmation) {
        Some(rules::Confirmation::Solana { slot, .. }) => (Some(*slot), None),
        Some(rules::Confirmation::Bank { bank_reference, .. }) => {
            (None, Some(bank_reference.clone()))
        }
        None => (None, None),
    };
    let submitted_at = record
        .submissions
        .first()
        .map(|s| s.submitted_at)
        .or(record.bank_file.as_ref().map(|f| f.created_at));
    let settled_at = record
        .confirmed
        .as_ref()
        .map(|c| c.confirmed_at)
        .or(record.failed.as_ref().map(|f| f.failed_at));
    let status = serde_json::to_value(record.status())
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    wp::PayoutView {
        payout_id: scheduled.payout_id,
        batch_id: scheduled.batch_id,
        provider_id: scheduled.provider_id,
        payout_date: scheduled.payout_date.to_string(),
        period: scheduled.period.clone(),
        schedule: scheduled.schedule,
        rail: scheduled.method.rail(),
        method: scheduled.method.clone(),
        amount_micro_usdc: scheduled.amount.micros(),
        amount_usdc: scheduled.amount.to_string(),
        status,
        cutoff: timestamp(scheduled.cutoff.unix_micros()),
        lines: scheduled.lines.count,
        lines_net_micro_usdc: scheduled.lines.net.micros(),
        brought_forward_micro_usdc: scheduled.brought_forward.micros(),
        carried_micro_usdc: scheduled.carried.micros(),
        scheduled_at: timestamp(scheduled.scheduled_at.unix_micros()),
        signature,
        attempts: u32::try_from(record.submissions.len()).unwrap_or(u32::MAX),
        bank_message_id: record.bank_file.as_ref().map(|f| f.message_id.clone()),
        bank_end_to_end_id: (scheduled.method.rail() == rules::Rail::Bank)
            .then(|| gpunex_payouts::sepa_file::end_to_end_id(scheduled.payout_id)),
        bank_amount_cents: record.bank_file.as_ref().map(|f| f.amount_cents),
        bank_currency: record.bank_file.as_ref().map(|f| f.currency.clone()),
        bank_reference,
        slot,
        submitted_at: submitted_at.map(|t| timestamp(t.unix_micros())),
        settled_at: settled_at.map(|t| timestamp(t.unix_micros())),
        failure_code: record.failed.as_ref().map(|f| f.reason_code.clone()),
        failure_reason: record.failed.as_ref().map(|f| f.reason.clone()),
    }
}

fn rolled(r: &RolledForward) -> wp::RolledForwardView {
    wp::RolledForwardView {
        provider_id: r.provider_id,
        schedule: r.schedule,
        available_micro_usdc: r.available.micros(),
        minimum_micro_usdc: r.minimum.micros(),
    }
}

/// Which payouts of a batch a view shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Start after this payout.
    pub after: Option<Uuid>,
    pub limit: usize,
}

impl Page {
    /// Every payout (the command line, the scheduler).
    pub const ALL: Page = Page {
        after: None,
        limit: usize::MAX,
    };
}

/// Payouts on one page of a batch over HTTP, unless `?limit=` says otherwise (at most 1,000).
pub const PAGE_DEFAULT: usize = 500;
pub const PAGE_MAX: usize = 1_000;

/// A recorded batch, with the payouts of `page`.
pub fn batch_view(
    earnings: &Earnings,
    batch: &BatchRecord,
    created: bool,
    page: Page,
) -> Result<wp::BatchView, ApiError> {
    let created_event = &batch.created;
    let start = match page.after {
        None => 0,
        Some(after) => {
            batch
                .payouts
                .iter()
                .position(|id| *id == after)
                .ok_or_else(|| {
                    ApiError::query(
                        "after",
                        ErrorCode::InvalidCursor,
                        "after: a payout of this batch (the next_after of the previous page)",
                    )
                })?
                + 1
        }
    };
    let ids = &batch.payouts[start..];
    let shown = &ids[..ids.len().min(page.limit)];
    let next_after = (shown.len() < ids.len())
        .then(|| shown.last().copied())
        .flatten();
    Ok(wp::BatchView {
        batch_id: created_event.batch_id,
        date: created_event.payout_date.to_string(),
        cutoff: timestamp(created_event.cutoff.unix_micros()),
        dry_run: false,
        created,
        payout_count: batch.payouts.len() as u64,
        payouts: shown
            .iter()
            .filter_map(|id| earnings.payouts().payout(*id))
            .map(payout_view)
            .collect(),
        next_after,
        // On the first page only: later pages carry payouts.
        rolled_forward: if page.after.is_none() {
            batch.rolled_forward.iter().map(rolled).collect()
        } else {
            Vec::new()
        },
        without_method: Vec::new(),
        total_micro_usdc: created_event.total.micros(),
        total_usdc: created_event.total.to_string(),
        bank_files: batch.files.iter().map(|f| f.message_id.clone()).collect(),
    })
}

/// A recorded batch without its payouts, with how many are in each status.
pub fn batch_summary(earnings: &Earnings, batch: &BatchRecord) -> wp::BatchSummary {
    let created = &batch.created;
    let mut by_status = std::collections::BTreeMap::new();
    for record in batch
        .payouts
        .iter()
        .filter_map(|id| earnings.payouts().payout(*id))
    {
        let status = serde_json::to_value(record.status())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        *by_status.entry(status).or_insert(0) += 1;
    }
    wp::BatchSummary {
        batch_id: created.batch_id,
        date: created.payout_date.to_string(),
        cutoff: timestamp(created.cutoff.unix_micros()),
        payout_count: batch.payouts.len() as u64,
        rolled_forward_count: batch.rolled_forward.len() as u64,
        total_micro_usdc: created.total.micros(),
        total_usdc: created.total.to_string(),
        by_status,
        bank_files: batch.files.iter().map(|f| f.message_id.clone()).collect(),
    }
}

/// A planned batch (a dry run): its payouts as they would be scheduled.
fn planned_view(earnings: &Earnings, planned: &Planned) -> wp::BatchView {
    let mut payouts: Vec<wp::PayoutView> = planned
        .existing
        .iter()
        .filter_map(|id| earnings.payouts().payout(*id))
        .map(payout_view)
        .collect();
    payouts.extend(planned.payouts.iter().map(|scheduled| {
        payout_view(&PayoutRecord {
            scheduled: scheduled.clone(),
            submissions: Vec::new(),
            bank_file: None,
            confirmed: None,
            failed: None,
            version: 0,
        })
    }));
    let total: i64 = payouts.iter().map(|p| p.amount_micro_usdc).sum();
    wp::BatchView {
        batch_id: planned.batch_id,
        date: planned.date.to_string(),
        cutoff: timestamp(planned.cutoff.unix_micros()),
        dry_run: true,
        created: false,
        payout_count: payouts.len() as u64,
        payouts,
        next_after: None,
        rolled_forward: planned.rolled_forward.iter().map(rolled).collect(),
        without_method: planned.without_method.clone(),
        total_micro_usdc: total,
        total_usdc: Usdc::from_micros(total).to_string(),
        bank_files: Vec::new(),
    }
}

/// How far back the scheduler looks for a payout date it missed (the server was down): six
/// days, so a missed Monday is still paid before the next one.
pub const CATCH_UP_DAYS: i64 = 6;

/// The payout dates the scheduler considers on `today`: today's, and those of the past
/// [`CATCH_UP_DAYS`] days, oldest first.
pub fn scheduler_dates(policy: &PayoutPolicy, today: NaiveDate) -> Vec<NaiveDate> {
    (0..=CATCH_UP_DAYS)
        .rev()
        .filter_map(|back| today.checked_sub_signed(chrono::Duration::days(back)))
        .filter(|date| {
            policy.is_payout_date(rules::Schedule::Weekly, *date)
                || policy.is_payout_date(rules::Schedule::Monthly, *date)
        })
        .collect()
}

/// The scheduler's memory between ticks: the log position at which a date was last found with
/// nothing due, so it is planned again only once something new is written.
#[derive(Debug, Default)]
pub struct SchedulerState {
    nothing_due_at: std::collections::BTreeMap<NaiveDate, u64>,
}

/// One tick of the scheduler: runs the batch of every date of [`scheduler_dates`] that has none
/// yet. Returns the batches it created.
pub async fn scheduler_tick(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    today: NaiveDate,
    memory: &mut SchedulerState,
) -> Result<Vec<wp::BatchView>, ApiError> {
    let mut created = Vec::new();
    let dates = scheduler_dates(policy, today);
    memory.nothing_due_at.retain(|date, _| dates.contains(date));
    for date in dates {
        let head = store.head_position().await?;
        let done = credentials.with_earnings(|e| e.payouts().batch_on(date).is_some());
        if done || memory.nothing_due_at.get(&date) == Some(&head) {
            continue;
        }
        let batch = match run_batch(
            store,
            credentials,
            policy,
            date,
            false,
            "system:payout-scheduler",
        )
        .await
        {
            Ok(batch) => batch,
            Err(error) => {
                // One date's failure does not hold back the others; the next tick retries it.
                tracing::warn!(%date, %error, "payout batch failed; retrying at the next tick");
                continue;
            }
        };
        if batch.created {
            tracing::info!(%date, payouts = batch.payouts.len(), total = %batch.total_usdc, "scheduled payout batch");
            created.push(batch);
        } else {
            memory.nothing_due_at.insert(date, head);
        }
    }
    Ok(created)
}

/// Runs each payout date's batch once the day has begun (UTC, from `clock`), checking `every`
/// so often; a date missed while the server was down is run within [`CATCH_UP_DAYS`].
pub async fn run_scheduler(
    store: Store,
    credentials: ReadModels,
    policy: PayoutPolicy,
    clock: impl Fn() -> NaiveDate,
    every: std::time::Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut memory = SchedulerState::default();
    loop {
        tick.tick().await;
        if let Err(error) =
            scheduler_tick(&store, &credentials, &policy, clock(), &mut memory).await
        {
            tracing::warn!(%error, "payout scheduler: a batch failed; retrying at the next tick");
        }
    }
}
