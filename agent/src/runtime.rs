//! Where renters' workloads run.
//!
//! - [`Runtime::Docker`] (production): a container through the Docker Engine API on its Unix
//!   socket, with only the rented GPUs (an NVIDIA device request naming their UUIDs), no host
//!   directory mounted, no privileges, `no-new-privileges`. Containers outlive an agent restart:
//!   the agent finds them again by id.
//! - [`Runtime::Process`] (tests and development): the workload's command as a child process in
//!   its own process group and scratch directory, with a clean environment in which only the
//!   rented GPUs are visible (`CUDA_VISIBLE_DEVICES`, `NVIDIA_VISIBLE_DEVICES`). A child does not
//!   outlive the agent.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpunex_domain::rental::Workload;
use serde_json::{Value, json};
use uuid::Uuid;

/// How long a stopped workload gets between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// How a workload stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exit {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub detail: String,
}

pub enum Runtime {
    Docker(Docker),
    Process(Processes),
}

impl Runtime {
    pub fn docker(socket: PathBuf, policy: JobPolicy) -> Runtime {
        Runtime::Docker(Docker {
            socket,
            policy,
            killed_unconfirmed: HashMap::new(),
        })
    }

    pub fn process(jobs_dir: PathBuf) -> Runtime {
        Runtime::Process(Processes {
            jobs_dir,
            children: HashMap::new(),
            dirs: HashMap::new(),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Runtime::Docker(_) => "docker",
            Runtime::Process(_) => "process",
        }
    }

    /// Whether a job survives an agent restart (and can be found again by its handle).
    pub fn survives_restart(&self) -> bool {
        matches!(self, Runtime::Docker(_))
    }

    /// Starts a workload on `gpus`; returns its handle (container id, process id).
    pub async fn start(
        &mut self,
        rental_id: Uuid,
        gpus: &[String],
        workload: &Workload,
    ) -> anyhow::Result<String> {
        match self {
            Runtime::Docker(docker) => docker.start(rental_id, gpus, workload).await,
            Runtime::Process(processes) => processes.start(rental_id, gpus, workload),
        }
    }

    /// `Some` once the workload has stopped by itself.
    pub async fn exited(&mut self, handle: &str) -> anyhow::Result<Option<Exit>> {
        match self {
            Runtime::Docker(docker) => docker.exited(handle).await,
            Runtime::Process(processes) => Ok(processes.exited(handle)),
        }
    }

    /// Stops a workload (SIGTERM, then SIGKILL after [`STOP_GRACE`]) and says how it ended.
    pub async fn stop(&mut self, handle: &str) -> anyhow::Result<Exit> {
        match self {
            Runtime::Docker(docker) => docker.stop(handle).await,
            Runtime::Process(processes) => Ok(processes.stop(handle).await),
        }
    }

    /// The output the workload printed (standard output and error, in order) since `cursor`,
    /// which moves past it. At most [`OUTPUT_READ_MAX`] bytes a call from a process; a
    /// container's log is bounded by its log driver's settings.
    pub async fn output(
        &mut self,
        handle: &str,
        cursor: &mut OutputCursor,
    ) -> anyhow::Result<Vec<u8>> {
        match self {
            Runtime::Docker(docker) => docker.output(handle, cursor).await,
            Runtime::Process(processes) => processes.output(handle, cursor),
        }
    }

    /// Removes what is left of a stopped workload.
    pub async fn remove(&mut self, handle: &str) {
        match self {
            Runtime::Docker(docker) => {
                let path = format!("/containers/{handle}?force=true&v=true");
                if let Err(error) = docker.call("DELETE", &path, None).await {
                    tracing::warn!(%error, container = handle, "could not remove the container");
                }
            }
            Runtime::Process(processes) => {
                processes.children.remove(handle);
                processes.dirs.remove(handle);
            }
        }
    }
}

/// The most output one call reads from a process's output file.
pub const OUTPUT_READ_MAX: u64 = 4 << 20;

/// Where a workload's output was read up to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputCursor {
    /// A process: the bytes of its output file read so far.
    #[serde(default)]
    pub bytes: u64,
    /// A container: the timestamp of the last log entry read (Docker's RFC 3339 with
    /// nanoseconds), and how many entries carried exactly that timestamp (Docker's `since`
    /// includes it).
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub at_since: u32,
}

/// The environment every workload gets: which rental, and which GPUs.
fn gpu_env(rental_id: Uuid, gpus: &[String]) -> Vec<(String, String)> {
    let list = gpus.join(",");
    vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), list.clone()),
        ("NVIDIA_VISIBLE_DEVICES".to_owned(), list.clone()),
        ("GPUNEX_RENTAL_ID".to_owned(), rental_id.to_string()),
        ("GPUNEX_GPU_UUIDS".to_owned(), list),
    ]
}

