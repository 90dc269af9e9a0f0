//! Rental commands after the start, on the command executor: metering an agent's usage report,
//! recording its job reports, and ending a rental (the renter or an admin, the agent's job end,
//! and the presence watchdog's abandoned rentals). Each loads the rental (and what metering needs
//! of its machine) from the read models once they reach its streams, decides with the rules in
//! `gpunex_domain::rental`, and appends at the versions it read: the rental's stream, and the
//! GPUs' lease streams when it ends.

use gpunex_domain::DomainEvent;
use gpunex_domain::fleet::Span;
use gpunex_domain::market::{self, PriceSet};
use gpunex_domain::metering::FeeSchedule;
use gpunex_domain::onboarding::Tier;
use gpunex_domain::rental::{
    self, EndCause, JobEnded, MeteringError, RentalEnded, RentalEvent, RentalRejection,
    RentalStarted, Workload,
};
use gpunex_domain::time::{MICROS_PER_SECOND, Timestamp};
use gpunex_domain::{StreamId, fleet};
use gpunex_projections::market::RentalState;
use gpunex_store::{ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use uuid::Uuid;

use crate::command::{Done, Executor, Rejection, Retry, expected_at};
use crate::listings::ListingIndex;
use crate::{AppError, ReadModels};

/// How many times a rental command decides again after another write moved a stream it appends
/// to (a usage report, the renter ending it, a silent machine) before it is refused.
pub const RENTAL_RETRY: Retry = Retry {
    name: "rental",
    attempts: 5,
};

/// How an agent's report was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Stored now.
    Recorded,
    /// Stored already, under the same id (a re-sent report).
    Duplicate,
    /// A usage counter at or below what was metered, or adding less than a micro-USDC: nothing
    /// to store.
    Absorbed,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Recorded => "recorded",
            Delivery::Duplicate => "duplicate",
            Delivery::Absorbed => "absorbed",
        }
    }
}

/// Where a report landed (`None` when absorbed) and how it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    pub position: Option<u64>,
    pub delivery: Delivery,
}

/// Why a rental command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such rental in the read models.
    NotFound,
    /// The rules refused it (ending twice, evidence too long).
    Rule(RentalRejection),
    /// A usage counter beyond what metering can price.
    Metering(MeteringError),
}

/// The answer of a rental command: written, refused, or the infrastructure failed.
pub type Outcome<T> = Result<Result<T, Rejection<Refusal>>, AppError>;

