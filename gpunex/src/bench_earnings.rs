//! `gpunex bench earnings`: the earnings API over real HTTP on a database written by `gpunex
//! simulate` with at least 1,000,000 usage events, and the rate of a full rebuild of the earnings
//! projection beside a bare ordered read of the same log (the ceiling, measured in the same run).

use std::time::{Duration, Instant};

use gpunex_domain::credentials::Role;
use serde::Serialize;

use crate::bench_search::{Latency, hammer};

#[derive(Debug, clap::Args)]
pub struct EarningsBenchArgs {
    /// Refuse to measure on fewer usage events than this.
    #[arg(long, default_value_t = 1_000_000)]
    pub min_usage_events: u64,
    /// When the database is empty, first simulate this many providers (8 GPUs each, 30 days,
    /// seed 42): 60 gives about 1.1 million usage events.
    #[arg(long, default_value_t = 60)]
    pub providers: u32,
    /// Seconds each endpoint is measured.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct Endpoint {
    pub path: String,
    pub latency: Latency,
}

#[derive(Debug, Serialize)]
pub struct EarningsReport {
    pub events: u64,
    pub usage_events: u64,
    /// A bare ordered read of the whole log (the ceiling).
    pub bare_read_events_per_second: u64,
    /// Read, decode and fold every earnings event of the log into a fresh projection.
    pub rebuild_events_per_second: u64,
    pub rebuild_seconds: f64,
    /// The server's start: every in-memory projection folded from the log.
    pub server_load_seconds: f64,
    pub provider_lines: u64,
    /// `GET /healthz` through the same server and client: the HTTP floor.
    pub reference_healthz: Latency,
    pub endpoints: Vec<Endpoint>,
}

/// `a / b` to two decimals, in integers.
pub(crate) fn ratio(a: u64, b: u64) -> String {
    let hundredths = u128::from(a) * 100 / u128::from(b.max(1));
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

/// Events per second, in integers.
pub(crate) fn rate(events: u64, elapsed: Duration) -> u64 {
    (u128::from(events) * 1_000_000 / elapsed.as_micros().max(1)) as u64
}

/// The CPU time this process has used so far, user and system, on all its threads.
pub(crate) fn process_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(Duration::ZERO, |usage| {
        let seconds = |t: nix::sys::time::TimeVal| {
            Duration::new(
                u64::try_from(t.tv_sec()).unwrap_or(0),
                u32::try_from(t.tv_usec()).unwrap_or(0) * 1_000,
            )
        };
        seconds(usage.user_time()) + seconds(usage.system_time())
    })
}

/// A bare ordered read of the log up to `head` (the ceiling of any replay): how many events,
/// and how long it took.
pub(crate) async fn bare_read(
    store: &gpunex_store::Store,
    head: u64,
) -> anyhow::Result<(u64, Duration)> {
    let started = Instant::now();
    let (mut after, mut events) = (0, 0_u64);
    while after < head {
        let batch = store
            .read_all(after, gpunex_store::READ_BATCH_EVENTS_MAX)
            .await?;
        let Some(last) = batch.last() else { break };
        after = last.position;
        events += batch.len() as u64;
    }
    Ok((events, started.elapsed()))
}