pub struct Processes {
    jobs_dir: PathBuf,
    children: HashMap<String, tokio::process::Child>,
    /// Each child's scratch directory (its output file is there).
    dirs: HashMap<String, PathBuf>,
}

impl Processes {
    fn start(
        &mut self,
        rental_id: Uuid,
        gpus: &[String],
        workload: &Workload,
    ) -> anyhow::Result<String> {
        let Some((program, args)) = workload.command.split_first() else {
            anyhow::bail!("the process runtime runs a command, and the workload has none");
        };
        let dir = self.jobs_dir.join(rental_id.to_string());
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::File::create(dir.join("output.log"))?;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .env(
                "PATH",
                std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
            )
            .env("HOME", &dir)
            .envs(&workload.env)
            .envs(gpu_env(rental_id, gpus))
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start `{program}`: {e}"))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow::anyhow!("the process exited at once"))?;
        let handle = pid.to_string();
        self.children.insert(handle.clone(), child);
        self.dirs.insert(handle.clone(), dir);
        Ok(handle)
    }

    fn output(&self, handle: &str, cursor: &mut OutputCursor) -> anyhow::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let Some(dir) = self.dirs.get(handle) else {
            return Ok(Vec::new());
        };
        let Ok(mut file) = std::fs::File::open(dir.join("output.log")) else {
            return Ok(Vec::new());
        };
        file.seek(SeekFrom::Start(cursor.bytes))?;
        let mut bytes = Vec::new();
        file.take(OUTPUT_READ_MAX).read_to_end(&mut bytes)?;
        cursor.bytes += bytes.len() as u64;
        Ok(bytes)
    }

    fn exited(&mut self, handle: &str) -> Option<Exit> {
        let Some(child) = self.children.get_mut(handle) else {
            return Some(Exit {
                detail: "the process is not a child of this agent (it did not survive a restart)"
                    .to_owned(),
                ..Exit::default()
            });
        };
        match child.try_wait() {
            Ok(Some(status)) => Some(exit_of(status)),
            Ok(None) => None,
            Err(error) => Some(Exit {
                detail: format!("cannot wait for the process: {error}"),
                ..Exit::default()
            }),
        }
    }

    async fn stop(&mut self, handle: &str) -> Exit {
        let Some(child) = self.children.get_mut(handle) else {
            return Exit {
                detail: "the process is not a child of this agent".to_owned(),
                ..Exit::default()
            };
        };
        if let Ok(Some(status)) = child.try_wait() {
            return exit_of(status);
        }
        let group = handle.parse::<i32>().ok().map(nix::unistd::Pid::from_raw);
        let signal_group = |signal| {
            if let Some(group) = group {
                let _ = nix::sys::signal::killpg(group, signal);
            }
        };
        signal_group(nix::sys::signal::Signal::SIGTERM);
        match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(status)) => exit_of(status),
            _ => {
                signal_group(nix::sys::signal::Signal::SIGKILL);
                let _ = child.kill().await;
                match child.wait().await {
                    Ok(status) => exit_of(status),
                    Err(error) => Exit {
                        detail: format!("cannot wait for the process: {error}"),
                        ..Exit::default()
                    },
                }
            }
        }
    }
}

fn exit_of(status: std::process::ExitStatus) -> Exit {
    Exit {
        exit_code: status.code(),
        signal: status.signal(),
        detail: String::new(),
    }
}

/// A Docker Engine API client on its Unix socket (API 1.41+: device requests).
pub struct Docker {
    socket: PathBuf,
    policy: JobPolicy,
    /// Jobs seen ended by SIGKILL (exit code 137) without Docker's out-of-memory flag, and how
    /// many polls since: [`Docker::exited`] looks again before it reports them.
    killed_unconfirmed: HashMap<String, u8>,
}

/// Polls a job that ended by SIGKILL without the out-of-memory flag is looked at again before
/// its end is reported: Docker can record an out-of-memory kill after the exit (on cgroup v2
/// the two events reach it in either order), and a job killed for its memory should say so.
const OOM_FLAG_POLLS: u8 = 2;

/// A container's exit code when its process was killed by SIGKILL (128 + 9), as the kernel's
/// out-of-memory killer does.
const SIGKILL_EXIT_CODE: i32 = 137;

/// What each rented GPU brings to its job's container besides the GPU: a share of the host's
/// memory and CPUs, a number of processes, and the network the container joins. A job on `n`
/// GPUs gets `n` times each figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPolicy {
    /// Memory (RAM, no swap beyond it) per rented GPU, MiB.
    pub memory_mib_per_gpu: u64,
    /// CPU time per rented GPU, in thousandths of a CPU.
    pub cpu_millis_per_gpu: u64,
    /// Processes and threads per rented GPU.
    pub pids_per_gpu: u64,
    /// `bridge` (the default: its own network namespace with outbound access) or `none`
    /// (loopback only). Never `host`.
    pub network: String,
}

