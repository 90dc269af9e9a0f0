//! The presence watchdog, a reactor: it records platform outages (gaps in its own liveness
//! ticks), declares machines offline when their heartbeats stop, ends rentals whose machine stayed
//! silent past the rental grace (`rentals::end_abandoned`), and prunes old telemetry. Every write
//! goes through the command executor. All its state is in the database, so a restarted server
//! carries on; the grace period restarts with the watchdog so time the platform was down is not
//! held against anyone.

use std::collections::HashMap;
use std::time::Duration;

use gpunex_domain::fleet::{self, FleetEvent, MachineOffline, PlatformOutageRecorded};
use gpunex_domain::time::{MICROS_PER_SECOND, Timestamp};
use gpunex_domain::{DomainEvent, StreamId};
use gpunex_store::fleet::Presence;
use gpunex_store::{AppendError, ExpectedVersion, Metadata, NewEvent, Store, StreamAppend};
use uuid::Uuid;

use crate::command::{Done, Executor, Rejection, Retry};
use crate::{AppError, ReadModels};

/// How presence is judged and telemetry kept. Defaults suit production; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetConfig {
    /// How often agents are told to send heartbeats.
    pub heartbeat_interval: Duration,
    /// A machine silent for longer than this is offline (dated at its last heartbeat).
    pub offline_grace: Duration,
    /// Raw telemetry samples older than this are deleted.
    pub telemetry_retention: Duration,
    /// Simulated machines may be listed to renters (development deployments only).
    pub dev_mode: bool,
    /// A rental whose machine stays offline longer than this (from its last heartbeat) ends as
    /// interrupted by the provider (`network_loss`).
    pub rental_grace: Duration,
    /// The platform fee per provider tier, charged on each metered usage.
    pub fees: gpunex_domain::metering::FeeSchedule,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            heartbeat_interval: Duration::from_secs(15),
            offline_grace: Duration::from_secs(60),
            telemetry_retention: Duration::from_secs(24 * 3_600),
            dev_mode: false,
            rental_grace: Duration::from_secs(600),
            fees: gpunex_domain::metering::FeeSchedule::default(),
        }
    }
}

