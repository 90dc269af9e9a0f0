//! The benchmark read model (issue 18): per GPU its latest run with its score and verdict, a
//! bounded history of runs, the automatic listing state, overrides and re-test requests; per
//! model and metric the fleet's latest accepted figures, kept sorted for the median; and the
//! fleet's automatic-action state (pause, the last hour's delistings).
//!
//! Bounded in memory: each GPU keeps its first [`FIRST_RUNS_KEPT`] and last [`RUNS_KEPT`] runs
//! as summaries and its last [`REFUSED_KEPT`] refusals; every run stays in the log.

use std::collections::{HashMap, VecDeque};

use gpunex_domain::DomainEvent;
use gpunex_domain::Timestamp;
use gpunex_domain::benchmark::{self, Figure, ListingAction, Metric, Outcome, Score, Verdict};
use gpunex_domain::benchmark_log::{
    self, ACTION_WINDOW_MICROS, BenchmarkEvent, DelistingPaused, FleetActions, ListingActed,
    OverrideSet, Pending, RetestRequested, RetestState, RunRecorded, RunRefused,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Runs kept per GPU, newest last.
pub const RUNS_KEPT: usize = 12;
/// A GPU's first runs kept, for its consistency against itself.
pub const FIRST_RUNS_KEPT: usize = 3;
/// Refused runs kept per GPU.
pub const REFUSED_KEPT: usize = 5;

/// One run as the tab lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: Uuid,
    pub recorded_at: Timestamp,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub driver_version: String,
    pub simulated_profile: Option<String>,
    pub figures: Vec<Figure>,
    pub score_bp: u64,
    pub outcome: Outcome,
}

/// The latest accepted run in full, with its assessment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest {
    pub recorded: RunRecorded,
    pub score: Score,
    pub verdict: Verdict,
}

/// Everything the model holds of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuBenchmarks {
    pub gpu_uuid: String,
    pub provider_id: Uuid,
    pub machine_id: Uuid,
    pub model_id: String,
    /// The GPU stream's version: the expected version of its next event.
    pub stream_version: u64,
    pub latest: Option<Latest>,
    pub first_runs: Vec<RunSummary>,
    pub runs: VecDeque<RunSummary>,
    pub runs_total: u64,
    pub refused: VecDeque<RunRefused>,
    pub refused_total: u64,
    /// The automatic delisting in force, if any.
    pub delisted: Option<ListingActed>,
    /// The last automatic action (delisting or relisting).
    pub last_action: Option<(bool, ListingActed)>,
    pub override_set: Option<OverrideSet>,
    /// A re-test no run has answered yet.
    pub retest: Option<RetestRequested>,
    pub last_provider_request: Option<Timestamp>,
}

impl GpuBenchmarks {
    pub fn new(gpu_uuid: &str, provider_id: Uuid, machine_id: Uuid, model_id: &str) -> Self {
        GpuBenchmarks {
            gpu_uuid: gpu_uuid.to_owned(),
            provider_id,
            machine_id,
            model_id: model_id.to_owned(),
            stream_version: 0,
            latest: None,
            first_runs: Vec::new(),
            runs: VecDeque::new(),
            runs_total: 0,
            refused: VecDeque::new(),
            refused_total: 0,
            delisted: None,
            last_action: None,
            override_set: None,
            retest: None,
            last_provider_request: None,
        }
    }

    /// Whether the benchmark keeps the GPU off the marketplace now: delisted by a verdict and
    /// not overridden.
    pub fn hidden(&self) -> bool {
        self.delisted.is_some() && self.override_set.is_none()
    }

    /// The score renters see: the latest accepted run's.
    pub fn score_bp(&self) -> Option<u64> {
        self.latest.as_ref().map(|l| l.score.score_bp)
    }

    /// What the latest verdict asks of the listing that has not been done yet.
    pub fn pending_action(&self) -> ListingAction {
        let Some(latest) = &self.latest else {
            return ListingAction::Keep;
        };
        if self.override_set.is_some() {
            return ListingAction::Keep;
        }
        // An action already taken on this run is not taken again.
        if self
            .last_action
            .as_ref()
            .is_some_and(|(_, acted)| acted.run_id == latest.recorded.run_id)
        {
            return ListingAction::Keep;
        }
        benchmark::listing_action(self.delisted.is_some(), &latest.verdict, &latest.score)
    }

