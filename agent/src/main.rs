//! `gpunex-agent`: the host agent providers run next to their GPUs.
//!
//! It detects the GPUs (NVML, or a simulation for development), registers the machine with the
//! platform, and sends heartbeats with telemetry. Everything it must not lose goes through a
//! durable local queue first. It speaks to the server only through `gpunex-wire` types.
#![deny(clippy::float_arithmetic)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod benchmarks;
mod client;
mod clock;
mod config;
mod detect;
mod gpusuite;
mod guard;
mod host;
mod hostbench;
mod joblog;
mod jobs;
mod kmsg;
mod queue;
mod reading;
mod runtime;
mod service;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gpunex_domain::fleet::{DetectedGpu, HostInfo, identify};
use uuid::Uuid;

use crate::config::{Config, Overrides};
use crate::detect::GpuSource;

#[derive(Debug, Parser)]
#[command(
    name = "gpunex-agent",
    version,
    about = "GPUnex host agent: detects your NVIDIA GPUs, registers them with GPUnex and reports their presence and health.",
    after_help = "Settings come from flags, then environment variables, then the config file \
                  (TOML; keys server_url, token, state_dir, heartbeat_interval, simulate, runtime, \
                  docker_socket, poll_interval, usage_interval, job_memory_mib_per_gpu, job_cpus_per_gpu, \
                  job_network, job_log_mib, benchmark_interval, benchmark_suite_duration, benchmark_sustained, simulate_profiles), then defaults."
)]
struct Cli {
    /// Config file (TOML). Default: /etc/gpunex/agent.toml when it exists.
    #[arg(long, env = "GPUNEX_AGENT_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Base URL of the GPUnex server [default: http://127.0.0.1:8080].
    #[arg(long = "server", env = "GPUNEX_SERVER_URL", global = true)]
    server_url: Option<String>,
    /// The agent token for this machine (from the provider dashboard). Never printed.
    #[arg(
        long,
        env = "GPUNEX_AGENT_TOKEN",
        hide_env_values = true,
        global = true
    )]
    token: Option<String>,
    /// Where the agent keeps its durable queue and state [default: /var/lib/gpunex-agent].
    #[arg(long, env = "GPUNEX_AGENT_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Heartbeat period, e.g. `15s` [default: what the server asks for, 15s].
    #[arg(long, env = "GPUNEX_HEARTBEAT_INTERVAL", global = true)]
    heartbeat_interval: Option<String>,
    /// SIMULATION for development and tests on machines without GPUs: e.g. `4xH100` or
    /// `2xa100-80gb,1xl40s`. The platform records such machines as simulated and never lists
    /// them to renters outside a development deployment.
    #[arg(long, env = "GPUNEX_SIMULATE", global = true)]
    simulate: Option<String>,
    /// With --simulate: GPU 0 reports a hardware slowdown that starts and ends every N samples.
    #[arg(
        long,
        env = "GPUNEX_SIMULATE_CONDITION_EVERY",
        global = true,
        requires = "simulate"
    )]
    simulate_condition_every: Option<u32>,
    /// How renters' workloads run: `docker` (containers through the Docker Engine API, with only
    /// the rented GPUs and no host directory) or `process` (a child process with only the rented
    /// GPUs visible: tests and development) [default: docker].
    #[arg(long, env = "GPUNEX_RUNTIME", global = true)]
    runtime: Option<String>,
    /// The Docker Engine API socket [default: /var/run/docker.sock].
    #[arg(long, env = "GPUNEX_DOCKER_SOCKET", global = true)]
    docker_socket: Option<PathBuf>,
    /// How often to ask the platform for rentals to run or stop [default: 5s].
    #[arg(long, env = "GPUNEX_POLL_INTERVAL", global = true)]
    poll_interval: Option<String>,
    /// How often to report running jobs' cumulative GPU-seconds [default: 60s].
    #[arg(long, env = "GPUNEX_USAGE_INTERVAL", global = true)]
    usage_interval: Option<String>,
    /// Memory each rented GPU brings to its job's container, MiB [default: 90 % of the host's
    /// memory divided by its GPUs].
    #[arg(long, env = "GPUNEX_JOB_MEMORY_MIB_PER_GPU", global = true)]
    job_memory_mib_per_gpu: Option<u64>,
    /// CPUs each rented GPU brings to its job's container, e.g. `8` or `0.5` [default: the
    /// host's CPUs divided by its GPUs].
    #[arg(long, env = "GPUNEX_JOB_CPUS_PER_GPU", global = true)]
    job_cpus_per_gpu: Option<String>,
    /// The network jobs' containers join: `bridge` (outbound access) or `none` (loopback only)
    /// [default: bridge]. Never the host's.
    #[arg(long, env = "GPUNEX_JOB_NETWORK", global = true)]
    job_network: Option<String>,
    /// How much of each job's latest output is kept and shipped to the platform for the renter,
    /// MiB (1 to 64) [default: 4].
    #[arg(long, env = "GPUNEX_JOB_LOG_MIB", global = true)]
    job_log_mib: Option<u64>,
    /// How often an idle GPU's benchmark suite runs again, e.g. `168h`, or `off` (the first
    /// suite, re-tests asked for on the platform and after a driver change still run)
    /// [default: 168h].
    #[arg(long, env = "GPUNEX_BENCHMARK_INTERVAL", global = true)]
    benchmark_interval: Option<String>,
    /// With --simulate: how long a simulated benchmark suite holds its GPU [default: 150s].
    #[arg(long, env = "GPUNEX_BENCHMARK_SUITE_DURATION", global = true)]
    benchmark_suite_duration: Option<String>,
    /// On real GPUs: how long the suite's sustained phase runs (10s to 10m) [default: 60s].
    #[arg(long, env = "GPUNEX_BENCHMARK_SUSTAINED", global = true)]
    benchmark_sustained: Option<String>,
    /// With --simulate: benchmark profiles of simulated GPUs by index, e.g.
    /// `3:wrong_results,1:pcie_x8` (healthy, thermal_throttling, pcie_x8, low_memory_bandwidth,
    /// lowered_power_limit, ecc_double_bit, fatal_xid, wrong_results); the others are healthy.
    #[arg(long, env = "GPUNEX_SIMULATE_PROFILES", global = true)]
    simulate_profiles: Option<String>,
    /// Log as one JSON object per line.
    #[arg(long, env = "GPUNEX_LOG_JSON", global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the GPUs and host this agent sees (no server needed).
    Detect {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Register this machine and its GPUs with the platform (through the durable queue), and
    /// wait for the platform to record it.
    Register {
        /// Register again even if the hardware has not changed.
        #[arg(long)]
        force: bool,
    },
    /// Run the agent service: register changes, deliver queued events, send heartbeats. Stops
    /// on SIGTERM or Ctrl-C.
    Run,
    /// Show the queue, the last heartbeat and, when the server answers, the machine's status.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Check that the GPUnex server answers, and print its version.
    Ping,
    /// Measure this host as the benchmark suite does: storage (O_DIRECT, 1 MiB blocks, several
    /// threads, every block read back and checked) in the state directory, and the network to
    /// the platform (round trip, parallel downloads). Needs the agent token for the network.
    BenchHost {
        /// How much the storage test writes and reads back, MiB.
        #[arg(long, default_value_t = 1_024)]
        storage_mib: u64,
        /// Threads writing and reading at once.
        #[arg(long, default_value_t = 4)]
        threads: usize,
        /// Parallel downloads for the throughput.
        #[arg(long, default_value_t = 4)]
        streams: usize,
        /// MiB each download fetches (at most 64).
        #[arg(long, default_value_t = 16)]
        download_mib: u64,
        /// Trials of each measure (the figures are their median and spread).
        #[arg(long, default_value_t = 3)]
        trials: u32,
        #[arg(long)]
        json: bool,
    },
    /// Run the benchmark suite on this host's GPUs now, in the foreground, and print every
    /// figure beside the GPU's datasheet peak, the health signals, the score and the verdict
    /// against the datasheet references (the platform scores against the fleet once it can).
    /// Nothing is reported to the platform. Run it on an idle GPU: it refuses a GPU in MIG mode or
    /// with another compute process.
    BenchGpu {
        /// Only this GPU (its UUID, as `detect` prints it).
        #[arg(long)]
        gpu: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The container's health check: exits 0 while the service's loop has run in the last
    /// [`service::ALIVE_WITHIN`] and a heartbeat was acknowledged in the last
    /// [`service::REACHED_WITHIN`]; 1 otherwise, with one sentence saying which.
    Health,
    /// Serve the Docker guard (ADR 0010): the only way the agent reaches the host's Docker
    /// Engine. Forwards to it only what renters' jobs need (job containers on the designated
    /// GPUs, with no host directory, device, namespace or privilege), refuses the rest.
    Guard {
        /// The socket served to the agent.
        #[arg(long, default_value = "/run/gpunex/docker.sock")]
        listen: PathBuf,
        /// The host's Docker Engine socket.
        #[arg(long, default_value = "/var/run/docker.sock")]
        upstream: PathBuf,
        /// The GPUs the provider designated for GPUnex: their UUIDs, comma-separated (what
        /// `nvidia-smi --query-gpu=uuid --format=csv,noheader` prints).
        #[arg(long, value_delimiter = ',', required = true)]
        gpus: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_json);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The simulated source for `machine_id` (the GPU UUIDs derive from it).
pub(crate) fn simulated_source(config: &Config, machine_id: Uuid) -> anyhow::Result<GpuSource> {
    let spec = config
        .simulate
        .clone()
        .ok_or_else(|| anyhow::anyhow!("no --simulate given"))?;
    // In the agent's container, the GPUs the runtime was told to give it (see
    // `Simulated::with_runtime_uuids`).
    let visible = std::env::var("NVIDIA_VISIBLE_DEVICES").ok();
    Ok(GpuSource::Simulated(
        simulate::Simulated::new(spec, machine_id).with_runtime_uuids(visible.as_deref()),
    ))
}

/// The GPU source for one-shot commands: NVML, or the simulation keyed by the machine id this
/// agent registered as (the nil id before the first registration).
fn source_for_command(config: &Config) -> anyhow::Result<(GpuSource, Option<Uuid>)> {
    let known = queue::Queue::open(&config.state_dir)
        .ok()
        .and_then(|q| q.get_state("identity").ok().flatten())
        .and_then(|text| serde_json::from_str::<gpunex_wire::fleet::AgentIdentity>(&text).ok())
        .map(|identity| identity.machine_id);
    match config.simulate {
        Some(_) => Ok((
            simulated_source(config, known.unwrap_or(Uuid::nil()))?,
            known,
        )),
        None => Ok((GpuSource::nvml()?, known)),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Guard {
        listen,
        upstream,
        gpus,
    } = &cli.command
    {
        let gpus: std::collections::BTreeSet<String> =
            gpus.iter().map(|g| g.trim().to_owned()).collect();
        if let Some(bad) = gpus.iter().find(|g| {
            g.is_empty()
                || g.len() > 96
                || !g.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        }) {
            anyhow::bail!(
                "`{bad}` is not a GPU UUID such as GPU-5a1d...; pass the UUIDs nvidia-smi prints"
            );
        }
        return guard::serve(listen, upstream, guard::Policy { gpus }).await;
    }
    let config = Config::load(Overrides {
        config: cli.config,
        server_url: cli.server_url,
        token: cli.token,
        state_dir: cli.state_dir,
        heartbeat_interval: cli.heartbeat_interval,
        simulate: cli.simulate,
        simulate_condition_every: cli.simulate_condition_every,
        runtime: cli.runtime,
        docker_socket: cli.docker_socket,
        poll_interval: cli.poll_interval,
        usage_interval: cli.usage_interval,
        job_memory_mib_per_gpu: cli.job_memory_mib_per_gpu,
        job_cpus_per_gpu: cli.job_cpus_per_gpu,
        job_network: cli.job_network,
        job_log_mib: cli.job_log_mib,
        benchmark_interval: cli.benchmark_interval,
        benchmark_suite_duration: cli.benchmark_suite_duration,
        benchmark_sustained: cli.benchmark_sustained,
        simulate_profiles: cli.simulate_profiles,
    })?;
    match cli.command {
        Command::Detect { json } => detect_command(&config, json),
        Command::Register { force } => register_command(&config, force).await,
        Command::Run => service::run(&config).await,
        Command::BenchHost {
            storage_mib,
            threads,
            streams,
            download_mib,
            trials,
            json,
        } => {
            bench_host(
                &config,
                storage_mib,
                threads,
                streams,
                download_mib,
                trials,
                json,
            )
            .await
        }
        Command::BenchGpu { gpu, json } => bench_gpu(&config, gpu, json).await,
        Command::Status { json } => status_command(&config, json).await,
        Command::Ping => ping(&config).await,
        Command::Health => service::health(&config, crate::clock::unix_ms()),
        Command::Guard { .. } => unreachable!("served above"),
    }
}

fn detect_command(config: &Config, json: bool) -> anyhow::Result<()> {
    let (source, _) = source_for_command(config)?;
    let gpus = source.inventory()?;
    // Disk figures are those of the state directory's filesystem, as a registration reports.
    let disk_of = if config.state_dir.exists() {
        config.state_dir.as_path()
    } else {
        std::path::Path::new("/")
    };
    let host = host::detect(disk_of);
    if json {
        let gpus: Vec<serde_json::Value> = gpus
            .iter()
            .map(|gpu| {
                let found = identify(gpu, &[]);
                let mut value = serde_json::to_value(gpu).unwrap_or_default();
                value["model_id"] = serde_json::json!(found.model_id);
                value["model_match"] = serde_json::json!(found.method);
                value["power_limit_lowered"] = serde_json::json!(gpu.power_limit_lowered());
                value
            })
            .collect();
        let document = serde_json::json!({
            "simulated": source.is_simulated(),
            "host": host,
            "gpus": gpus,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
        return Ok(());
    }
    print_host(&host, source.is_simulated());
    print_gpus(&gpus);
    Ok(())
}

fn unknown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

fn print_host(host: &HostInfo, simulated: bool) {
    println!("host      {}", host.hostname);
    println!(
        "cpu       {} ({} cores)",
        unknown(host.cpu_model.as_deref()),
        unknown(host.cpu_cores)
    );
    println!("ram       {} MiB", unknown(host.ram_mib));
    println!(
        "disk      {} GiB free of {} GiB",
        unknown(host.disk_free_gib),
        unknown(host.disk_total_gib)
    );
    println!("os        {}", unknown(host.os.as_deref()));
    println!("kernel    {}", unknown(host.kernel.as_deref()));
    if simulated {
        println!("gpus      SIMULATED (--simulate): not real hardware");
    }
}

fn print_gpus(gpus: &[DetectedGpu]) {
    println!();
    println!(
        "{:<3} {:<26} {:<11} {:>9} {:<10} {:<5} {:<11} {:<11} {:<9} {:<5} {:<5} UUID",
        "#",
        "NAME",
        "MODEL",
        "VRAM MiB",
        "DRIVER",
        "CUDA",
        "PCIE NOW",
        "PCIE MAX",
        "POWER W",
        "ECC",
        "MIG"
    );
    for gpu in gpus {
        let found = identify(gpu, &[]);
        let link = |l: gpunex_domain::fleet::PcieLink| {
            format!("gen{} x{}", unknown(l.generation), unknown(l.width))
        };
        let power = match (gpu.power_limit_w, gpu.default_power_limit_w) {
            (Some(limit), Some(default)) if limit < default => format!("{limit}/{default}!"),
            (Some(limit), _) => limit.to_string(),
            (None, _) => "unknown".to_owned(),
        };
        let flag = |b: Option<bool>| match b {
            Some(true) => "on",
            Some(false) => "off",
            None => "?",
        };
        println!(
            "{:<3} {:<26} {:<11} {:>9} {:<10} {:<5} {:<11} {:<11} {:<9} {:<5} {:<5} {}",
            gpu.index,
            gpu.name.chars().take(26).collect::<String>(),
            found.model_id.as_deref().unwrap_or("(unlisted)"),
            gpu.vram_mib,
            unknown(
                gpu.driver_version
                    .as_deref()
                    .map(|d| d.split(' ').next().unwrap_or(d))
            ),
            unknown(gpu.cuda_driver_version.as_deref()),
            link(gpu.pcie_current),
            link(gpu.pcie_max),
            power,
            flag(gpu.ecc_enabled),
            flag(gpu.mig_enabled),
            gpu.gpu_uuid
        );
    }
    if gpus.iter().any(|g| g.power_limit_lowered() == Some(true)) {
        println!(
            "\n! power limit lowered below the default: benchmarks and earnings will be lower"
        );
    }
}

async fn register_command(config: &Config, force: bool) -> anyhow::Result<()> {
    let nvml = match config.simulate {
        Some(_) => None,
        None => Some(GpuSource::nvml()?),
    };
    let client = client::Client::new(&config.server_url, config.token()?)?;
    let mut queue = queue::Queue::open(&config.state_dir)?;
    let identity = service::identity(&queue, &client).await?;
    let source = match nvml {
        Some(nvml) => nvml,
        None => simulated_source(config, identity.machine_id)?,
    };
    let gpus = source.inventory()?;
    let host = host::detect(&config.state_dir);
    let queued = service::queue_registration(
        &mut queue,
        identity.machine_id,
        host,
        gpus.clone(),
        source.is_simulated(),
        force,
    )?;
    let delivered = service::deliver(&mut queue, &client).await?;
    if delivered.stalled {
        anyhow::bail!(
            "the registration is queued but the platform could not be reached; `gpunex-agent run` delivers it when it can"
        );
    }
    if delivered.rejected > 0 {
        let why = queue
            .rejected(1)?
            .into_iter()
            .next()
            .map(|r| r.error)
            .unwrap_or_default();
        anyhow::bail!("the platform refused the registration: {why}");
    }
    println!(
        "machine {} of provider {}: {}",
        identity.machine_id,
        identity.provider_id,
        if queued {
            format!("registered with {} GPU(s)", gpus.len())
        } else {
            "already registered with this hardware (use --force to register again)".to_owned()
        }
    );
    if let Ok(view) = client.machine().await {
        for gpu in &view.gpus {
            println!(
                "  GPU {} {} -> {}",
                gpu.index,
                gpu.name,
                gpu.model_id.as_deref().unwrap_or("not a catalog model")
            );
        }
    }
    Ok(())
}

async fn status_command(config: &Config, json: bool) -> anyhow::Result<()> {
    let queue = queue::Queue::open(&config.state_dir)?;
    let counts = queue.counts()?;
    let identity: Option<gpunex_wire::fleet::AgentIdentity> = queue
        .get_state("identity")?
        .map(|text| serde_json::from_str(&text))
        .transpose()?;
    let last = service::last_heartbeat(&queue)?;
    let rejected = queue.rejected(5)?;
    let schedule = benchmarks::stored_schedule(&queue)?;
    let remote = match config.token() {
        Ok(token) => match client::Client::new(&config.server_url, token)?
            .machine()
            .await
        {
            Ok(view) => Ok(view),
            Err(error) => Err(error.to_string()),
        },
        Err(error) => Err(error.to_string()),
    };
    let docker = match &config.runtime {
        config::RuntimeKind::Docker { socket } => Some((
            socket.clone(),
            runtime::docker_version(socket)
                .await
                .map_err(|e| format!("{e:#}")),
        )),
        config::RuntimeKind::Process => None,
    };
    if json {
        let document = serde_json::json!({
            "docker": docker.as_ref().map(|(socket, answer)| serde_json::json!({
                "socket": socket,
                "api_version": answer.as_ref().ok(),
                "error": answer.as_ref().err(),
            })),
            "identity": identity,
            "queue": {
                "pending": counts.pending,
                "delivered": counts.delivered,
                "rejected": counts.rejected,
                "oldest_pending": counts.oldest_pending,
            },
            "rejected": rejected.iter().map(|r| serde_json::json!({
                "event_id": r.event_id, "kind": r.kind, "error": r.error,
            })).collect::<Vec<_>>(),
            "last_heartbeat": last,
            "benchmarks": schedule,
            "platform": match &remote {
                Ok(view) => serde_json::to_value(view)?,
                Err(error) => serde_json::json!({ "error": error }),
            },
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
        return Ok(());
    }
    match &identity {
        Some(id) => println!("machine   {} (provider {})", id.machine_id, id.provider_id),
        None => println!("machine   not registered yet (run `gpunex-agent register`)"),
    }
    println!(
        "queue     {} pending, {} delivered, {} rejected{}",
        counts.pending,
        counts.delivered,
        counts.rejected,
        counts
            .oldest_pending
            .map(|t| format!(" (oldest pending since {t})"))
            .unwrap_or_default()
    );
    for r in &rejected {
        println!("  rejected {} {}: {}", r.kind, r.event_id, r.error);
    }
    match &last {
        Some(ack) => println!(
            "heartbeat last acknowledged at {} ({})",
            ack.received_at, ack.status
        ),
        None => println!("heartbeat none acknowledged yet"),
    }
    match &remote {
        Ok(view) => println!(
            "platform  {} since {}, {} GPU(s), last seen {}",
            view.status,
            view.since.as_deref().unwrap_or("-"),
            view.gpus.len(),
            view.last_seen.as_deref().unwrap_or("never")
        ),
        Err(error) => println!("platform  unknown: {error}"),
    }
    let runs: u64 = schedule.gpus.values().map(|g| g.runs).sum();
    let aborted: u64 = schedule.gpus.values().map(|g| g.aborted).sum();
    println!(
        "benchmark {} run(s) on {} GPU(s), {} aborted by rentals{}",
        runs,
        schedule.gpus.values().filter(|g| g.runs > 0).count(),
        aborted,
        schedule
            .running
            .as_deref()
            .map(|gpu| format!("; running on {gpu}"))
            .unwrap_or_default()
    );
    if let Some(why) = &schedule.unavailable {
        println!("          no suite on this host: {why}");
    }
    for (gpu, entry) in &schedule.gpus {
        if let Some(problem) = &entry.problem {
            println!(
                "          {gpu}: {problem}{}",
                entry
                    .retry_at_ms
                    .and_then(chrono::DateTime::from_timestamp_millis)
                    .map(|at| format!(" (tried again at {})", at.format("%Y-%m-%d %H:%M UTC")))
                    .unwrap_or_default()
            );
        }
    }
    match &docker {
        Some((socket, Ok(version))) => {
            println!("docker    API {version} at {}", socket.display());
        }
        Some((socket, Err(error))) => {
            println!("docker    unreachable at {}: {error}", socket.display());
        }
        None => println!("docker    not used (process runtime)"),
    }
    Ok(())
}

async fn bench_host(
    config: &Config,
    storage_mib: u64,
    threads: usize,
    streams: usize,
    download_mib: u64,
    trials: u32,
    json: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=65_536).contains(&storage_mib),
        "--storage-mib: 1 to 65536"
    );
    anyhow::ensure!((1..=64).contains(&download_mib), "--download-mib: 1 to 64");
    anyhow::ensure!((1..=20).contains(&trials), "--trials: 1 to 20");
    std::fs::create_dir_all(&config.state_dir)?;
    let dir = config.state_dir.clone();
    let storage = tokio::task::spawn_blocking(move || {
        hostbench::storage(&dir, storage_mib << 20, threads, trials)
    })
    .await??;
    let client = client::Client::new(&config.server_url, config.token()?)?;
    let network = hostbench::network(&client, 20, streams, download_mib << 20, trials).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "storage": storage,
                "network": network,
            }))?
        );
        return Ok(());
    }
    let whole = |milli: u64| format!("{}.{}", milli / 1_000, milli % 1_000 / 100);
    println!(
        "storage   write {} MB/s, read {} MB/s (median of {}; {} MiB, {} threads, {})",
        whole(storage.write.median_milli),
        whole(storage.read.median_milli),
        storage.read.trials,
        storage.bytes >> 20,
        storage.threads,
        if storage.direct {
            "O_DIRECT"
        } else {
            "buffered: this file system refuses O_DIRECT"
        }
    );
    println!(
        "network   round trip {} us (median of {}), throughput {} Mbit/s ({} streams of {} MiB)",
        whole(network.rtt.median_milli),
        network.rtt.trials,
        whole(network.throughput.median_milli),
        network.streams,
        network.bytes_per_stream >> 20
    );
    Ok(())
}

