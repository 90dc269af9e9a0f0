//! The benchmark suite's schedule on this machine (issue 18): the first suite on each GPU right
//! after registration, then a re-test every `--benchmark-interval` (spread by a per-GPU offset
//! so a fleet never tests at once), after a driver change, and when the platform asks for one
//! (the provider or an admin); only while the GPU is not rented, and a rental that arrives
//! aborts a running suite at once (customers first). Results go through the durable queue like
//! every report, so a platform that cannot be reached loses none.
//!
//! On real GPUs the suite (`gpusuite`) runs on its own thread while the service loop goes on; a
//! GPU the suite cannot run on now (another compute process, a CUDA failure) is tried again
//! later. Simulated GPUs (`--simulate`) produce runs from named profiles
//! (`gpunex_domain::benchmark::simulated`, `--simulate-profiles 3:wrong_results`), each marked
//! with its profile. Without the CUDA driver library or cuBLAS the agent says so once and
//! reports no run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use gpunex_domain::benchmark::simulated::{self, Profile};
use gpunex_domain::fleet::DetectedGpu;
use gpunex_domain::gpu::{GPU_CATALOG, GpuModel, GpuVariant, find_model};
use gpunex_wire::benchmarks::{BenchmarkRunReport, BenchmarkSkippedReport, Environment};
use gpunex_wire::fleet::{AgentEvent, AgentEventBody, RetestAssignment};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::clock::unix_ms;
use crate::gpusuite::{Finished, RealSuite};
use crate::queue::Queue;
use gpunex_gpu::SuiteError;

/// The agent state key of the schedule.
pub const BENCHMARKS_KEY: &str = "benchmarks";
/// Re-tests of an idle GPU: weekly.
pub const DEFAULT_BENCHMARK_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3_600);
/// How long a simulated suite holds its GPU (the standard suite's target on a real one).
pub const DEFAULT_SIMULATED_SUITE: Duration = Duration::from_secs(150);
/// The real suite's sustained phase.
pub const DEFAULT_SUSTAINED: Duration = Duration::from_secs(60);
/// Why a GPU in MIG mode is not benchmarked.
pub const MIG_ENABLED: &str =
    "MIG is enabled: the suite measures whole GPUs; disable MIG to benchmark this GPU";
/// A GPU the suite could not start on (another compute process) is tried again after this.
pub const RETRY_BUSY: Duration = Duration::from_secs(15 * 60);
/// A GPU the suite failed on (a CUDA error) is tried again after this.
pub const RETRY_FAILED: Duration = Duration::from_secs(3_600);

/// What the agent remembers between runs, per GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSchedule {
    pub last_finished_ms: Option<i64>,
    /// The driver the last suite ran under.
    pub driver: Option<String>,
    /// The platform's re-test request the last suite answered (its `requested_at`).
    pub answered_request: Option<String>,
    /// Suites a rental interrupted.
    pub aborted: u64,
    pub runs: u64,
    /// Why the suite could not run or finish last time, and when it is tried again.
    #[serde(default)]
    pub problem: Option<String>,
    /// The reason for skipping the suite the platform was last told (cleared by a run).
    #[serde(default)]
    pub reported: Option<String>,
    #[serde(default)]
    pub retry_at_ms: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub gpus: BTreeMap<String, GpuSchedule>,
    /// The GPU a suite runs on now (`gpunex-agent status` shows it). A suite does not survive a
    /// restart: it starts again from the beginning.
    #[serde(default)]
    pub running: Option<String>,
    /// The last kernel-log record the real suite read (XIDs are reported once).
    #[serde(default)]
    pub kmsg_seq: Option<u64>,
    /// Why this host runs no suite at all (no CUDA driver library, no cuBLAS), while it is so.
    #[serde(default)]
    pub unavailable: Option<String>,
}

/// Why a GPU's suite is due now, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// The GPU has never been tested.
    First,
    /// The platform asked (its provider or an admin).
    Requested,
    /// The driver changed since the last suite.
    DriverChanged,
    /// The interval (with its per-GPU offset) has passed.
    Periodic,
}

/// A GPU's offset in `[0, interval / 10)`, from its UUID: the same GPU always waits the same
/// extra time, and GPUs registered together test apart.
pub fn spread_ms(gpu_uuid: &str, interval_ms: i64) -> i64 {
    // FNV-1a: stable across builds and platforms.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in gpu_uuid.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let window = u64::try_from(interval_ms / 10).unwrap_or(0).max(1);
    i64::try_from(hash % window).unwrap_or(0)
}

