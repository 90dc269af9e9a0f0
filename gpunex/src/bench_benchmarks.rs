//! `gpunex bench benchmarks`: scoring at fleet scale (issue 18). In one process, no database:
//!
//! - **fold and score**: 100,000 GPUs' runs (simulated, about 8 % degraded, across every catalog
//!   model), each decided against the fleet as it grows (`decide_record`: plausibility and the
//!   references) and stored as JSON as the log stores it; then the stored runs decoded and
//!   folded into the benchmark model (each run scored and judged, each model's fleet figures
//!   kept sorted), beside the reference: decoding the same runs alone, which every fold of the
//!   log pays;
//! - **the automatic-action pass** over the whole fleet (what fails, the rate limit, the anomaly
//!   rule), beside the fold of one run;
//! - **a listing search with score filters** on a listing snapshot of those GPUs (listed, priced),
//!   sorted by score and filtered by a minimum score, beside the same search without them.

use std::time::{Duration, Instant};

use gpunex_domain::DomainEvent;
use gpunex_domain::benchmark::simulated::{self, Profile};
use gpunex_domain::benchmark_log::{self, BenchedGpu, BenchmarkEvent, Environment, Submitted};
use gpunex_domain::gpu::GPU_CATALOG;
use gpunex_domain::time::Timestamp;
use gpunex_projections::applications::Applications;
use gpunex_projections::fleet::Fleet;
use gpunex_projections::market::{BuildInputs, ListingSnapshot, Market, SearchFilter, SortBy};
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, clap::Args)]
pub struct BenchmarksBenchArgs {
    /// GPUs with a run (and listed, for the search).
    #[arg(long, default_value_t = 100_000)]
    pub gpus: usize,
    /// Searches timed per variant.
    #[arg(long, default_value_t = 2_000)]
    pub searches: usize,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchmarksReport {
    pub gpus: usize,
    pub degraded: usize,
    pub failing: usize,
    pub decide_runs_per_second: u64,
    pub fold_runs_per_second: u64,
    pub decode_runs_per_second: u64,
    pub fold_to_decode: String,
    /// The benchmark model's size as the snapshot serializes it, per GPU (one run each).
    pub model_bytes_per_gpu: u64,
    pub actions_pass_ms: u64,
    pub actions_delist_now: usize,
    pub actions_deferred: usize,
    pub snapshot_build_ms: u64,
    pub search_plain_p50_ns: u64,
    pub search_plain_p99_ns: u64,
    pub search_score_p50_ns: u64,
    pub search_score_p99_ns: u64,
    pub search_score_to_plain_p99: String,
}

fn rate(n: usize, elapsed: Duration) -> u64 {
    (n as u128 * 1_000_000 / elapsed.as_micros().max(1)) as u64
}

fn ratio(a: u64, b: u64) -> String {
    format!("{}.{:02}", a / b.max(1), a * 100 / b.max(1) % 100)
}

fn percentile(sorted: &[u64], pct: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() - 1) * pct / 100]
}

/// The fleet's GPUs: one registered, online machine per 8 GPUs, an approved provider per
/// machine, a price; the events applied to the in-memory models the listing snapshot reads.
struct Fleetwide {
    applications: Applications,
    fleet: Fleet,
    market: Market,
    gpus: Vec<BenchedGpu>,
}

fn fleet_of(gpus: usize, at: Timestamp) -> anyhow::Result<Fleetwide> {
    let mut fleetwide = Fleetwide {
        applications: Applications::default(),
        fleet: Fleet::default(),
        market: Market::default(),
        gpus: Vec::with_capacity(gpus),
    };
    let mut position = 0_u64;
    let providers = gpus.div_ceil(crate::bench_search::GPUS_PER_PROVIDER);
    for index in 0..providers {
        for append in crate::bench_search::provider_events(index, at) {
            for (version, new) in append.events.iter().enumerate() {
                position += 1;
                let event = DomainEvent::decode(&new.event_type, new.schema_version, &new.payload)?;
                let version = version as u64 + 1;
                fleetwide.applications.apply(position, &event);
                fleetwide.fleet.apply(version, at.unix_micros(), &event);
                fleetwide
                    .market
                    .apply(position, version, at.unix_micros(), &event);
            }
        }
    }
    for machine in fleetwide.fleet.machines() {
        for gpu in &machine.gpus {
            if fleetwide.gpus.len() < gpus {
                fleetwide.gpus.push(BenchedGpu {
                    gpu_uuid: gpu.gpu.gpu_uuid.clone(),
                    machine_id: machine.machine_id,
                    provider_id: machine.provider_id,
                    model_id: gpu.model_id.clone(),
                    pci_device_id: gpu.gpu.pci_device_id,
                    simulated: false,
                });
            }
        }
    }
    Ok(fleetwide)
}