/// Processes and threads per rented GPU.
pub const PIDS_PER_GPU: u64 = 4_096;

/// The share of the host's memory jobs may use together: the rest stays with the host (its
/// Docker daemon, this agent, the page cache).
pub const JOB_MEMORY_PERCENT: u64 = 90;

impl JobPolicy {
    /// The default policy of a host with `ram_mib` of memory, `cpus` CPUs and `gpus` GPUs: each
    /// GPU brings [`JOB_MEMORY_PERCENT`] % of the memory and all the CPUs divided by the GPUs
    /// (rounded down; at least 256 MiB and a tenth of a CPU).
    pub fn for_host(ram_mib: Option<u64>, cpus: Option<u32>, gpus: usize) -> JobPolicy {
        let gpus = u64::try_from(gpus.max(1)).unwrap_or(1);
        let ram = ram_mib.unwrap_or(16 * 1024);
        let cpus = u64::from(cpus.unwrap_or(4));
        JobPolicy {
            memory_mib_per_gpu: (ram * JOB_MEMORY_PERCENT / 100 / gpus).max(256),
            cpu_millis_per_gpu: (cpus * 1_000 / gpus).max(100),
            pids_per_gpu: PIDS_PER_GPU,
            network: "bridge".to_owned(),
        }
    }
}

/// The container a rental runs in: its image and command, only its GPUs (an NVIDIA device
/// request by UUID), no host directory or device, no host namespace, every capability dropped,
/// `no-new-privileges`, and memory, CPU and process limits for its number of GPUs (`policy`).
pub fn container_spec(
    rental_id: Uuid,
    gpus: &[String],
    workload: &Workload,
    policy: &JobPolicy,
) -> Value {
    let mut env: Vec<String> = workload
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.extend(
        gpu_env(rental_id, gpus)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    let n = u64::try_from(gpus.len().max(1)).unwrap_or(1);
    let memory = policy.memory_mib_per_gpu.saturating_mul(n) << 20;
    let mut spec = json!({
        "Image": workload.image,
        "Env": env,
        "Labels": {JOB_LABEL: rental_id.to_string()},
        "HostConfig": {
            "DeviceRequests": [{
                "Driver": "nvidia",
                "DeviceIDs": gpus,
                "Capabilities": [["gpu", "compute", "utility"]],
            }],
            "Binds": [],
            "Mounts": [],
            "Devices": [],
            "Privileged": false,
            "SecurityOpt": ["no-new-privileges:true"],
            "CapDrop": ["ALL"],
            "Memory": memory,
            "MemorySwap": memory,
            "NanoCpus": policy.cpu_millis_per_gpu.saturating_mul(n).saturating_mul(1_000_000),
            "PidsLimit": policy.pids_per_gpu.saturating_mul(n),
            "IpcMode": "private",
            "PidMode": "",
            "UTSMode": "",
            "UsernsMode": "",
            "ShmSize": (memory / 2).max(64 << 20),
            "NetworkMode": policy.network,
            "RestartPolicy": {"Name": "no"},
            "AutoRemove": false,
            "LogConfig": {"Type": "json-file", "Config": {"max-size": "16m", "max-file": "2"}},
        },
    });
    if !workload.command.is_empty() {
        spec["Cmd"] = json!(workload.command);
    }
    spec
}

/// The label every job container carries: its rental.
pub const JOB_LABEL: &str = "io.gpunex.rental_id";

/// What Docker said in an error answer: its JSON `message`, else the start of the body.
fn docker_message(bytes: &[u8]) -> String {
    serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(bytes).chars().take(300).collect())
}

/// An image reference as a path segment of the Engine API (`/images/{name}/json`): its own
/// `/`, `:` and `@` kept, as the Docker CLI sends them; anything else outside the unreserved
/// set escaped.
fn path_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z'
            | b'A'..=b'Z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'/'
            | b':'
            | b'@' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `application/x-www-form-urlencoded`-style escaping for a query value.
fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Docker {
    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Vec<u8>)> {
        call_unix(&self.socket, method, path, body).await
    }

    async fn json(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let (status, bytes) = self.call(method, path, body).await?;
        if !(200..300).contains(&status) {
            let message = docker_message(&bytes);
            anyhow::bail!("Docker answered {status} to {method} {path}: {message}");
        }
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    async fn start(
        &self,
        rental_id: Uuid,
        gpus: &[String],
        workload: &Workload,
    ) -> anyhow::Result<String> {
        self.ensure_image(&workload.image).await?;
        let created = self
            .json(
                "POST",
                &format!("/containers/create?name=gpunex-{rental_id}"),
                Some(&container_spec(rental_id, gpus, workload, &self.policy)),
            )
            .await?;
        let id = created["Id"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("Docker created a container without an id"))?
            .to_owned();
        self.json("POST", &format!("/containers/{id}/start"), None)
            .await?;
        Ok(id)
    }

    /// Pulls `image` only when the daemon does not have it (inspected first), so a host that
    /// has the image runs it offline. A pull the daemon or the registry refuses fails with
    /// Docker's own message.
    async fn ensure_image(&self, image: &str) -> anyhow::Result<()> {
        let (status, bytes) = self
            .call("GET", &format!("/images/{}/json", path_escape(image)), None)
            .await?;
        match status {
            200 => return Ok(()),
            404 => {}
            _ => anyhow::bail!(
                "cannot inspect the image {image}: Docker answered {status}: {}",
                docker_message(&bytes)
            ),
        }
        // The answer is a stream of JSON progress lines; an error arrives as a line with
        // `error`, or as a non-2xx answer with a `message`.
        let (status, bytes) = self
            .call(
                "POST",
                &format!("/images/create?fromImage={}", escape(image)),
                None,
            )
            .await?;
        if !(200..300).contains(&status) {
            anyhow::bail!(
                "cannot pull {image}: Docker answered {status}: {}",
                docker_message(&bytes)
            );
        }
        let text = String::from_utf8_lossy(&bytes);
        let failed = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v["error"].as_str().map(str::to_owned));
        if let Some(message) = failed {
            anyhow::bail!("cannot pull {image}: {message}");
        }
        Ok(())
    }

    async fn inspect(&self, handle: &str) -> anyhow::Result<Option<Value>> {
        let (status, bytes) = self
            .call("GET", &format!("/containers/{handle}/json"), None)
            .await?;
        match status {
            404 => Ok(None),
            200 => Ok(Some(serde_json::from_slice(&bytes)?)),
            _ => anyhow::bail!("Docker answered {status} to inspecting {handle}"),
        }
    }

    /// `Some` once the container has stopped; a SIGKILL without the out-of-memory flag only
    /// after [`OOM_FLAG_POLLS`] more looks.
    async fn exited(&mut self, handle: &str) -> anyhow::Result<Option<Exit>> {
        let Some((exit, oom_killed)) = self.exit(handle).await? else {
            return Ok(None);
        };
        if exit.exit_code == Some(SIGKILL_EXIT_CODE) && !oom_killed {
            let polls = self
                .killed_unconfirmed
                .entry(handle.to_owned())
                .or_insert(0);
            if *polls < OOM_FLAG_POLLS {
                *polls += 1;
                return Ok(None);
            }
        }
        self.killed_unconfirmed.remove(handle);
        Ok(Some(exit))
    }

    /// How the container ended and whether Docker flagged it killed for its memory (`None`:
    /// it has not stopped).
    async fn exit(&self, handle: &str) -> anyhow::Result<Option<(Exit, bool)>> {
        let Some(container) = self.inspect(handle).await? else {
            return Ok(Some((
                Exit {
                    detail: "the container is gone".to_owned(),
                    ..Exit::default()
                },
                false,
            )));
        };
        let state = &container["State"];
        if state["Running"].as_bool() == Some(true) {
            return Ok(None);
        }
        if matches!(state["Status"].as_str(), Some("created" | "restarting")) {
            return Ok(None);
        }
        let mut detail = state["Error"].as_str().unwrap_or_default().to_owned();
        let oom_killed = state["OOMKilled"].as_bool() == Some(true);
        if oom_killed {
            let limit = container["HostConfig"]["Memory"].as_u64().unwrap_or(0) >> 20;
            detail = format!(
                "out of memory: the job used all of its {limit} MiB and was killed (OOMKilled)"
            );
        }
        let exit = Exit {
            exit_code: state["ExitCode"]
                .as_i64()
                .and_then(|c| i32::try_from(c).ok()),
            signal: None,
            detail,
        };
        Ok(Some((exit, oom_killed)))
    }

    /// The container's log entries after `cursor` (both streams, with Docker's timestamps,
    /// which are stripped): the answer is Docker's multiplexed stream, frames of an 8-byte
    /// header (stream, 3 zero bytes, big-endian length) and one entry each.
    async fn output(&self, handle: &str, cursor: &mut OutputCursor) -> anyhow::Result<Vec<u8>> {
        let since = cursor
            .since
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| format!("&since={}.{:09}", t.timestamp(), t.timestamp_subsec_nanos()))
            .unwrap_or_default();
        let path = format!("/containers/{handle}/logs?stdout=1&stderr=1&timestamps=1{since}");
        let (status, bytes) = self.call("GET", &path, None).await?;
        if status == 404 {
            return Ok(Vec::new());
        }
        if !(200..300).contains(&status) {
            anyhow::bail!(
                "Docker answered {status} to reading the logs of {handle}: {}",
                docker_message(&bytes)
            );
        }
        Ok(take_log_entries(&bytes, cursor))
    }

    async fn stop(&mut self, handle: &str) -> anyhow::Result<Exit> {
        let (status, _) = self
            .call(
                "POST",
                &format!("/containers/{handle}/stop?t={}", STOP_GRACE.as_secs()),
                None,
            )
            .await?;
        // 304: already stopped; 404: gone.
        if !matches!(status, 204 | 304 | 404) {
            anyhow::bail!("Docker answered {status} to stopping {handle}");
        }
        // The agent stopped it: a SIGKILL here is the agent's own, reported as it reads.
        self.killed_unconfirmed.remove(handle);
        Ok(self
            .exit(handle)
            .await?
            .map(|(exit, _)| exit)
            .unwrap_or_default())
    }
}