/// Whether `gpu`'s suite is due at `now_ms`, and why. `interval_ms` 0: no periodic re-test.
pub fn due(
    schedule: &GpuSchedule,
    gpu_uuid: &str,
    driver: &str,
    request: Option<&str>,
    now_ms: i64,
    interval_ms: i64,
) -> Option<Due> {
    let Some(last) = schedule.last_finished_ms else {
        return Some(Due::First);
    };
    if let Some(requested_at) = request
        && schedule.answered_request.as_deref() != Some(requested_at)
    {
        return Some(Due::Requested);
    }
    if schedule.driver.as_deref() != Some(driver) {
        return Some(Due::DriverChanged);
    }
    if interval_ms > 0 && now_ms >= last + interval_ms + spread_ms(gpu_uuid, interval_ms) {
        return Some(Due::Periodic);
    }
    None
}

/// A suite running on one GPU.
#[derive(Debug, Clone)]
struct Running {
    gpu: DetectedGpu,
    why: Due,
    request: Option<String>,
    started_ms: i64,
    started_at: String,
}

/// What the suite runs on: real GPUs, simulated GPUs and their profiles, or nothing (with why).
#[derive(Debug, Clone)]
pub enum Suite {
    Real(Box<RealSuite>),
    Simulated {
        /// Profiles by GPU index; the others are healthy.
        profiles: BTreeMap<u32, Profile>,
        duration: Duration,
    },
    Unavailable(String),
}

/// A real suite's thread.
struct Job {
    cancel: Arc<AtomicBool>,
    result: Receiver<Result<Finished, SuiteError>>,
    handle: JoinHandle<()>,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Idle,
    Started {
        gpu_uuid: String,
        why: Due,
    },
    Running,
    Finished {
        gpu_uuid: String,
        run_id: Uuid,
    },
    Aborted {
        gpu_uuid: String,
    },
    /// The suite could not run or finish on the GPU; it is tried again later.
    Deferred {
        gpu_uuid: String,
        why: String,
    },
}

pub struct Benchmarks {
    schedule: Schedule,
    running: Option<Running>,
    suite: Suite,
    machine_id: Uuid,
    interval_ms: i64,
    told_unavailable: bool,
    job: Option<Job>,
    /// An aborted real suite's thread, still stopping: no suite starts until it has.
    stopping: Option<JoinHandle<()>>,
}

