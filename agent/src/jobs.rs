//! Renters' jobs on this machine: start what the platform assigns, report usage as a cumulative
//! counter, stop what the platform ended, and report how each job ended with its evidence.
//!
//! Every report goes through the durable queue together with the jobs' state (one SQLite
//! transaction), so a restart neither repeats nor forgets one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gpunex_domain::fleet::GpuCondition;
use gpunex_domain::rental::{EndCause, JobEvidence};
use gpunex_wire::fleet::{
    AgentEvent, AgentEventBody, Assignment, JobEndedReport, JobStartedReport, UsageReport,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::client::{Client, SendError};
use crate::clock::{now_text, unix_ms};
use crate::joblog::JobLogs;
use crate::queue::Queue;
use crate::runtime::{Exit, OutputCursor, Runtime};

const JOBS_KEY: &str = "jobs";

/// A job as the agent keeps it on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub gpus: Vec<String>,
    pub runtime: String,
    pub handle: String,
    pub started_unix_ms: i64,
    /// The highest counter queued so far.
    pub reported_gpu_seconds: u64,
    pub last_report_unix_ms: i64,
    /// Where its output was read up to, and how much of it was shipped.
    #[serde(default)]
    pub output: OutputCursor,
    #[serde(default)]
    pub log: LogProgress,
}

/// A job's output: how many bytes it printed so far, and how many of them the platform has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogProgress {
    pub total: u64,
    pub shipped: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct JobsState {
    running: BTreeMap<Uuid, JobRecord>,
    /// Rentals whose job end was queued: never started again.
    ended: BTreeSet<Uuid>,
    /// Ended jobs whose output is not all shipped yet.
    #[serde(default)]
    logs_pending: BTreeMap<Uuid, LogProgress>,
}

pub struct Jobs {
    runtime: Runtime,
    logs: JobLogs,
    machine_id: Uuid,
    usage_interval: Duration,
    state: JobsState,
}

/// Conditions that make a GPU unfit to run a job.
fn is_fault(condition: GpuCondition) -> bool {
    matches!(condition, GpuCondition::Lost | GpuCondition::EccUncorrected)
}

impl Jobs {
    /// Loads the jobs' state. Jobs of a runtime that does not survive a restart are reported
    /// ended (`host_shutdown`) with what was counted before.
    pub fn open(
        queue: &mut Queue,
        runtime: Runtime,
        logs: JobLogs,
        machine_id: Uuid,
        usage_interval: Duration,
    ) -> anyhow::Result<Jobs> {
        let state: JobsState = queue
            .get_state(JOBS_KEY)?
            .map(|text| serde_json::from_str(&text))
            .transpose()?
            .unwrap_or_default();
        let mut jobs = Jobs {
            runtime,
            logs,
            machine_id,
            usage_interval,
            state,
        };
        if !jobs.runtime.survives_restart() {
            let lost: Vec<Uuid> = jobs.state.running.keys().copied().collect();
            for rental_id in lost {
                let evidence = JobEvidence {
                    detail: "the agent restarted; a process job does not survive it".to_owned(),
                    ..JobEvidence::default()
                };
                jobs.queue_end(queue, rental_id, EndCause::HostShutdown, evidence)?;
            }
        }
        Ok(jobs)
    }

    /// The cumulative GPU-seconds of a job now: its GPUs times the whole seconds since it started,
    /// never below what was already reported.
    fn counter(record: &JobRecord, now_ms: i64) -> u64 {
        let seconds = u64::try_from((now_ms - record.started_unix_ms).max(0) / 1_000).unwrap_or(0);
        (seconds * record.gpus.len() as u64).max(record.reported_gpu_seconds)
    }

