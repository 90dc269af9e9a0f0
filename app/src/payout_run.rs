//! Payout batches, a command and a reactor: a date's batch planned from the earnings projection
//! and written as events, and the scheduler that runs it every payout date (the HTTP views of
//! batches are in `gpunex-api`).
//!
//! A run first claims the stream `payout_runs` (`payout.batch_started`, at the version it
//! planned from) in the same append as its first payouts, so only one batch is written at a
//! time. The batch is written in appends of at most 62 payouts (`payout.scheduled`, each on its
//! own stream `payout-<id>`, which must not exist) and ends with the balances rolled forward
//! (`payout.rolled_forward`, 200 providers an event) and `payout.batch_created` on
//! `payout_batch-<date>` (which must not exist either). A rerun of a finished date creates
//! nothing; a rerun after a crash part-way keeps the payouts already written and finishes the
//! batch, and until then no other date may start.

use chrono::NaiveDate;
use gpunex_domain::codes::ErrorCode;
use gpunex_domain::money::Usdc;
use gpunex_domain::payouts::{
    self as rules, BatchCreated, BatchStarted, PayoutEvent, PayoutPolicy, PayoutScheduled,
    RolledForward, RolledForwardRecorded,
};
use gpunex_domain::time::Timestamp;
use gpunex_domain::{DomainEvent, StreamId};
use std::collections::{HashMap, HashSet};

use gpunex_projections::earnings::{Earnings, StoredRange};
use gpunex_store::{AppendError, ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use uuid::Uuid;

use crate::command::{Executor, Rejection, Retry};
use crate::{AppError, ReadModels};

/// Why a batch run wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchRefusal {
    #[error("{0} is in the future: a batch pays what was earned up to its date")]
    DateInFuture(NaiveDate),
    #[error(
        "{date} is neither a Monday (weekly payouts) nor the first business day of its month (monthly payouts, first {first_business_day})"
    )]
    NotAPayoutDate {
        date: NaiveDate,
        first_business_day: NaiveDate,
    },
    #[error("payouts kept changing while the batch of {0} was planned; run it again")]
    KeptChanging(NaiveDate),
    #[error(
        "the batch of {other} was started and not finished: finish it first (gpunex payouts run --date {other})"
    )]
    OtherRunUnfinished { other: NaiveDate },
    #[error("another payout run wrote meanwhile; run the batch of {0} again")]
    WrittenMeanwhile(NaiveDate),
    /// An amount outside what money can hold.
    #[error("{0}")]
    Amount(String),
}

impl BatchRefusal {
    fn amount(error: impl std::fmt::Display) -> BatchRefusal {
        BatchRefusal::Amount(error.to_string())
    }

    /// Its stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            BatchRefusal::DateInFuture(_) => ErrorCode::DateInFuture,
            BatchRefusal::NotAPayoutDate { .. } => ErrorCode::NotAPayoutDate,
            BatchRefusal::KeptChanging(_)
            | BatchRefusal::OtherRunUnfinished { .. }
            | BatchRefusal::WrittenMeanwhile(_) => ErrorCode::BatchInProgress,
            BatchRefusal::Amount(_) => ErrorCode::AmountOutOfRange,
        }
    }
}

/// What a batch run did.
#[derive(Debug, Clone)]
pub enum BatchRun {
    /// The date's batch exists: `created` now, or before.
    Exists { date: NaiveDate, created: bool },
    /// A dry run, or nothing due on the date: the plan, and nothing written.
    Planned { planned: Planned, dry_run: bool },
}

/// Payouts written per append (each on its own stream, with the runs' and the batch's streams:
/// 64 at most).
const PAYOUTS_PER_APPEND: usize = 62;

/// Times a batch is planned again when payouts settle meanwhile.
const PLAN_ATTEMPTS: usize = 5;