impl Benchmarks {
    /// Loads the schedule from the agent's state.
    pub fn open(
        queue: &Queue,
        suite: Suite,
        machine_id: Uuid,
        interval: Option<Duration>,
    ) -> anyhow::Result<Benchmarks> {
        let mut schedule = stored_schedule(queue)?;
        // A real suite that was running when the agent stopped may have brought it down (a GPU
        // that hangs or crashes under load): that GPU waits before its next suite instead of
        // starting one at once, which could crash the agent again and again.
        if let (Suite::Real(_), Some(gpu)) = (&suite, schedule.running.take()) {
            let entry = schedule.gpus.entry(gpu).or_default();
            entry.problem = Some(
                "the agent stopped while the suite ran on this GPU (a crash, a hang or a restart)"
                    .to_owned(),
            );
            entry.retry_at_ms = Some(
                unix_ms().saturating_add(i64::try_from(RETRY_FAILED.as_millis()).unwrap_or(0)),
            );
            queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&schedule)?)?;
        }
        schedule.running = None;
        Ok(Benchmarks {
            schedule,
            running: None,
            suite,
            machine_id,
            interval_ms: interval.map_or(0, |i| i64::try_from(i.as_millis()).unwrap_or(i64::MAX)),
            told_unavailable: false,
            job: None,
            stopping: None,
        })
    }

    /// One step at `now_ms`: a running suite is aborted when its GPU is rented (`busy`), or
    /// finished and queued when it is done; otherwise the first due GPU that is not rented
    /// starts. `retests`: the platform's waiting requests for this machine.
    pub fn step(
        &mut self,
        queue: &mut Queue,
        now_ms: i64,
        gpus: &[DetectedGpu],
        busy: &BTreeSet<String>,
        retests: &[RetestAssignment],
    ) -> anyhow::Result<Step> {
        if let Suite::Unavailable(why) = &self.suite {
            let why = why.clone();
            if !self.told_unavailable {
                self.told_unavailable = true;
                tracing::warn!("no benchmark suite: {why}");
                // Kept for `gpunex-agent status`.
                if self.schedule.unavailable.as_deref() != Some(why.as_str()) {
                    self.schedule.unavailable = Some(why.clone());
                    queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&self.schedule)?)?;
                }
            }
            // The provider sees why on the platform, once per GPU.
            for gpu in gpus {
                self.report_skip(queue, &gpu.gpu_uuid, &why)?;
            }
            return Ok(Step::Idle);
        }
        if self.schedule.unavailable.is_some() {
            self.schedule.unavailable = None;
            queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&self.schedule)?)?;
        }
        if let Some(running) = self.running.clone() {
            let gpu_uuid = running.gpu.gpu_uuid.clone();
            if busy.contains(&gpu_uuid) {
                if let Some(job) = self.job.take() {
                    // The thread stops at its next check (a GEMM batch at most); nothing it
                    // measured is kept.
                    job.cancel.store(true, Ordering::Relaxed);
                    self.stopping = Some(job.handle);
                }
                self.running = None;
                self.schedule.running = None;
                self.schedule
                    .gpus
                    .entry(gpu_uuid.clone())
                    .or_default()
                    .aborted += 1;
                queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&self.schedule)?)?;
                tracing::info!(gpu = %gpu_uuid, "a rental arrived: benchmark suite aborted (customers first); it runs again when the GPU is free");
                return Ok(Step::Aborted { gpu_uuid });
            }
            let report = match &self.suite {
                Suite::Simulated { profiles, duration } => {
                    let duration_ms = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
                    if now_ms < running.started_ms.saturating_add(duration_ms) {
                        return Ok(Step::Running);
                    }
                    let profile = profiles
                        .get(&running.gpu.index)
                        .copied()
                        .unwrap_or(Profile::Healthy);
                    let runs = self.schedule.gpus.get(&gpu_uuid).map_or(0, |g| g.runs);
                    tracing::info!(gpu = %gpu_uuid, profile = profile.name(), "simulated benchmark suite finished");
                    simulated_report(self.machine_id, &running, profile, runs, *duration)?
                }
                Suite::Real(_) => {
                    let Some(job) = &self.job else {
                        self.running = None;
                        return Ok(Step::Idle);
                    };
                    let outcome = match job.result.try_recv() {
                        Err(TryRecvError::Empty) => return Ok(Step::Running),
                        Err(TryRecvError::Disconnected) => Err(SuiteError::Cuda {
                            step: "the suite".to_owned(),
                            error: "its thread stopped without a result".to_owned(),
                        }),
                        Ok(outcome) => outcome,
                    };
                    self.job = None;
                    match outcome {
                        Ok(finished) => {
                            self.schedule.kmsg_seq = finished.kmsg_seq.or(self.schedule.kmsg_seq);
                            for note in &finished.notes {
                                tracing::warn!(gpu = %gpu_uuid, "benchmark suite: {note}");
                            }
                            tracing::info!(gpu = %gpu_uuid, seconds = finished.elapsed.as_secs(), "benchmark suite finished");
                            real_report(self.machine_id, &running, finished)
                        }
                        Err(SuiteError::Unavailable(why)) => {
                            self.end_run(queue)?;
                            self.suite = Suite::Unavailable(why);
                            return Ok(Step::Idle);
                        }
                        Err(SuiteError::Cancelled) => {
                            // Only a rental stops the thread, and that path took the job
                            // already; nothing to report either way.
                            self.end_run(queue)?;
                            return Ok(Step::Aborted { gpu_uuid });
                        }
                        Err(error) => return self.defer(queue, &gpu_uuid, now_ms, &error),
                    }
                }
                Suite::Unavailable(_) => return Ok(Step::Idle),
            };
            return self.finish(queue, &running, report, now_ms);
        }
        if self.stopping.as_ref().is_some_and(|h| !h.is_finished()) {
            return Ok(Step::Idle);
        }
        self.stopping = None;
        for gpu in gpus {
            if busy.contains(&gpu.gpu_uuid) {
                continue;
            }
            let request = retests
                .iter()
                .find(|r| r.gpu_uuid == gpu.gpu_uuid)
                .map(|r| r.requested_at.clone());
            let schedule = self
                .schedule
                .gpus
                .get(&gpu.gpu_uuid)
                .cloned()
                .unwrap_or_default();
            if schedule.retry_at_ms.is_some_and(|at| now_ms < at) && request.is_none() {
                continue;
            }
            let Some(why) = due(
                &schedule,
                &gpu.gpu_uuid,
                &driver_of(gpu),
                request.as_deref(),
                now_ms,
                self.interval_ms,
            ) else {
                continue;
            };
            if let Suite::Real(suite) = self.suite.clone() {
                if model_of(gpu).is_none() {
                    // Not a catalog model: nothing to score it against.
                    continue;
                }
                if gpu.mig_enabled == Some(true) {
                    // Said once (here and to the platform); the GPU is looked at again when its
                    // MIG mode changes (the inventory is read again at every start).
                    let entry = self.schedule.gpus.entry(gpu.gpu_uuid.clone()).or_default();
                    if entry.problem.as_deref() != Some(MIG_ENABLED) {
                        entry.problem = Some(MIG_ENABLED.to_owned());
                        tracing::warn!(gpu = %gpu.gpu_uuid, "benchmark suite skipped: {MIG_ENABLED}");
                    }
                    self.report_skip(queue, &gpu.gpu_uuid, MIG_ENABLED)?;
                    continue;
                }
                let cancel = Arc::new(AtomicBool::new(false));
                let (sender, result) = std::sync::mpsc::channel();
                let suite = *suite;
                let uuid = gpu.gpu_uuid.clone();
                let kmsg = self.schedule.kmsg_seq;
                let stop = cancel.clone();
                let handle = std::thread::Builder::new()
                    .name("gpunex-suite".to_owned())
                    .spawn(move || {
                        let outcome = crate::gpusuite::run(&suite, &uuid, kmsg, &stop);
                        let _ = sender.send(outcome);
                    })?;
                self.job = Some(Job {
                    cancel,
                    result,
                    handle,
                });
            }
            tracing::info!(gpu = %gpu.gpu_uuid, ?why, "benchmark suite started");
            self.schedule.running = Some(gpu.gpu_uuid.clone());
            queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&self.schedule)?)?;
            self.running = Some(Running {
                gpu: gpu.clone(),
                why,
                request,
                started_ms: now_ms,
                started_at: crate::clock::now_text(),
            });
            return Ok(Step::Started {
                gpu_uuid: gpu.gpu_uuid.clone(),
                why,
            });
        }
        Ok(Step::Idle)
    }

    /// Queues a finished run with the schedule that counts it, in one transaction.
    fn finish(
        &mut self,
        queue: &mut Queue,
        running: &Running,
        report: BenchmarkRunReport,
        now_ms: i64,
    ) -> anyhow::Result<Step> {
        let gpu_uuid = running.gpu.gpu_uuid.clone();
        let run_id = Uuid::now_v7();
        let entry = self.schedule.gpus.entry(gpu_uuid.clone()).or_default();
        entry.runs += 1;
        entry.last_finished_ms = Some(now_ms);
        entry.driver = Some(driver_of(&running.gpu));
        entry.problem = None;
        entry.retry_at_ms = None;
        // A recorded run ends what the platform shows as skipped.
        entry.reported = None;
        if running.why == Due::Requested {
            entry.answered_request.clone_from(&running.request);
        }
        self.schedule.running = None;
        let event = AgentEvent {
            event_id: run_id,
            occurred_at: crate::clock::now_text(),
            body: AgentEventBody::BenchmarkRun(report),
        };
        queue.enqueue_with_state(
            &event,
            BENCHMARKS_KEY,
            &serde_json::to_string(&self.schedule)?,
        )?;
        self.running = None;
        tracing::info!(gpu = %gpu_uuid, "benchmark result queued");
        Ok(Step::Finished { gpu_uuid, run_id })
    }

    /// Tells the platform, once per GPU and reason, that the suite is skipped on `gpu_uuid` and
    /// why (through the durable queue, with the schedule that remembers it was said).
    fn report_skip(
        &mut self,
        queue: &mut Queue,
        gpu_uuid: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        let reason = skip_reason(reason);
        let entry = self.schedule.gpus.entry(gpu_uuid.to_owned()).or_default();
        if entry.reported.as_deref() == Some(reason.as_str()) {
            return Ok(());
        }
        entry.reported = Some(reason.clone());
        let event = AgentEvent {
            event_id: Uuid::now_v7(),
            occurred_at: crate::clock::now_text(),
            body: AgentEventBody::BenchmarkSkipped(BenchmarkSkippedReport {
                machine_id: self.machine_id,
                gpu_uuid: gpu_uuid.to_owned(),
                reason,
            }),
        };
        queue.enqueue_with_state(
            &event,
            BENCHMARKS_KEY,
            &serde_json::to_string(&self.schedule)?,
        )?;
        Ok(())
    }

    /// No suite runs any more: forgets the running one and keeps the schedule that says so.
    fn end_run(&mut self, queue: &mut Queue) -> anyhow::Result<()> {
        self.running = None;
        self.schedule.running = None;
        queue.set_state(BENCHMARKS_KEY, &serde_json::to_string(&self.schedule)?)?;
        Ok(())
    }

    /// The suite could not run or finish on `gpu_uuid`: try again later, and say why.
    fn defer(
        &mut self,
        queue: &mut Queue,
        gpu_uuid: &str,
        now_ms: i64,
        error: &SuiteError,
    ) -> anyhow::Result<Step> {
        let wait = match error {
            SuiteError::Precondition { .. } => RETRY_BUSY,
            _ => RETRY_FAILED,
        };
        let why = error.to_string();
        if !matches!(error, SuiteError::Precondition { .. }) {
            // A failing suite is the provider's to see; a busy GPU is not.
            self.report_skip(queue, gpu_uuid, &format!("the suite failed: {why}"))?;
        }
        let entry = self.schedule.gpus.entry(gpu_uuid.to_owned()).or_default();
        entry.problem = Some(why.clone());
        entry.retry_at_ms =
            Some(now_ms.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(0)));
        self.end_run(queue)?;
        tracing::warn!(gpu = %gpu_uuid, retry_in_s = wait.as_secs(), "benchmark suite did not finish: {why}");
        Ok(Step::Deferred {
            gpu_uuid: gpu_uuid.to_owned(),
            why,
        })
    }
}