pub async fn run(database_url: &str, args: EarningsBenchArgs) -> anyhow::Result<()> {
    let store = crate::database::open_store(database_url).await?;
    if store.head_position().await? == 0 {
        let days = 30;
        eprintln!(
            "empty database: simulating {} providers x 8 GPUs x {days} days (seed 42) first ...",
            args.providers
        );
        let config = crate::simulate::SimConfig {
            seed: 42,
            providers: args.providers,
            gpus: 8,
            days,
            renters: 200,
            start: gpunex_app::payout_run::today_utc(store.clock().now())
                - chrono::Days::new(u64::from(days)),
            fees: gpunex_domain::metering::FeeSchedule::default(),
        };
        let report = crate::simulate::simulate(&store, &config, &|_| {}).await?;
        eprintln!(
            "simulated: {} events, {} usage, in {:.0} s",
            report.events, report.usage_events, report.seconds
        );
    }
    let head = store.head_position().await?;

    // The ceiling: a bare ordered read of the whole log.
    let (events, bare) = bare_read(&store, head).await?;

    // The rebuild of the stored earnings projection: emptied, then every batch read, the
    // earnings events decoded, folded and written with the checkpoint.
    let started = Instant::now();
    store.rebuild_earnings().await?;
    let rebuild = started.elapsed();
    let (provider_id, provider_lines, usage_events) = {
        let cursors = store.earnings_all_cursors().await?;
        let usage_events: u64 = cursors.values().map(|c| c.through.lines).sum();
        let (provider_id, provider_lines) = cursors
            .iter()
            .map(|(p, c)| (*p, c.through.lines))
            .max_by_key(|(_, lines)| *lines)
            .ok_or_else(|| anyhow::anyhow!("no provider has earnings"))?;
        (provider_id, provider_lines, usage_events)
    };
    anyhow::ensure!(
        usage_events >= args.min_usage_events,
        "the database holds {usage_events} usage lines, fewer than {}: write one with `gpunex simulate --providers 60 --gpus 8 --days 30` into an empty DATABASE_URL",
        args.min_usage_events
    );

    let started = Instant::now();
    let state = gpunex_api::AppState::load(store.clone()).await?;
    let server_load = started.elapsed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let router = gpunex_api::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, router).await });
    let (token, _) = gpunex_api::tokens::issue_token(
        &state.store,
        &state.credentials,
        gpunex_api::tokens::TokenRequest::new(Role::Finance, "bench", "cli"),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let today = gpunex_app::payout_run::today_utc(state.clock.now());
    let month_ago = today - chrono::Days::new(30);
    let yesterday = today - chrono::Days::new(1);
    let paths = [
        format!("/v1/providers/{provider_id}/earnings"),
        format!(
            "/v1/providers/{provider_id}/earnings?from={month_ago}&to={today}&tz=Europe/Madrid"
        ),
        format!("/v1/providers/{provider_id}/earnings/daily?from={month_ago}&to={today}"),
        format!(
            "/v1/providers/{provider_id}/earnings/statement.csv?from={yesterday}&to={yesterday}"
        ),
        "/v1/earnings".to_owned(),
    ];
    eprintln!(
        "{events} events, {usage_events} usage; provider {provider_id} has {provider_lines} lines; {} client(s), {} s per endpoint ...",
        args.clients, args.seconds
    );
    let reference_healthz = hammer(
        &base,
        &["/healthz".to_owned()],
        args.clients,
        args.seconds,
        None,
    )
    .await?;
    let mut endpoints = Vec::new();
    for path in paths {
        let latency = hammer(
            &base,
            std::slice::from_ref(&path),
            args.clients,
            args.seconds,
            Some(&token.token),
        )
        .await?;
        endpoints.push(Endpoint { path, latency });
    }
    let report = EarningsReport {
        events,
        usage_events,
        bare_read_events_per_second: rate(events, bare),
        rebuild_events_per_second: rate(events, rebuild),
        rebuild_seconds: rebuild.as_secs_f64(),
        server_load_seconds: server_load.as_secs_f64(),
        provider_lines,
        reference_healthz,
        endpoints,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "log: {} events ({} usage); one provider: {} usage lines",
        report.events, report.usage_events, report.provider_lines
    );
    println!(
        "earnings rebuild      {:>9} events/s  ({:.1} s)   bare ordered read {:>9} events/s   ratio {}",
        report.rebuild_events_per_second,
        report.rebuild_seconds,
        report.bare_read_events_per_second,
        ratio(
            report.rebuild_events_per_second,
            report.bare_read_events_per_second
        )
    );
    println!(
        "server start (every in-memory projection folded): {:.1} s",
        report.server_load_seconds
    );
    print_endpoints(&report.reference_healthz, &report.endpoints);
    Ok(())
}

/// The latency table of a run: `/healthz` (the reference), then each endpoint.
pub(crate) fn print_endpoints(reference: &Latency, endpoints: &[Endpoint]) {
    println!(
        "{:<100} {:>9} {:>9} {:>9} {:>9}",
        "endpoint", "requests", "p50 us", "p99 us", "max us"
    );
    let row = |path: &str, l: &Latency| {
        println!(
            "{:<100} {:>9} {:>9} {:>9} {:>9}",
            path, l.requests, l.p50_us, l.p99_us, l.max_us
        );
    };
    row("/healthz (reference)", reference);
    for endpoint in endpoints {
        row(&endpoint.path, &endpoint.latency);
    }
}
