//! The benchmark commands on the command executor (issue 18): a run its machine's agent reports,
//! re-tests asked for by the provider or an admin, an admin's override and its end, resuming
//! automatic delisting after an anomaly; and the automatic-action pass, the reactor that delists
//! and relists GPUs on their verdicts within the fleet's safety rules
//! (`gpunex_domain::benchmark_log::plan_actions`).
//!
//! A GPU's events go to its stream (`gpu_benchmarks-{gpu_uuid}`) at the version the read models
//! hold; the automatic actions go to one fleet stream at its version, so two processes running
//! the pass cannot both spend one hour's delisting budget: the second is refused and looks again.

use std::time::Duration;

use gpunex_domain::benchmark_log::{
    self, ACTIONS_STREAM, BenchedGpu, BenchmarkEvent, BenchmarkRejection, Plan, Submitted,
};
use gpunex_domain::{DomainEvent, StreamId, Timestamp};
use gpunex_store::{Metadata, NewEvent, StreamAppend};
use uuid::Uuid;

use crate::command::{Done, Executor, Rejection, Retry, append_at, expected_at};
use crate::{AppError, ReadModels};

/// A GPU's benchmark commands decide again when another event of the same GPU landed first.
pub const GPU_RETRY: Retry = Retry {
    name: "gpu_benchmarks",
    attempts: 5,
};

/// The pass looks again at once when another process acted first; otherwise at its next tick.
pub const ACTIONS_RETRY: Retry = Retry {
    name: "benchmark_actions",
    attempts: 3,
};

/// How often the automatic-action pass runs when no event wakes it.
pub const ACTIONS_INTERVAL: Duration = Duration::from_secs(30);
/// The least time between two passes: a busy log (usage reports every second) does not make
/// the pass, which reads every GPU's state, run for every batch of events.
pub const ACTIONS_GAP: Duration = Duration::from_secs(1);

/// The answer of a benchmark command.
pub type Outcome = Result<Result<Done, Rejection<BenchmarkRejection>>, AppError>;

/// The GPU's benchmark stream, or a refusal naming the GPU when its UUID cannot name a stream
/// (registration accepts only UUIDs that can).
pub fn gpu_stream(gpu_uuid: &str) -> Result<StreamId, Rejection<BenchmarkRejection>> {
    StreamId::parse(benchmark_log::gpu_stream_name(gpu_uuid)).map_err(|e| {
        Rejection::Rule(BenchmarkRejection::Invalid {
            field: "gpu_uuid".to_owned(),
            reason: e.to_string(),
        })
    })
}

/// Runs a command on `gpu_uuid`'s benchmark stream: once the read models have applied the
/// stream, `decide` (given the stream, its version and the time) says what to append; another
/// event of the GPU landing first makes it decide again ([`GPU_RETRY`]).
async fn on_gpu_stream(
    exec: &Executor<'_>,
    gpu_uuid: &str,
    mut decide: impl FnMut(&StreamId, u64, Timestamp) -> Result<Vec<StreamAppend>, BenchmarkRejection>,
) -> Outcome {
    let models = exec.models();
    let stream = match gpu_stream(gpu_uuid) {
        Ok(stream) => stream,
        Err(rejection) => return Ok(Err(rejection)),
    };
    exec.execute(
        GPU_RETRY,
        || {
            let stream = stream.clone();
            async move { models.at_stream(exec.store(), &stream).await }
        },
        |version: &u64, now| decide(&stream, *version, now),
    )
    .await
}

pub fn actions_stream() -> StreamId {
    StreamId::parse(ACTIONS_STREAM).unwrap_or_else(|_| unreachable!("a constant stream id"))
}

/// The registered GPU `gpu_uuid` on `machine_id`, as a run is decided against it; `None` when
/// the machine has no such GPU.
pub fn benched_gpu(models: &ReadModels, machine_id: Uuid, gpu_uuid: &str) -> Option<BenchedGpu> {
    models.with_fleet(|f| {
        let machine = f.machine(&machine_id)?;
        let gpu = machine.gpus.iter().find(|g| g.gpu.gpu_uuid == gpu_uuid)?;
        Some(BenchedGpu {
            gpu_uuid: gpu_uuid.to_owned(),
            machine_id,
            provider_id: machine.provider_id,
            model_id: gpu.model_id.clone(),
            pci_device_id: gpu.gpu.pci_device_id,
            simulated: machine.simulated,
        })
    })
}

