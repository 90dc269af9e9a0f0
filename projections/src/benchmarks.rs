//! The benchmark read model (issue 18): per GPU its latest run with its score and verdict, a
//! bounded history of runs, the automatic listing state, overrides and re-test requests; per
//! model and metric the fleet's latest accepted figures, kept sorted for the median; and the
//! fleet's automatic-action state (pause, the last hour's delistings).
//!
//! Bounded in memory: each GPU keeps its first [`FIRST_RUNS_KEPT`] and last [`RUNS_KEPT`] runs
//! as summaries and its last [`REFUSED_KEPT`] refusals; every run stays in the log.

use std::collections::{BTreeMap, HashMap, VecDeque};

use gpunex_domain::DomainEvent;
use gpunex_domain::Timestamp;
use gpunex_domain::benchmark::{self, ListingAction, Metric, Outcome, Score, Verdict};
use gpunex_domain::benchmark_log::{
    self, ACTION_WINDOW_MICROS, BenchmarkEvent, DelistingPaused, FleetActions, ListingActed,
    OverrideSet, Pending, RetestRequested, RetestState, RunRecorded, RunRefused, SuiteSkipped,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Runs kept per GPU, newest last.
pub const RUNS_KEPT: usize = 12;
/// A GPU's first runs kept, for its consistency against itself.
pub const FIRST_RUNS_KEPT: usize = 3;
/// Refused runs kept per GPU.
pub const REFUSED_KEPT: usize = 5;

/// One run as the tab lists it: what it scored and when (its figures stay in the log; the
/// latest run is kept in full).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub run_id: Uuid,
    pub recorded_at: Timestamp,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub driver_version: String,
    pub simulated_profile: Option<String>,
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
    /// Why the agent cannot run the suite on this GPU, until a run is recorded.
    pub skipped: Option<SuiteSkipped>,
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
            skipped: None,
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

/// A multiset of figures kept sorted in chunks of at most [`CHUNK_MAX`]: inserting or removing
/// one moves at most a chunk, and the median is found by walking the chunks' lengths, so a model
/// with 100,000 GPUs costs microseconds per run rather than a copy of the whole fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SortedFigures {
    chunks: Vec<Vec<u64>>,
    len: usize,
}

const CHUNK_MAX: usize = 512;

impl SortedFigures {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk `value` belongs in: the first whose last value is at least it, else the last.
    fn chunk_of(&self, value: u64) -> usize {
        self.chunks
            .partition_point(|c| c.last().is_some_and(|last| *last < value))
            .min(self.chunks.len().saturating_sub(1))
    }

    pub fn insert(&mut self, value: u64) {
        if self.chunks.is_empty() {
            self.chunks.push(Vec::with_capacity(CHUNK_MAX));
        }
        let c = self.chunk_of(value);
        let chunk = &mut self.chunks[c];
        let at = chunk.partition_point(|v| *v < value);
        chunk.insert(at, value);
        self.len += 1;
        if chunk.len() > CHUNK_MAX {
            let upper = chunk.split_off(CHUNK_MAX / 2);
            self.chunks.insert(c + 1, upper);
        }
    }

    /// Removes one `value`; false when it is not there.
    pub fn remove(&mut self, value: u64) -> bool {
        if self.chunks.is_empty() {
            return false;
        }
        let c = self.chunk_of(value);
        let chunk = &mut self.chunks[c];
        let Ok(at) = chunk.binary_search(&value) else {
            return false;
        };
        chunk.remove(at);
        self.len -= 1;
        if chunk.is_empty() {
            self.chunks.remove(c);
        }
        true
    }

    /// The lower middle, as `benchmark::median`.
    pub fn median(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let mut k = (self.len - 1) / 2;
        for chunk in &self.chunks {
            if k < chunk.len() {
                return Some(chunk[k]);
            }
            k -= chunk.len();
        }
        None
    }
}

/// One model's fleet: per metric, the latest accepted figure of each of its GPUs, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ModelFleet {
    figures: BTreeMap<Metric, SortedFigures>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Benchmarks {
    gpus: HashMap<String, GpuBenchmarks>,
    /// Per model, the fleet's latest accepted figures (each GPU's are in its `latest`).
    fleet: HashMap<String, ModelFleet>,
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
                gpu.skipped = None;
                // The GPU's previous figures leave its model's fleet; the new ones enter it.
                let previous = gpu
                    .latest
                    .take()
                    .map(|l| (l.recorded.model_id, l.recorded.run.figures));
                gpu.latest = Some(Latest {
                    recorded: (**recorded).clone(),
                    score,
                    verdict,
                });
                if let Some((model_id, figures)) = previous
                    && let Some(fleet) = self.fleet.get_mut(&model_id)
                {
                    for figure in figures {
                        if let Some(sorted) = fleet.figures.get_mut(&figure.metric) {
                            sorted.remove(figure.median_milli);
                        }
                    }
                }
                let fleet = self.fleet.entry(recorded.model_id.clone()).or_default();
                for figure in &recorded.run.figures {
                    fleet
                        .figures
                        .entry(figure.metric)
                        .or_default()
                        .insert(figure.median_milli);
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
                gpu.skipped = None;
            }
            BenchmarkEvent::SuiteSkipped(skipped) => {
                let gpu = self.gpu_entry(
                    &skipped.gpu_uuid,
                    skipped.provider_id,
                    skipped.machine_id,
                    "",
                );
                gpu.stream_version = stream_version;
                gpu.skipped = Some(skipped.clone());
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
            .get(model_id)
            .and_then(|f| f.figures.get(&metric))
            .map_or((0, None), |f| (f.len(), f.median()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_figures_keep_the_median_through_inserts_and_removes() {
        let mut sorted = SortedFigures::default();
        let mut plain: Vec<u64> = Vec::new();
        let mut rng = gpunex_domain::splitmix::SplitMix64(7);
        for round in 0..20_000 {
            let value = rng.next_u64() % 5_000;
            if round % 3 == 2 && !plain.is_empty() {
                let gone = plain[(value as usize) % plain.len()];
                assert!(sorted.remove(gone));
                let at = plain.iter().position(|v| *v == gone).unwrap();
                plain.remove(at);
            } else {
                sorted.insert(value);
                plain.push(value);
            }
            if round % 97 == 0 {
                let mut copy = plain.clone();
                assert_eq!(
                    sorted.median(),
                    benchmark::median(&mut copy),
                    "round {round}"
                );
                assert_eq!(sorted.len(), plain.len());
            }
        }
        assert!(!sorted.remove(99_999));
        assert!(
            sorted
                .chunks
                .iter()
                .all(|c| !c.is_empty() && c.len() <= CHUNK_MAX)
        );
        assert!(
            sorted
                .chunks
                .windows(2)
                .all(|w| w[0].last() <= w[1].first())
        );
    }
}