/// What the stored earnings lines say about every provider for a cutoff, read as of the
/// in-memory earnings' position and for each provider's settlements at that position.
pub async fn stored_ranges(
    store: &Store,
    credentials: &ReadModels,
    cutoff: Timestamp,
) -> Result<HashMap<Uuid, StoredRange>, AppError> {
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

/// The payouts `date` would schedule (one per provider whose schedule pays on it, for the
/// period it pays) that are scheduled already: open ones from memory, the ones that are over
/// from the stored payouts projection, read as of the in-memory earnings' position.
pub async fn scheduled_payouts(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    date: NaiveDate,
) -> Result<HashSet<Uuid>, AppError> {
    let (as_of, ids) = credentials.with_earnings(|e| {
        let ids: Vec<Uuid> = e
            .providers()
            .into_iter()
            .filter_map(|provider_id| {
                let settings = e.payout_settings(provider_id)?;
                policy.is_payout_date(settings.schedule, date).then(|| {
                    rules::payout_id(provider_id, &rules::period_key(settings.schedule, date))
                })
            })
            .collect();
        (e.position(), ids)
    });
    Ok(store
        .payouts_by_id(&ids, as_of)
        .await?
        .into_keys()
        .collect())
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

/// Plans `date`'s batch: every provider whose schedule pays on `date` is paid what is available
/// at the cutoff (at or above its minimum; bank transfers in whole cents) or rolls forward.
/// `scheduled`: the payouts of the date's periods scheduled already, open or over
/// ([`scheduled_payouts`]).
pub fn plan(
    earnings: &Earnings,
    stored: &HashMap<Uuid, StoredRange>,
    scheduled: &HashSet<Uuid>,
    policy: &PayoutPolicy,
    date: NaiveDate,
    now: Timestamp,
) -> Result<Planned, BatchRefusal> {
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
        if scheduled.contains(&payout_id) || earnings.payouts().open_payout(payout_id).is_some() {
            // Scheduled already: by an interrupted run of this batch (in `existing`), or for
            // the same period on another date (a monthly date moved by a new holiday).
            continue;
        }
        let minimum = policy.minimum(settings.schedule);
        match rules::plan(payable.available, minimum, settings.method.rail())
            .map_err(BatchRefusal::amount)?
        {
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
                postings: rules::schedule_entry(provider_id, amount.paid)
                    .map_err(BatchRefusal::amount)?,
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

/// Builds (or, with `dry_run`, shows) the batch of `date`. A date whose batch exists is left
/// unchanged (`created: false`).
pub async fn run_batch(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    date: NaiveDate,
    dry_run: bool,
    actor: &str,
) -> Result<Result<BatchRun, BatchRefusal>, AppError> {
    if date > today_utc(store.clock().now()) {
        return Ok(Err(BatchRefusal::DateInFuture(date)));
    }
    if !policy.is_payout_date(rules::Schedule::Weekly, date)
        && !policy.is_payout_date(rules::Schedule::Monthly, date)
    {
        return Ok(Err(BatchRefusal::NotAPayoutDate {
            date,
            first_business_day: policy.first_business_day(date),
        }));
    }
    credentials.wait_for(store.head_position().await?).await?;
    if credentials.with_earnings(|e| e.payouts().batch_on(date).is_some()) {
        return Ok(Ok(BatchRun::Exists {
            date,
            created: false,
        }));
    }
    let now = store.clock().now();
    let cutoff = policy.cutoff(date);
    let mut attempt = 0;
    let (planned, runs_version, unfinished) = loop {
        attempt += 1;
        let stored = stored_ranges(store, credentials, cutoff).await?;
        let scheduled = scheduled_payouts(store, credentials, policy, date).await?;
        let planned = credentials.with_earnings(|e| {
            // Plan only from stored figures read for the settlements in force now.
            let current = e.providers().iter().all(|p| {
                stored
                    .get(p)
                    .is_some_and(|r| r.settled_through == e.settled_through(*p))
            });
            current.then(|| {
                plan(e, &stored, &scheduled, policy, date, now).map(|planned| {
                    let book = e.payouts();
                    (planned, book.runs_version(), book.unfinished())
                })
            })
        });
        match planned {
            Some(Ok(planned)) => break planned,
            Some(Err(refused)) => return Ok(Err(refused)),
            None if attempt < PLAN_ATTEMPTS => {}
            None => return Ok(Err(BatchRefusal::KeptChanging(date))),
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
        return Ok(Ok(BatchRun::Planned { planned, dry_run }));
    }
    if let Some(other) = unfinished.filter(|d| *d != date) {
        return Ok(Err(BatchRefusal::OtherRunUnfinished { other }));
    }
    let mut ids: Vec<Uuid> = planned.existing.clone();
    ids.extend(planned.payouts.iter().map(|p| p.payout_id));
    let total = credentials.with_earnings(|e| e.payouts().forming_total(planned.batch_id))
        + planned
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
    let exec = Executor::new(store, credentials);
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
        // Decided once, before the first chunk: a chunk whose streams moved refuses the run.
        let mut streams = Some(streams);
        let outcome = exec
            .execute(
                BATCH_CHUNK_RETRY,
                || async { Ok(()) },
                |_: &(), _now| {
                    Ok::<_, std::convert::Infallible>(streams.take().unwrap_or_default())
                },
            )
            .await?;
        match outcome {
            Ok(_) => {}
            // Another run claimed the runs' stream, or wrote these payouts, first.
            Err(Rejection::Contended { .. }) => {
                return Ok(Err(BatchRefusal::WrittenMeanwhile(date)));
            }
            Err(Rejection::IdTaken { event_id, reason }) => {
                return Err(AppError::Append(AppendError::IdempotencyConflict {
                    event_id,
                    reason,
                }));
            }
            Err(Rejection::Rule(never)) => match never {},
        }
    }
    tracing::info!(%date, payouts = batch.payout_count, total = %batch.total, "payout batch created");
    Ok(Ok(BatchRun::Exists {
        date,
        created: true,
    }))
}

/// A batch is written in chunks decided once from one plan: a chunk whose streams moved (another
/// run claimed `payout_runs`, or wrote these payouts) refuses the run rather than deciding again.
pub const BATCH_CHUNK_RETRY: Retry = Retry {
    name: "payout_batch_chunk",
    attempts: 1,
};

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
/// yet. Returns the dates whose batch it created.
pub async fn scheduler_tick(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    today: NaiveDate,
    memory: &mut SchedulerState,
) -> Result<Vec<NaiveDate>, AppError> {
    let mut created = Vec::new();
    let dates = scheduler_dates(policy, today);
    memory.nothing_due_at.retain(|date, _| dates.contains(date));
    for date in dates {
        let head = store.head_position().await?;
        let done = credentials.with_earnings(|e| e.payouts().batch_on(date).is_some());
        if done || memory.nothing_due_at.get(&date) == Some(&head) {
            continue;
        }
        let run = run_batch(
            store,
            credentials,
            policy,
            date,
            false,
            "system:payout-scheduler",
        )
        .await;
        match run {
            Ok(Ok(BatchRun::Exists { created: true, .. })) => {
                tracing::info!(%date, "scheduled payout batch");
                created.push(date);
            }
            Ok(Ok(_)) => {
                memory.nothing_due_at.insert(date, head);
            }
            // One date's failure does not hold back the others; the next tick retries it.
            Ok(Err(refused)) => {
                tracing::warn!(%date, %refused, "payout batch refused; retrying at the next tick");
            }
            Err(error) => {
                tracing::warn!(%date, %error, "payout batch failed; retrying at the next tick");
            }
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

/// How far ahead [`next_payout`] looks for a payout date, in days (a month's first business day
/// is always within this).
const NEXT_PAYOUT_DAYS_MAX: u64 = 40;

/// A provider's next payout as it stands now: the date its schedule pays next (today, while the
/// date's batch has not run), the cutoff, and what the provider could be paid at that cutoff
/// from the lines stored so far. Earnings dated before a cutoff still in the future can add to
/// it; a batch pays what is available when it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextPayout {
    pub date: NaiveDate,
    pub cutoff: Timestamp,
    pub schedule: gpunex_domain::payouts::Schedule,
    pub rail: gpunex_domain::payouts::Rail,
    pub minimum: Usdc,
    /// Earned before the cutoff and not yet paid, plus what is brought forward.
    pub available: Usdc,
    /// What would be sent if the batch ran now (`None`: below the minimum, it rolls forward).
    pub amount: Option<gpunex_domain::payouts::PayoutAmount>,
}

/// The provider's [`NextPayout`] (`None` without payout settings).
pub async fn next_payout(
    store: &Store,
    credentials: &ReadModels,
    policy: &PayoutPolicy,
    provider_id: Uuid,
    now: Timestamp,
) -> Result<Option<NextPayout>, AppError> {
    let today = chrono::DateTime::from_timestamp_micros(now.unix_micros())
        .map(|t| t.date_naive())
        .unwrap_or_default();
    let found = credentials.with_earnings(|e| {
        let settings = e.payout_settings(provider_id)?.clone();
        let date = (0..NEXT_PAYOUT_DAYS_MAX)
            .map(|offset| today + chrono::Days::new(offset))
            .find(|date| {
                policy.is_payout_date(settings.schedule, *date)
                    && (*date > today || e.payouts().batch_on(*date).is_none())
            })?;
        Some((settings, date, e.position(), e.settled_through(provider_id)))
    });
    let Some((settings, date, as_of, settled_through)) = found else {
        return Ok(None);
    };
    store.earnings_reached(as_of).await?;
    let cutoff = policy.cutoff(date);
    let settled = store.earnings_through(provider_id, settled_through).await?;
    let (before_cutoff, position) = store.earnings_before(provider_id, cutoff, as_of).await?;
    let range = StoredRange {
        settled_through,
        settled,
        before_cutoff,
        before_cutoff_position: position,
    };
    let payable = credentials.with_earnings(|e| e.payable(provider_id, &range));
    let minimum = policy.minimum(settings.schedule);
    let rail = settings.method.rail();
    let amount = rules::plan(payable.available, minimum, rail).map_err(|error| {
        AppError::Store(gpunex_store::StoreError::CorruptRow {
            position: as_of,
            reason: format!("a provider's payable balance is out of range: {error}"),
        })
    })?;
    Ok(Some(NextPayout {
        date,
        cutoff,
        schedule: settings.schedule,
        rail,
        minimum,
        available: payable.available,
        amount,
    }))
}
