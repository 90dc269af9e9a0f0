//! What the agent does: learn its identity, register its hardware through the durable queue,
//! deliver queued events, and send heartbeats with telemetry, watching for GPU conditions.

use std::collections::BTreeSet;
use std::time::Duration;

use gpunex_domain::fleet::{DetectedGpu, GpuCondition, GpuSample, HostInfo};
use gpunex_wire::fleet::{
    AgentEvent, AgentEventBody, AgentIdentity, GpuConditionReport, Heartbeat, Registration,
};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::client::{Client, SendError};
use crate::clock::{now_text, unix_ms};
use crate::config::{Config, DEFAULT_HEARTBEAT_INTERVAL, RuntimeKind};
use crate::detect::{GpuSource, Reading};
use crate::jobs::Jobs;
use crate::queue::Queue;
use crate::runtime::{JobPolicy, Runtime};

const IDENTITY_KEY: &str = "identity";
const REGISTERED_KEY: &str = "registered_fingerprint";
const CONDITIONS_KEY: &str = "active_conditions";
const LAST_HEARTBEAT_KEY: &str = "last_heartbeat";
/// When the service's loop last ran, and when a heartbeat was last acknowledged (Unix ms).
const ALIVE_KEY: &str = "alive_unix_ms";
const REACHED_KEY: &str = "reached_unix_ms";
/// `health` fails when the loop has not run for this long (a hung service)...
pub const ALIVE_WITHIN: Duration = Duration::from_secs(120);
/// ...or when no heartbeat was acknowledged for this long (the platform unreachable).
pub const REACHED_WITHIN: Duration = Duration::from_secs(600);

pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The identity an agent token is bound to: from the state file, else asked of the server once
/// and kept (so later starts work while the platform is down).
pub async fn identity(queue: &Queue, client: &Client) -> anyhow::Result<AgentIdentity> {
    if let Some(text) = queue.get_state(IDENTITY_KEY)? {
        let known: AgentIdentity = serde_json::from_str(&text)?;
        // Kept only while the same token is configured.
        if Some(known.token_id) == client.token_id() {
            return Ok(known);
        }
    }
    let identity = client.identity().await.map_err(|error| match &error {
        SendError::Refused { status: 401, .. } => anyhow::anyhow!(
            "the server does not accept this token ({error}); check that it is an agent token and not revoked"
        ),
        SendError::Refused { status: 403, .. } => anyhow::anyhow!(
            "this token is not an agent token ({error}); issue one for this machine from the provider dashboard"
        ),
        // Keep the send error in the chain: `identity_patiently` retries the transient ones.
        _ => anyhow::Error::new(error).context("cannot confirm the agent token"),
    })?;
    queue.set_state(IDENTITY_KEY, &serde_json::to_string(&identity)?)?;
    Ok(identity)
}