    /// The GPU's consistency: the spread of its kept runs' scores and its last runs against
    /// its first ones.
    pub fn consistency(&self) -> Consistency {
        let scores: Vec<u64> = self.runs.iter().map(|r| r.score_bp).collect();
        let spread_bp = match (scores.iter().min(), scores.iter().max()) {
            (Some(min), Some(max)) if scores.len() >= 2 => Some(max - min),
            _ => None,
        };
        let mut first: Vec<u64> = self.first_runs.iter().map(|r| r.score_bp).collect();
        let mut last: Vec<u64> = self
            .runs
            .iter()
            .rev()
            .take(FIRST_RUNS_KEPT)
            .map(|r| r.score_bp)
            .collect();
        let last_vs_first_bp = if self.runs_total > FIRST_RUNS_KEPT as u64 {
            match (benchmark::median(&mut first), benchmark::median(&mut last)) {
                (Some(first), Some(last)) if first > 0 => Some(last * 10_000 / first),
                _ => None,
            }
        } else {
            None
        };
        Consistency {
            runs: self.runs_total,
            spread_bp,
            last_vs_first_bp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consistency {
    pub runs: u64,
    /// Highest minus lowest score of the kept runs (two or more).
    pub spread_bp: Option<u64>,
    /// The median score of the last runs against the median of the first, once there are more
    /// runs than the first ones.
    pub last_vs_first_bp: Option<u64>,
}

/// Per model and metric, each GPU's latest accepted figure, and the same figures sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct FleetFigures {
    by_gpu: HashMap<String, u64>,
    sorted: Vec<u64>,
}

impl FleetFigures {
    fn set(&mut self, gpu_uuid: &str, value: u64) {
        if let Some(old) = self.by_gpu.insert(gpu_uuid.to_owned(), value)
            && let Ok(at) = self.sorted.binary_search(&old)
        {
            self.sorted.remove(at);
        }
        let at = self.sorted.partition_point(|v| *v < value);
        self.sorted.insert(at, value);
    }

    fn remove(&mut self, gpu_uuid: &str) {
        if let Some(old) = self.by_gpu.remove(gpu_uuid)
            && let Ok(at) = self.sorted.binary_search(&old)
        {
            self.sorted.remove(at);
        }
    }

    /// The lower middle, as `benchmark::median`.
    fn median(&self) -> Option<u64> {
        if self.sorted.is_empty() {
            None
        } else {
            Some(self.sorted[(self.sorted.len() - 1) / 2])
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Benchmarks {
    gpus: HashMap<String, GpuBenchmarks>,
    /// `(model, metric)` -> the fleet's latest accepted figures.
    #[serde(with = "crate::serde_pairs")]
    fleet: HashMap<(String, Metric), FleetFigures>,
    paused: Option<DelistingPaused>,
    /// When an operator last resumed automatic delisting: runs recorded before it no longer
    /// count towards an anomaly (the operator has looked at them).
    resumed_at: Option<Timestamp>,
    /// The fleet action stream's version.
    actions_version: u64,
    /// Automatic delistings of the last hour (by the events' own times), oldest first.
    recent_delistings: VecDeque<(String, Timestamp)>,
}

impl Benchmarks {
    pub fn apply(&mut self, stream_version: u64, event: &DomainEvent) {
        let DomainEvent::Benchmark(event) = event else {
            return;
        };
        match event {
            BenchmarkEvent::RunRecorded(recorded) => {
                let (score, verdict) = benchmark_log::assess(recorded);
                let gpu = self.gpu_entry(
                    &recorded.gpu_uuid,
                    recorded.provider_id,
                    recorded.machine_id,
                    &recorded.model_id,
                );
                gpu.stream_version = stream_version;
                gpu.machine_id = recorded.machine_id;
                gpu.model_id.clone_from(&recorded.model_id);
                let summary = RunSummary {
                    run_id: recorded.run_id,
                    recorded_at: recorded.recorded_at,
                    started_at: recorded.started_at,
                    finished_at: recorded.finished_at,
                    driver_version: recorded.environment.driver_version.clone(),
                    simulated_profile: recorded.simulated_profile.clone(),
                    figures: recorded.run.figures.clone(),
                    score_bp: score.score_bp,
                    outcome: verdict.outcome,
                };
                if gpu.first_runs.len() < FIRST_RUNS_KEPT {
                    gpu.first_runs.push(summary.clone());
                }
                gpu.runs.push_back(summary);
                while gpu.runs.len() > RUNS_KEPT {
                    gpu.runs.pop_front();
                }
                gpu.runs_total += 1;
                // A newer run answers any re-test and ends an override (which covered the
                // verdict an admin looked at).
                gpu.retest = None;
                gpu.override_set = None;
                let figures: Vec<(Metric, u64)> = recorded
                    .run
                    .figures
                    .iter()
                    .map(|f| (f.metric, f.median_milli))
                    .collect();
                gpu.latest = Some(Latest {
                    recorded: (**recorded).clone(),
                    score,
                    verdict,
                });
                for metric in Metric::ALL {
                    let figures_of = self
                        .fleet
                        .entry((recorded.model_id.clone(), metric))
                        .or_default();
                    match figures.iter().find(|(m, _)| *m == metric) {
                        Some((_, value)) => figures_of.set(&recorded.gpu_uuid, *value),
                        None => figures_of.remove(&recorded.gpu_uuid),
                    }
                }
            }
            BenchmarkEvent::RunRefused(refused) => {
                let gpu = self.gpu_entry(
                    &refused.gpu_uuid,
                    refused.provider_id,
                    refused.machine_id,
                    &refused.model_id,
                );
                gpu.stream_version = stream_version;
                gpu.refused.push_back((**refused).clone());
                while gpu.refused.len() > REFUSED_KEPT {
                    gpu.refused.pop_front();
                }
                gpu.refused_total += 1;
                gpu.retest = None;
            }
            BenchmarkEvent::RetestRequested(requested) => {
                let gpu =
                    self.gpu_entry(&requested.gpu_uuid, requested.provider_id, Uuid::nil(), "");
                gpu.stream_version = stream_version;
                if !requested.by_admin {
                    gpu.last_provider_request = Some(requested.at);
                }
                gpu.retest = Some(requested.clone());
            }
            BenchmarkEvent::OverrideSet(set) => {
                let gpu = self.gpu_entry(&set.gpu_uuid, set.provider_id, Uuid::nil(), "");
                gpu.stream_version = stream_version;
                gpu.override_set = Some(set.clone());
            }
            BenchmarkEvent::OverrideCleared(cleared) => {
                let gpu = self.gpu_entry(&cleared.gpu_uuid, cleared.provider_id, Uuid::nil(), "");
                gpu.stream_version = stream_version;
                gpu.override_set = None;
            }
            BenchmarkEvent::GpuDelisted(acted) => {
                self.actions_version = stream_version;
                self.recent_delistings
                    .push_back((acted.model_id.clone(), acted.at));
                self.prune(acted.at);
                let gpu = self.gpu_entry(&acted.gpu_uuid, acted.provider_id, Uuid::nil(), "");
                gpu.delisted = Some(acted.clone());
                gpu.last_action = Some((true, acted.clone()));
            }
            BenchmarkEvent::GpuRelisted(acted) => {
                self.actions_version = stream_version;
                let gpu = self.gpu_entry(&acted.gpu_uuid, acted.provider_id, Uuid::nil(), "");
                gpu.delisted = None;
                gpu.last_action = Some((false, acted.clone()));
            }
            BenchmarkEvent::DelistingPaused(paused) => {
                self.actions_version = stream_version;
                self.paused = Some(paused.clone());
            }
            BenchmarkEvent::DelistingResumed(resumed) => {
                self.actions_version = stream_version;
                self.paused = None;
                self.resumed_at = Some(resumed.at);
            }
        }
    }

    fn gpu_entry(
        &mut self,
        gpu_uuid: &str,
        provider_id: Uuid,
        machine_id: Uuid,
        model_id: &str,
    ) -> &mut GpuBenchmarks {
        self.gpus
            .entry(gpu_uuid.to_owned())
            .or_insert_with(|| GpuBenchmarks::new(gpu_uuid, provider_id, machine_id, model_id))
    }

    fn prune(&mut self, now: Timestamp) {
        let since = now.unix_micros() - ACTION_WINDOW_MICROS;
        while self
            .recent_delistings
            .front()
            .is_some_and(|(_, at)| at.unix_micros() <= since)
        {
            self.recent_delistings.pop_front();
        }
    }

    pub fn gpu(&self, gpu_uuid: &str) -> Option<&GpuBenchmarks> {
        self.gpus.get(gpu_uuid)
    }

    pub fn gpus(&self) -> impl Iterator<Item = &GpuBenchmarks> {
        self.gpus.values()
    }

    /// The GPU stream's version (0: no benchmark event yet).
    pub fn stream_version(&self, gpu_uuid: &str) -> u64 {
        self.gpus.get(gpu_uuid).map_or(0, |g| g.stream_version)
    }

    pub fn actions_version(&self) -> u64 {
        self.actions_version
    }

    pub fn paused(&self) -> Option<&DelistingPaused> {
        self.paused.as_ref()
    }

    /// How many of the model's GPUs have an accepted figure for `metric`, and their median.
    pub fn fleet_figure(&self, model_id: &str, metric: Metric) -> (usize, Option<u64>) {
        self.fleet
            .get(&(model_id.to_owned(), metric))
            .map_or((0, None), |f| (f.sorted.len(), f.median()))
    }

    /// What a re-test decision needs.
    pub fn retest_state(&self, gpu_uuid: &str, provider_id: Uuid) -> RetestState {
        let gpu = self.gpus.get(gpu_uuid);
        RetestState {
            gpu_uuid: gpu_uuid.to_owned(),
            provider_id,
            pending: gpu.is_some_and(|g| g.retest.is_some()),
            last_provider_request: gpu.and_then(|g| g.last_provider_request),
        }
    }

    /// GPUs with a re-test waiting, for their machine's agent.
    pub fn retests_of(&self, machine_gpus: &[String]) -> Vec<&RetestRequested> {
        machine_gpus
            .iter()
            .filter_map(|g| self.gpus.get(g).and_then(|g| g.retest.as_ref()))
            .collect()
    }

    /// The automatic-action pass's view at `now`: the fleet's counts and the actions the
    /// latest verdicts ask for.
    pub fn pending_actions(&self, now: Timestamp) -> (FleetActions, Vec<Pending>) {
        let mut fleet = FleetActions {
            paused: self.paused.is_some(),
            ..FleetActions::default()
        };
        let since = now.unix_micros() - ACTION_WINDOW_MICROS;
        fleet.recent_delistings = self
            .recent_delistings
            .iter()
            .filter(|(_, at)| at.unix_micros() > since)
            .cloned()
            .collect();
        let mut pending = Vec::new();
        for gpu in self.gpus.values() {
            let Some(latest) = &gpu.latest else { continue };
            let driver = latest.recorded.environment.driver_version.clone();
            *fleet.fleet_sizes.entry(gpu.model_id.clone()).or_default() += 1;
            let group = fleet
                .groups
                .entry((gpu.model_id.clone(), driver.clone()))
                .or_default();
            group.0 += 1;
            let action = gpu.pending_action();
            // Failing now: delisted by a verdict that still fails, or about to be.
            let failing = latest.verdict.outcome == Outcome::Fail
                && gpu.override_set.is_none()
                && (gpu.delisted.is_some() || action == ListingAction::Delist);
            // A delisting older than the window is settled; the anomaly rule looks at GPUs
            // failing together now.
            let recent = gpu
                .delisted
                .as_ref()
                .is_none_or(|d| d.at.unix_micros() > since);
            let unseen = self
                .resumed_at
                .is_none_or(|resumed| latest.recorded.recorded_at > resumed);
            if failing && recent && unseen {
                group.1 += 1;
            }
            if action != ListingAction::Keep {
                pending.push(Pending {
                    gpu_uuid: gpu.gpu_uuid.clone(),
                    provider_id: gpu.provider_id,
                    model_id: gpu.model_id.clone(),
                    driver_version: driver,
                    run_id: latest.recorded.run_id,
                    action,
                    score_bp: latest.score.score_bp,
                    verdict: latest.verdict.clone(),
                    recorded_at: latest.recorded.recorded_at,
                });
            }
        }
        (fleet, pending)
    }
}