/// The entries of a multiplexed log answer after `cursor` (which moves past them), without
/// their timestamps. A container with a TTY answers raw text: lines, each with its timestamp.
fn take_log_entries(bytes: &[u8], cursor: &mut OutputCursor) -> Vec<u8> {
    let mut entries: Vec<&[u8]> = Vec::new();
    let multiplexed = bytes.first().is_some_and(|b| *b <= 2) && bytes.len() >= 8;
    if multiplexed {
        let mut rest = bytes;
        while rest.len() >= 8 {
            let len = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
            let Some(frame) = rest.get(8..8 + len) else {
                break;
            };
            entries.push(frame);
            rest = &rest[8 + len..];
        }
    } else {
        entries.extend(bytes.split_inclusive(|b| *b == b'\n'));
    }
    let last = cursor
        .since
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    let mut out = Vec::new();
    let mut seen_at_last = 0_u32;
    for entry in entries {
        let Some(space) = entry.iter().position(|b| *b == b' ') else {
            continue;
        };
        let stamp_text = String::from_utf8_lossy(&entry[..space]).into_owned();
        let Ok(stamp) = chrono::DateTime::parse_from_rfc3339(&stamp_text) else {
            continue;
        };
        if let Some(last) = last {
            if stamp < last {
                continue;
            }
            if stamp == last {
                seen_at_last += 1;
                if seen_at_last <= cursor.at_since {
                    continue;
                }
            }
        }
        out.extend_from_slice(&entry[space + 1..]);
        let same = cursor
            .since
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            == Some(stamp);
        if same {
            cursor.at_since += 1;
        } else {
            cursor.since = Some(stamp_text);
            cursor.at_since = 1;
        }
    }
    out
}

/// The Docker Engine API version answering on `socket` (the guard's, in the installed agent).
pub async fn docker_version(socket: &Path) -> anyhow::Result<String> {
    let (status, bytes) = call_unix(socket, "GET", "/version", None).await?;
    anyhow::ensure!(
        status == 200,
        "Docker answered {status}: {}",
        docker_message(&bytes)
    );
    let version: Value = serde_json::from_slice(&bytes)?;
    Ok(version["ApiVersion"]
        .as_str()
        .unwrap_or("unknown")
        .to_owned())
}

