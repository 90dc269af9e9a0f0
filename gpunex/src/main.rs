//! `gpunex`: the server and the operator commands.

use std::process::ExitCode;

use clap::Parser;
use gpunex::cli::{
    self, AdminCommand, AuditCommand, BenchCommand, Cli, Command, EventsCommand, LogFormat,
    OperatorRole, PayoutsCommand, ProjectionsCommand,
};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            listen,
            public_url,
            mailbox_dir,
            mail_from,
            smtp_url,
            no_outbox,
            server,
            fleet,
            payouts,
            sepa_debtor,
            no_payout_scheduler,
            solana,
        } => {
            let fleet = fleet.config()?;
            let http = gpunex_api::server::Http {
                limits: server.limits()?,
                metrics_loopback: server.metrics_loopback,
                agent_image: server.agent_image.clone(),
            };
            let payouts = gpunex_api::server::Payouts {
                config: gpunex_api::payout_run::PayoutConfig::new(
                    payouts.policy()?,
                    sepa_debtor.as_deref(),
                )?,
                scheduler: !no_payout_scheduler,
                solana: solana.rail()?,
            };
            let store = gpunex::database::open_store_with(
                &cli.database_url,
                gpunex_store::StoreOptions {
                    clock: server_clock()?,
                    ..Default::default()
                },
            )
            .await?;
            let notifications = match smtp_url {
                _ if no_outbox => None,
                Some(url) => Some(gpunex_app::outbox::Transport::Smtp(
                    gpunex_app::outbox::Smtp::from_url(&url, &mail_from)?,
                )),
                None => Some(gpunex_app::outbox::Transport::Mailbox(
                    gpunex_app::outbox::Mailbox::open(&mailbox_dir, &mail_from)?,
                )),
            };
            gpunex_api::server::serve(
                store,
                listen,
                notifications,
                fleet,
                payouts,
                http,
                public_url,
            )
            .await?;
        }
        Command::Migrate => {
            let store = cli::open_store(&cli.database_url).await?;
            let (position, hash) = store.head().await?;
            println!("migrations applied; log head at position {position} (hash {hash})");
        }
        Command::Events {
            command:
                EventsCommand::Tail {
                    after,
                    lines,
                    follow,
                    json,
                },
        } => {
            let store = cli::open_store(&cli.database_url).await?;
            cli::events_tail(&store, after, lines, follow, json).await?;
        }
        Command::Events {
            command: EventsCommand::Copy { to, through, json },
        } => {
            let source = cli::open_store(&cli.database_url).await?;
            let target = cli::open_store(&to).await?;
            let bar = cli::progress_bar(0, "copying");
            let report = gpunex::copy::events_copy(&source, &target, &to, through, &|at, end| {
                bar.set_length(end);
                bar.set_position(at);
            })
            .await?;
            bar.finish_and_clear();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "copied {} events into {} (from position {}) in {:.1} s; head at position {} \
                     (hash {}); {} idempotency records, {} SMTP deliveries, {} machines' last \
                     heartbeats, {} telemetry rows",
                    report.events_copied,
                    gpunex::database::redact(&to),
                    report.resumed_from,
                    report.seconds,
                    report.head_position,
                    report.head_hash,
                    report.idempotency_records_copied,
                    report.deliveries_copied,
                    report.presence_rows_copied,
                    report.telemetry_rows_copied
                );
            }
        }
        Command::Audit {
            command:
                AuditCommand::Verify {
                    json,
                    expect_head_hash,
                    expect_head_position,
                },
        } => {
            let store = cli::open_store(&cli.database_url).await?;
            let anchor = expect_head_position.zip(expect_head_hash);
            if !cli::audit_verify(&store, json, anchor).await? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Audit {
            command: AuditCommand::Reconcile { json },
        } => {
            let store = cli::open_store(&cli.database_url).await?;
            let head = store.head_position().await?;
            let bar = cli::progress_bar(head, "reconciling");
            let reconciler =
                gpunex_api::reconcile::replay(&store, head, &|p| bar.set_position(p)).await?;
            bar.finish_and_clear();
            let report = reconciler.check(store.clock().now(), None);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                gpunex_api::reconcile::print(&report);
            }
            if !report.is_clean() {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Projections { command } => {
            let store = cli::open_store(&cli.database_url).await?;
            match command {
                ProjectionsCommand::Status => {
                    for status in store.projection_status().await? {
                        println!(
                            "{:<12} checkpoint {:>10}  head {:>10}  lag {:>8} events",
                            status.projection,
                            status.checkpoint,
                            status.head,
                            status.lag()
                        );
                    }
                }
                ProjectionsCommand::Run => {
                    let report = store.run_projections().await?;
                    println!(
                        "folded {} events in {} batches; checkpoint {}",
                        report.events, report.batches, report.checkpoint
                    );
                }
                ProjectionsCommand::Rebuild { only } => {
                    let position = cli::rebuild(&store, &only).await?;
                    println!(
                        "read models rebuilt from position 0 and swapped in at position {position}"
                    );
                }
            }
        }
        Command::Admin {
            command:
                AdminCommand::CreateToken {
                    role,
                    label,
                    provider_id,
                    machine_id,
                },
        } => {
            use gpunex_domain::credentials::Role;
            let store = cli::open_store(&cli.database_url).await?;
            let provider =
                || provider_id.ok_or_else(|| anyhow::anyhow!("--provider-id is required"));
            let role = match role {
                OperatorRole::Admin => Role::Admin,
                OperatorRole::Finance => Role::Finance,
                OperatorRole::Treasury => Role::Treasury,
                OperatorRole::Provider => Role::Provider {
                    provider_id: provider()?,
                },
                OperatorRole::Agent => {
                    let provider_id = provider()?;
                    let registry = gpunex_app::ReadModels::load(&store).await?;
                    let machine_id =
                        gpunex_api::tokens::agent_machine(&registry, provider_id, machine_id)
                            .map_err(|e| anyhow::anyhow!("cannot issue the token: {e}"))?;
                    Role::Agent {
                        provider_id,
                        machine_id,
                    }
                }
            };
            let (new, issued) =
                gpunex_app::credentials::issue_unattended(&store, role, &label, "cli")
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot issue the token: {e}"))?
                    .map_err(|e| anyhow::anyhow!("cannot issue the token: {e}"))?;
            if let Role::Agent { machine_id, .. } = role {
                eprintln!("machine id {machine_id}");
            }
            eprintln!(
                "token {} ({}) issued; it is shown once and cannot be recovered:",
                issued.token_id,
                role.name()
            );
            println!("{}", new.token);
        }
        Command::Admin {
            command: AdminCommand::Grant { email, role },
        } => {
            let store = cli::open_store(&cli.database_url).await?;
            let command = gpunex_domain::accounts::GrantCommand::Grant {
                role: role.role(),
                by: "operator".to_owned(),
            };
            staff_role(&store, &email, command).await?;
        }
        Command::Admin {
            command: AdminCommand::Revoke { email, role },
        } => {
            let store = cli::open_store(&cli.database_url).await?;
            let command = gpunex_domain::accounts::GrantCommand::Revoke {
                role: role.role(),
                by: "operator".to_owned(),
            };
            staff_role(&store, &email, command).await?;
        }
        Command::Payouts {
            command:
                PayoutsCommand::Run {
                    date,
                    dry_run,
                    json,
                    payouts,
                },
        } => {
            let policy = payouts.policy()?;
            let store = cli::open_store(&cli.database_url).await?;
            let credentials = gpunex_app::ReadModels::load(&store).await?;
            let batch = gpunex_api::payout_run::run_batch(
                &store,
                &credentials,
                &policy,
                date,
                dry_run,
                "system:cli",
            )
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", e.code()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&batch)?);
            } else {
                cli::print_batch(&batch);
            }
        }
        Command::Payouts {
            command: PayoutsCommand::Send { once, solana },
        } => {
            let rail = solana
                .rail()?
                .ok_or_else(|| anyhow::anyhow!("--solana-rpc-url is required"))?;
            let store = cli::open_store(&cli.database_url).await?;
            let credentials = gpunex_app::ReadModels::load(&store).await?;
            loop {
                let report = gpunex_app::payout_send::pass(&store, &credentials, &rail).await?;
                println!(
                    "submitted {} rebroadcast {} re-signed {} confirmed {} failed {}; open {}",
                    report.submitted,
                    report.rebroadcast,
                    report.resigned,
                    report.confirmed,
                    report.failed,
                    report.open
                );
                if once || report.open == 0 {
                    break;
                }
                tokio::time::sleep(rail.poll).await;
            }
        }
        Command::Simulate(args) => cli::simulate(&cli.database_url, &args).await?,
        Command::Bench {
            command: BenchCommand::Store(args),
        } => gpunex::bench::run(args).await?,
        Command::Bench {
            command: BenchCommand::Search(args),
        } => gpunex::bench_search::run(args).await?,
        Command::Bench {
            command: BenchCommand::Benchmarks(args),
        } => gpunex::bench_benchmarks::run(args).await?,
        Command::Bench {
            command: BenchCommand::Earnings(args),
        } => gpunex::bench_earnings::run(&cli.database_url, args).await?,
        Command::Bench {
            command: BenchCommand::Payouts(args),
        } => gpunex::bench_payouts::run(&cli.database_url, args).await?,
        Command::Bench {
            command: BenchCommand::Scale(args),
        } => gpunex::bench_scale::run(&cli.database_url, args).await?,
        Command::Bench {
            command: BenchCommand::Console(args),
        } => gpunex::bench_console::run(&cli.database_url, args).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `gpunex admin grant|revoke`: changes a person's staff roles and prints what they hold.
async fn staff_role(
    store: &gpunex_store::Store,
    email: &str,
    command: gpunex_domain::accounts::GrantCommand,
) -> anyhow::Result<()> {
    let email = gpunex_domain::accounts::normalize_email(email)
        .map_err(|reason| anyhow::anyhow!("--email: {reason}"))?;
    let change = gpunex_app::accounts::change_staff_role(store, &email, command)
        .await?
        .map_err(|refusal| anyhow::anyhow!("{email}: {refusal}"))?;
    let roles: Vec<&str> = change.roles.iter().map(|role| role.name()).collect();
    println!(
        "{email} ({}) {}; staff roles now: {}",
        change.user_id,
        if change.changed {
            "changed"
        } else {
            "unchanged"
        },
        if roles.is_empty() {
            "none".to_owned()
        } else {
            roles.join(", ")
        }
    );
    Ok(())
}

/// The server's clock: the wall clock; in a debug build with `GPUNEX_TEST_CLOCK_STEP_DAYS=N`,
/// the wall clock moved N days ahead at each `SIGUSR1`, so the browser suite reaches a payout
/// date after the usage it metered instead of waiting for it. Release builds have no such
/// switch: the variable is not even read.
fn server_clock() -> anyhow::Result<gpunex_domain::clock::SharedClock> {
    let wall: gpunex_domain::clock::SharedClock = std::sync::Arc::new(gpunex_store::SystemClock);
    #[cfg(all(debug_assertions, unix))]
    if let Ok(days) = std::env::var("GPUNEX_TEST_CLOCK_STEP_DAYS") {
        let days: i64 = days
            .parse()
            .map_err(|_| anyhow::anyhow!("GPUNEX_TEST_CLOCK_STEP_DAYS is a number of days"))?;
        let clock = gpunex_domain::clock::OffsetClock::over(wall);
        let mut signals =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())?;
        let moved = clock.clone();
        tokio::spawn(async move {
            while signals.recv().await.is_some() {
                let now = moved.advance_seconds(days * 86_400);
                tracing::warn!(now = now.unix_micros(), days, "test clock moved ahead");
            }
        });
        tracing::warn!(days, "test clock: SIGUSR1 moves it ahead (debug build)");
        return Ok(clock);
    }
    Ok(wall)
}
