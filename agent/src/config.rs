//! Configuration: flags, then environment variables, then the config file, then defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::simulate::SimSpec;

/// Read when `--config` is not given and the file exists.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/gpunex/agent.toml";
pub const DEFAULT_SERVER_URL: &str = "http://127.0.0.1:8080";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/gpunex-agent";
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);
pub const DEFAULT_USAGE_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// How much of each job's latest output the agent keeps and ships, MiB.
pub const DEFAULT_JOB_LOG_MIB: u64 = 4;
/// The most a provider may set it to.
pub const MAX_JOB_LOG_MIB: u64 = 64;

/// How renters' workloads run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Containers through the Docker Engine API (production).
    Docker { socket: PathBuf },
    /// A child process of the agent with only the rented GPUs visible (tests, development).
    Process,
}

/// The config file (TOML). Every key is optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub server_url: Option<String>,
    pub token: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub heartbeat_interval: Option<String>,
    pub simulate: Option<String>,
    pub runtime: Option<String>,
    pub docker_socket: Option<PathBuf>,
    pub poll_interval: Option<String>,
    pub usage_interval: Option<String>,
    pub job_memory_mib_per_gpu: Option<u64>,
    pub job_cpus_per_gpu: Option<String>,
    pub job_network: Option<String>,
    pub job_log_mib: Option<u64>,
    pub benchmark_interval: Option<String>,
    pub benchmark_suite_duration: Option<String>,
    pub benchmark_sustained: Option<String>,
    pub simulate_profiles: Option<String>,
}

/// What flags and the environment gave (clap fills these).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub server_url: Option<String>,
    pub token: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub heartbeat_interval: Option<String>,
    pub simulate: Option<String>,
    pub simulate_condition_every: Option<u32>,
    pub runtime: Option<String>,
    pub docker_socket: Option<PathBuf>,
    pub poll_interval: Option<String>,
    pub usage_interval: Option<String>,
    pub job_memory_mib_per_gpu: Option<u64>,
    pub job_cpus_per_gpu: Option<String>,
    pub job_network: Option<String>,
    pub job_log_mib: Option<u64>,
    pub benchmark_interval: Option<String>,
    pub benchmark_suite_duration: Option<String>,
    pub benchmark_sustained: Option<String>,
    pub simulate_profiles: Option<String>,
}

/// What the provider set for renters' containers; what is unset follows the host
/// ([`crate::runtime::JobPolicy::for_host`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSettings {
    pub memory_mib_per_gpu: Option<u64>,
    /// Thousandths of a CPU.
    pub cpu_millis_per_gpu: Option<u64>,
    pub network: String,
    /// How much of each job's latest output is kept and shipped, bytes.
    pub log_bytes: u64,
}

/// The agent's effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server_url: String,
    pub token: Option<String>,
    pub state_dir: PathBuf,
    /// `None`: use what the server asks for (15 s until it says).
    pub heartbeat_interval: Option<Duration>,
    pub simulate: Option<SimSpec>,
    pub runtime: RuntimeKind,
    /// How often the agent asks for its assignments.
    pub poll_interval: Duration,
    /// How often running jobs' usage counters are reported.
    pub usage_interval: Duration,
    pub jobs: JobSettings,
    /// Re-tests of an idle GPU; `None`: only the first suite, re-tests on request and after a
    /// driver change.
    pub benchmark_interval: Option<Duration>,
    /// How long a simulated suite holds its GPU.
    pub simulated_suite: Duration,
    /// The real suite's sustained phase.
    pub benchmark_sustained: Duration,
    /// Simulated GPUs' benchmark profiles by index (the others are healthy).
    pub simulate_profiles:
        std::collections::BTreeMap<u32, gpunex_domain::benchmark::simulated::Profile>,
}

