//! `gpunex bench scale`: what a server costs as the log grows. On a database written by `gpunex
//! simulate`, it starts `gpunex serve` as a fresh process twice, first with no read-model
//! snapshot stored (a fold of the whole log, which writes one) and then as a restart from that
//! snapshot, and measures the time until `/readyz` answers ready with every read model caught
//! up, the server's resident memory after each start and after a stretch of load, the provider
//! dashboard and statement latency over HTTP (beside `/healthz` through the same client, the HTTP
//! floor), and each stored projection's catch-up (a full rebuild) beside a bare ordered read of
//! the same log made right before it, in rounds (the fastest of each side is the figure): the
//! figures run twice, on logs of different lengths, show whether cost is flat in history.
//! Resident memory is read from `/proc/<pid>/status` (Linux).

use std::time::{Duration, Instant};

use gpunex_domain::credentials::Role;
use serde::Serialize;

use crate::bench_earnings::{Endpoint, bare_read, print_endpoints, process_cpu, rate, ratio};
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
    /// Seconds of usage reports (one agent, one rented GPU) measured while another store handle
    /// appends batches at full speed, as another server process would; 0 skips it.
    #[arg(long, default_value_t = 20)]
    pub usage_seconds: u64,
    /// Rounds of each stored projection's catch-up, each a bare ordered read then a rebuild:
    /// the fastest of each side is the figure, and every round's ratio is printed beside it
    /// (on a shared machine one slow round says little).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub catch_up_rounds: u32,
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
    /// The first start with no snapshot stored (it folds the whole log into memory and writes
    /// one), until ready, and its resident memory then, in MiB.
    pub cold_ready_seconds: f64,
    pub cold_rss_mib: u64,
    /// A restart, from the snapshot the first start wrote: from starting `gpunex serve` until
    /// `/readyz` answers ready with no projection behind.
    pub ready_seconds: f64,
    /// The server's resident memory once ready, in MiB.
    pub rss_ready_mib: u64,
    /// The read-model snapshot the restart began from, in bytes.
    pub snapshot_bytes: u64,
    /// After `load_seconds` of requests.
    pub rss_loaded_mib: u64,
    pub load_seconds: u64,
    /// Each stored projection rebuilt from position 0 (ledger, earnings, rentals, payouts,
    /// presence, prices), beside a bare ordered read of the whole log made right before it.
    pub catch_up: Vec<CatchUp>,
    pub reference_healthz: Latency,
    pub endpoints: Vec<Endpoint>,
    /// `POST /v1/agent/events` with one usage report, while another writer appends.
    pub usage_report: Option<Latency>,
    /// Events the other writer appended meanwhile, per second.
    pub concurrent_appends_per_second: u64,
}

/// One stored projection's full catch-up (a rebuild from position 0) beside a bare ordered read
/// of the same log made right before it, so both find the page cache in the same state, and
/// where the catch-up's time went (`gpunex_store::CatchUpTimes`: reading, decoding and
/// folding, and writing overlap, so they may add up to more than the whole). Measured in
/// rounds (`--catch-up-rounds`): the figures are the fastest rebuild's and the fastest bare
/// read's, and `rounds` has each round's.
#[derive(Debug, Serialize)]
pub struct CatchUp {
    pub projection: &'static str,
    pub events_per_second: u64,
    /// The ceiling of any catch-up.
    pub bare_read_events_per_second: u64,
    pub bare_read_seconds: f64,
    /// The whole rebuild, swap and vacuum included.
    pub seconds: f64,
    pub read_seconds: f64,
    pub fold_seconds: f64,
    pub write_seconds: f64,
    /// The CPU time (user and system, all threads) the rebuild and the bare read used: on two
    /// cores a catch-up is at most twice its CPU seconds per wall second.
    pub cpu_seconds: f64,
    pub bare_read_cpu_seconds: f64,
    pub rounds: Vec<CatchUpRound>,
}

/// One round of a catch-up's measure: a bare ordered read, then the rebuild.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpRound {
    pub bare_read_seconds: f64,
    pub seconds: f64,
    /// The rebuild's rate over the bare read's in this round alone, in hundredths.
    pub ratio: String,
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