/// Like [`identity`], retrying while the server is unreachable (for `run`).
pub async fn identity_patiently(queue: &Queue, client: &Client) -> anyhow::Result<AgentIdentity> {
    let mut wait = Duration::from_millis(200);
    loop {
        match identity(queue, client).await {
            Ok(identity) => return Ok(identity),
            Err(error)
                if error
                    .downcast_ref::<SendError>()
                    .is_some_and(SendError::is_transient) =>
            {
                tracing::warn!(error = format!("{error:#}"), "waiting for the platform");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
            Err(error) => return Err(error),
        }
    }
}

/// What decides whether hardware changed: the GPUs without their idle-dependent link state, and
/// the agent version. Host figures (free disk) change all the time and do not count.
fn fingerprint(machine_id: Uuid, gpus: &[DetectedGpu], simulated: bool) -> String {
    let stable: Vec<DetectedGpu> = gpus
        .iter()
        .map(|gpu| DetectedGpu {
            pcie_current: Default::default(),
            ..gpu.clone()
        })
        .collect();
    let text = serde_json::json!([machine_id, stable, simulated, AGENT_VERSION]).to_string();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Queues a registration when the hardware differs from what was last registered (or `force`).
/// Returns whether one was queued.
pub fn queue_registration(
    queue: &mut Queue,
    machine_id: Uuid,
    host: HostInfo,
    gpus: Vec<DetectedGpu>,
    simulated: bool,
    force: bool,
) -> anyhow::Result<bool> {
    let print = fingerprint(machine_id, &gpus, simulated);
    if !force && queue.get_state(REGISTERED_KEY)?.as_deref() == Some(print.as_str()) {
        return Ok(false);
    }
    let event = AgentEvent {
        event_id: Uuid::now_v7(),
        occurred_at: now_text(),
        body: AgentEventBody::Registration(Registration {
            machine_id,
            agent_version: AGENT_VERSION.to_owned(),
            simulated,
            host,
            gpus,
        }),
    };
    queue.enqueue_with_state(&event, REGISTERED_KEY, &print)?;
    Ok(true)
}

/// How one delivery pass ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    pub recorded: usize,
    pub duplicates: usize,
    pub rejected: usize,
    /// Pending events left because the platform could not be reached.
    pub stalled: bool,
}

/// Sends pending events in queue order, in batches. A batch the platform refuses is resent one
/// event at a time so the bad event is set aside (marked rejected) and the rest flow.
pub async fn deliver(queue: &mut Queue, client: &Client) -> anyhow::Result<Delivered> {
    let mut outcome = Delivered::default();
    loop {
        let batch = queue.pending(gpunex_wire::fleet::AGENT_EVENTS_PER_REQUEST_MAX)?;
        if batch.is_empty() {
            return Ok(outcome);
        }
        let ids: Vec<Uuid> = batch.iter().map(|e| e.event_id).collect();
        queue.count_attempt(&ids)?;
        match client.deliver(&batch).await {
            Ok(response) => settle(queue, &response, &mut outcome)?,
            Err(error) if error.is_transient() => {
                tracing::warn!(%error, pending = batch.len(), "delivery failed; will retry");
                outcome.stalled = true;
                return Ok(outcome);
            }
            Err(
                error @ SendError::Refused {
                    status: 401 | 403, ..
                },
            ) => {
                // A revoked or foreign token: nothing can be delivered; keep everything queued.
                anyhow::bail!("the platform refuses this agent's token: {error}");
            }
            Err(_) => {
                for event in batch {
                    match client.deliver(std::slice::from_ref(&event)).await {
                        Ok(response) => settle(queue, &response, &mut outcome)?,
                        Err(error) if error.is_transient() => {
                            outcome.stalled = true;
                            return Ok(outcome);
                        }
                        Err(
                            error @ SendError::Refused {
                                status: 401 | 403, ..
                            },
                        ) => {
                            anyhow::bail!("the platform refuses this agent's token: {error}");
                        }
                        Err(error) => {
                            tracing::error!(event_id = %event.event_id, %error, "event rejected by the platform; set aside");
                            queue.mark_rejected(event.event_id, &error.to_string())?;
                            outcome.rejected += 1;
                        }
                    }
                }
            }
        }
    }
}

fn settle(
    queue: &mut Queue,
    response: &gpunex_wire::fleet::AgentEventsResponse,
    outcome: &mut Delivered,
) -> anyhow::Result<()> {
    let mut done = Vec::new();
    for result in &response.results {
        match result.status.as_str() {
            "recorded" => outcome.recorded += 1,
            "duplicate" | "absorbed" => outcome.duplicates += 1,
            _ => {
                queue.mark_rejected(result.event_id, &format!("{:?}", result.error))?;
                outcome.rejected += 1;
                continue;
            }
        }
        done.push((result.event_id, result.position, result.status.clone()));
    }
    queue.mark_delivered(&done)
}

/// The long-running service: detect, register, then each tick sample the GPUs, queue condition
/// changes, follow the rentals assigned to this machine (start, meter, stop, report), deliver the
/// queue, and send a heartbeat when one is due. Stops on SIGTERM or Ctrl-C.
/// The suite on real GPUs as the agent's configuration sets it (`--benchmark-sustained`, the
/// state directory, the platform and the token).
pub fn real_suite(config: &Config) -> crate::gpusuite::RealSuite {
    crate::gpusuite::RealSuite {
        plan: gpunex_gpu::Plan {
            sustained: config.benchmark_sustained,
            ..gpunex_gpu::Plan::default()
        },
        state_dir: config.state_dir.clone(),
        storage_bytes: crate::gpusuite::STORAGE_BYTES,
        server: config.server_url.clone(),
        token: config.token.clone().unwrap_or_default(),
    }
}

pub async fn run(config: &Config) -> anyhow::Result<()> {
    // Without a driver, fail at once with one sentence, before waiting on anything.
    let nvml = match config.simulate {
        Some(_) => None,
        None => Some(GpuSource::nvml()?),
    };
    let client = Client::new(&config.server_url, config.token()?)?;
    let mut queue = Queue::open(&config.state_dir)?;
    let forgotten = queue.forget_settled()?;
    if forgotten > 0 {
        tracing::debug!(forgotten, "old settled events deleted from the queue");
    }
    let identity = identity_patiently(&queue, &client).await?;
    let mut source = match nvml {
        Some(nvml) => nvml,
        None => crate::simulated_source(config, identity.machine_id)?,
    };
    let gpus = source.inventory()?;
    let host = crate::host::detect(&config.state_dir);
    let (host_ram_mib, host_cpus) = (host.ram_mib, host.cpu_cores);
    if queue_registration(
        &mut queue,
        identity.machine_id,
        host,
        gpus.clone(),
        source.is_simulated(),
        false,
    )? {
        tracing::info!(
            gpus = gpus.len(),
            "hardware changed or first start: registration queued"
        );
    }
    let mut active: BTreeSet<(String, GpuCondition)> = queue
        .get_state(CONDITIONS_KEY)?
        .map(|text| serde_json::from_str(&text))
        .transpose()?
        .unwrap_or_default();
    let mut interval = config
        .heartbeat_interval
        .unwrap_or(DEFAULT_HEARTBEAT_INTERVAL);
    let runtime = match &config.runtime {
        RuntimeKind::Docker { socket } => {
            let mut policy = JobPolicy::for_host(host_ram_mib, host_cpus, gpus.len());
            if let Some(memory) = config.jobs.memory_mib_per_gpu {
                policy.memory_mib_per_gpu = memory;
            }
            if let Some(cpus) = config.jobs.cpu_millis_per_gpu {
                policy.cpu_millis_per_gpu = cpus;
            }
            policy.network.clone_from(&config.jobs.network);
            tracing::info!(?policy, "renters' containers");
            Runtime::docker(socket.clone(), policy)
        }
        RuntimeKind::Process => Runtime::process(config.state_dir.join("jobs")),
    };
    let mut jobs = Jobs::open(
        &mut queue,
        runtime,
        crate::joblog::JobLogs::new(config.state_dir.join("job-logs"), config.jobs.log_bytes),
        identity.machine_id,
        config.usage_interval,
    )?;
    let suite = if source.is_simulated() {
        crate::benchmarks::Suite::Simulated {
            profiles: config.simulate_profiles.clone(),
            duration: config.simulated_suite,
        }
    } else {
        match gpunex_gpu::cuda::probe() {
            Ok(()) => crate::benchmarks::Suite::Real(Box::new(real_suite(config))),
            Err(error) => crate::benchmarks::Suite::Unavailable(format!(
                "{error}; no run is reported, and the platform lists the GPU by its datasheet figures"
            )),
        }
    };
    let mut benchmarks = crate::benchmarks::Benchmarks::open(
        &queue,
        suite,
        identity.machine_id,
        config.benchmark_interval,
    )?;
    // The GPUs renters hold, as the last answered assignments said.
    let mut rented: BTreeSet<String> = BTreeSet::new();
    let mut retests: Vec<gpunex_wire::fleet::RetestAssignment> = Vec::new();
    let mut previous: Vec<GpuSample> = Vec::new();
    let mut last_beat: Option<std::time::Instant> = None;
    let mut shutdown = std::pin::pin!(shutdown_signal());
    tracing::info!(machine_id = %identity.machine_id, server = client.base(), "agent running");
    loop {
        let readings = source.sample(&gpus);
        let samples = conditions(
            &mut queue,
            identity.machine_id,
            &readings,
            &previous,
            &mut active,
        )?;
        let assignments = match client.assignments().await {
            Ok(answer) => {
                rented = answer
                    .assignments
                    .iter()
                    .filter(|a| a.status == "active")
                    .flat_map(|a| a.gpu_uuids.iter().cloned())
                    .collect();
                retests = answer.retests;
                Some(answer.assignments)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot fetch assignments");
                None
            }
        };
        // Customers first: a rental that arrived stops a suite on its GPUs before its job starts.
        if let Err(error) = benchmarks.step(
            &mut queue,
            crate::benchmarks::now_ms(),
            &gpus,
            &rented,
            &retests,
        ) {
            tracing::warn!(%error, "benchmark suite step failed");
        }
        jobs.step(&mut queue, assignments.as_deref(), &active)
            .await?;
        queue.set_state(ALIVE_KEY, &unix_ms().to_string())?;
        jobs.ship_logs(&mut queue, &client).await?;
        let delivered = deliver(&mut queue, &client).await?;
        let registration_pending = queue
            .pending(1)?
            .iter()
            .any(|e| matches!(e.body, AgentEventBody::Registration(_)));
        let beat_due = last_beat.is_none_or(|at| at.elapsed() >= interval);
        if beat_due && !delivered.stalled && !registration_pending {
            last_beat = Some(std::time::Instant::now());
            let beat = Heartbeat {
                machine_id: identity.machine_id,
                gpus: samples.clone(),
            };
            match client.heartbeat(&beat).await {
                Ok(ack) => {
                    queue.set_state(LAST_HEARTBEAT_KEY, &serde_json::to_string(&ack)?)?;
                    queue.set_state(REACHED_KEY, &unix_ms().to_string())?;
                    if config.heartbeat_interval.is_none() {
                        interval =
                            Duration::from_secs(u64::from(ack.heartbeat_interval_seconds.max(1)));
                    }
                }
                // The platform does not know this machine (its database was replaced, say):
                // register again rather than send heartbeats it refuses.
                Err(SendError::Refused { code, .. }) if code == "machine_not_registered" => {
                    tracing::warn!("the platform does not know this machine: registering again");
                    let host = crate::host::detect(&config.state_dir);
                    queue_registration(
                        &mut queue,
                        identity.machine_id,
                        host,
                        gpus.clone(),
                        source.is_simulated(),
                        true,
                    )?;
                }
                Err(error) => tracing::warn!(%error, "heartbeat failed"),
            }
        }
        previous = samples;
        tokio::select! {
            () = tokio::time::sleep(interval.min(config.poll_interval)) => {}
            () = &mut shutdown => {
                jobs.shutdown(&mut queue).await?;
                // One last attempt to hand over what is queued; what is left stays on disk.
                let _ = tokio::time::timeout(Duration::from_secs(5), deliver(&mut queue, &client)).await;
                tracing::info!("agent stopped");
                return Ok(());
            }
        }
    }
}

/// Turns readings into samples, queueing an event for each condition that started or ended
/// (the set of active conditions is saved with each event, so a restart neither repeats nor
/// forgets one).
fn conditions(
    queue: &mut Queue,
    machine_id: Uuid,
    readings: &[Reading],
    previous: &[GpuSample],
    active: &mut BTreeSet<(String, GpuCondition)>,
) -> anyhow::Result<Vec<GpuSample>> {
    let mut samples = Vec::new();
    for reading in readings {
        let (gpu_uuid, now_active, evidence) = match reading {
            Reading::Sample(sample) => {
                let before = previous.iter().find(|p| p.gpu_uuid == sample.gpu_uuid);
                samples.push(sample.clone());
                (
                    sample.gpu_uuid.clone(),
                    GpuCondition::in_sample(sample, before),
                    Some(sample.clone()),
                )
            }
            Reading::Lost { gpu_uuid, reason } => {
                tracing::error!(%gpu_uuid, %reason, "GPU lost");
                (gpu_uuid.clone(), vec![GpuCondition::Lost], None)
            }
        };
        let all = [
            GpuCondition::HwSlowdown,
            GpuCondition::Thermal,
            GpuCondition::PowerBrake,
            GpuCondition::EccUncorrected,
            GpuCondition::Lost,
        ];
        for condition in all {
            let key = (gpu_uuid.clone(), condition);
            let is_active = now_active.contains(&condition);
            if is_active == active.contains(&key) {
                continue;
            }
            if is_active {
                active.insert(key);
            } else {
                active.remove(&key);
            }
            let event = AgentEvent {
                event_id: Uuid::now_v7(),
                occurred_at: now_text(),
                body: AgentEventBody::GpuCondition(GpuConditionReport {
                    machine_id,
                    gpu_uuid: gpu_uuid.clone(),
                    condition,
                    active: is_active,
                    evidence: evidence.clone(),
                }),
            };
            queue.enqueue_with_state(&event, CONDITIONS_KEY, &serde_json::to_string(active)?)?;
        }
    }
    Ok(samples)
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// The container's health at `now_ms`: the service's loop ran within [`ALIVE_WITHIN`] and a
/// heartbeat was acknowledged within [`REACHED_WITHIN`] (both read from the state the service
/// keeps in its queue's database).
pub fn health(config: &Config, now_ms: i64) -> anyhow::Result<()> {
    let queue = Queue::open(&config.state_dir)?;
    let age = |key: &str| -> anyhow::Result<Option<Duration>> {
        Ok(queue
            .get_state(key)?
            .and_then(|text| text.parse::<i64>().ok())
            .map(|at| Duration::from_millis(u64::try_from(now_ms - at).unwrap_or(0))))
    };
    match age(ALIVE_KEY)? {
        None => anyhow::bail!("the agent service has not run yet"),
        Some(age) if age > ALIVE_WITHIN => anyhow::bail!(
            "the agent service has not run for {} s (more than {} s): it is stuck",
            age.as_secs(),
            ALIVE_WITHIN.as_secs()
        ),
        Some(_) => {}
    }
    match age(REACHED_KEY)? {
        None => anyhow::bail!("no heartbeat acknowledged by the platform yet"),
        Some(age) if age > REACHED_WITHIN => anyhow::bail!(
            "the platform has not acknowledged a heartbeat for {} s (more than {} s): check the network and the server URL",
            age.as_secs(),
            REACHED_WITHIN.as_secs()
        ),
        Some(age) => {
            println!(
                "healthy: last heartbeat acknowledged {} s ago",
                age.as_secs()
            );
            Ok(())
        }
    }
}

/// The last heartbeat answer, for `status`.
pub fn last_heartbeat(queue: &Queue) -> anyhow::Result<Option<gpunex_wire::fleet::HeartbeatAck>> {
    Ok(queue
        .get_state(LAST_HEARTBEAT_KEY)?
        .map(|text| serde_json::from_str(&text))
        .transpose()?)
}
