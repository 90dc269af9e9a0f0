//! The `gpunex` command line: one typed configuration, parsed once in `main`.

use std::io::IsTerminal;
use std::net::SocketAddr;

use clap::{Parser, Subcommand, ValueEnum};
use gpunex_store::{AuditProgress, AuditReport, Store};
use indicatif::{ProgressBar, ProgressStyle};

/// The embedded default: one SQLite file under `./data/`.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://./data/gpunex.sqlite";

#[derive(Debug, Parser)]
#[command(
    name = "gpunex",
    version,
    about = "GPUnex: the GPU compute marketplace backend"
)]
pub struct Cli {
    /// Database: `sqlite://PATH` (embedded default) or `postgres://USER@HOST:PORT/DB` (production).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, default_value = DEFAULT_DATABASE_URL, global = true)]
    pub database_url: String,

    /// Log output: human-readable text or one JSON object per line.
    #[arg(long, env = "GPUNEX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

// Parsed once at start; the size of `Serve`'s flags does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP API (migrations are applied on start; SIGTERM or Ctrl-C stops it gracefully).
    Serve {
        /// Address to listen on.
        #[arg(long, env = "GPUNEX_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where people and agents reach the platform (`https://api.gpunex.com`), as the steps
        /// in notifications name it; default `http://` and the address listened on.
        #[arg(long, env = "GPUNEX_PUBLIC_URL")]
        public_url: Option<String>,
        /// Where notifications are delivered: a Maildir-style directory (`new/<id>.eml`).
        #[arg(long, env = "GPUNEX_MAILBOX_DIR", default_value = "./data/mailbox")]
        mailbox_dir: std::path::PathBuf,
        /// The sender of notifications.
        #[arg(
            long,
            env = "GPUNEX_MAIL_FROM",
            default_value = "GPUnex <no-reply@gpunex.local>"
        )]
        mail_from: String,
        /// Send notifications by SMTP instead of the mailbox directory: `smtp://host:25`,
        /// `smtp://host:587?tls=required`, `smtps://user:password@host:465`.
        #[arg(long, env = "GPUNEX_SMTP_URL", hide_env_values = true)]
        smtp_url: Option<String>,
        /// Do not deliver notifications from this process (another one does: the outbox has one
        /// checkpoint per deployment).
        #[arg(long, env = "GPUNEX_NO_OUTBOX", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
        no_outbox: bool,
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        fleet: FleetArgs,
        #[command(flatten)]
        payouts: PayoutArgs,
        /// The platform's bank account for SEPA payout files: a JSON file with `iban`, `bic`,
        /// `account_holder` and `address` (`street`, `building_number`, `post_code`, `town`,
        /// `country`). Without it, bank payouts are scheduled but no file can be made.
        #[arg(long, env = "GPUNEX_SEPA_DEBTOR")]
        sepa_debtor: Option<std::path::PathBuf>,
        /// Do not run payout batches on payout dates from this process (another one does).
        #[arg(long, env = "GPUNEX_NO_PAYOUT_SCHEDULER", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
        no_payout_scheduler: bool,
        #[command(flatten)]
        solana: SolanaArgs,
    },
    /// Payout batches and the Solana sender.
    Payouts {
        #[command(subcommand)]
        command: PayoutsCommand,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Operator view of the event log.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Audit the ledger.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Inspect, run or rebuild the read models.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCommand,
    },
    /// Administration from the command line.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Drive a simulated marketplace (providers with simulated GPUs, outages, price changes,
    /// rentals, cancellations, faults) into an empty database, deterministically from the seed,
    /// checking the money invariants every simulated hour.
    Simulate(SimulateArgs),
    /// Measure performance and print figures.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Providers (one machine each).
    #[arg(long, default_value_t = 20)]
    pub providers: u32,
    /// GPUs per provider.
    #[arg(long, default_value_t = 8)]
    pub gpus: u32,
    /// Simulated days, in 5-minute steps.
    #[arg(long, default_value_t = 7)]
    pub days: u32,
    /// Renters sharing the demand.
    #[arg(long, default_value_t = 50)]
    pub renters: u32,
    /// The first simulated day (YYYY-MM-DD, UTC) [default: `days` days before today].
    #[arg(long)]
    pub start: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `gpunex simulate`.