/// Records a run the agent of `gpu.machine_id` reported, under the agent's own event id
/// (`report_id`): a re-sent report is absorbed by the store's idempotency.
pub async fn record_run(
    exec: &Executor<'_>,
    report_id: Uuid,
    meta: &Metadata,
    gpu: &BenchedGpu,
    submitted: &Submitted,
) -> Outcome {
    let models = exec.models();
    on_gpu_stream(exec, &gpu.gpu_uuid, |stream, version, now| {
        let event = models.with_market(|m| {
            let benchmarks = m.benchmarks();
            benchmark_log::decide_record(
                gpu,
                submitted.clone(),
                |model, metric| benchmarks.fleet_figure(model, metric),
                now,
            )
        })?;
        Ok(vec![StreamAppend {
            stream_id: stream.clone(),
            expected: expected_at(version),
            events: vec![NewEvent::from_domain(
                report_id,
                &DomainEvent::Benchmark(event),
                meta.clone(),
            )],
        }])
    })
    .await
}

/// Records that the agent of `gpu.machine_id` skips its suite, under the agent's own event id
/// (a re-sent report is absorbed by the store's idempotency).
pub async fn record_skipped(
    exec: &Executor<'_>,
    report_id: Uuid,
    meta: &Metadata,
    gpu: &BenchedGpu,
    reason: &str,
) -> Outcome {
    on_gpu_stream(exec, &gpu.gpu_uuid, |stream, version, now| {
        let event = benchmark_log::decide_skipped(gpu, reason, now)?;
        Ok(vec![StreamAppend {
            stream_id: stream.clone(),
            expected: expected_at(version),
            events: vec![NewEvent::from_domain(
                report_id,
                &DomainEvent::Benchmark(BenchmarkEvent::SuiteSkipped(event)),
                meta.clone(),
            )],
        }])
    })
    .await
}

/// Asks for a re-test of `gpu_uuid` (of `provider_id`).
pub async fn request_retest(
    exec: &Executor<'_>,
    gpu_uuid: &str,
    provider_id: Uuid,
    by_admin: bool,
    reason: &str,
    meta: &Metadata,
) -> Outcome {
    let models = exec.models();
    on_gpu_stream(exec, gpu_uuid, |stream, version, now| {
        let state = models.with_market(|m| m.benchmarks().retest_state(gpu_uuid, provider_id));
        let requested = benchmark_log::decide_retest(&state, &meta.actor, by_admin, reason, now)?;
        Ok(vec![append_at(
            stream.clone(),
            version,
            [DomainEvent::Benchmark(BenchmarkEvent::RetestRequested(
                requested,
            ))],
            meta,
        )])
    })
    .await
}

/// An admin keeps `gpu_uuid` listed whatever its latest verdict (`set`), or ends that.
pub async fn change_override(
    exec: &Executor<'_>,
    gpu_uuid: &str,
    set: bool,
    reason: &str,
    meta: &Metadata,
) -> Outcome {
    let models = exec.models();
    on_gpu_stream(exec, gpu_uuid, |stream, version, now| {
        let gpu = models.with_market(|m| m.benchmarks().gpu(gpu_uuid).cloned());
        let event = match (set, gpu) {
            (true, Some(gpu)) => {
                let latest = gpu
                    .latest
                    .as_ref()
                    .ok_or(BenchmarkRejection::NothingToOverride)?;
                BenchmarkEvent::OverrideSet(benchmark_log::OverrideSet {
                    gpu_uuid: gpu_uuid.to_owned(),
                    provider_id: gpu.provider_id,
                    run_id: latest.recorded.run_id,
                    reason: benchmark_log::clean_reason(reason)?,
                    by: meta.actor.clone(),
                    at: now,
                })
            }
            (true, None) => return Err(BenchmarkRejection::NothingToOverride),
            (false, Some(gpu)) if gpu.override_set.is_some() => {
                BenchmarkEvent::OverrideCleared(benchmark_log::OverrideCleared {
                    gpu_uuid: gpu_uuid.to_owned(),
                    provider_id: gpu.provider_id,
                    by: meta.actor.clone(),
                    at: now,
                })
            }
            (false, _) => return Err(BenchmarkRejection::NoOverride),
        };
        Ok(vec![append_at(
            stream.clone(),
            version,
            [DomainEvent::Benchmark(event)],
            meta,
        )])
    })
    .await
}

