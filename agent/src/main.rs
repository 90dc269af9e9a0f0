//! `gpunex-agent`: the host agent providers run next to their GPUs.
//!
//! This first version only checks that it can reach a GPUnex server; GPU detection,
//! registration, presence and job execution arrive with the host-agent capability (see
//! `docs/ARCHITECTURE.md`). It speaks to the server only through `gpunex-wire` types.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// How long the agent waits for the server before giving up on a request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(name = "gpunex-agent", version, about = "GPUnex host agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check that the GPUnex server answers, and print its version.
    Ping {
        /// Base URL of the GPUnex server.
        #[arg(
            long,
            env = "GPUNEX_SERVER_URL",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Ping { server } => {
            let client = reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .build()?;
            let url = format!("{}/healthz", server.trim_end_matches('/'));
            let response = client
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
                server, health.status, health.version
            );
            Ok(())
        }
    }
}