pub async fn simulate(database_url: &str, args: &SimulateArgs) -> anyhow::Result<()> {
    let store = open_store(database_url).await?;
    let start = match &args.start {
        Some(text) => gpunex_domain::calendar::date(text)?,
        None => {
            let today = gpunex_app::payout_run::today_utc(store.clock().now());
            today - chrono::Days::new(u64::from(args.days))
        }
    };
    let head = store.head_position().await?;
    anyhow::ensure!(
        head == 0,
        "simulate writes into an empty database; this one holds {head} events (use another DATABASE_URL)"
    );
    let config = crate::simulate::SimConfig {
        seed: args.seed,
        providers: args.providers,
        gpus: args.gpus,
        days: args.days,
        renters: args.renters,
        start,
        fees: gpunex_domain::metering::FeeSchedule::default(),
    };
    let bar = progress_bar(u64::from(args.days), "simulating days");
    let report =
        crate::simulate::simulate(&store, &config, &|day| bar.set_position(u64::from(day))).await?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let usdc = |m: i64| gpunex_domain::money::Usdc::from_micros(m).to_string();
    println!(
        "simulated {} days from {} (seed {}): {} providers, {} GPUs",
        report.days, report.start, report.seed, report.providers, report.gpus
    );
    println!(
        "{} events ({} usage) in {:.1} s; {} rentals: {} completed, {} cancelled, {} hardware faults, {} network losses; {} outages, {} price changes",
        report.events,
        report.usage_events,
        report.seconds,
        report.rentals,
        report.completed,
        report.cancelled,
        report.hardware_faults,
        report.network_losses,
        report.outages,
        report.price_changes
    );
    println!(
        "renter charges {} USDC = provider earnings {} + platform fees {}; {} hourly reconciliations clean",
        usdc(report.renter_charges_micro_usdc),
        usdc(report.provider_earnings_micro_usdc),
        usdc(report.platform_fees_micro_usdc),
        report.invariant_checks
    );
    println!(
        "{} benchmark runs ({} GPUs degraded, repaired later): {} automatic delistings, {} relistings",
        report.benchmark_runs,
        report.degraded_gpus,
        report.benchmark_delistings,
        report.benchmark_relistings
    );
    println!("content digest {}", report.content_digest);
    Ok(())
}

/// How many clients, and how slow, the server tolerates (`docs/api.md`, "Limits").
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Most open connections. At the bound, the longest-idle connection is closed for a new
    /// one; when none is idle, the new one gets `503 server_busy`. Keep it below the process's
    /// file descriptor limit (`ulimit -n`) less what the database pool needs.
    #[arg(long, env = "GPUNEX_CONNECTIONS_MAX", default_value_t = 1_024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub connections_max: u32,
    /// A client must send a request's headers within this; slower ones are disconnected.
    #[arg(long, env = "GPUNEX_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: std::time::Duration,
    /// A request's body must arrive within this (`408 request_timeout`).
    #[arg(long, env = "GPUNEX_BODY_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub body_read_timeout: std::time::Duration,
    /// A connection with no request for this long is closed.
    #[arg(long, env = "GPUNEX_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: std::time::Duration,
    /// Most requests one token may have in flight at once (`429 too_many_requests`).
    #[arg(long, env = "GPUNEX_REQUESTS_IN_FLIGHT_PER_TOKEN", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub requests_in_flight_per_token: u32,
    /// Whether `GET /metrics` answers requests from the loopback interface without credentials
    /// (a Prometheus on the same host). Turn it off when a proxy on the same host forwards
    /// outside traffic: every request would then come from loopback. Admins always may.
    #[arg(long, env = "GPUNEX_METRICS_LOOPBACK", default_value = "true", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_loopback: bool,
    /// The agent image the installer at `/agent/install.sh` starts [default:
    /// gpunex/agent:<this version>].
    #[arg(long, env = "GPUNEX_AGENT_IMAGE")]
    pub agent_image: Option<String>,
}