impl Config {
    pub fn load(overrides: Overrides) -> anyhow::Result<Config> {
        let file = match &overrides.config {
            Some(path) => read_file(path)?,
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                read_file(Path::new(DEFAULT_CONFIG_FILE))?
            }
            None => FileConfig::default(),
        };
        let server_url = overrides
            .server_url
            .or(file.server_url)
            .unwrap_or_else(|| DEFAULT_SERVER_URL.to_owned());
        if !(server_url.starts_with("http://") || server_url.starts_with("https://")) {
            anyhow::bail!("the server URL must start with http:// or https://, got `{server_url}`");
        }
        let heartbeat_interval = match overrides.heartbeat_interval.or(file.heartbeat_interval) {
            Some(text) => Some(
                parse_duration(&text).map_err(|e| anyhow::anyhow!("heartbeat interval: {e}"))?,
            ),
            None => None,
        };
        let simulate = match overrides.simulate.or(file.simulate) {
            Some(text) => {
                let mut spec =
                    SimSpec::parse(&text).map_err(|e| anyhow::anyhow!("--simulate {e}"))?;
                spec.condition_every = overrides.simulate_condition_every;
                Some(spec)
            }
            None => None,
        };
        let runtime = match overrides.runtime.or(file.runtime).as_deref() {
            None | Some("docker") => RuntimeKind::Docker {
                socket: overrides
                    .docker_socket
                    .or(file.docker_socket)
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_DOCKER_SOCKET)),
            },
            Some("process") => RuntimeKind::Process,
            Some(other) => anyhow::bail!("runtime must be docker or process, got `{other}`"),
        };
        let interval = |text: Option<String>, default: Duration, what: &str| match text {
            Some(text) => parse_duration(&text).map_err(|e| anyhow::anyhow!("{what}: {e}")),
            None => Ok(default),
        };
        let poll_interval = interval(
            overrides.poll_interval.or(file.poll_interval),
            DEFAULT_POLL_INTERVAL,
            "poll interval",
        )?;
        let usage_interval = interval(
            overrides.usage_interval.or(file.usage_interval),
            DEFAULT_USAGE_INTERVAL,
            "usage interval",
        )?;
        let network = overrides
            .job_network
            .or(file.job_network)
            .unwrap_or_else(|| "bridge".to_owned());
        if !matches!(network.as_str(), "bridge" | "none") {
            anyhow::bail!(
                "job network must be bridge or none, got `{network}` (a job never joins the host's network)"
            );
        }
        let memory_mib_per_gpu = overrides
            .job_memory_mib_per_gpu
            .or(file.job_memory_mib_per_gpu);
        if memory_mib_per_gpu.is_some_and(|m| m < 64) {
            anyhow::bail!("job memory per GPU must be at least 64 MiB");
        }
        let cpu_millis_per_gpu = overrides
            .job_cpus_per_gpu
            .or(file.job_cpus_per_gpu)
            .map(|text| parse_cpus(&text).map_err(|e| anyhow::anyhow!("job CPUs per GPU: {e}")))
            .transpose()?;
        let log_mib = overrides
            .job_log_mib
            .or(file.job_log_mib)
            .unwrap_or(DEFAULT_JOB_LOG_MIB);
        if !(1..=MAX_JOB_LOG_MIB).contains(&log_mib) {
            anyhow::bail!("job log bound must be 1 to {MAX_JOB_LOG_MIB} MiB, got {log_mib}");
        }
        let benchmark_interval = match overrides
            .benchmark_interval
            .or(file.benchmark_interval)
            .as_deref()
        {
            None => Some(crate::benchmarks::DEFAULT_BENCHMARK_INTERVAL),
            Some("off") => None,
            Some(text) => Some(
                parse_duration(text)
                    .map_err(|e| anyhow::anyhow!("benchmark interval: {e} (or `off`)"))?,
            ),
        };
        let simulated_suite = interval(
            overrides
                .benchmark_suite_duration
                .or(file.benchmark_suite_duration),
            crate::benchmarks::DEFAULT_SIMULATED_SUITE,
            "simulated benchmark suite duration",
        )?;
        let benchmark_sustained = interval(
            overrides.benchmark_sustained.or(file.benchmark_sustained),
            crate::benchmarks::DEFAULT_SUSTAINED,
            "benchmark sustained phase",
        )?;
        if !(Duration::from_secs(10)..=Duration::from_secs(600)).contains(&benchmark_sustained) {
            anyhow::bail!(
                "the benchmark sustained phase must last 10 s to 10 min, got {} s",
                benchmark_sustained.as_secs()
            );
        }
        let simulate_profiles = match overrides.simulate_profiles.or(file.simulate_profiles) {
            Some(text) => crate::benchmarks::parse_profiles(&text)
                .map_err(|e| anyhow::anyhow!("--simulate-profiles {e}"))?,
            None => std::collections::BTreeMap::new(),
        };
        if !simulate_profiles.is_empty() && simulate.is_none() {
            anyhow::bail!("--simulate-profiles needs --simulate");
        }
        let jobs = JobSettings {
            memory_mib_per_gpu,
            cpu_millis_per_gpu,
            network,
            log_bytes: log_mib << 20,
        };
        Ok(Config {
            benchmark_interval,
            simulated_suite,
            benchmark_sustained,
            simulate_profiles,
            jobs,
            runtime,
            poll_interval,
            usage_interval,
            server_url,
            token: overrides.token.or(file.token).map(|t| t.trim().to_owned()),
            state_dir: overrides
                .state_dir
                .or(file.state_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            heartbeat_interval,
            simulate,
        })
    }

    /// The token, or a clear error naming the three ways to give it.
    pub fn token(&self) -> anyhow::Result<&str> {
        self.token.as_deref().filter(|t| !t.is_empty()).ok_or_else(|| {
            anyhow::anyhow!(
                "no agent token: pass --token, set GPUNEX_AGENT_TOKEN, or put `token = \"...\"` in the config file"
            )
        })
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the config file {}: {e}", path.display()))?;
    toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("the config file {} is invalid: {e}", path.display()))
}