/// An operator resumes automatic delisting after an anomaly paused it.
pub async fn resume_delisting(exec: &Executor<'_>, reason: &str, meta: &Metadata) -> Outcome {
    let models = exec.models();
    let stream = actions_stream();
    exec.execute(
        GPU_RETRY,
        || {
            let stream = stream.clone();
            async move { models.at_stream(exec.store(), &stream).await }
        },
        |version: &u64, now| {
            let paused = models.with_market(|m| m.benchmarks().paused().is_some());
            let resumed = benchmark_log::decide_resume(paused, &meta.actor, reason, now)?;
            Ok(vec![append_at(
                stream.clone(),
                *version,
                [DomainEvent::Benchmark(BenchmarkEvent::DelistingResumed(
                    resumed,
                ))],
                meta,
            )])
        },
    )
    .await
}

/// What one automatic-action pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub delisted: usize,
    pub relisted: usize,
    pub paused: bool,
    /// Failing GPUs left listed for now (rate limit or pause).
    pub deferred: usize,
}

/// One pass of the automatic actions at the executor's now: delists and relists what the latest
/// verdicts ask for, within the rate limit, or pauses on an anomaly.
pub async fn actions_pass(exec: &Executor<'_>) -> Result<PassReport, AppError> {
    let models = exec.models();
    let stream = actions_stream();
    let meta = Metadata::actor("system:benchmarks");
    let mut planned = Plan::default();
    let outcome = exec
        .execute(
            ACTIONS_RETRY,
            || {
                let stream = stream.clone();
                async move { models.at_stream(exec.store(), &stream).await }
            },
            |version: &u64, now| -> Result<_, std::convert::Infallible> {
                let (fleet, pending) = models.with_market(|m| m.benchmarks().pending_actions(now));
                planned = benchmark_log::plan_actions(&fleet, &pending, now);
                Ok(vec![append_at(
                    stream.clone(),
                    *version,
                    planned.events.iter().cloned().map(DomainEvent::Benchmark),
                    &meta,
                )])
            },
        )
        .await?;
    match outcome {
        Ok(Done::Committed(_)) => Ok(PassReport {
            delisted: count(&planned, |e| matches!(e, BenchmarkEvent::GpuDelisted(_))),
            relisted: count(&planned, |e| matches!(e, BenchmarkEvent::GpuRelisted(_))),
            paused: planned
                .events
                .iter()
                .any(|e| matches!(e, BenchmarkEvent::DelistingPaused(_))),
            deferred: planned.deferred,
        }),
        Ok(Done::Nothing) => Ok(PassReport {
            deferred: planned.deferred,
            ..PassReport::default()
        }),
        // Another process acted on the same GPUs first each time: the next pass looks again.
        Err(_) => Ok(PassReport::default()),
    }
}

fn count(plan: &Plan, which: impl Fn(&BenchmarkEvent) -> bool) -> usize {
    plan.events.iter().filter(|e| which(e)).count()
}

/// The server's automatic-action loop: a pass when the read models move (a run recorded, an
/// override), at most one per [`ACTIONS_GAP`], and at least every [`ACTIONS_INTERVAL`] (the rate
/// limit's hour moves on).
pub async fn run_actions(store: gpunex_store::Store, models: ReadModels) {
    let mut position = models.watch_position();
    loop {
        let exec = Executor::new(&store, &models);
        match actions_pass(&exec).await {
            Ok(report) if report.delisted + report.relisted > 0 || report.paused => {
                tracing::info!(
                    delisted = report.delisted,
                    relisted = report.relisted,
                    paused = report.paused,
                    deferred = report.deferred,
                    "benchmark listing actions"
                );
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "benchmark listing actions failed; retrying"),
        }
        position.mark_unchanged();
        tokio::time::sleep(ACTIONS_GAP).await;
        // Events that arrived during the gap wake the next pass at once.
        let _ = tokio::time::timeout(ACTIONS_INTERVAL, position.changed()).await;
    }
}