impl ServerArgs {
    pub fn limits(&self) -> anyhow::Result<gpunex_api::http_server::ServerLimits> {
        for (name, value) in [
            ("--header-read-timeout", self.header_read_timeout),
            ("--body-read-timeout", self.body_read_timeout),
            ("--idle-timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                anyhow::bail!("{name} must be more than zero");
            }
        }
        Ok(gpunex_api::http_server::ServerLimits {
            connections_max: self.connections_max as usize,
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            idle_timeout: self.idle_timeout,
            requests_in_flight_per_token_max: self.requests_in_flight_per_token as usize,
        })
    }
}

/// How agents' presence is judged and their telemetry kept.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// How often agents are told to send heartbeats (`15s`, `500ms`, `1m`).
    #[arg(long, env = "GPUNEX_HEARTBEAT_INTERVAL", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat_interval: std::time::Duration,
    /// A machine silent for longer than this is recorded offline, dated at its last heartbeat.
    #[arg(long, env = "GPUNEX_OFFLINE_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub offline_grace: std::time::Duration,
    /// Raw per-GPU telemetry older than this is deleted (the latest sample is always kept).
    #[arg(long, env = "GPUNEX_TELEMETRY_RETENTION", default_value = "24h", value_parser = parse_duration)]
    pub telemetry_retention: std::time::Duration,
    /// Development deployment: machines with simulated GPUs may be listed to renters. Never set
    /// this in production.
    #[arg(long, env = "GPUNEX_DEV_MODE", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    pub dev_mode: bool,
    /// A rental whose machine stays offline longer than this ends as interrupted by the provider.
    #[arg(long, env = "GPUNEX_RENTAL_GRACE", default_value = "10m", value_parser = parse_duration)]
    pub rental_grace: std::time::Duration,
    /// Platform fee for Community providers, in basis points of each charge (2000 = 20%).
    #[arg(long, env = "GPUNEX_FEE_COMMUNITY_BP", default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub fee_community_bp: u32,
    /// Platform fee for Enterprise providers, in basis points (1500 = 15%).
    #[arg(long, env = "GPUNEX_FEE_ENTERPRISE_BP", default_value_t = 1_500, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub fee_enterprise_bp: u32,
}

impl FleetArgs {
    pub fn config(&self) -> anyhow::Result<gpunex_api::fleet::FleetConfig> {
        if self.offline_grace < self.heartbeat_interval * 2 {
            anyhow::bail!(
                "--offline-grace ({:?}) must be at least twice --heartbeat-interval ({:?}): one late heartbeat must not make a machine offline",
                self.offline_grace,
                self.heartbeat_interval
            );
        }
        Ok(gpunex_api::fleet::FleetConfig {
            heartbeat_interval: self.heartbeat_interval,
            offline_grace: self.offline_grace,
            telemetry_retention: self.telemetry_retention,
            dev_mode: self.dev_mode,
            rental_grace: self.rental_grace,
            fees: gpunex_domain::metering::FeeSchedule {
                community_bp: self.fee_community_bp,
                enterprise_bp: self.fee_enterprise_bp,
            },
        })
    }
}

/// `500ms`, `15s`, `2m`, `24h`: a whole number and a unit.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` needs a unit: ms, s, m or h"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let duration = match unit {
        "ms" => std::time::Duration::from_millis(number),
        "s" => std::time::Duration::from_secs(number),
        "m" => std::time::Duration::from_secs(number.saturating_mul(60)),
        "h" => std::time::Duration::from_secs(number.saturating_mul(3_600)),
        _ => return Err(format!("`{unit}` is not a unit: use ms, s, m or h")),
    };
    if duration.is_zero() {
        return Err("must be more than zero".to_owned());
    }
    Ok(duration)
}