/// `4`, `0.5`, `2.25`: CPUs with at most three decimals, as thousandths (at least 0.1).
pub fn parse_cpus(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !(fraction.is_empty() || digits(fraction) && fraction.len() <= 3) {
        return Err(format!("`{text}` is not a number of CPUs such as 4 or 0.5"));
    }
    let whole: u64 = whole
        .parse()
        .map_err(|_| format!("`{text}` is too large"))?;
    let fraction: u64 = format!("{fraction:0<3}").parse().unwrap_or(0);
    let millis = whole
        .checked_mul(1_000)
        .and_then(|w| w.checked_add(fraction))
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if millis < 100 {
        return Err("must be at least 0.1".to_owned());
    }
    Ok(millis)
}

/// `500ms`, `15s`, `2m`: a whole number and a unit, at least 100 ms.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` needs a unit: ms, s, m or h"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        "h" => Duration::from_secs(number.saturating_mul(3_600)),
        _ => return Err(format!("`{unit}` is not a unit: use ms, s, m or h")),
    };
    if duration < Duration::from_millis(100) {
        return Err("must be at least 100ms".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_file_and_the_file_beats_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(
            &path,
            "server_url = \"https://api.gpunex.example\"\ntoken = \"from-file\"\nheartbeat_interval = \"30s\"\n",
        )
        .unwrap();
        let config = Config::load(Overrides {
            config: Some(path.clone()),
            token: Some("from-flag".to_owned()),
            ..Overrides::default()
        })
        .unwrap();
        assert_eq!(config.server_url, "https://api.gpunex.example");
        assert_eq!(config.token().unwrap(), "from-flag");
        assert_eq!(config.heartbeat_interval, Some(Duration::from_secs(30)));
        assert_eq!(config.state_dir, PathBuf::from(DEFAULT_STATE_DIR));

        std::fs::write(&path, "sever_url = \"typo\"\n").unwrap();
        let error = Config::load(Overrides {
            config: Some(path),
            ..Overrides::default()
        })
        .unwrap_err();
        assert!(error.to_string().contains("sever_url"), "{error}");
    }

    #[test]
    fn cpus_are_read_as_thousandths() {
        assert_eq!(parse_cpus("4"), Ok(4_000));
        assert_eq!(parse_cpus("0.5"), Ok(500));
        assert_eq!(parse_cpus("2.125"), Ok(2_125));
        assert!(parse_cpus("0.05").is_err());
        assert!(parse_cpus("1.2345").is_err());
        assert!(parse_cpus("-1").is_err());
        assert!(parse_cpus("x").is_err());
        assert!(parse_cpus("99999999999999999999").is_err());
    }

    #[test]
    fn a_job_never_joins_the_hosts_network() {
        let error = Config::load(Overrides {
            job_network: Some("host".to_owned()),
            ..Overrides::default()
        })
        .unwrap_err();
        assert!(error.to_string().contains("bridge or none"), "{error}");
        let error = Config::load(Overrides {
            job_log_mib: Some(0),
            ..Overrides::default()
        })
        .unwrap_err();
        assert!(error.to_string().contains("job log bound"), "{error}");
    }

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("15").is_err());
        assert!(parse_duration("10ms").is_err());
        assert_eq!(parse_duration("168h"), Ok(Duration::from_secs(168 * 3_600)));
        assert!(parse_duration("1d").is_err());
    }
}