/// One HTTP/1.1 request on a Unix socket.
async fn call_unix(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(u16, Vec<u8>)> {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach Docker at {}: {e}", socket.display()))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let bytes = match body {
        Some(body) => Bytes::from(serde_json::to_vec(body)?),
        None => Bytes::new(),
    };
    let request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "docker")
        .header("content-type", "application/json")
        .body(Full::new(bytes))?;
    let response = tokio::time::timeout(Duration::from_secs(600), sender.send_request(request))
        .await
        .map_err(|_| anyhow::anyhow!("Docker did not answer {method} {path} in 10 minutes"))??;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes().to_vec();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn workload(command: &[&str]) -> Workload {
        Workload {
            image: "nvidia/cuda:12.4.1-base-ubuntu22.04".to_owned(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            env: BTreeMap::from([("EPOCHS".to_owned(), "3".to_owned())]),
        }
    }

    fn policy() -> JobPolicy {
        JobPolicy::for_host(Some(64 * 1024), Some(16), 4)
    }

    #[test]
    fn containers_get_only_their_gpus_and_no_host_directory() {
        let gpus = vec!["GPU-aa".to_owned(), "GPU-bb".to_owned()];
        let rental = Uuid::nil();
        let policy = policy();
        // A quarter of 90 % of 64 GiB, and 4 CPUs, per GPU.
        assert_eq!(policy.memory_mib_per_gpu, 14_745);
        assert_eq!(policy.cpu_millis_per_gpu, 4_000);
        let spec = container_spec(rental, &gpus, &workload(&["python", "train.py"]), &policy);
        let host = &spec["HostConfig"];
        assert_eq!(host["Memory"], json!((2 * 14_745_u64) << 20));
        assert_eq!(host["MemorySwap"], host["Memory"]);
        assert_eq!(host["NanoCpus"], json!(8_000_000_000_u64));
        assert_eq!(host["PidsLimit"], json!(2 * PIDS_PER_GPU));
        assert_eq!(host["CapDrop"], json!(["ALL"]));
        assert_eq!(host["SecurityOpt"], json!(["no-new-privileges:true"]));
        assert_eq!(host["NetworkMode"], json!("bridge"));
        assert_eq!(host["Devices"], json!([]));
        assert_eq!(
            host["DeviceRequests"][0]["DeviceIDs"],
            json!(["GPU-aa", "GPU-bb"])
        );
        assert_eq!(host["DeviceRequests"].as_array().map(Vec::len), Some(1));
        assert_eq!(host["Binds"], json!([]));
        assert_eq!(host["Mounts"], json!([]));
        assert_eq!(host["Privileged"], json!(false));
        assert!(host.get("VolumesFrom").is_none() && host.get("CapAdd").is_none());
        assert_eq!(spec["Cmd"], json!(["python", "train.py"]));
        let env: Vec<&str> = spec["Env"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(env.contains(&"EPOCHS=3"));
        assert!(env.contains(&"CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb"));
        // No command: the image's own.
        assert!(
            container_spec(rental, &gpus, &workload(&[]), &policy)
                .get("Cmd")
                .is_none()
        );
        assert_eq!(escape("nvidia/cuda:12.4"), "nvidia%2Fcuda%3A12.4");
    }

    #[test]
    fn log_entries_are_read_once_each_even_when_timestamps_repeat() {
        fn frame(stream: u8, text: &str) -> Vec<u8> {
            let mut f = vec![stream, 0, 0, 0];
            f.extend_from_slice(&u32::try_from(text.len()).unwrap().to_be_bytes());
            f.extend_from_slice(text.as_bytes());
            f
        }
        let a = "2026-12-06T05:00:00.1Z";
        let b = "2026-12-06T05:00:00.2Z";
        let mut answer = frame(1, &format!("{a} one\n"));
        answer.extend(frame(2, &format!("{b} two\n")));
        answer.extend(frame(1, &format!("{b} three\n")));
        let mut cursor = OutputCursor::default();
        assert_eq!(take_log_entries(&answer, &mut cursor), b"one\ntwo\nthree\n");
        assert_eq!((cursor.since.as_deref(), cursor.at_since), (Some(b), 2));
        // Docker's `since` includes the last timestamp: the two entries already read at it are
        // skipped, a third one at it is new.
        let mut again = frame(2, &format!("{b} two\n"));
        again.extend(frame(1, &format!("{b} three\n")));
        again.extend(frame(1, &format!("{b} four\n")));
        again.extend(frame(1, "2026-12-06T05:00:01.000000001Z five\n"));
        assert_eq!(take_log_entries(&again, &mut cursor), b"four\nfive\n");
        assert_eq!(cursor.at_since, 1);
        // A TTY container's raw lines.
        let mut cursor = OutputCursor::default();
        let raw = format!("{a} x\n{b} y\n");
        assert_eq!(take_log_entries(raw.as_bytes(), &mut cursor), b"x\ny\n");
        // Garbage is skipped, never a panic.
        assert!(take_log_entries(&[1, 0, 0, 0, 255, 255, 255, 255, 1], &mut cursor).is_empty());
    }

    #[tokio::test]
    async fn a_process_sees_only_its_gpus_and_stops_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let mut runtime = Runtime::process(dir.path().to_owned());
        let gpus = vec!["GPU-aa".to_owned()];
        let rental = Uuid::now_v7();
        // The agent's own environment (cargo sets CARGO_PKG_NAME for tests) does not leak.
        let script =
            "echo \"$CUDA_VISIBLE_DEVICES $GPUNEX_RENTAL_ID ${CARGO_PKG_NAME:-none}\"; exit 3";
        let handle = runtime
            .start(rental, &gpus, &workload(&["sh", "-c", script]))
            .await
            .unwrap();
        let exit = loop {
            if let Some(exit) = runtime.exited(&handle).await.unwrap() {
                break exit;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(exit.exit_code, Some(3));
        let output =
            std::fs::read_to_string(dir.path().join(rental.to_string()).join("output.log"))
                .unwrap();
        assert_eq!(output.trim(), format!("GPU-aa {rental} none"));

        let handle = runtime
            .start(Uuid::now_v7(), &gpus, &workload(&["sleep", "30"]))
            .await
            .unwrap();
        assert_eq!(runtime.exited(&handle).await.unwrap(), None);
        let exit = runtime.stop(&handle).await;
        assert_eq!(exit.unwrap().signal, Some(15));
        let error = runtime
            .start(Uuid::now_v7(), &gpus, &workload(&[]))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("runs a command"), "{error}");
    }

    /// A STAND-IN for the Docker Engine API: it answers the calls the runtime makes on a Unix
    /// socket and records them, so the exact requests and the handling of answers a real daemon
    /// gives only rarely (a pull refused mid-stream) are checked in a unit test. The real daemon
    /// is exercised by `agent/tests/docker_engine.rs`.
    struct StandInDocker {
        calls: std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>,
    }

    /// What the stand-in does with an image.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Pull {
        /// Absent, pulled.
        Pulled,
        /// Already there: no pull.
        Present,
        /// Absent; the pull's progress stream carries an error.
        RefusedInStream,
        /// Absent; the daemon answers the pull with an error status and its message.
        Refused,
    }

    impl StandInDocker {
        fn start(socket: &Path, pull: Pull) -> StandInDocker {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let listener = tokio::net::UnixListener::bind(socket).unwrap();
            let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let recorded = calls.clone();
            tokio::spawn(async move {
                let mut inspections = 0;
                let mut oom_inspections = 0;
                loop {
                    let (mut stream, _) = listener.accept().await.unwrap();
                    let mut buffer = Vec::new();
                    let mut chunk = [0_u8; 4096];
                    let head_end = loop {
                        let n = stream.read(&mut chunk).await.unwrap();
                        buffer.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buffer.len() < head_end + length {
                        let n = stream.read(&mut chunk).await.unwrap();
                        buffer.extend_from_slice(&chunk[..n]);
                    }
                    let body =
                        String::from_utf8_lossy(&buffer[head_end..head_end + length]).to_string();
                    let mut words = head.split_whitespace();
                    let (method, path) = (
                        words.next().unwrap().to_owned(),
                        words.next().unwrap().to_owned(),
                    );
                    recorded
                        .lock()
                        .unwrap()
                        .push((method.clone(), path.clone(), body));
                    let (status, answer) = match (method.as_str(), path.as_str()) {
                        ("GET", p) if p.starts_with("/images/") => match pull {
                            Pull::Present => ("200 OK", "{\"Id\":\"sha256:ab\"}".to_owned()),
                            _ => (
                                "404 Not Found",
                                "{\"message\":\"No such image\"}".to_owned(),
                            ),
                        },
                        ("POST", p) if p.starts_with("/images/create") => match pull {
                            Pull::RefusedInStream => (
                                "200 OK",
                                "{\"status\":\"Pulling\"}\n{\"error\":\"manifest unknown\"}\n"
                                    .to_owned(),
                            ),
                            Pull::Refused => (
                                "500 Internal Server Error",
                                "{\"message\":\"dial tcp: lookup registry.example: no such host\"}"
                                    .to_owned(),
                            ),
                            _ => (
                                "200 OK",
                                "{\"status\":\"Pulling\"}\n{\"status\":\"Downloaded\"}\n"
                                    .to_owned(),
                            ),
                        },
                        ("POST", p) if p.starts_with("/containers/create") => (
                            "201 Created",
                            "{\"Id\":\"c0ffee\",\"Warnings\":[]}".to_owned(),
                        ),
                        ("GET", "/containers/c0ffee/json") => {
                            inspections += 1;
                            let state = if inspections == 1 {
                                "{\"Running\":true,\"Status\":\"running\"}"
                            } else {
                                "{\"Running\":false,\"Status\":\"exited\",\"ExitCode\":3,\"OOMKilled\":false,\"Error\":\"\"}"
                            };
                            ("200 OK", format!("{{\"Id\":\"c0ffee\",\"State\":{state}}}"))
                        }
                        // Killed for its memory, the flag recorded after the exit (the
                        // third look sees it).
                        ("GET", "/containers/0ff00d/json") => {
                            oom_inspections += 1;
                            let flagged = oom_inspections >= 3;
                            (
                                "200 OK",
                                format!(
                                    "{{\"Id\":\"0ff00d\",\"HostConfig\":{{\"Memory\":100663296}},\"State\":{{\"Running\":false,\"Status\":\"exited\",\"ExitCode\":137,\"OOMKilled\":{flagged},\"Error\":\"\"}}}}"
                                ),
                            )
                        }
                        // Killed by SIGKILL, never flagged.
                        ("GET", "/containers/dead/json") => (
                            "200 OK",
                            "{\"Id\":\"dead\",\"State\":{\"Running\":false,\"Status\":\"exited\",\"ExitCode\":137,\"OOMKilled\":false,\"Error\":\"\"}}".to_owned(),
                        ),
                        ("GET", _) => (
                            "404 Not Found",
                            "{\"message\":\"No such container\"}".to_owned(),
                        ),
                        _ => ("204 No Content", String::new()),
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                    stream.write_all(response.as_bytes()).await.unwrap();
                    let _ = stream.shutdown().await;
                }
            });
            StandInDocker { calls }
        }

        fn calls(&self) -> Vec<(String, String, String)> {
            self.calls.lock().unwrap().clone()
        }
    }

    /// Docker may record an out-of-memory kill after the exit: a SIGKILL without the flag is
    /// looked at again before it is reported, so the job says why it died.
    #[tokio::test]
    async fn a_sigkill_waits_for_a_late_out_of_memory_flag() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let _docker = StandInDocker::start(&socket, Pull::Present);
        let mut runtime = Runtime::docker(socket, policy());
        assert_eq!(runtime.exited("0ff00d").await.unwrap(), None);
        assert_eq!(runtime.exited("0ff00d").await.unwrap(), None);
        let exit = runtime.exited("0ff00d").await.unwrap().unwrap();
        assert_eq!(exit.exit_code, Some(137));
        assert!(
            exit.detail.contains("out of memory") && exit.detail.contains("96 MiB"),
            "{exit:?}"
        );

        // Never flagged: reported after OOM_FLAG_POLLS more looks, as it is.
        for _ in 0..OOM_FLAG_POLLS {
            assert_eq!(runtime.exited("dead").await.unwrap(), None);
        }
        let exit = runtime.exited("dead").await.unwrap().unwrap();
        assert_eq!((exit.exit_code, exit.detail.as_str()), (Some(137), ""));
        // The agent's own stop reads the exit at once.
        let stopped = runtime.stop("dead").await.unwrap();
        assert_eq!(stopped.exit_code, Some(137));
    }

    #[tokio::test]
    async fn the_docker_runtime_drives_the_engine_api() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let docker = StandInDocker::start(&socket, Pull::Pulled);
        let mut runtime = Runtime::docker(socket.clone(), policy());
        let rental = Uuid::now_v7();
        let gpus = vec!["GPU-aa".to_owned(), "GPU-bb".to_owned()];
        let handle = runtime
            .start(rental, &gpus, &workload(&["python", "train.py"]))
            .await
            .unwrap();
        assert_eq!(handle, "c0ffee");
        assert_eq!(
            runtime.exited(&handle).await.unwrap(),
            None,
            "still running"
        );
        let exit = runtime.exited(&handle).await.unwrap().unwrap();
        assert_eq!(exit.exit_code, Some(3));
        runtime.stop(&handle).await.unwrap();
        runtime.remove(&handle).await;
        let calls = docker.calls();
        let summary: Vec<(&str, &str)> = calls
            .iter()
            .map(|(m, p, _)| (m.as_str(), p.as_str()))
            .collect();
        let create = format!("/containers/create?name=gpunex-{rental}");
        assert_eq!(
            summary,
            [
                ("GET", "/images/nvidia/cuda:12.4.1-base-ubuntu22.04/json"),
                (
                    "POST",
                    "/images/create?fromImage=nvidia%2Fcuda%3A12.4.1-base-ubuntu22.04"
                ),
                ("POST", create.as_str()),
                ("POST", "/containers/c0ffee/start"),
                ("GET", "/containers/c0ffee/json"),
                ("GET", "/containers/c0ffee/json"),
                ("POST", "/containers/c0ffee/stop?t=10"),
                ("GET", "/containers/c0ffee/json"),
                ("DELETE", "/containers/c0ffee?force=true&v=true"),
            ]
        );
        let spec: Value = serde_json::from_str(&calls[2].2).unwrap();
        assert_eq!(
            spec,
            container_spec(rental, &gpus, &workload(&["python", "train.py"]), &policy())
        );
        assert_eq!(
            spec["HostConfig"]["DeviceRequests"][0]["DeviceIDs"],
            json!(gpus)
        );

        // An image the daemon has: no pull (a host runs it offline).
        let socket = dir.path().join("present.sock");
        let present = StandInDocker::start(&socket, Pull::Present);
        Runtime::docker(socket, policy())
            .start(rental, &gpus, &workload(&[]))
            .await
            .unwrap();
        let paths: Vec<String> = present.calls().into_iter().map(|(_, p, _)| p).collect();
        assert_eq!(paths[0], "/images/nvidia/cuda:12.4.1-base-ubuntu22.04/json");
        assert!(
            paths.iter().all(|p| !p.starts_with("/images/create")),
            "{paths:?}"
        );
        // A pull refused in its progress stream, or with an error status: Docker's own message,
        // no container.
        for (pull, said) in [
            (Pull::RefusedInStream, "manifest unknown"),
            (
                Pull::Refused,
                "Docker answered 500: dial tcp: lookup registry.example: no such host",
            ),
        ] {
            let socket = dir.path().join(format!("{pull:?}.sock"));
            let refusing = StandInDocker::start(&socket, pull);
            let error = Runtime::docker(socket, policy())
                .start(rental, &gpus, &workload(&[]))
                .await
                .unwrap_err();
            assert!(error.to_string().contains(said), "{error}");
            assert_eq!(
                refusing.calls().len(),
                2,
                "inspected, pulled, nothing created"
            );
        }
        // No daemon at all: a clear error naming the socket.
        let error = Runtime::docker(dir.path().join("absent.sock"), policy())
            .start(rental, &gpus, &workload(&[]))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("cannot reach Docker"), "{error}");
    }
}