#[derive(Debug, Subcommand)]
pub enum PayoutsCommand {
    /// Build the payout batch of a date as events (the server's scheduler does it on payout
    /// dates). Running it again for the same date creates nothing new.
    Run {
        /// The payout date, `YYYY-MM-DD` (a Monday, or the first business day of a month).
        #[arg(long)]
        date: chrono::NaiveDate,
        /// Show what would be paid; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the batch as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        payouts: PayoutArgs,
    },
    /// Send the open Solana payouts until each is finalized or failed (the server does it in
    /// the background when it has `--solana-rpc-url`).
    Send {
        /// One pass only.
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        solana: SolanaArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Print the last events of the log, one per line; with --follow, keep printing new ones.
    Tail {
        /// Start after this position instead of showing the last --lines events.
        #[arg(long)]
        after: Option<u64>,
        /// How many of the last events to show first.
        #[arg(long, default_value_t = 20)]
        lines: u64,
        /// Keep running and print events as they are committed.
        #[arg(long, short)]
        follow: bool,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Copy the log, byte for byte and hash-checked, into another database (the embedded
    /// SQLite file to PostgreSQL, say), with the idempotency records, SMTP deliveries, machines'
    /// last heartbeats, the liveness tick and GPU telemetry; the target's read models are built
    /// when a server first starts on it. The target must be
    /// empty or hold a prefix of this log (an interrupted copy resumes). Stop the servers on
    /// this database for the last pass: events appended after the copy starts are not copied.
    Copy {
        /// The database to copy into (`postgres://...` or `sqlite://PATH`); migrations are
        /// applied to it first.
        #[arg(long)]
        to: String,
        /// Copy only the events through this position (the tables outside the log are then not
        /// copied: they describe the source's present, not the prefix's).
        #[arg(long)]
        through: Option<u64>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain, replay the log through every projection and compare with the stored
    /// read models and double-entry balances. Exit 0 when all agree, 1 with each difference.
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// A head hash recorded elsewhere earlier (hex); fails if the log no longer contains it at
        /// --expect-head-position, which catches a rewritten tail.
        #[arg(long, requires = "expect_head_position")]
        expect_head_hash: Option<String>,
        #[arg(long)]
        expect_head_position: Option<u64>,
    },
    /// Check usage money to the micro-USDC from the events: every line's charge, fee, split and
    /// postings; renter charges = provider earnings + platform fees; per rental, billed =
    /// earned GPU-seconds <= online GPU-seconds. Exit 0 when all agree, 1 listing every mismatch.
    Reconcile {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectionsCommand {
    /// Show each projection's checkpoint and lag.
    Status,
    /// Fold all pending events into the read models and exit.
    Run,
    /// Rebuild every stored read model from position 0: the ledger into fresh tables swapped
    /// in at the end, the others emptied and refolded (their readers fold what is missing).
    Rebuild {
        /// Rebuild only these models (repeatable): ledger, earnings, rentals, payouts,
        /// presence, prices.
        #[arg(long = "only", value_name = "MODEL", value_parser = clap::builder::PossibleValuesParser::new(gpunex_projections::PROJECTIONS))]
        only: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Issue a credential and print it once: the first admin token, a finance or treasury
    /// token, or (for operators setting up a machine by hand, and the GPU check script) a
    /// provider or agent token. Providers normally take theirs through the API.
    CreateToken {
        #[arg(long, value_enum)]
        role: OperatorRole,
        /// What the token is for, e.g. "alice's laptop".
        #[arg(long, default_value = "created on the command line")]
        label: String,
        /// The provider a provider or agent token is bound to.
        #[arg(long, required_if_eq_any = [("role", "provider"), ("role", "agent")])]
        provider_id: Option<uuid::Uuid>,
        /// Another token for a machine the provider already holds; without it the platform
        /// mints a new machine id (printed with the token).
        #[arg(long)]
        machine_id: Option<uuid::Uuid>,
    },
    /// Grant a staff role to a person's account (they sign up first): they then act in it from
    /// the console or a session with `X-GPUnex-Act-As`, as themselves. Granting a role held
    /// changes nothing.
    Grant {
        /// The account's email.
        #[arg(long)]
        email: String,
        #[arg(long, value_enum)]
        role: StaffRoleArg,
    },
    /// Revoke a staff role from a person's account; their sessions lose it at once.
    Revoke {
        #[arg(long)]
        email: String,
        #[arg(long, value_enum)]
        role: StaffRoleArg,
    },
}

/// A staff role a person's account can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StaffRoleArg {
    Admin,
    Finance,
    Treasury,
}

impl StaffRoleArg {
    pub fn role(self) -> gpunex_domain::accounts::StaffRole {
        use gpunex_domain::accounts::StaffRole;
        match self {
            StaffRoleArg::Admin => StaffRole::Admin,
            StaffRoleArg::Finance => StaffRole::Finance,
            StaffRoleArg::Treasury => StaffRole::Treasury,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OperatorRole {
    Admin,
    Finance,
    Treasury,
    Provider,
    Agent,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Event store throughput on SQLite and PostgreSQL, each beside the database's own ceiling.
    Store(crate::bench::StoreBenchArgs),
    /// Marketplace search latency over HTTP with 100,000 listings, at 1 and 64 clients, and
    /// the delay from a price change to its visibility in search.
    Search(crate::bench_search::SearchBenchArgs),
    /// The earnings API over HTTP on a simulated database with at least 1,000,000 usage events,
    /// and a full rebuild of the earnings projection beside a bare read of the log.
    Earnings(crate::bench_earnings::EarningsBenchArgs),
    /// One weekly payout batch for 10,000 providers on an empty database: plan, write (beside a
    /// bare append), rerun, the SEPA files, and the reconcile replay (beside a bare read).
    Payouts(crate::bench_payouts::PayoutBenchArgs),
    /// What a server costs as the log grows, on a simulated database: start until ready,
    /// resident memory after the start and after load, dashboard and statement latency over
    /// HTTP, and the stored projection's catch-up beside a bare read of the log.
    Scale(crate::bench_scale::ScaleBenchArgs),
    /// Benchmark scoring at fleet scale, in one process: 100,000 GPUs' runs decided, folded and
    /// scored (beside decoding them alone), the automatic-action pass over the whole fleet, and
    /// a listing search by score (beside the same search without it).
    Benchmarks(crate::bench_benchmarks::BenchmarksBenchArgs),
    /// The server's time for each page of the web console (its API calls, in the stages the page
    /// makes them, and its shell) on a simulated database, acting as the busiest provider.
    Console(crate::bench_console::ConsoleBenchArgs),
}

pub use crate::database::{open_store, redact};

pub async fn events_tail(
    store: &Store,
    after: Option<u64>,
    lines: u64,
    follow: bool,
    json: bool,
) -> anyhow::Result<()> {
    let head = store.head_position().await?;
    let start = after.unwrap_or_else(|| head.saturating_sub(lines));
    let mut subscription = store.subscribe(start).await;
    loop {
        if !follow && subscription.position() >= head {
            return Ok(());
        }
        let batch = tokio::select! {
            batch = subscription.next_batch(1_000) => batch?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        for event in &batch {
            if !follow && event.position > head {
                return Ok(());
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&gpunex_api::server::event_to_wire(event))?
                );
            } else {
                let actor = event
                    .decode_metadata()
                    .map(|m| m.actor)
                    .unwrap_or_else(|_| "?".to_owned());
                println!(
                    "{:>10}  {}  {}@{}  {} v{}  {}  {}",
                    event.position,
                    gpunex_api::server::timestamp(event.recorded_at_us),
                    event.stream_id,
                    event.stream_version,
                    event.event_type,
                    event.schema_version,
                    event.event_id,
                    actor
                );
            }
        }
    }
}

/// A progress bar on stderr when it is a terminal, nothing otherwise.
pub fn progress_bar(length: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(length);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} events ({per_sec}, eta {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

/// Runs the audit and prints it; returns whether the ledger is clean.
pub async fn audit_verify(
    store: &Store,
    json: bool,
    expected_head: Option<(u64, String)>,
) -> anyhow::Result<bool> {
    let head = store.head_position().await?;
    let bar = progress_bar(head, "verifying");
    let mut report = store
        .audit(&|p: AuditProgress| {
            bar.set_length(p.head);
            bar.set_position(p.position);
        })
        .await?;
    bar.finish_and_clear();
    check_snapshot(store, &mut report).await?;
    let anchor_problem = match expected_head {
        Some((position, hash)) => check_anchor(store, position, &hash).await?,
        None => None,
    };
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["clean"] = serde_json::Value::Bool(report.is_clean() && anchor_problem.is_none());
        value["first_bad_position"] = serde_json::to_value(report.first_bad_position())?;
        if let Some(problem) = &anchor_problem {
            value["anchor_mismatch"] = serde_json::Value::String(problem.clone());
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_report(&report, anchor_problem.as_deref());
    }
    Ok(report.is_clean() && anchor_problem.is_none())
}

async fn check_anchor(store: &Store, position: u64, hash: &str) -> anyhow::Result<Option<String>> {
    let found = if position == 0 {
        // Before the first event the chain starts from 32 zero bytes.
        Some(hex::encode(gpunex_store::envelope::GENESIS_HASH))
    } else {
        let events = store.read_all(position - 1, 1).await?;
        events
            .first()
            .filter(|e| e.position == position)
            .map(|e| hex::encode(e.hash))
    };
    Ok(match found {
        Some(found) if found.eq_ignore_ascii_case(hash) => None,
        Some(found) => Some(format!(
            "position {position} has hash {found}, expected {hash}"
        )),
        None => Some(format!("position {position} is not in the log")),
    })
}

/// Adds the check of the in-memory read models' snapshot to an audit report.
pub async fn check_snapshot(store: &Store, report: &mut AuditReport) -> anyhow::Result<()> {
    use gpunex_app::snapshot::SnapshotCheck;
    report.snapshot = match gpunex_app::ReadModels::verify_snapshot(store).await? {
        SnapshotCheck::Missing => "none stored".to_owned(),
        SnapshotCheck::OtherFormat { position, format } => {
            format!("at position {position} of format {format}, which this binary ignores")
        }
        SnapshotCheck::Matches { position } => {
            format!("at position {position}, equal to the fold of the log")
        }
        SnapshotCheck::Differs {
            position,
            models,
            reason,
        } => {
            report
                .findings
                .push(gpunex_store::AuditFinding::SnapshotMismatch {
                    position,
                    models: models.iter().map(|m| (*m).to_owned()).collect(),
                    reason,
                });
            format!("at position {position}, DIFFERENT from the fold of the log")
        }
    };
    Ok(())
}

fn print_report(report: &AuditReport, anchor_problem: Option<&str>) {
    println!("events checked:        {}", report.events_checked);
    println!(
        "head:                  position {} hash {}",
        report.head_position, report.head_hash
    );
    println!("ledger checkpoint:     {}", report.ledger_checkpoint);
    println!("journal lines checked: {}", report.journal_lines_checked);
    println!("accounts checked:      {}", report.accounts_checked);
    println!("earnings checkpoint:   {}", report.earnings_checkpoint);
    println!("earnings lines checked: {}", report.earnings_lines_checked);
    println!("earnings hours checked: {}", report.earnings_hours_checked);
    println!("rentals checkpoint:    {}", report.rentals_checkpoint);
    println!("rentals checked:       {}", report.rentals_checked);
    println!("payouts checkpoint:    {}", report.payouts_checkpoint);
    println!("payouts checked:       {}", report.payouts_checked);
    println!("presence checkpoint:   {}", report.presence_checkpoint);
    println!("presence checked:      {}", report.presence_checked);
    println!("prices checkpoint:     {}", report.prices_checkpoint);
    println!("prices checked:        {}", report.prices_checked);
    println!("read-model snapshot:   {}", report.snapshot);
    println!(
        "total debits:          {} micro-USDC",
        report.total_debits_micro_usdc
    );
    if let Some(problem) = anchor_problem {
        println!("ANCHOR MISMATCH: {problem}");
    }
    if report.is_clean() && anchor_problem.is_none() {
        println!("result:                OK: chain intact, read models and balances match the log");
        return;
    }
    if let Some(position) = report.first_bad_position() {
        println!("first bad position:    {position}");
    }
    for finding in &report.findings {
        println!("DIFFERENCE: {finding}");
    }
    if report.findings_omitted > 0 {
        println!("... and {} more differences", report.findings_omitted);
    }
    println!("result:                FAILED");
}

/// Rebuilds every stored model (or those named in `only`), prints where each one's time went,
/// and returns the position they are all at.
pub async fn rebuild(store: &Store, only: &[String]) -> anyhow::Result<u64> {
    let head = store.head_position().await?;
    let bar = progress_bar(head, "rebuilding");
    let mut rebuilt = Vec::new();
    for &projection in gpunex_projections::PROJECTIONS {
        if !only.is_empty() && !only.iter().any(|name| name == projection) {
            continue;
        }
        let cpu = crate::bench_earnings::process_cpu();
        let model = store.rebuild(projection, &|p| bar.set_position(p)).await?;
        let cpu = crate::bench_earnings::process_cpu().saturating_sub(cpu);
        rebuilt.push((projection, model, cpu));
    }
    bar.finish_and_clear();
    for (projection, model, cpu) in &rebuilt {
        let times = model.times;
        println!(
            "{projection:<9} at {:>10} in {:>6.1} s: reading and decoding {:.1} s, folding {:.1} s, writing {:.1} s (these overlap); CPU {:.1} s",
            model.checkpoint,
            times.total.as_secs_f64(),
            times.read.as_secs_f64(),
            times.fold.as_secs_f64(),
            times.write.as_secs_f64(),
            cpu.as_secs_f64()
        );
    }
    Ok(rebuilt
        .iter()
        .map(|(_, model, _)| model.checkpoint)
        .min()
        .unwrap_or(0))
}

/// A payout batch for people.
pub fn print_batch(batch: &gpunex_wire::payouts::BatchView) {
    let state = match (batch.dry_run, batch.created) {
        (true, _) => "dry run: nothing written",
        (false, true) => "created",
        (false, false) => "already existed: nothing new created",
    };
    println!(
        "batch {} of {} (cutoff {}): {state}",
        batch.batch_id, batch.date, batch.cutoff
    );
    for payout in &batch.payouts {
        println!(
            "  pay   {} provider {} {:>16} USDC  {:?} {:?}  {} lines, carried {} micro-USDC  [{}]",
            payout.payout_id,
            payout.provider_id,
            payout.amount_usdc,
            payout.schedule,
            payout.rail,
            payout.lines,
            payout.carried_micro_usdc,
            payout.status
        );
    }
    for rolled in &batch.rolled_forward {
        println!(
            "  roll  provider {} {:?}: {} micro-USDC available, minimum {}",
            rolled.provider_id,
            rolled.schedule,
            rolled.available_micro_usdc,
            rolled.minimum_micro_usdc
        );
    }
    for provider in &batch.without_method {
        println!("  hold  provider {provider}: no payout method chosen");
    }
    println!(
        "total {} USDC in {} payouts",
        batch.total_usdc,
        batch.payouts.len()
    );
}

/// The payout rules, from flags or the environment.
#[derive(Debug, Clone, clap::Args)]
pub struct PayoutArgs {
    /// Weekly payouts need at least this balance, in USDC; below it the balance rolls forward.
    #[arg(long, env = "GPUNEX_PAYOUT_WEEKLY_MINIMUM", default_value = "20")]
    pub payout_weekly_minimum: String,
    /// Monthly payouts need at least this balance, in USDC.
    #[arg(long, env = "GPUNEX_PAYOUT_MONTHLY_MINIMUM", default_value = "5")]
    pub payout_monthly_minimum: String,
    /// Earnings wait this many days before they can be paid (the window for disputes).
    #[arg(long, env = "GPUNEX_PAYOUT_HOLD_DAYS", default_value_t = 3)]
    pub payout_hold_days: u32,
    /// Holidays skipped by monthly payouts besides weekends, comma-separated `YYYY-MM-DD`.
    #[arg(long, env = "GPUNEX_PAYOUT_HOLIDAYS", value_delimiter = ',')]
    pub payout_holidays: Vec<chrono::NaiveDate>,
}

impl PayoutArgs {
    pub fn policy(&self) -> anyhow::Result<gpunex_domain::payouts::PayoutPolicy> {
        let usdc = |text: &str, flag: &str| -> anyhow::Result<gpunex_domain::Usdc> {
            let value: rust_decimal::Decimal = text
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("{flag}: {text:?} is not an amount in USDC"))?;
            let amount = gpunex_domain::Usdc::from_decimal(value)
                .map_err(|e| anyhow::anyhow!("{flag}: {text:?}: {e}"))?;
            if amount.is_negative() {
                anyhow::bail!("{flag}: {text:?} must not be negative");
            }
            Ok(amount)
        };
        Ok(gpunex_domain::payouts::PayoutPolicy {
            weekly_minimum: usdc(&self.payout_weekly_minimum, "--payout-weekly-minimum")?,
            monthly_minimum: usdc(&self.payout_monthly_minimum, "--payout-monthly-minimum")?,
            hold_days: self.payout_hold_days,
            holidays: self
                .payout_holidays
                .iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
        })
    }
}

/// Where and how the Solana rail sends.
#[derive(Debug, Clone, clap::Args)]
pub struct SolanaArgs {
    /// Solana JSON-RPC endpoint. Without it, Solana payouts are scheduled but not sent.
    #[arg(long, env = "GPUNEX_SOLANA_RPC_URL")]
    pub solana_rpc_url: Option<String>,
    /// The treasury's key file (Solana CLI format). It pays the fees and holds the USDC.
    #[arg(long, env = "GPUNEX_TREASURY_KEYPAIR")]
    pub treasury_keypair: Option<std::path::PathBuf>,
    /// The USDC mint (6 decimals).
    #[arg(long, env = "GPUNEX_USDC_MINT", default_value = gpunex_payouts::solana::USDC_MAINNET_MINT)]
    pub usdc_mint: String,
    /// How long to wait between passes over the open payouts.
    #[arg(long, env = "GPUNEX_SOLANA_POLL", default_value = "2s", value_parser = parse_duration)]
    pub solana_poll: std::time::Duration,
}

impl SolanaArgs {
    /// The rail, when an RPC endpoint is configured (then the key file is required).
    pub fn rail(&self) -> anyhow::Result<Option<gpunex_app::payout_send::SolanaRail>> {
        let Some(url) = &self.solana_rpc_url else {
            return Ok(None);
        };
        let path = self.treasury_keypair.as_ref().ok_or_else(|| {
            anyhow::anyhow!("--treasury-keypair is required with --solana-rpc-url")
        })?;
        Ok(Some(gpunex_app::payout_send::SolanaRail {
            rpc: gpunex_payouts::solana::Rpc::new(url.clone())?,
            treasury: gpunex_payouts::solana::Treasury::from_file(path)?,
            mint: gpunex_payouts::solana::pubkey(&self.usdc_mint)?,
            poll: self.solana_poll,
        }))
    }
}
