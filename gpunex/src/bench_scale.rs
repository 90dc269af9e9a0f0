//! `gpunex bench scale`: what a server costs as the log grows. On a database written by `gpunex
//! simulate`, it starts `gpunex serve` as a fresh process and measures the time until `/readyz`
//! answers ready with every read model caught up, the server's resident memory after the start
//! and after a stretch of load, the provider dashboard and statement latency over HTTP (beside
//! `/healthz` through the same client, the HTTP floor), and the stored projection's catch-up
//! (a full rebuild of the ledger read model) beside a bare ordered read of the same log: the
//! figures run twice, on logs of different lengths, show whether cost is flat in history.
//! Resident memory is read from `/proc/<pid>/status` (Linux).

use std::time::{Duration, Instant};

use gpunex_domain::credentials::Role;
use serde::Serialize;

use crate::bench_earnings::{Endpoint, bare_read, print_endpoints, rate, ratio};
use crate::bench_search::{Latency, hammer};

#[derive(Debug, clap::Args)]
pub struct ScaleBenchArgs {
    /// Refuse to measure on fewer events than this (simulate first).
    #[arg(long, default_value_t = 100_000)]
    pub min_events: u64,
    /// Seconds each endpoint is measured.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Seconds of load (the dashboard endpoints, round robin) before resident memory is read
    /// again.
    #[arg(long, default_value_t = 600)]
    pub load_seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Longest wait for the server to become ready.
    #[arg(long, default_value_t = 900)]
    pub ready_timeout_seconds: u64,
    /// Print figures as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct ScaleReport {
    pub database: String,
    pub events: u64,
    /// From starting `gpunex serve` until `/readyz` answers ready with no projection behind.
    pub ready_seconds: f64,
    /// The server's resident memory once ready, in MiB.
    pub rss_ready_mib: u64,
    /// After `load_seconds` of requests.
    pub rss_loaded_mib: u64,
    pub load_seconds: u64,
    /// A bare ordered read of the whole log (the ceiling of any catch-up).
    pub bare_read_events_per_second: u64,
    /// The stored ledger projection rebuilt from position 0.
    pub catch_up_events_per_second: u64,
    pub reference_healthz: Latency,
    pub endpoints: Vec<Endpoint>,
}

/// The server process, killed when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The resident set of process `pid`, in MiB (`VmRSS` in `/proc/<pid>/status`).
fn rss_mib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib / 1024)
}

/// Waits until `/readyz` answers 200 with every projection caught up.
async fn wait_ready(base: &str, timeout: Duration) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + timeout;
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the server was not ready within {timeout:?}"
        );
        if let Ok(response) = http.get(format!("{base}/readyz")).send().await
            && response.status().is_success()
        {
            let ready: gpunex_wire::Readiness = response.json().await?;
            if ready.projections.iter().all(|p| p.lag_events == 0) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn run(database_url: &str, args: ScaleBenchArgs) -> anyhow::Result<()> {
    let store = crate::cli::open_store(database_url).await?;
    let events = store.head_position().await?;
    anyhow::ensure!(
        events >= args.min_events,
        "the log holds {events} events, fewer than --min-events {}: run `gpunex simulate` first",
        args.min_events
    );
    // A finance token to read any provider's earnings, issued before the server starts (it
    // folds the token like every other event).
    let (token, _) = gpunex_api::tokens::issue_token(
        &store,
        None,
        gpunex_api::tokens::TokenRequest::new(Role::Finance, "bench scale", "cli"),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let today = gpunex_api::payout_run::today_utc(store.clock().now());

    eprintln!(
        "{events} events: bare ordered read, then a full rebuild of the ledger projection ..."
    );
    let head = store.head_position().await?;
    let (read, bare) = bare_read(&store, head).await?;
    let started = Instant::now();
    let rebuilt = store.rebuild_projections(&|_| {}).await?;
    let catch_up = started.elapsed();

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let mailbox = tempfile::tempdir()?;
    eprintln!("starting `gpunex serve` on {base} ...");
    let started = Instant::now();
    let server = Server(
        std::process::Command::new(std::env::current_exe()?)
            .args(["--database-url", database_url, "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--mailbox-dir")
            .arg(mailbox.path())
            .arg("--no-payout-scheduler")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    wait_ready(&base, Duration::from_secs(args.ready_timeout_seconds)).await?;
    let ready = started.elapsed();
    let pid = server.0.id();
    let rss_ready = rss_mib(pid)?;

    // The provider with the most usage lines in the last 30 days, from the finance view.
    let month_ago = today - chrono::Days::new(30);
    let yesterday = today - chrono::Days::new(1);
    let finance: gpunex_wire::earnings::FinanceEarnings = reqwest::Client::new()
        .get(format!("{base}/v1/earnings?from={month_ago}&to={today}"))
        .bearer_auth(&token.token)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let provider_id = finance
        .providers
        .iter()
        .max_by_key(|p| p.period.lines)
        .map(|p| p.provider_id)
        .ok_or_else(|| anyhow::anyhow!("the finance view lists no provider"))?;
    let paths = [
        format!("/v1/providers/{provider_id}/earnings"),
        format!("/v1/providers/{provider_id}/earnings/daily?from={month_ago}&to={today}"),
        format!(
            "/v1/providers/{provider_id}/earnings/statement.csv?from={yesterday}&to={yesterday}"
        ),
        format!("/v1/providers/{provider_id}/payouts"),
    ];
    let reference_healthz = hammer(
        &base,
        &["/healthz".to_owned()],
        args.clients,
        args.seconds,
        None,
    )
    .await?;
    let mut endpoints = Vec::new();
    for path in &paths {
        let latency = hammer(
            &base,
            std::slice::from_ref(path),
            args.clients,
            args.seconds,
            Some(&token.token),
        )
        .await?;
        endpoints.push(Endpoint {
            path: path.clone(),
            latency,
        });
    }
    if args.load_seconds > 0 {
        eprintln!("{} s of load ...", args.load_seconds);
        hammer(
            &base,
            &paths,
            args.clients,
            args.load_seconds,
            Some(&token.token),
        )
        .await?;
    }
    let rss_loaded = rss_mib(pid)?;
    drop(server);

    let report = ScaleReport {
        database: format!("{:?}", store.backend()).to_lowercase(),
        events,
        ready_seconds: ready.as_secs_f64(),
        rss_ready_mib: rss_ready,
        rss_loaded_mib: rss_loaded,
        load_seconds: args.load_seconds,
        bare_read_events_per_second: rate(read, bare),
        catch_up_events_per_second: rate(rebuilt, catch_up),
        reference_healthz,
        endpoints,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}: {} events", report.database, report.events);
    println!(
        "start until ready       {:>8.1} s     resident {:>5} MiB ready, {:>5} MiB after {} s of load",
        report.ready_seconds, report.rss_ready_mib, report.rss_loaded_mib, report.load_seconds
    );
    println!(
        "stored catch-up     {:>9} events/s   bare ordered read {:>9} events/s   ratio {}",
        report.catch_up_events_per_second,
        report.bare_read_events_per_second,
        ratio(
            report.catch_up_events_per_second,
            report.bare_read_events_per_second
        )
    );
    print_endpoints(&report.reference_healthz, &report.endpoints);
    Ok(())
}