    fn save(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string(&self.state)?)
    }

    fn event(&self, body: AgentEventBody) -> AgentEvent {
        AgentEvent {
            event_id: Uuid::now_v7(),
            occurred_at: now_text(),
            body,
        }
    }

    /// Queues a job's end with its final counter, and forgets it.
    fn queue_end(
        &mut self,
        queue: &mut Queue,
        rental_id: Uuid,
        cause: EndCause,
        evidence: JobEvidence,
    ) -> anyhow::Result<()> {
        let Some(record) = self.state.running.remove(&rental_id) else {
            return Ok(());
        };
        let gpu_seconds = Jobs::counter(&record, unix_ms());
        self.state.ended.insert(rental_id);
        if record.log.shipped < record.log.total {
            self.state.logs_pending.insert(rental_id, record.log);
        } else {
            self.logs.remove(rental_id);
        }
        let event = self.event(AgentEventBody::JobEnded(JobEndedReport {
            machine_id: self.machine_id,
            rental_id,
            cause,
            evidence,
            gpu_seconds,
        }));
        tracing::info!(%rental_id, ?cause, gpu_seconds, "job ended");
        queue.enqueue_with_state(&event, JOBS_KEY, &self.save()?)
    }

    async fn end(
        &mut self,
        queue: &mut Queue,
        rental_id: Uuid,
        cause: EndCause,
        exit: Exit,
        fault: Option<(String, GpuCondition)>,
    ) -> anyhow::Result<()> {
        let handle = self.state.running.get(&rental_id).map(|r| r.handle.clone());
        // The last of its output, kept before the container goes.
        self.collect_output(rental_id).await;
        let (gpu_uuid, condition) = fault.unzip();
        let evidence = JobEvidence {
            exit_code: exit.exit_code,
            signal: exit.signal,
            gpu_uuid,
            condition,
            detail: exit.detail.chars().take(500).collect(),
        };
        self.queue_end(queue, rental_id, cause, evidence)?;
        if let Some(handle) = handle {
            self.runtime.remove(&handle).await;
        }
        Ok(())
    }

    /// Reads what a running job printed since the last call into its kept output.
    async fn collect_output(&mut self, rental_id: Uuid) -> bool {
        let Some(record) = self.state.running.get_mut(&rental_id) else {
            return false;
        };
        if record.handle.is_empty() {
            return false;
        }
        let bytes = match self
            .runtime
            .output(&record.handle, &mut record.output)
            .await
        {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(%rental_id, %error, "cannot read the job's output");
                return false;
            }
        };
        if bytes.is_empty() {
            return false;
        }
        match self.logs.append(rental_id, record.log.total, &bytes) {
            Ok(total) => {
                record.log.total = total;
                true
            }
            Err(error) => {
                tracing::warn!(%rental_id, %error, "cannot keep the job's output");
                false
            }
        }
    }

    /// Ships the output the platform does not have yet, running jobs' and ended ones', each in
    /// chunks, oldest first. Stops at the first failure to reach the platform (the rest waits
    /// for the next pass); a chunk the platform refuses drops that job's output (resending it
    /// would be refused again).
    pub async fn ship_logs(&mut self, queue: &mut Queue, client: &Client) -> anyhow::Result<()> {
        let max = gpunex_wire::fleet::JOB_LOG_CHUNK_MAX_BYTES;
        let mut changed = false;
        let mut work: Vec<(Uuid, LogProgress, bool)> = self
            .state
            .running
            .iter()
            .map(|(id, r)| (*id, r.log, true))
            .collect();
        work.extend(
            self.state
                .logs_pending
                .iter()
                .map(|(id, p)| (*id, *p, false)),
        );
        'jobs: for (rental_id, mut progress, running) in work {
            let mut refused = false;
            while let Some((offset, bytes)) =
                self.logs
                    .next_chunk(rental_id, progress.shipped, progress.total, max)?
            {
                match client.ship_log(rental_id, offset, &bytes).await {
                    Ok(()) => {
                        progress.shipped = offset + bytes.len() as u64;
                        changed = true;
                    }
                    Err(SendError::Refused { code, detail, .. }) => {
                        tracing::warn!(%rental_id, %code, %detail, "the platform refused the job's output; dropping it");
                        progress.shipped = progress.total;
                        refused = true;
                        changed = true;
                        break;
                    }
                    Err(error) => {
                        tracing::debug!(%rental_id, %error, "cannot ship the job's output now");
                        self.set_progress(rental_id, progress, running);
                        break 'jobs;
                    }
                }
            }
            if progress.shipped < progress.total && !refused {
                // Nothing left in the file (dropped before it was shipped): caught up.
                progress.shipped = progress.total;
                changed = true;
            }
            self.set_progress(rental_id, progress, running);
        }
        if changed {
            queue.set_state(JOBS_KEY, &self.save()?)?;
        }
        Ok(())
    }

    fn set_progress(&mut self, rental_id: Uuid, progress: LogProgress, running: bool) {
        if running {
            if let Some(record) = self.state.running.get_mut(&rental_id) {
                record.log = progress;
            }
        } else if progress.shipped >= progress.total {
            self.state.logs_pending.remove(&rental_id);
            self.logs.remove(rental_id);
        } else {
            self.state.logs_pending.insert(rental_id, progress);
        }
    }

    /// One pass: jobs that exited, jobs on faulty GPUs, jobs the platform ended, new assignments,
    /// and usage due. `assignments` is `None` when the platform could not be asked (nothing is
    /// started or stopped for want of an answer). `faults` are the active GPU conditions.
    pub async fn step(
        &mut self,
        queue: &mut Queue,
        assignments: Option<&[Assignment]>,
        faults: &BTreeSet<(String, GpuCondition)>,
    ) -> anyhow::Result<()> {
        // Workloads that stopped by themselves completed (whatever their exit code: that is the
        // renter's program).
        let running: Vec<(Uuid, String)> = self
            .state
            .running
            .iter()
            .map(|(id, r)| (*id, r.handle.clone()))
            .collect();
        let mut printed = false;
        for (rental_id, _) in &running {
            printed |= self.collect_output(*rental_id).await;
        }
        if printed {
            queue.set_state(JOBS_KEY, &self.save()?)?;
        }
        for (rental_id, handle) in &running {
            match self.runtime.exited(handle).await {
                Ok(Some(exit)) => {
                    self.end(queue, *rental_id, EndCause::Completed, exit, None)
                        .await?;
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%rental_id, %error, "cannot check the job"),
            }
        }
        // A GPU fault stops the job on it: the provider's side.
        let faulty: Vec<(Uuid, String, GpuCondition)> = self
            .state
            .running
            .iter()
            .filter_map(|(id, record)| {
                faults
                    .iter()
                    .find(|(gpu, condition)| is_fault(*condition) && record.gpus.contains(gpu))
                    .map(|(gpu, condition)| (*id, gpu.clone(), *condition))
            })
            .collect();
        for (rental_id, gpu, condition) in faulty {
            let handle = self.state.running[&rental_id].handle.clone();
            let mut exit = self.runtime.stop(&handle).await.unwrap_or_default();
            exit.detail = format!("stopped: GPU {gpu} reported {condition:?}");
            tracing::error!(%rental_id, %gpu, ?condition, "job stopped on a GPU fault");
            self.end(
                queue,
                rental_id,
                EndCause::HardwareFault,
                exit,
                Some((gpu, condition)),
            )
            .await?;
        }
        if let Some(assignments) = assignments {
            self.follow(queue, assignments, faults).await?;
        }
        self.report_usage(queue, false)?;
        Ok(())
    }

    async fn follow(
        &mut self,
        queue: &mut Queue,
        assignments: &[Assignment],
        faults: &BTreeSet<(String, GpuCondition)>,
    ) -> anyhow::Result<()> {
        let by_id: BTreeMap<Uuid, &Assignment> =
            assignments.iter().map(|a| (a.rental_id, a)).collect();
        // Ended by the renter or the platform (or unknown to it): stop.
        let ended: Vec<(Uuid, EndCause)> = self
            .state
            .running
            .keys()
            .filter_map(|id| match by_id.get(id) {
                Some(a) if a.status == "active" => None,
                Some(a) => Some((*id, a.end_cause.unwrap_or(EndCause::Platform))),
                None => Some((*id, EndCause::Platform)),
            })
            .collect();
        for (rental_id, cause) in ended {
            let handle = self.state.running[&rental_id].handle.clone();
            let mut exit = self.runtime.stop(&handle).await.unwrap_or_default();
            exit.detail = "stopped: the rental ended".to_owned();
            self.end(queue, rental_id, cause, exit, None).await?;
        }
        // New rentals: start them.
        for assignment in assignments.iter().filter(|a| a.status == "active") {
            let id = assignment.rental_id;
            if self.state.running.contains_key(&id) || self.state.ended.contains(&id) {
                continue;
            }
            let fault = faults
                .iter()
                .find(|(gpu, c)| is_fault(*c) && assignment.gpu_uuids.contains(gpu))
                .cloned();
            let started = match (&fault, &assignment.workload) {
                (Some(_), _) => Err(anyhow::anyhow!("a rented GPU is faulty")),
                (None, None) => Err(anyhow::anyhow!("the rental names no workload")),
                (None, Some(workload)) => {
                    self.runtime
                        .start(id, &assignment.gpu_uuids, workload)
                        .await
                }
            };
            let now = unix_ms();
            self.state.running.insert(
                id,
                JobRecord {
                    gpus: assignment.gpu_uuids.clone(),
                    runtime: self.runtime.name().to_owned(),
                    handle: String::new(),
                    started_unix_ms: now,
                    reported_gpu_seconds: 0,
                    last_report_unix_ms: now,
                    output: OutputCursor::default(),
                    log: LogProgress::default(),
                },
            );
            match started {
                Ok(handle) => {
                    if let Some(record) = self.state.running.get_mut(&id) {
                        record.handle = handle.clone();
                    }
                    let event = self.event(AgentEventBody::JobStarted(JobStartedReport {
                        machine_id: self.machine_id,
                        rental_id: id,
                        runtime: self.runtime.name().to_owned(),
                        handle: handle.clone(),
                    }));
                    tracing::info!(rental_id = %id, %handle, "job started");
                    queue.enqueue_with_state(&event, JOBS_KEY, &self.save()?)?;
                }
                Err(error) => {
                    tracing::error!(rental_id = %id, %error, "job could not start");
                    let cause = if fault.is_some() {
                        EndCause::HardwareFault
                    } else {
                        EndCause::Platform
                    };
                    let evidence = JobEvidence {
                        gpu_uuid: fault.as_ref().map(|(g, _)| g.clone()),
                        condition: fault.as_ref().map(|(_, c)| *c),
                        detail: format!("could not start: {error}")
                            .chars()
                            .take(500)
                            .collect(),
                        ..JobEvidence::default()
                    };
                    self.queue_end(queue, id, cause, evidence)?;
                }
            }
        }
        // Jobs the platform believes running here that this agent does not run (its state was
        // lost): report them ended, so the platform stops waiting.
        for assignment in assignments.iter().filter(|a| a.status != "active") {
            let id = assignment.rental_id;
            if assignment.job_started
                && !self.state.running.contains_key(&id)
                && !self.state.ended.contains(&id)
            {
                self.state.ended.insert(id);
                let event = self.event(AgentEventBody::JobEnded(JobEndedReport {
                    machine_id: self.machine_id,
                    rental_id: id,
                    cause: assignment.end_cause.unwrap_or(EndCause::Platform),
                    evidence: JobEvidence {
                        detail: "the job was not running on this agent (its state was lost)"
                            .to_owned(),
                        ..JobEvidence::default()
                    },
                    gpu_seconds: 0,
                }));
                queue.enqueue_with_state(&event, JOBS_KEY, &self.save()?)?;
            }
        }
        // Forget ended rentals the platform no longer lists.
        self.state.ended.retain(|id| by_id.contains_key(id));
        Ok(())
    }

    /// Queues a usage report for each running job whose report is due (or all, with `all`).
    pub fn report_usage(&mut self, queue: &mut Queue, all: bool) -> anyhow::Result<()> {
        let now = unix_ms();
        let interval = i64::try_from(self.usage_interval.as_millis()).unwrap_or(i64::MAX);
        let due: Vec<Uuid> = self
            .state
            .running
            .iter()
            .filter(|(_, r)| !r.handle.is_empty())
            .filter(|(_, r)| all || now - r.last_report_unix_ms >= interval)
            .map(|(id, _)| *id)
            .collect();
        for rental_id in due {
            let Some(record) = self.state.running.get_mut(&rental_id) else {
                continue;
            };
            let gpu_seconds = Jobs::counter(record, now);
            record.last_report_unix_ms = now;
            if gpu_seconds == record.reported_gpu_seconds {
                continue;
            }
            record.reported_gpu_seconds = gpu_seconds;
            let event = self.event(AgentEventBody::Usage(UsageReport {
                machine_id: self.machine_id,
                rental_id,
                gpu_seconds,
            }));
            queue.enqueue_with_state(&event, JOBS_KEY, &self.save()?)?;
        }
        Ok(())
    }

    /// The agent is stopping: process jobs are stopped and reported ended (`host_shutdown`);
    /// containers keep running and are found again at the next start.
    pub async fn shutdown(&mut self, queue: &mut Queue) -> anyhow::Result<()> {
        if self.runtime.survives_restart() {
            return self.report_usage(queue, true);
        }
        let running: Vec<(Uuid, String)> = self
            .state
            .running
            .iter()
            .map(|(id, r)| (*id, r.handle.clone()))
            .collect();
        for (rental_id, handle) in running {
            let mut exit = self.runtime.stop(&handle).await.unwrap_or_default();
            exit.detail = "stopped: the agent is shutting down".to_owned();
            self.end(queue, rental_id, EndCause::HostShutdown, exit, None)
                .await?;
        }
        Ok(())
    }
}