pub async fn run(args: BenchmarksBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.gpus >= 100, "--gpus: at least 100");
    let report = bench(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(())
}

fn bench(args: &BenchmarksBenchArgs) -> anyhow::Result<BenchmarksReport> {
    let at = Timestamp::from_unix_micros(1_780_000_000_000_000);
    eprintln!(
        "{} GPUs: registering, pricing and listing them in memory ...",
        args.gpus
    );
    let mut fleetwide = fleet_of(args.gpus, at)?;
    let mut rng = gpunex_domain::splitmix::SplitMix64(42);
    let environment = Environment::simulated("550.54.15", "12.4", false, 60);

    // Decide every run against the fleet as it grows, keeping each as the log keeps it.
    eprintln!("deciding {} runs ...", fleetwide.gpus.len());
    let mut degraded = 0;
    let mut stored: Vec<(&'static str, String)> = Vec::with_capacity(fleetwide.gpus.len());
    let started = Instant::now();
    let mut deciding = Market::default();
    let mut decide_time = Duration::ZERO;
    for (i, gpu) in fleetwide.gpus.iter().enumerate() {
        let model_id = gpu.model_id.as_deref().unwrap_or_default();
        let model = GPU_CATALOG
            .iter()
            .find(|m| m.id == model_id)
            .ok_or_else(|| anyhow::anyhow!("{model_id} is not a catalog model"))?;
        let profile = if rng.next_u64() % 100 < 8 {
            degraded += 1;
            Profile::ALL[1 + (rng.next_u64() % (Profile::ALL.len() as u64 - 1)) as usize]
        } else {
            Profile::Healthy
        };
        let variant = model
            .variants
            .iter()
            .find(|v| v.pci_device_id == gpu.pci_device_id)
            .unwrap_or(&model.variants[0]);
        let run = simulated::run(model, variant, &gpu.gpu_uuid, profile, rng.next_u64());
        let submitted = Submitted {
            run_id: Uuid::from_u128(i as u128 + 1),
            simulated_profile: None,
            environment: environment.clone(),
            run,
            started_at: at,
            finished_at: at,
        };
        let timed = Instant::now();
        let benchmarks = deciding.benchmarks();
        let event = benchmark_log::decide_record(
            gpu,
            submitted,
            |model, metric| benchmarks.fleet_figure(model, metric),
            at,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        decide_time += timed.elapsed();
        let event = DomainEvent::Benchmark(event);
        deciding.apply(0, 1, 0, &event);
        stored.push((
            event.event_type(),
            serde_json::to_string(&event.to_payload())?,
        ));
    }
    let _ = started;

    // The reference: decoding the stored runs.
    eprintln!("decoding them (the reference), then folding them ...");
    let started = Instant::now();
    let mut decoded = 0;
    for (event_type, payload) in &stored {
        let event = DomainEvent::decode_json(event_type, 1, payload)?;
        decoded += usize::from(matches!(event, DomainEvent::Benchmark(_)));
    }
    let decode = started.elapsed();
    anyhow::ensure!(decoded == stored.len());
    // The fold: decode, score, judge, keep the fleet's figures sorted.
    let started = Instant::now();
    for (event_type, payload) in &stored {
        let event = DomainEvent::decode_json(event_type, 1, payload)?;
        fleetwide.market.apply(0, 1, 0, &event);
    }
    let fold = started.elapsed();
    let failing = fleetwide
        .market
        .benchmarks()
        .gpus()
        .filter(|g| {
            g.latest
                .as_ref()
                .is_some_and(|l| l.verdict.outcome == gpunex_domain::benchmark::Outcome::Fail)
        })
        .count();

    let model_bytes = serde_json::to_vec(fleetwide.market.benchmarks())?.len();
    // One automatic-action pass over the whole fleet.
    let started = Instant::now();
    let (actions, pending) = fleetwide.market.benchmarks().pending_actions(at);
    let plan = benchmark_log::plan_actions(&actions, &pending, at);
    let pass = started.elapsed();
    let delist_now = plan
        .events
        .iter()
        .filter(|e| matches!(e, BenchmarkEvent::GpuDelisted(_)))
        .count();

    // The listing snapshot of the fleet, and searches with and without the score.
    eprintln!("building the listing snapshot and searching ...");
    let applications: Vec<_> = fleetwide
        .applications
        .all()
        .into_iter()
        .map(|(_, a)| a.clone())
        .collect();
    let started = Instant::now();
    let snapshot = ListingSnapshot::build(
        &BuildInputs {
            fleet: &fleetwide.fleet,
            market: &fleetwide.market,
            applications: &applications,
            added_models: &[],
            dev_mode: false,
        },
        at,
    );
    let build = started.elapsed();
    anyhow::ensure!(
        snapshot.listings.len() >= args.gpus * 9 / 10,
        "only {} of {} GPUs listed",
        snapshot.listings.len(),
        args.gpus
    );
    let model = Some(GPU_CATALOG[0].id.to_owned());
    let plain = SearchFilter {
        model: model.clone(),
        ..SearchFilter::default()
    };
    let scored = SearchFilter {
        model,
        min_performance_bp: Some(9_500),
        ..SearchFilter::default()
    };
    let time = |filter: &SearchFilter, sort: SortBy| {
        let mut samples = Vec::with_capacity(args.searches);
        for _ in 0..args.searches {
            let started = Instant::now();
            let (page, _) = snapshot.search(filter, sort, None, 50);
            std::hint::black_box(page.len());
            samples.push(started.elapsed().as_nanos() as u64);
        }
        samples.sort_unstable();
        samples
    };
    // Both find a full page.
    anyhow::ensure!(snapshot.search(&plain, SortBy::Rank, None, 50).0.len() == 50);
    let (page, _) = snapshot.search(&scored, SortBy::Performance, None, 50);
    anyhow::ensure!(
        page.len() == 50
            && page
                .iter()
                .all(|l| l.performance_score_bp.is_some_and(|s| s >= 9_500)),
        "the score filter found {} listings",
        page.len()
    );
    // Interleaved, so both see the same machine.
    let mut plain_samples = Vec::new();
    let mut score_samples = Vec::new();
    for _ in 0..4 {
        plain_samples.extend(time(&plain, SortBy::Rank));
        score_samples.extend(time(&scored, SortBy::Performance));
    }
    plain_samples.sort_unstable();
    score_samples.sort_unstable();
    let (plain_p99, score_p99) = (
        percentile(&plain_samples, 99),
        percentile(&score_samples, 99),
    );
    Ok(BenchmarksReport {
        gpus: stored.len(),
        degraded,
        failing,
        decide_runs_per_second: rate(stored.len(), decide_time),
        fold_runs_per_second: rate(stored.len(), fold),
        decode_runs_per_second: rate(stored.len(), decode),
        fold_to_decode: ratio(rate(stored.len(), fold), rate(stored.len(), decode)),
        model_bytes_per_gpu: (model_bytes / stored.len().max(1)) as u64,
        actions_pass_ms: pass.as_millis() as u64,
        actions_delist_now: delist_now,
        actions_deferred: plan.deferred,
        snapshot_build_ms: build.as_millis() as u64,
        search_plain_p50_ns: percentile(&plain_samples, 50),
        search_plain_p99_ns: plain_p99,
        search_score_p50_ns: percentile(&score_samples, 50),
        search_score_p99_ns: score_p99,
        search_score_to_plain_p99: ratio(score_p99, plain_p99.max(1)),
    })
}

fn print(r: &BenchmarksReport) {
    println!(
        "{} GPUs benchmarked ({} degraded profiles; {} failing their verdict)",
        r.gpus, r.degraded, r.failing
    );
    println!(
        "decide (plausibility, references)  {:>9} runs/s",
        r.decide_runs_per_second
    );
    println!(
        "fold (decode, score, verdict)      {:>9} runs/s   reference: decode alone {:>9} runs/s   ratio {}",
        r.fold_runs_per_second, r.decode_runs_per_second, r.fold_to_decode
    );
    println!(
        "benchmark model, serialized        {:>9} bytes per GPU (one run each)",
        r.model_bytes_per_gpu
    );
    println!(
        "automatic-action pass, whole fleet {:>9} ms      {} delisted now, {} deferred by the rate limit",
        r.actions_pass_ms, r.actions_delist_now, r.actions_deferred
    );
    println!(
        "listing snapshot build            {:>9} ms",
        r.snapshot_build_ms
    );
    println!(
        "search by score (min 95 %, sorted)  p50 {:>6} ns  p99 {:>6} ns   reference: by rank, no score filter p50 {:>6} ns  p99 {:>6} ns   p99 ratio {}",
        r.search_score_p50_ns,
        r.search_score_p99_ns,
        r.search_plain_p50_ns,
        r.search_plain_p99_ns,
        r.search_score_to_plain_p99
    );
}