impl FleetConfig {
    /// How often the watchdog looks: a quarter of the grace period, at most 5 seconds.
    pub fn watchdog_interval(&self) -> Duration {
        (self.offline_grace / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// A gap in the platform's liveness ticks longer than this is a platform outage.
    pub fn outage_threshold(&self) -> Duration {
        self.watchdog_interval() * 3 + Duration::from_secs(1)
    }

    pub fn grace_micros(&self) -> i64 {
        i64::try_from(self.offline_grace.as_micros()).unwrap_or(i64::MAX)
    }
}

/// Whole seconds of `duration`, saturating.
pub fn whole_seconds(duration: Duration) -> u32 {
    u32::try_from(duration.as_secs()).unwrap_or(u32::MAX)
}

/// The stream of platform outages.
pub const OUTAGE_STREAM: &str = "platform-outages";

/// The machine's stream.
pub fn machine_stream(machine_id: Uuid) -> StreamId {
    StreamId::parse(format!("machine-{machine_id}"))
        .unwrap_or_else(|_| unreachable!("a hyphenated uuid is a valid stream id"))
}

/// How many times declaring a machine offline decides again after a heartbeat or a registration
/// moved its stream (the next decision usually finds it online).
pub const OFFLINE_RETRY: Retry = Retry {
    name: "machine offline",
    attempts: 3,
};

/// Runs the watchdog until the task is dropped: one pass every `watchdog_interval`.
pub async fn run_watchdog(store: Store, models: ReadModels, config: FleetConfig) {
    let started = store.clock().now();
    let mut last_prune = 0_i64;
    loop {
        if let Err(error) = watch_once(&store, &models, &config, started, &mut last_prune).await {
            tracing::warn!(%error, "presence watchdog pass failed; retrying");
        }
        tokio::time::sleep(config.watchdog_interval()).await;
    }
}

/// One pass of the watchdog, at the clock's now; `started` is when this watchdog began
/// watching.
pub async fn watch_once(
    store: &Store,
    models: &ReadModels,
    config: &FleetConfig,
    started: Timestamp,
    last_prune: &mut i64,
) -> Result<(), AppError> {
    let exec = Executor::new(store, models);
    let at = exec.now();
    record_outage(store, config, at).await?;
    presence_pass(&exec, config, started).await?;
    if at.unix_micros() - *last_prune > 60 * MICROS_PER_SECOND {
        let retention = i64::try_from(config.telemetry_retention.as_micros()).unwrap_or(i64::MAX);
        let deleted = store.prune_telemetry(at.unix_micros() - retention).await?;
        if deleted > 0 {
            tracing::debug!(deleted, "old telemetry pruned");
        }
        let day = 24 * 3_600 * MICROS_PER_SECOND;
        let deleted = store
            .prune_job_logs(at.unix_micros() - gpunex_store::job_logs::RETENTION_DAYS * day)
            .await?;
        if deleted > 0 {
            tracing::debug!(deleted, "old job output pruned");
        }
        *last_prune = at.unix_micros();
    }
    Ok(())
}

/// Judges presence at the executor's now: declares offline every online machine silent past
/// the grace period, then ends the rentals of machines offline past the rental grace. (The
/// watchdog's pass, without its liveness tick: the simulation runs it at each simulated step.)
pub async fn presence_pass(
    exec: &Executor<'_>,
    config: &FleetConfig,
    started: Timestamp,
) -> Result<(), AppError> {
    let (store, models) = (exec.store(), exec.models());
    let online: Vec<Uuid> = models.with_fleet(|f| {
        f.machines()
            .into_iter()
            .filter(|m| m.online)
            .map(|m| m.machine_id)
            .collect()
    });
    if !online.is_empty() {
        let presences: HashMap<Uuid, Presence> = store
            .presences(None)
            .await?
            .into_iter()
            .map(|p| (p.machine_id, p))
            .collect();
        for machine_id in online {
            let last_heartbeat = presences
                .get(&machine_id)
                .map(|p| Timestamp::from_unix_micros(p.last_heartbeat_us));
            declare_offline(exec, config, machine_id, last_heartbeat, started).await?;
        }
    }
    crate::rentals::end_abandoned(exec, config.rental_grace, started).await?;
    Ok(())
}

/// Declares one machine offline if it has been silent past the grace period: dated at its last
/// heartbeat (or when it came online, or when this watchdog started, whichever is latest). A
/// heartbeat, a registration or another server's watchdog that moves the machine's stream first
/// makes it decide again on what they wrote.
async fn declare_offline(
    exec: &Executor<'_>,
    config: &FleetConfig,
    machine_id: Uuid,
    last_heartbeat: Option<Timestamp>,
    started: Timestamp,
) -> Result<(), AppError> {
    let models = exec.models();
    let stream = machine_stream(machine_id);
    let mut first = true;
    let outcome: Result<Done, Rejection<()>> = exec
        .execute(
            OFFLINE_RETRY,
            || {
                // After a conflict, the machine's stream and presence as they are now.
                let reread = !std::mem::replace(&mut first, false);
                let stream = &stream;
                async move {
                    let mut last = last_heartbeat;
                    if reread {
                        models.wait_for_streams(exec.store(), &[stream]).await?;
                        last = exec
                            .store()
                            .presences(Some(&[machine_id]))
                            .await?
                            .into_iter()
                            .find(|p| p.machine_id == machine_id)
                            .map(|p| Timestamp::from_unix_micros(p.last_heartbeat_us));
                    }
                    Ok(models.with_fleet(|f| {
                        f.machine(&machine_id)
                            .filter(|m| m.online)
                            .map(|m| (m.provider_id, m.stream_version, last.or(m.since)))
                    }))
                }
            },
            |machine: &Option<(Uuid, u64, Option<Timestamp>)>, now| {
                let Some((provider_id, version, last)) = *machine else {
                    return Ok(Vec::new());
                };
                let last = last.unwrap_or(started);
                if !fleet::offline_due(last, started, now, config.grace_micros()) {
                    return Ok(Vec::new());
                }
                let event = DomainEvent::Fleet(FleetEvent::MachineOffline(MachineOffline {
                    machine_id,
                    provider_id,
                    last_heartbeat_at: last,
                    detected_at: now,
                    grace_seconds: whole_seconds(config.offline_grace),
                }));
                Ok(vec![StreamAppend {
                    stream_id: machine_stream(machine_id),
                    expected: ExpectedVersion::Exact(version),
                    events: vec![NewEvent::from_domain(
                        Uuid::now_v7(),
                        &event,
                        Metadata::actor("system:watchdog"),
                    )],
                }])
            },
        )
        .await?;
    match outcome {
        Ok(Done::Committed(_)) => tracing::info!(%machine_id, "machine offline"),
        Ok(Done::Nothing) => {}
        Err(refused) => {
            tracing::debug!(%machine_id, ?refused, "machine not declared offline this pass")
        }
    }
    Ok(())
}

/// Records the platform outage the last liveness tick shows, if its gap is longer than the
/// threshold, and only then ticks: a pass that fails in between leaves the tick where it was, so
/// the next pass finds the same gap and the outage is not lost (its id is derived from where it
/// began, so it is stored once however many passes find it).
async fn record_outage(store: &Store, config: &FleetConfig, at: Timestamp) -> Result<(), AppError> {
    let threshold = i64::try_from(config.outage_threshold().as_micros()).unwrap_or(i64::MAX);
    if let Some(previous) = store.platform_tick().await?
        && at.unix_micros() - previous > threshold
    {
        let from = Timestamp::from_unix_micros(previous);
        let event =
            DomainEvent::Fleet(FleetEvent::PlatformOutageRecorded(PlatformOutageRecorded {
                from,
                until: at,
            }));
        let stream =
            StreamId::parse(OUTAGE_STREAM).unwrap_or_else(|_| unreachable!("a valid stream id"));
        let appended = store
            .append(
                stream,
                ExpectedVersion::Any,
                vec![NewEvent::from_domain(
                    fleet::outage_event_id(from),
                    &event,
                    Metadata::actor("system:watchdog"),
                )],
            )
            .await;
        match appended {
            Ok(committed) if !committed.replayed => {
                tracing::warn!(
                    from = previous,
                    until = at.unix_micros(),
                    "platform outage recorded"
                );
            }
            // Recorded already, by an earlier pass or another server's watchdog (which saw the
            // gap end at another instant).
            Ok(_) | Err(AppendError::IdempotencyConflict { .. }) => {}
            Err(AppendError::Store(error)) => return Err(error.into()),
            Err(other) => return Err(AppError::Append(other)),
        }
    }
    store.record_platform_tick(at.unix_micros()).await?;
    Ok(())
}