/// The schedule as the state file keeps it (`gpunex-agent status` reads it).
pub fn stored_schedule(queue: &Queue) -> anyhow::Result<Schedule> {
    Ok(queue
        .get_state(BENCHMARKS_KEY)?
        .map(|text| serde_json::from_str(&text))
        .transpose()?
        .unwrap_or_default())
}

fn driver_of(gpu: &DetectedGpu) -> String {
    gpu.driver_version
        .clone()
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The catalog model and variant a detected GPU is: by PCI device id, else by name.
pub fn model_of(gpu: &DetectedGpu) -> Option<(&'static GpuModel, &'static GpuVariant)> {
    if let Some(device) = gpu.pci_device_id {
        for model in GPU_CATALOG {
            if let Some(variant) = model
                .variants
                .iter()
                .find(|v| v.pci_device_id == Some(device))
            {
                return Some((model, variant));
            }
        }
    }
    let model = find_model(&gpu.name)?;
    Some((model, model.variants.first()?))
}

/// A simulated run's report, marked with its profile.
fn simulated_report(
    machine_id: Uuid,
    running: &Running,
    profile: Profile,
    runs_before: u64,
    duration: Duration,
) -> anyhow::Result<BenchmarkRunReport> {
    let gpu = &running.gpu;
    let (model, variant) = model_of(gpu).ok_or_else(|| {
        anyhow::anyhow!(
            "simulated GPU {} is not a catalog model: nothing to simulate",
            gpu.name
        )
    })?;
    // A different seed each run of each GPU: healthy runs vary like real ones.
    let seed =
        spread_ms(&gpu.gpu_uuid, i64::MAX).unsigned_abs() ^ runs_before.wrapping_mul(0x9e37_79b9);
    let run = simulated::run(model, variant, &gpu.gpu_uuid, profile, seed);
    Ok(BenchmarkRunReport {
        machine_id,
        gpu_uuid: gpu.gpu_uuid.clone(),
        simulated_profile: Some(profile.name().to_owned()),
        environment: Environment::simulated(
            &driver_of(gpu),
            gpu.cuda_driver_version.as_deref().unwrap_or("unknown"),
            gpu.mig_enabled.unwrap_or(false),
            u32::try_from(duration.as_secs() / 2).unwrap_or(u32::MAX),
        ),
        run,
        started_at: running.started_at.clone(),
        finished_at: crate::clock::now_text(),
    })
}

/// A reason as the platform takes it: no control characters, at most 500 characters.
fn skip_reason(text: &str) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match clean.char_indices().nth(499) {
        Some((cut, _)) => format!("{}…", &clean[..cut]),
        None => clean,
    }
}