/// Starts `gpunex serve` on a free loopback port and waits until it is ready: the process, how
/// long that took, and its base URL.
async fn start_server(
    database_url: &str,
    mailbox: &std::path::Path,
    args: &ScaleBenchArgs,
) -> anyhow::Result<(Server, Duration, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    eprintln!("starting `gpunex serve` on {base} ...");
    let started = Instant::now();
    let server = Server(
        std::process::Command::new(std::env::current_exe()?)
            .args(["--database-url", database_url, "serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--mailbox-dir")
            .arg(mailbox)
            .arg("--no-payout-scheduler")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()?,
    );
    wait_ready(&base, Duration::from_secs(args.ready_timeout_seconds)).await?;
    Ok((server, started.elapsed(), base))
}

/// Waits until `/readyz` answers 200 with every projection caught up.
pub(crate) async fn wait_ready(base: &str, timeout: Duration) -> anyhow::Result<()> {
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

/// One JSON call to the server; a non-2xx answer is an error naming the path.
async fn call(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    token: Option<&str>,
    body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let mut request = http.post(format!("{base}{path}")).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    let answer: serde_json::Value = response.json().await.unwrap_or_default();
    anyhow::ensure!(status.is_success(), "{path}: {status}: {answer}");
    Ok(answer)
}

/// Signs a person up and in; their session token.
async fn person(http: &reqwest::Client, base: &str, email: &str) -> anyhow::Result<String> {
    let credentials =
        serde_json::json!({"email": email, "password": "correct horse battery staple"});
    call(http, base, "/v1/accounts", None, credentials.clone()).await?;
    let session = call(http, base, "/v1/sessions", None, credentials).await?;
    session["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no session token: {session}"))
}

/// What a usage report needs: an agent token and its machine, and a rental of its one GPU.
struct RentedGpu {
    agent: String,
    machine_id: String,
    rental_id: String,
}

/// A new provider with one online H100, priced and rented, set up over HTTP as a newcomer, a
/// reviewer and a renter would.
async fn rented_gpu(
    http: &reqwest::Client,
    base: &str,
    admin: &str,
    clock: &gpunex_domain::clock::SharedClock,
) -> anyhow::Result<RentedGpu> {
    let tag = uuid::Uuid::now_v7().simple().to_string();
    let applicant = person(http, base, &format!("scale-{tag}@example.com")).await?;
    let form = serde_json::json!({
        "full_legal_name": "Bench Provider", "email": format!("scale-{tag}@example.com"),
        "gpus": [{"model": "h100-80gb", "quantity": 1, "system_ram_gb": 256, "upload_gbps": "10",
                  "download_gbps": "10", "availability": {"kind": "always_on"},
                  "location": {"city": "Madrid", "country": "ES", "region": "Madrid"}}],
        "ups_protected": true, "commitment_months": 12, "maintenance_notes": "none planned"
    });
    let application = call(http, base, "/v1/applications", Some(&applicant), form).await?;
    let id = application["application_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let approved = call(
        http,
        base,
        &format!("/v1/applications/{id}/approve"),
        Some(admin),
        serde_json::json!({"tier": "community"}),
    )
    .await?;
    let provider_id = approved["provider_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let provider = call(
        http,
        base,
        &format!("/v1/applications/{id}/provider-token"),
        Some(&applicant),
        serde_json::Value::Null,
    )
    .await?;
    let provider = provider["token"].as_str().unwrap_or_default().to_owned();
    let agent = call(
        http,
        base,
        "/v1/tokens",
        Some(&provider),
        serde_json::json!({"role": {"kind": "agent"}}),
    )
    .await?;
    let machine_id = agent["role"]["machine_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let agent = agent["token"].as_str().unwrap_or_default().to_owned();
    let gpu_uuid = format!("GPU-{}", &tag[..24]);
    let registration = serde_json::json!({"events": [{
        "event_id": uuid::Uuid::now_v7(), "occurred_at": gpunex_api::server::timestamp(clock.now().unix_micros()),
        "kind": "registration",
        // Declared a real GPU: simulated ones are listed only in dev mode.
        "body": {"machine_id": machine_id, "agent_version": "bench", "simulated": false,
                 "host": {"hostname": "bench", "cpu_model": null, "cpu_cores": null, "ram_mib": null,
                          "disk_total_gib": null, "disk_free_gib": null, "os": null, "kernel": null},
                 "gpus": [{"gpu_uuid": gpu_uuid, "index": 0, "name": "NVIDIA H100 80GB HBM3",
                           "pci_device_id": 0x2330, "pci_bus_id": null, "vram_mib": 81_559,
                           "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                           "pcie_current": {"generation": 5, "width": 16},
                           "pcie_max": {"generation": 5, "width": 16}, "power_limit_w": null,
                           "default_power_limit_w": null, "ecc_enabled": null, "mig_enabled": null}]}
    }]});
    call(http, base, "/v1/agent/events", Some(&agent), registration).await?;
    call(
        http,
        base,
        "/v1/agent/heartbeat",
        Some(&agent),
        serde_json::json!({"machine_id": machine_id, "gpus": []}),
    )
    .await?;
    call(
        http,
        base,
        &format!("/v1/providers/{provider_id}/prices"),
        Some(&provider),
        serde_json::json!({"model_id": "h100-80gb", "price_usdc": "2.00"}),
    )
    .await?;
    let renter = person(http, base, &format!("renter-{tag}@example.com")).await?;
    let rental = call(
        http,
        base,
        "/v1/rentals",
        Some(&renter),
        serde_json::json!({"gpu_uuids": [gpu_uuid],
            "workload": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["sleep", "3600"]}}),
    )
    .await?;
    Ok(RentedGpu {
        agent,
        machine_id,
        rental_id: rental["rental_id"].as_str().unwrap_or_default().to_owned(),
    })
}

/// Usage reports for `seconds` (a heartbeat every second keeps the machine online, so each
/// whole second of the counter is billable) while `writer` appends batches as fast as it can.
/// Returns the reports' latency and the writer's events per second.
async fn usage_under_load(
    base: &str,
    rented: &RentedGpu,
    writer: gpunex_store::Store,
    seconds: u64,
) -> anyhow::Result<(Latency, u64)> {
    let clock = writer.clock().clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut appended = 0_u64;
            let mut seed = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let events = crate::bench::new_events(100, seed);
                seed += 100;
                writer
                    .append(
                        crate::bench::stream("scale"),
                        gpunex_store::ExpectedVersion::NoStream,
                        events,
                    )
                    .await?;
                appended += 100;
            }
            anyhow::Ok(rate(appended, started.elapsed()))
        })
    };
    let http = reqwest::Client::new();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut samples = Vec::new();
    let mut last_beat = Instant::now();
    while Instant::now() < deadline {
        if last_beat.elapsed() >= Duration::from_secs(1) {
            call(
                &http,
                base,
                "/v1/agent/heartbeat",
                Some(&rented.agent),
                serde_json::json!({"machine_id": rented.machine_id, "gpus": []}),
            )
            .await?;
            last_beat = Instant::now();
        }
        let report = serde_json::json!({"events": [{
            "event_id": uuid::Uuid::now_v7(), "occurred_at": gpunex_api::server::timestamp(clock.now().unix_micros()),
            "kind": "usage",
            "body": {"machine_id": rented.machine_id, "rental_id": rented.rental_id,
                     "gpu_seconds": started.elapsed().as_secs()}
        }]});
        let sent = Instant::now();
        call(&http, base, "/v1/agent/events", Some(&rented.agent), report).await?;
        samples.push(u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let appends_per_second = appender.await??;
    Ok((
        crate::bench_search::latency(1, samples, started.elapsed()),
        appends_per_second,
    ))
}

pub async fn run(database_url: &str, args: ScaleBenchArgs) -> anyhow::Result<()> {
    let store = crate::database::open_store(database_url).await?;
    let events = store.head_position().await?;
    anyhow::ensure!(
        events >= args.min_events,
        "the log holds {events} events, fewer than --min-events {}: run `gpunex simulate` first",
        args.min_events
    );
    // A finance token to read any provider's earnings, issued before the server starts (it
    // folds the token like every other event).
    let (token, _) =
        gpunex_app::credentials::issue_unattended(&store, Role::Finance, "bench scale", "cli")
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let (admin, _) =
        gpunex_app::credentials::issue_unattended(&store, Role::Admin, "bench scale", "cli")
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let today = gpunex_app::payout_run::today_utc(store.clock().now());

    eprintln!(
        "{events} events: each stored projection rebuilt, beside a bare ordered read of the log ..."
    );
    let head = store.head_position().await?;
    let mut catch_up = Vec::new();
    for &projection in gpunex_projections::PROJECTIONS {
        eprintln!("... {projection}");
        // The fastest bare read (events, time, CPU) and rebuild (checkpoint, times, CPU).
        let mut fastest_read: Option<(u64, Duration, Duration)> = None;
        let mut fastest_rebuild: Option<(u64, gpunex_store::CatchUpTimes, Duration)> = None;
        let mut rounds = Vec::new();
        for _ in 0..args.catch_up_rounds {
            let cpu = process_cpu();
            let (read, bare) = bare_read(&store, head).await?;
            let bare_cpu = process_cpu().saturating_sub(cpu);
            let cpu = process_cpu();
            let rebuilt = store.rebuild(projection, &|_| {}).await?;
            let cpu = process_cpu().saturating_sub(cpu);
            let times = rebuilt.times;
            rounds.push(CatchUpRound {
                bare_read_seconds: bare.as_secs_f64(),
                seconds: times.total.as_secs_f64(),
                ratio: ratio(rate(rebuilt.checkpoint, times.total), rate(read, bare)),
            });
            if fastest_read.is_none_or(|(_, fastest, _)| bare < fastest) {
                fastest_read = Some((read, bare, bare_cpu));
            }
            if fastest_rebuild.is_none_or(|(_, fastest, _)| times.total < fastest.total) {
                fastest_rebuild = Some((rebuilt.checkpoint, times, cpu));
            }
        }
        let (Some((read, bare, bare_cpu)), Some((checkpoint, times, cpu))) =
            (fastest_read, fastest_rebuild)
        else {
            anyhow::bail!("no catch-up round was measured");
        };
        catch_up.push(CatchUp {
            projection,
            events_per_second: rate(checkpoint, times.total),
            bare_read_events_per_second: rate(read, bare),
            bare_read_seconds: bare.as_secs_f64(),
            seconds: times.total.as_secs_f64(),
            read_seconds: times.read.as_secs_f64(),
            fold_seconds: times.fold.as_secs_f64(),
            write_seconds: times.write.as_secs_f64(),
            cpu_seconds: cpu.as_secs_f64(),
            bare_read_cpu_seconds: bare_cpu.as_secs_f64(),
            rounds,
        });
    }

    // A first start with no snapshot folds the whole log (and writes one); a restart begins
    // from that snapshot, as every start after a server has run does.
    store
        .delete_snapshot(gpunex_app::snapshot::SNAPSHOT_NAME)
        .await?;
    let mailbox = tempfile::tempdir()?;
    eprintln!("first start, no snapshot ...");
    let (server, cold_ready, _) = start_server(database_url, mailbox.path(), &args).await?;
    let cold_rss = rss_mib(server.0.id())?;
    drop(server);
    eprintln!("restart, from the snapshot ...");
    let (server, ready, base) = start_server(database_url, mailbox.path(), &args).await?;
    let pid = server.0.id();
    let rss_ready = rss_mib(pid)?;
    let snapshot_bytes = store
        .read_snapshot(gpunex_app::snapshot::SNAPSHOT_NAME)
        .await?
        .map_or(0, |s| s.body.len() as u64);

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
        format!("/v1/providers/{provider_id}/earnings?from={month_ago}&to={today}"),
        format!("/v1/providers/{provider_id}/earnings/daily?from={month_ago}&to={today}"),
        format!(
            "/v1/providers/{provider_id}/earnings/statement.csv?from={yesterday}&to={yesterday}"
        ),
        format!("/v1/providers/{provider_id}/payouts"),
        // The provider's ledger statement, first page (its postings rows, then its entries).
        format!("/v1/ledger/accounts/provider_payable:{provider_id}/lines"),
    ];
    // The provider's prices (read from the stored price history), which finance may not read:
    // measured with the admin token, and not part of the load below.
    let prices = format!("/v1/providers/{provider_id}/prices");
    let reference_healthz = hammer(
        &base,
        &["/healthz".to_owned()],
        args.clients,
        args.seconds,
        None,
    )
    .await?;
    let mut endpoints = Vec::new();
    let measured = paths
        .iter()
        .map(|path| (path, &token.token))
        .chain([(&prices, &admin.token)]);
    for (path, bearer) in measured {
        let latency = hammer(
            &base,
            std::slice::from_ref(path),
            args.clients,
            args.seconds,
            Some(bearer),
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
    let (usage_report, concurrent_appends_per_second) = if args.usage_seconds > 0 {
        eprintln!(
            "{} s of usage reports beside another writer ...",
            args.usage_seconds
        );
        let rented =
            rented_gpu(&reqwest::Client::new(), &base, &admin.token, store.clock()).await?;
        let writer = crate::database::open_store(database_url).await?;
        let (latency, appends) =
            usage_under_load(&base, &rented, writer, args.usage_seconds).await?;
        (Some(latency), appends)
    } else {
        (None, 0)
    };
    drop(server);

    let report = ScaleReport {
        database: format!("{:?}", store.backend()).to_lowercase(),
        events,
        cold_ready_seconds: cold_ready.as_secs_f64(),
        cold_rss_mib: cold_rss,
        ready_seconds: ready.as_secs_f64(),
        rss_ready_mib: rss_ready,
        snapshot_bytes,
        rss_loaded_mib: rss_loaded,
        load_seconds: args.load_seconds,
        catch_up,
        reference_healthz,
        endpoints,
        usage_report,
        concurrent_appends_per_second,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}: {} events", report.database, report.events);
    println!(
        "first start (no snapshot) {:>6.1} s     resident {:>5} MiB ready",
        report.cold_ready_seconds, report.cold_rss_mib
    );
    println!(
        "restart until ready     {:>8.1} s     resident {:>5} MiB ready, {:>5} MiB after {} s of load",
        report.ready_seconds, report.rss_ready_mib, report.rss_loaded_mib, report.load_seconds
    );
    println!("read-model snapshot {:>9} bytes", report.snapshot_bytes);
    for model in &report.catch_up {
        println!(
            "{:<9} catch-up {:>9} events/s   bare ordered read {:>9} events/s   ratio {}",
            model.projection,
            model.events_per_second,
            model.bare_read_events_per_second,
            ratio(model.events_per_second, model.bare_read_events_per_second)
        );
        println!(
            "          {:.1} s (bare read {:.1} s): reading and decoding {:.1} s, folding {:.1} s, writing {:.1} s (these overlap); CPU {:.1} s (bare read {:.1} s)",
            model.seconds,
            model.bare_read_seconds,
            model.read_seconds,
            model.fold_seconds,
            model.write_seconds,
            model.cpu_seconds,
            model.bare_read_cpu_seconds
        );
        let rounds: Vec<String> = model
            .rounds
            .iter()
            .map(|r| {
                format!(
                    "{} ({:.1} / {:.1} s)",
                    r.ratio, r.seconds, r.bare_read_seconds
                )
            })
            .collect();
        println!(
            "          fastest of {} rounds; each round's ratio: {}",
            model.rounds.len(),
            rounds.join(", ")
        );
    }
    print_endpoints(&report.reference_healthz, &report.endpoints);
    if let Some(usage) = &report.usage_report {
        println!(
            "usage report (POST /v1/agent/events) beside another writer at {} events/s: {} reports, p50 {} us, p99 {} us, max {} us",
            report.concurrent_appends_per_second,
            usage.requests,
            usage.p50_us,
            usage.p99_us,
            usage.max_us
        );
    }
    Ok(())
}