async fn bench_gpu(config: &Config, only: Option<String>, json: bool) -> anyhow::Result<()> {
    use gpunex_domain::benchmark::{Metric, peak_milli, reference, score, verdict};
    anyhow::ensure!(
        config.simulate.is_none(),
        "bench-gpu measures real GPUs; simulated ones get their runs from profiles (--simulate-profiles)"
    );
    gpunex_gpu::cuda::probe()?;
    let gpus: Vec<DetectedGpu> = GpuSource::nvml()?
        .inventory()?
        .into_iter()
        .filter(|g| {
            only.as_ref()
                .is_none_or(|u| u.eq_ignore_ascii_case(&g.gpu_uuid))
        })
        .collect();
    if gpus.is_empty() {
        anyhow::bail!("no GPU here has the UUID {}", only.unwrap_or_default());
    }
    std::fs::create_dir_all(&config.state_dir)?;
    let suite = service::real_suite(config);
    let mut reports = Vec::new();
    let mut failed = false;
    for gpu in gpus {
        let uuid = gpu.gpu_uuid.clone();
        let task_suite = suite.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            gpusuite::run(
                &task_suite,
                &uuid,
                None,
                &std::sync::atomic::AtomicBool::new(false),
            )
        })
        .await?;
        let finished = match outcome {
            Ok(finished) => finished,
            Err(error) => {
                failed = true;
                eprintln!("{} ({}): {error}", gpu.name, gpu.gpu_uuid);
                continue;
            }
        };
        let catalog = benchmarks::model_of(&gpu);
        let pcie = finished.run.health.pcie;
        let whole = |milli: u64| format!("{}.{}", milli / 1_000, milli % 1_000 / 100);
        let mut figures = Vec::new();
        for figure in &finished.run.figures {
            let peak = catalog.and_then(|(_, v)| peak_milli(v, figure.metric, pcie.as_ref()));
            let healthy = catalog.and_then(|(m, v)| {
                reference(m, v, figure.metric, pcie.as_ref(), &[]).map(|r| r.value_milli)
            });
            figures.push(serde_json::json!({
                "metric": figure.metric,
                "median_milli": figure.median_milli,
                "p10_milli": figure.p10_milli,
                "p90_milli": figure.p90_milli,
                "trials": figure.trials,
                "datasheet_peak_milli": peak,
                "of_peak_bp": peak.map(|p| figure.median_milli * 10_000 / p.max(1)),
                "healthy_reference_milli": healthy,
            }));
        }
        let judged = catalog.map(|(model, variant)| {
            let scored = score(&finished.run, |metric: Metric| {
                reference(model, variant, metric, pcie.as_ref(), &[])
            });
            let verdict = verdict(variant, &finished.run, &scored);
            (model.id, scored, verdict)
        });
        let per_trial: Vec<serde_json::Value> = finished
            .measured
            .gemm
            .iter()
            .map(|g| serde_json::json!({"precision": g.precision.name(), "gemms_per_trial": g.per_trial}))
            .collect();
        let report = serde_json::json!({
            "gpu_uuid": gpu.gpu_uuid,
            "name": finished.measured.device_name,
            "compute_capability": format!("{}.{}", finished.measured.compute_capability.0, finished.measured.compute_capability.1),
            "model_id": judged.as_ref().map(|j| j.0),
            "seconds": finished.elapsed.as_secs(),
            "gemm_size": suite.plan.gemm_size,
            "gemms": per_trial,
            "memory_buffer_bytes": finished.measured.memory_bytes,
            "sustained_windows_milli": finished.measured.sustained_windows_milli,
            "figures": figures,
            "health": finished.run.health,
            "environment": finished.environment,
            "score": judged.as_ref().map(|j| &j.1),
            "verdict": judged.as_ref().map(|j| &j.2),
            "notes": finished.notes,
        });
        if !json {
            println!(
                "{} ({}), compute capability {}, driver {}, CUDA {}: suite in {} s",
                finished.measured.device_name,
                gpu.gpu_uuid,
                report["compute_capability"].as_str().unwrap_or(""),
                finished.environment.driver_version,
                finished.environment.cuda_version,
                finished.elapsed.as_secs()
            );
            for figure in &finished.run.figures {
                let peak = catalog.and_then(|(_, v)| peak_milli(v, figure.metric, pcie.as_ref()));
                println!(
                    "  {:<20} {:>10} (p10 {}, p90 {}; {} trials){}",
                    figure.metric.name(),
                    whole(figure.median_milli),
                    whole(figure.p10_milli),
                    whole(figure.p90_milli),
                    figure.trials,
                    peak.map(|p| format!(
                        "  datasheet {}: {}.{} %",
                        whole(p),
                        figure.median_milli * 100 / p.max(1),
                        figure.median_milli * 1_000 / p.max(1) % 10
                    ))
                    .unwrap_or_default()
                );
            }
            let h = &finished.run.health;
            println!(
                "  health: results {}, ECC uncorrected +{}, retired pages {}, row remap pending {} failed {}, PCIe replays +{}, XIDs {:?}",
                if h.results_verified {
                    "verified"
                } else {
                    "WRONG"
                },
                h.ecc_uncorrected,
                h.retired_pages,
                h.row_remap_pending,
                h.row_remap_failed,
                h.pcie_replays,
                h.xids
            );
            println!(
                "  under load: max {} C, sustained {} C, SM {} MHz, sustained ratio {} bp over {} s, clock events {:#x}, power limit {}/{} W, PCIe {}",
                h.max_temperature_c,
                h.sustained_temperature_c,
                finished.environment.sm_clock_mhz,
                h.sustained_ratio_bp,
                finished.environment.sustained_seconds,
                h.throttle_mask,
                h.power_limit_w,
                h.default_power_limit_w,
                h.pcie.map_or("not read".to_owned(), |p| format!(
                    "Gen{} x{} (max Gen{} x{})",
                    p.generation, p.width, p.max_generation, p.max_width
                ))
            );
            match &judged {
                Some((model, scored, verdict)) => {
                    println!(
                        "  {model}: score {}.{:02} % of the datasheet's healthy figures, verdict {:?}",
                        scored.score_bp / 100,
                        scored.score_bp % 100,
                        verdict.outcome
                    );
                    for reason in &verdict.reasons {
                        println!(
                            "    {:?} {}: {}",
                            reason.outcome, reason.code, reason.evidence
                        );
                    }
                }
                None => println!("  not a catalog model: no score"),
            }
            for note in &finished.notes {
                println!("  note: {note}");
            }
        }
        reports.push(report);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    if failed {
        anyhow::bail!("the suite did not finish on every GPU");
    }
    Ok(())
}

async fn ping(config: &Config) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(client::REQUEST_TIMEOUT)
        .build()?;
    let url = format!("{}/healthz", config.server_url.trim_end_matches('/'));
    let response = http
        .get(&url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach {url}: {e}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "{url} answered {}",
        response.status()
    );
    let health: gpunex_wire::Health = response.json().await?;
    println!(
        "server {} is {} (version {})",
        config.server_url, health.status, health.version
    );
    Ok(())
}