/// The rental's stream.
pub fn rental_stream(rental_id: Uuid) -> StreamId {
    StreamId::parse(format!("rental-{rental_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// The provider's tier, which sets the fee (Community until approved otherwise).
pub fn tier_of(models: &ReadModels, provider_id: Uuid) -> Tier {
    models
        .provider_application(&provider_id)
        .and_then(|a| a.tier)
        .unwrap_or(Tier::Community)
}

/// The most GPU-seconds a rental can be billed for at `now`: its GPUs times the seconds its
/// machine was online (by `transitions`) between the start and the end (or now). An offline
/// transition is dated at the last heartbeat, so nothing after it counts: no heartbeat, no meter.
pub fn online_gpu_seconds(
    transitions: &[(bool, Timestamp)],
    rental: &RentalState,
    now: Timestamp,
) -> u64 {
    let until = rental.ended.as_ref().map_or(now, |e| e.ended_at).min(now);
    let window = Span {
        from: rental.started.started_at,
        until,
    };
    let micros = fleet::online_micros(transitions, window);
    let seconds = u64::try_from(micros / MICROS_PER_SECOND).unwrap_or(0);
    seconds.saturating_mul(rental.started.gpu_uuids.len() as u64)
}

/// The machine's online and offline transitions for a window that starts at `from`, for
/// metering a rental that started then: from memory when it holds them (the last month), from
/// the stored presence history otherwise, folded at least as far as the in-memory models.
pub async fn transitions_since(
    store: &Store,
    models: &ReadModels,
    machine_id: Uuid,
    from: Timestamp,
) -> Result<Vec<(bool, Timestamp)>, AppError> {
    let in_memory = models.with_fleet(|f| {
        f.machine(&machine_id)
            .filter(|m| m.transitions_cover(from))
            .map(|m| m.transitions.clone())
    });
    match in_memory {
        Some(transitions) => Ok(transitions),
        None => Ok(store
            .machine_transitions(machine_id, from, models.position())
            .await?),
    }
}

/// A rental's state: from memory while it is open, from the stored rentals projection once it
/// is over (folded at least through its own stream's last event, so never older than memory).
pub async fn rental_of(
    store: &Store,
    models: &ReadModels,
    rental_id: Uuid,
) -> Result<Option<RentalState>, AppError> {
    if let Some(open) = models.with_market(|m| m.open_rental(&rental_id).cloned()) {
        return Ok(Some(open));
    }
    let position = store.streams_position(&[&rental_stream(rental_id)]).await?;
    Ok(store.stored_rental(rental_id, position).await?)
}

/// Writes a rental's events: each to its stream (`RentalEvent::stream`), the rental's at the
/// version it was read at, each lease stream at its version in the read models. The first
/// `ids.len()` events take those ids (a report's own), the others new ones.
fn writes(
    models: &ReadModels,
    rental: &RentalState,
    ids: &[Uuid],
    events: Vec<RentalEvent>,
    meta: &Metadata,
) -> Vec<StreamAppend> {
    let own = rental_stream(rental.started.rental_id);
    let mut writes: Vec<StreamAppend> = Vec::new();
    for (i, event) in events.into_iter().enumerate() {
        let stream_id = event.stream();
        let id = ids.get(i).copied().unwrap_or_else(Uuid::now_v7);
        let new = NewEvent::from_domain(id, &DomainEvent::Rental(event), meta.clone());
        if let Some(write) = writes.iter_mut().find(|w| w.stream_id == stream_id) {
            write.events.push(new);
            continue;
        }
        let expected = if stream_id == own {
            rental.stream_version
        } else {
            models.with_market(|m| m.lease_version(lease_of(&stream_id)))
        };
        writes.push(StreamAppend {
            stream_id,
            expected: expected_at(expected),
            events: vec![new],
        });
    }
    writes
}

fn lease_of(stream: &StreamId) -> &str {
    let name = stream.as_str();
    name.strip_prefix("gpu_lease-").unwrap_or(name)
}

/// The rental as of its stream's last event, once the read models have folded it.
async fn load(exec: &Executor<'_>, rental_id: Uuid) -> Result<Option<RentalState>, AppError> {
    exec.models()
        .wait_for_streams(exec.store(), &[&rental_stream(rental_id)])
        .await?;
    rental_of(exec.store(), exec.models(), rental_id).await
}

/// How many times a rental's start decides again after a lease stream it appends to moved (a
/// GPU released or taken meanwhile): a GPU another rental took is then refused by the rule.
pub const START_RETRY: Retry = Retry {
    name: "rental_start",
    attempts: 3,
};

/// A renter's request to start a rental.
#[derive(Debug, Clone, Copy)]
pub struct Rent<'a> {
    /// The new rental's id (its stream must not exist).
    pub rental_id: Uuid,
    pub renter_id: Uuid,
    /// In the order asked; the first sets the machine and model.
    pub gpu_uuids: &'a [String],
    pub workload: &'a Workload,
}

/// What a rental's start reads: the GPUs as listed and leased, the first GPU's price history,
/// and each lease stream's version, read from the market in one look.
struct Start {
    gpus: Vec<rental::AskedGpu>,
    prices: Vec<PriceSet>,
    versions: Vec<u64>,
}

/// Starts a rental of `gpu_uuids` for `renter_id`: checked against the listing snapshot (which
/// GPUs are offered) and the market (leases, authoritative, and the price in force at the
/// start), decided by `rental::decide_start`, and appended with one lease per GPU at each lease
/// stream's version, all or none. `prepare` sees the decided start right before each append.
/// Answers where it landed and the start.
pub async fn start(
    exec: &Executor<'_>,
    listings: &ListingIndex,
    rent: Rent<'_>,
    meta: &Metadata,
    mut prepare: impl FnMut(&RentalStarted),
) -> Outcome<(u64, RentalStarted)> {
    let Rent {
        rental_id,
        renter_id,
        gpu_uuids,
        workload,
    } = rent;
    let models = exec.models();
    let mut decided = None;
    let outcome = exec
        .execute(
            START_RETRY,
            move || async move {
                let snapshot = listings.current();
                Ok(models.with_market(|market| {
                    let gpus: Vec<rental::AskedGpu> = gpu_uuids
                        .iter()
                        .map(|uuid| rental::AskedGpu {
                            gpu_uuid: uuid.clone(),
                            listed: snapshot.listing(uuid).map(|l| rental::ListedGpu {
                                provider_id: l.provider_id,
                                machine_id: l.machine_id,
                                model_id: l.model_id.to_string(),
                            }),
                            leased: market.lease_of(uuid).is_some(),
                        })
                        .collect();
                    let prices = gpus
                        .first()
                        .and_then(|g| g.listed.as_ref())
                        .map(|l| {
                            market
                                .live_prices(l.provider_id, &l.model_id)
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default();
                    let versions = gpu_uuids.iter().map(|u| market.lease_version(u)).collect();
                    Start {
                        gpus,
                        prices,
                        versions,
                    }
                }))
            },
            |start: &Start, now| {
                let events = rental::decide_start(&rental::StartInput {
                    rental_id,
                    renter_id,
                    gpus: &start.gpus,
                    price_per_gpu_hour: market::price_at(&start.prices, now),
                    workload,
                    at: now,
                })
                .map_err(Refusal::Rule)?;
                let mut writes = Vec::with_capacity(events.len());
                for event in events {
                    let expected = match &event {
                        RentalEvent::Started(started) => {
                            prepare(started);
                            decided = Some(started.clone());
                            ExpectedVersion::NoStream
                        }
                        RentalEvent::GpuLeased(lease) => {
                            let i = gpu_uuids
                                .iter()
                                .position(|u| *u == lease.gpu_uuid)
                                .unwrap_or_default();
                            expected_at(start.versions.get(i).copied().unwrap_or(0))
                        }
                        _ => ExpectedVersion::Any,
                    };
                    writes.push(StreamAppend {
                        stream_id: event.stream(),
                        expected,
                        events: vec![NewEvent::from_domain(
                            Uuid::now_v7(),
                            &DomainEvent::Rental(event),
                            meta.clone(),
                        )],
                    });
                }
                Ok(writes)
            },
        )
        .await?;
    Ok(match (outcome, decided) {
        (Ok(done), Some(started)) => match done.position() {
            Some(position) => Ok((position, started)),
            None => unreachable!("a rental's start always writes"),
        },
        (Ok(_), None) => unreachable!("a rental that was not refused started"),
        (Err(refused), _) => Err(refused),
    })
}

/// A report stored under its own id: a re-send (same content) or an earlier delivery of it
/// (`IdTaken`) is a duplicate, answered with where it landed.
async fn delivered(
    exec: &Executor<'_>,
    report_id: Uuid,
    outcome: Result<Done, Rejection<Refusal>>,
) -> Outcome<Delivered> {
    match outcome {
        Ok(Done::Committed(committed)) => Ok(Ok(Delivered {
            position: Some(committed.last_position()),
            delivery: if committed.replayed {
                Delivery::Duplicate
            } else {
                Delivery::Recorded
            },
        })),
        Ok(Done::Nothing) => Ok(Ok(Delivered {
            position: None,
            delivery: Delivery::Absorbed,
        })),
        Err(Rejection::IdTaken { .. }) => Ok(Ok(Delivered {
            position: exec.store().event_position(report_id).await?,
            delivery: Delivery::Duplicate,
        })),
        Err(other) => Ok(Err(other)),
    }
}

/// What metering a report reads: the rental, its machine's transitions and the provider's tier.
struct Metering {
    transitions: Vec<(bool, Timestamp)>,
    tier: Tier,
    rental: RentalState,
}

/// Meters one usage report: the charge beyond what the rental was already charged, at its
/// locked price, split into fee and net by the provider's tier, posted on the rental's stream
/// under the report's id (a re-sent report is a duplicate; two reports never charge the same
/// seconds twice). The counter is capped at the GPU-seconds the machine was online.
pub async fn meter(
    exec: &Executor<'_>,
    fees: FeeSchedule,
    report_id: Uuid,
    meta: &Metadata,
    rental_id: Uuid,
    gpu_seconds: u64,
) -> Outcome<Delivered> {
    let models = exec.models();
    let outcome = exec
        .execute(
            RENTAL_RETRY,
            move || async move {
                let Some(rental) = load(exec, rental_id).await? else {
                    return Ok(None);
                };
                // The machine's presence as of its stream's last event. (The provider's tier was
                // decided before the rental began, so it is already applied.)
                let machine = rental.started.machine_id;
                let stream = StreamId::parse(format!("machine-{machine}"))
                    .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"));
                models.wait_for_streams(exec.store(), &[&stream]).await?;
                let Some(rental) = rental_of(exec.store(), models, rental_id).await? else {
                    return Ok(None);
                };
                let transitions =
                    transitions_since(exec.store(), models, machine, rental.started.started_at)
                        .await?;
                Ok(Some(Metering {
                    transitions,
                    tier: tier_of(models, rental.started.provider_id),
                    rental,
                }))
            },
            |loaded: &Option<Metering>, now| {
                let Some(Metering {
                    transitions,
                    tier,
                    rental,
                }) = loaded
                else {
                    return Err(Refusal::NotFound);
                };
                let input = rental::UsageInput {
                    rental: &rental.started,
                    meter: rental.meter,
                    tier: *tier,
                    fees,
                    reported_gpu_seconds: gpu_seconds,
                    online_gpu_seconds: online_gpu_seconds(transitions, rental, now),
                    report_id,
                    at: now,
                };
                let metered = rental::meter_usage(&input).map_err(Refusal::Metering)?;
                let events: Vec<RentalEvent> =
                    metered.into_iter().map(RentalEvent::UsageMetered).collect();
                Ok(writes(models, rental, &[report_id], events, meta))
            },
        )
        .await?;
    delivered(exec, report_id, outcome).await
}

/// Records an agent's report on a rental's own stream (the job started, or ended after the
/// rental did) under the report's id.
pub async fn record(
    exec: &Executor<'_>,
    rental_id: Uuid,
    report_id: Uuid,
    event: RentalEvent,
    meta: &Metadata,
) -> Outcome<Delivered> {
    let models = exec.models();
    let outcome = exec
        .execute(
            RENTAL_RETRY,
            move || async move { load(exec, rental_id).await },
            |rental: &Option<RentalState>, _now| {
                let rental = rental.as_ref().ok_or(Refusal::NotFound)?;
                Ok(writes(
                    models,
                    rental,
                    &[report_id],
                    vec![event.clone()],
                    meta,
                ))
            },
        )
        .await?;
    delivered(exec, report_id, outcome).await
}

/// The agent's job ended: `rental.job_ended` under the report's id, and if the rental was still
/// active, its end with the job's cause and evidence and its GPUs released, in one append.
pub async fn job_ended(
    exec: &Executor<'_>,
    report_id: Uuid,
    job: &JobEnded,
    occurred: Timestamp,
    meta: &Metadata,
) -> Outcome<Delivered> {
    let models = exec.models();
    let rental_id = job.rental_id;
    let outcome = exec
        .execute(
            RENTAL_RETRY,
            move || async move { load(exec, rental_id).await },
            |rental: &Option<RentalState>, now| {
                let rental = rental.as_ref().ok_or(Refusal::NotFound)?;
                let at = occurred.max(rental.started.started_at).min(now);
                let job = JobEnded {
                    ended_at: at,
                    ..job.clone()
                };
                let events = if rental.ended.is_some() {
                    vec![RentalEvent::JobEnded(job)]
                } else {
                    let ended = RentalEnded {
                        rental_id: job.rental_id,
                        cause: job.cause,
                        ended_at: at,
                        ended_by: format!("agent:{}", job.machine_id),
                        evidence: job.evidence.summary(),
                    };
                    rental::decide_end(
                        &rental.started,
                        false,
                        ended,
                        vec![RentalEvent::JobEnded(job)],
                    )
                    .map_err(Refusal::Rule)?
                };
                Ok(writes(models, rental, &[report_id], events, meta))
            },
        )
        .await?;
    delivered(exec, report_id, outcome).await
}

/// Ends a rental for a person: the renter (`renter_cancelled`) or an admin for the platform
/// (`platform`), with their evidence. Returns the position of the end.
pub async fn end(
    exec: &Executor<'_>,
    rental_id: Uuid,
    cause: EndCause,
    actor: &str,
    evidence: &str,
) -> Outcome<u64> {
    let models = exec.models();
    let meta = Metadata::actor(actor);
    let outcome = exec
        .execute(
            RENTAL_RETRY,
            move || async move { load(exec, rental_id).await },
            |rental: &Option<RentalState>, now| {
                let rental = rental.as_ref().ok_or(Refusal::NotFound)?;
                let ended = rental::end(
                    rental_id,
                    rental.ended.is_some(),
                    cause,
                    now,
                    actor,
                    evidence,
                )
                .map_err(Refusal::Rule)?;
                let events = rental::decide_end(&rental.started, false, ended, Vec::new())
                    .map_err(Refusal::Rule)?;
                Ok(writes(models, rental, &[], events, &meta))
            },
        )
        .await?;
    Ok(outcome.map(|done| done.position().unwrap_or(0)))
}

/// Ends, as interrupted by the provider (`network_loss`), every active rental whose machine has
/// been offline for longer than `grace` (counted from its last heartbeat, or from
/// `watching_since` when the watchdog started later: silence while the platform itself was down
/// does not count). The rental ends at the last heartbeat: nothing after it is billed. Returns how
/// many it ended; a rental that ended or moved meanwhile is looked at again on the next pass.
pub async fn end_abandoned(
    exec: &Executor<'_>,
    grace: std::time::Duration,
    watching_since: Timestamp,
) -> Result<usize, AppError> {
    let models = exec.models();
    let grace_micros = i64::try_from(grace.as_micros()).unwrap_or(i64::MAX);
    let candidates: Vec<Uuid> = models.with_market(|m| {
        m.active_rentals()
            .into_iter()
            .map(|r| r.started.rental_id)
            .collect()
    });
    let meta = Metadata::actor("system:watchdog");
    let mut ended = 0;
    for rental_id in candidates {
        let outcome: Result<Done, Rejection<Refusal>> = exec
            .execute(
                RENTAL_RETRY,
                move || async move {
                    let rental = rental_of(exec.store(), models, rental_id).await?;
                    Ok(rental.map(|rental| {
                        let offline_since = models.with_fleet(|f| {
                            f.machine(&rental.started.machine_id)
                                .filter(|m| !m.online)
                                .and_then(|m| m.since)
                        });
                        (offline_since, rental)
                    }))
                },
                |loaded: &Option<(Option<Timestamp>, RentalState)>, now| {
                    let Some((Some(last_heartbeat), rental)) = loaded else {
                        return Ok(Vec::new());
                    };
                    let last_heartbeat = *last_heartbeat;
                    if rental.ended.is_some()
                        || !fleet::offline_due(last_heartbeat, watching_since, now, grace_micros)
                    {
                        return Ok(Vec::new());
                    }
                    let evidence = format!(
                        "machine {} offline: last heartbeat {}, no heartbeat for {} s (grace {} s)",
                        rental.started.machine_id,
                        last_heartbeat.rfc3339(),
                        (now.unix_micros() - last_heartbeat.unix_micros()) / MICROS_PER_SECOND,
                        grace.as_secs(),
                    );
                    let end = RentalEnded {
                        rental_id,
                        cause: EndCause::NetworkLoss,
                        ended_at: last_heartbeat.max(rental.started.started_at),
                        ended_by: "system:watchdog".to_owned(),
                        evidence,
                    };
                    let events = rental::decide_end(&rental.started, false, end, Vec::new())
                        .map_err(Refusal::Rule)?;
                    Ok(writes(models, rental, &[], events, &meta))
                },
            )
            .await?;
        match outcome {
            Ok(Done::Committed(_)) => {
                tracing::warn!(%rental_id, "rental ended: machine offline past the grace period");
                ended += 1;
            }
            Ok(Done::Nothing) => {}
            Err(refused) => {
                tracing::debug!(%rental_id, ?refused, "abandoned rental not ended this pass");
            }
        }
    }
    Ok(ended)
}