/// A real run's report.
fn real_report(machine_id: Uuid, running: &Running, finished: Finished) -> BenchmarkRunReport {
    BenchmarkRunReport {
        machine_id,
        gpu_uuid: running.gpu.gpu_uuid.clone(),
        simulated_profile: None,
        environment: finished.environment,
        run: finished.run,
        started_at: running.started_at.clone(),
        finished_at: crate::clock::now_text(),
    }
}

/// `3:wrong_results,1:pcie_x8`: profiles by simulated GPU index.
pub fn parse_profiles(text: &str) -> Result<BTreeMap<u32, Profile>, String> {
    let mut profiles = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (index, name) = part
            .split_once(':')
            .ok_or_else(|| format!("`{part}`: write INDEX:PROFILE, e.g. 3:wrong_results"))?;
        let index: u32 = index
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: the GPU index is not a whole number"))?;
        let profile = Profile::parse(name.trim()).ok_or_else(|| {
            format!(
                "`{name}` is not a profile; choose from {}",
                Profile::ALL.map(Profile::name).join(", ")
            )
        })?;
        if profiles.insert(index, profile).is_some() {
            return Err(format!("GPU {index} is given twice"));
        }
    }
    Ok(profiles)
}

/// Now, for the service loop.
pub fn now_ms() -> i64 {
    unix_ms()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    #[test]
    fn a_gpu_is_due_first_then_on_request_driver_change_or_after_its_interval() {
        let fresh = GpuSchedule::default();
        assert_eq!(
            due(&fresh, "GPU-a", "550", None, 0, 168 * HOUR),
            Some(Due::First)
        );
        let tested = GpuSchedule {
            last_finished_ms: Some(0),
            driver: Some("550".to_owned()),
            ..GpuSchedule::default()
        };
        assert_eq!(due(&tested, "GPU-a", "550", None, HOUR, 168 * HOUR), None);
        assert_eq!(
            due(&tested, "GPU-a", "555", None, HOUR, 168 * HOUR),
            Some(Due::DriverChanged)
        );
        assert_eq!(
            due(&tested, "GPU-a", "550", Some("t1"), HOUR, 168 * HOUR),
            Some(Due::Requested)
        );
        let answered = GpuSchedule {
            answered_request: Some("t1".to_owned()),
            ..tested.clone()
        };
        assert_eq!(
            due(&answered, "GPU-a", "550", Some("t1"), HOUR, 168 * HOUR),
            None
        );
        let after = 168 * HOUR + spread_ms("GPU-a", 168 * HOUR);
        assert_eq!(
            due(&tested, "GPU-a", "550", None, after - 1, 168 * HOUR),
            None
        );
        assert_eq!(
            due(&tested, "GPU-a", "550", None, after, 168 * HOUR),
            Some(Due::Periodic)
        );
        // Periodic re-tests off.
        assert_eq!(due(&tested, "GPU-a", "550", None, 1_000 * HOUR, 0), None);
    }

    #[test]
    fn gpus_registered_together_test_apart() {
        let interval = 168 * HOUR;
        let offsets: BTreeSet<i64> = (0..64)
            .map(|i| spread_ms(&format!("GPU-{i:04}"), interval))
            .collect();
        assert!(offsets.len() > 60, "{offsets:?}");
        assert!(offsets.iter().all(|o| (0..interval / 10).contains(o)));
    }

    fn h100(uuid: &str) -> DetectedGpu {
        DetectedGpu {
            gpu_uuid: uuid.to_owned(),
            index: 0,
            name: "NVIDIA H100 80GB HBM3".to_owned(),
            pci_device_id: Some(0x2330),
            pci_bus_id: Some("00000000:3B:00.0".to_owned()),
            vram_mib: 81_559,
            driver_version: Some("550.54.15".to_owned()),
            cuda_driver_version: Some("12.4".to_owned()),
            pcie_current: Default::default(),
            pcie_max: Default::default(),
            power_limit_w: Some(700),
            default_power_limit_w: Some(700),
            ecc_enabled: Some(true),
            mig_enabled: Some(false),
        }
    }

    fn real_suite() -> Suite {
        Suite::Real(Box::new(RealSuite {
            plan: gpunex_gpu::Plan::default(),
            state_dir: std::env::temp_dir(),
            storage_bytes: 1 << 20,
            server: "http://127.0.0.1:9".to_owned(),
            token: String::new(),
        }))
    }

    /// A queue in `dir` and a real suite's schedule over it.
    fn real_benchmarks(dir: &std::path::Path) -> (Queue, Benchmarks) {
        let queue = Queue::open(dir).unwrap();
        let benchmarks = Benchmarks::open(
            &queue,
            real_suite(),
            Uuid::nil(),
            Some(DEFAULT_BENCHMARK_INTERVAL),
        )
        .unwrap();
        (queue, benchmarks)
    }

    /// The queued events, which must all be skip reports: (GPU, reason) each.
    fn skips(queue: &Queue) -> Vec<(String, String)> {
        queue
            .pending(100)
            .unwrap()
            .into_iter()
            .map(|e| match e.body {
                AgentEventBody::BenchmarkSkipped(s) => (s.gpu_uuid, s.reason),
                other => panic!("not a skip report: {other:?}"),
            })
            .collect()
    }

    fn reason_of(queue: &Queue) -> String {
        skips(queue)
            .first()
            .map(|s| s.1.clone())
            .unwrap_or_default()
    }

    /// Steps until the real suite's thread has answered.
    fn settle(
        benchmarks: &mut Benchmarks,
        queue: &mut Queue,
        gpus: &[DetectedGpu],
        busy: &BTreeSet<String>,
    ) -> Step {
        for _ in 0..500 {
            let step = benchmarks.step(queue, 1_000, gpus, busy, &[]).unwrap();
            if step != Step::Running {
                return step;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the suite's thread did not answer");
    }

    /// The suite on a real GPU runs on its own thread; on a machine without the NVIDIA driver
    /// (this one, in CI) it answers that it cannot run, the agent says so once and stops trying,
    /// and nothing is queued.
    #[test]
    fn a_real_suite_without_the_driver_stops_trying_and_queues_nothing() {
        if gpunex_gpu::cuda::probe().is_ok() {
            return; // A GPU host: scripts/gpu-check.sh runs the suite for real.
        }
        let dir = tempfile::tempdir().unwrap();
        let (mut queue, mut benchmarks) = real_benchmarks(dir.path());
        let gpus = [h100("GPU-real-0")];
        let none = BTreeSet::new();
        let started = benchmarks.step(&mut queue, 0, &gpus, &none, &[]).unwrap();
        assert_eq!(
            started,
            Step::Started {
                gpu_uuid: "GPU-real-0".to_owned(),
                why: Due::First
            }
        );
        assert_eq!(
            settle(&mut benchmarks, &mut queue, &gpus, &none),
            Step::Idle
        );
        assert!(matches!(benchmarks.suite, Suite::Unavailable(_)));
        assert!(queue.pending(10).unwrap().is_empty());
        assert_eq!(
            benchmarks
                .step(&mut queue, 2_000, &gpus, &none, &[])
                .unwrap(),
            Step::Idle
        );
        // The platform is told why, once per GPU, and no run is queued.
        benchmarks
            .step(&mut queue, 3_000, &gpus, &none, &[])
            .unwrap();
        assert_eq!(
            skips(&queue),
            vec![("GPU-real-0".to_owned(), reason_of(&queue))]
        );
        assert!(reason_of(&queue).contains("could not be loaded"));
        let stored = stored_schedule(&queue).unwrap();
        assert!(
            stored
                .unavailable
                .as_deref()
                .unwrap()
                .contains("could not be loaded"),
            "status says why: {:?}",
            stored.unavailable
        );
        assert_eq!(stored.running, None);
        assert_eq!(stored.gpus.get("GPU-real-0").map_or(0, |g| g.runs), 0);
        // And it does not start again.
        assert_eq!(
            benchmarks
                .step(&mut queue, 10_000, &gpus, &none, &[])
                .unwrap(),
            Step::Idle
        );
    }

    /// A rental that arrives while the real suite's thread runs stops it; no suite starts until
    /// the thread has stopped.
    #[test]
    fn a_rental_stops_the_real_suites_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (mut queue, mut benchmarks) = real_benchmarks(dir.path());
        let gpus = [h100("GPU-real-0")];
        let none = BTreeSet::new();
        benchmarks.step(&mut queue, 0, &gpus, &none, &[]).unwrap();
        let cancel = benchmarks.job.as_ref().unwrap().cancel.clone();
        let rented: BTreeSet<String> = ["GPU-real-0".to_owned()].into();
        assert_eq!(
            benchmarks.step(&mut queue, 1, &gpus, &rented, &[]).unwrap(),
            Step::Aborted {
                gpu_uuid: "GPU-real-0".to_owned()
            }
        );
        assert!(
            cancel.load(Ordering::Relaxed),
            "the thread was told to stop"
        );
        assert!(benchmarks.job.is_none());
        let stored = stored_schedule(&queue).unwrap();
        assert_eq!(stored.gpus["GPU-real-0"].aborted, 1);
        assert_eq!(stored.running, None);
        // Once the thread has stopped, the GPU (free again) is due again.
        let handle = benchmarks.stopping.take().unwrap();
        handle.join().unwrap();
        assert!(matches!(
            benchmarks.step(&mut queue, 2, &gpus, &none, &[]).unwrap(),
            Step::Started { .. }
        ));
    }

    /// An agent that stopped while a real suite ran (it may have crashed on the GPU) does not
    /// start that GPU's suite again at once; a platform re-test request still does.
    #[test]
    fn a_suite_interrupted_by_the_agent_stopping_waits_before_running_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut queue = Queue::open(dir.path()).unwrap();
        let interrupted = Schedule {
            running: Some("GPU-real-0".to_owned()),
            ..Schedule::default()
        };
        queue
            .set_state(
                BENCHMARKS_KEY,
                &serde_json::to_string(&interrupted).unwrap(),
            )
            .unwrap();
        let mut benchmarks = Benchmarks::open(
            &queue,
            real_suite(),
            Uuid::nil(),
            Some(DEFAULT_BENCHMARK_INTERVAL),
        )
        .unwrap();
        let stored = stored_schedule(&queue).unwrap();
        assert_eq!(stored.running, None);
        let entry = &stored.gpus["GPU-real-0"];
        assert!(entry.problem.as_deref().unwrap().contains("agent stopped"));
        let retry_at = entry.retry_at_ms.unwrap();
        assert!(retry_at > unix_ms() + 3_500_000, "{retry_at}");
        let gpus = [h100("GPU-real-0")];
        let none = BTreeSet::new();
        assert_eq!(
            benchmarks
                .step(&mut queue, retry_at - 1, &gpus, &none, &[])
                .unwrap(),
            Step::Idle
        );
        let request = RetestAssignment {
            gpu_uuid: "GPU-real-0".to_owned(),
            requested_at: "2026-12-06T10:00:00Z".to_owned(),
        };
        assert!(matches!(
            benchmarks
                .step(&mut queue, retry_at - 1, &gpus, &none, &[request])
                .unwrap(),
            Step::Started { .. }
        ));
        // The simulated suite starts again at once: nothing real ran.
        let other = tempfile::tempdir().unwrap();
        let queue = Queue::open(other.path()).unwrap();
        queue
            .set_state(
                BENCHMARKS_KEY,
                &serde_json::to_string(&interrupted).unwrap(),
            )
            .unwrap();
        let simulated = Suite::Simulated {
            profiles: BTreeMap::new(),
            duration: DEFAULT_SIMULATED_SUITE,
        };
        Benchmarks::open(&queue, simulated, Uuid::nil(), None).unwrap();
        assert!(stored_schedule(&queue).unwrap().gpus.is_empty());
    }

    /// A GPU in MIG mode is not benchmarked (the suite measures whole GPUs); `status` says why.
    #[test]
    fn a_gpu_in_mig_mode_is_skipped_and_said_so() {
        let dir = tempfile::tempdir().unwrap();
        let (mut queue, mut benchmarks) = real_benchmarks(dir.path());
        let mig = DetectedGpu {
            mig_enabled: Some(true),
            ..h100("GPU-mig-0")
        };
        let none = BTreeSet::new();
        for now in [0, 1_000] {
            assert_eq!(
                benchmarks
                    .step(&mut queue, now, std::slice::from_ref(&mig), &none, &[])
                    .unwrap(),
                Step::Idle
            );
        }
        assert!(benchmarks.job.is_none());
        assert_eq!(
            skips(&queue),
            vec![("GPU-mig-0".to_owned(), MIG_ENABLED.to_owned())]
        );
        let stored = stored_schedule(&queue).unwrap();
        assert_eq!(
            stored.gpus["GPU-mig-0"].problem.as_deref(),
            Some(MIG_ENABLED)
        );
        assert_eq!(stored.gpus["GPU-mig-0"].runs, 0);
    }

    #[test]
    fn skip_reasons_fit_what_the_platform_takes() {
        assert_eq!(skip_reason(" no\tcuBLAS\n "), "no cuBLAS");
        let long = skip_reason(&"é".repeat(600));
        assert_eq!(long.chars().count(), 500);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn profiles_parse_by_index() {
        let profiles = parse_profiles("3:wrong_results, 1:pcie_x8").unwrap();
        assert_eq!(profiles.get(&3), Some(&Profile::WrongResults));
        assert_eq!(profiles.get(&1), Some(&Profile::PcieX8));
        assert!(parse_profiles("3:broken").is_err());
        assert!(parse_profiles("x:healthy").is_err());
        assert!(parse_profiles("1:healthy,1:pcie_x8").is_err());
    }
}
