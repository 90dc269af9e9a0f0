//! The agent against a real Docker Engine: the image builds offline from the local CUDA base,
//! and renters' jobs run as real containers with only their GPUs and the rental's limits,
//! complete, are cancelled, are OOM-killed, pull a missing image from a registry on 127.0.0.1,
//! and leave their output readable after the container is gone.
//!
//! `scripts/docker.sh start` (run by scripts/test.sh, so by `.ci/run`) starts the daemon and the
//! registry and exports `DOCKER_HOST` and `GPUNEX_TEST_REGISTRY`. Without them these tests say so
//! and pass, except under `CI=true`, where they fail. Two stand-ins are used, both named in
//! scripts/docker.sh: the NVIDIA hook that lets dockerd accept a GPU device request (the
//! container gets no GPU), and the base image tagged as NVIDIA's CUDA base.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};
use tokio::process::Command;

mod common;

use common::*;

const CUDA_BASE: &str = "nvidia/cuda:12.4.0-base-ubuntu22.04";

struct Engine {
    socket: PathBuf,
    registry: String,
}

/// The engine scripts/docker.sh started, or `None` (a failure under `CI=true`).
fn engine() -> Option<Engine> {
    let host = std::env::var("DOCKER_HOST").ok();
    let registry = std::env::var("GPUNEX_TEST_REGISTRY").ok();
    match (
        host.as_deref().and_then(|h| h.strip_prefix("unix://")),
        registry,
    ) {
        (Some(socket), Some(registry)) => Some(Engine {
            socket: PathBuf::from(socket),
            registry,
        }),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no Docker Engine: run the tests through scripts/test.sh, which starts one (scripts/docker.sh)"
            );
            eprintln!(
                "skipped: no Docker Engine (DOCKER_HOST and GPUNEX_TEST_REGISTRY unset; see scripts/docker.sh)"
            );
            None
        }
    }
}

fn docker(args: &[&str]) -> Output {
    std::process::Command::new("docker")
        .args(args)
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .expect("the docker CLI runs")
}

/// The docker CLI talking to the guard's socket instead of the daemon's.
fn through_guard(socket: &Path, args: &[&str]) -> Output {
    std::process::Command::new("docker")
        .args(args)
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .output()
        .expect("the docker CLI runs")
}

/// `gpunex-agent guard` in front of the engine, for `gpus`; its socket once it listens.
async fn start_guard(
    engine: &Engine,
    dir: &Path,
    gpus: &[String],
) -> (tokio::process::Child, PathBuf) {
    let socket = dir.join("guard").join("docker.sock");
    let child = Command::new(AGENT)
        .args(["guard", "--listen", socket.to_str().unwrap()])
        .args(["--upstream", engine.socket.to_str().unwrap()])
        .args(["--gpus", &gpus.join(",")])
        .env("RUST_LOG", "error")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("the guard listening", 30, || async { socket.exists() }).await;
    (child, socket)
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The agent image, built once per test binary from the repository root with its
/// `.dockerignore`, from the agent binary these tests run.
fn agent_image() -> &'static str {
    static BUILT: OnceLock<String> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = repo_root();
        let binary = Path::new(AGENT);
        let relative = binary.strip_prefix(&root).expect(
            "the agent binary is built under the repository (no CARGO_TARGET_DIR outside it)",
        );
        let tag = "gpunex/agent:test".to_owned();
        let out = std::process::Command::new("docker")
            .args(["build", "-f", "agent/docker/Dockerfile"])
            .args([
                "--build-arg",
                &format!("AGENT_BINARY={}", relative.display()),
            ])
            .args([
                "--build-arg",
                &format!("VERSION={}", env!("CARGO_PKG_VERSION")),
            ])
            // The stand-in CUDA image this machine has (no registry here); the published image
            // builds on the CUDA runtime image, which adds cuBLAS for the GPU suite.
            .args(["--build-arg", &format!("CUDA_BASE={CUDA_BASE}")])
            .args(["-t", &tag, "."])
            .current_dir(&root)
            .env("DOCKER_BUILDKIT", "0")
            .output()
            .unwrap();
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "docker build: {log}");
        // The context is the binary (and the two files the legacy builder always sends), not
        // target/: "Sending build context to Docker daemon  123.4MB".
        let sent = log
            .lines()
            .find_map(|l| l.strip_prefix("Sending build context to Docker daemon"))
            .map(str::trim)
            .expect("the legacy builder reports the context size");
        let sent_kb = size_kb(sent);
        let binary_kb = std::fs::metadata(binary).unwrap().len() / 1_000;
        assert!(
            sent_kb < binary_kb + 1_000,
            "the build context is {sent}, the binary {binary_kb} kB: .dockerignore lets more in"
        );
        tag
    })
}

/// `123.4MB`, `56.7kB`, `890B` (the legacy builder's context size) in whole kB.
fn size_kb(text: &str) -> u64 {
    let (number, scale) = if let Some(n) = text.strip_suffix("GB") {
        (n, 1_000_000)
    } else if let Some(n) = text.strip_suffix("MB") {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix("kB") {
        (n, 1)
    } else {
        return 0;
    };
    let (whole, fraction) = number
        .trim()
        .split_once('.')
        .unwrap_or((number.trim(), "0"));
    let tenths: u64 = fraction.get(..1).and_then(|d| d.parse().ok()).unwrap_or(0);
    whole.parse::<u64>().unwrap_or(u64::MAX / 2_000_000) * scale + tenths * scale / 10
}

#[test]
fn the_agent_image_builds_offline_as_a_user_with_a_label_and_a_health_check() {
    let Some(_engine) = engine() else { return };
    let image = agent_image();
    let config: Value = serde_json::from_str(&docker_ok(&[
        "image",
        "inspect",
        image,
        "--format",
        "{{json .Config}}",
    ]))
    .unwrap();
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION"),
        "{config}"
    );
    assert_eq!(config["User"], "10001:10001");
    assert_eq!(
        config["Healthcheck"]["Test"],
        json!(["CMD", "/usr/local/bin/gpunex-agent", "health"])
    );
    assert_eq!(
        config["Shell"],
        json!(["/bin/bash", "-euo", "pipefail", "-c"])
    );
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/gpunex-agent"]));
    let version = docker_ok(&["run", "--rm", "--network", "none", image, "--version"]);
    assert_eq!(
        version.trim(),
        format!("gpunex-agent {}", env!("CARGO_PKG_VERSION"))
    );
    // Unhealthy until the service has run and reached the platform, with the reason.
    let out = docker(&["run", "--rm", "--network", "none", image, "health"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has not run yet"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A failing command inside a pipe fails the build (`pipefail`), as the base's shell runs it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {image}\nUSER 0\nRUN false | cat\n"),
    )
    .unwrap();
    let out = docker(&["build", "-q", "--force-rm", dir.path().to_str().unwrap()]);
    assert!(!out.status.success(), "a failing pipe must fail the build");
}

/// The container of a rental while it exists.
fn container(rental_id: &str) -> Option<Value> {
    let out = docker(&["inspect", &format!("gpunex-{rental_id}")]);
    out.status
        .success()
        .then(|| serde_json::from_slice::<Value>(&out.stdout).unwrap()[0].clone())
}

async fn rent(base: &str, renter: &str, image: &str, script: &str) -> (String, Vec<String>) {
    let (status, rental) = call(
        base,
        "POST",
        "/v1/rentals",
        renter,
        Some(json!({"gpus": 1, "filter": {"model": "h100-80gb"},
                    "workload": {"image": image, "command": ["sh", "-c", script]}})),
    )
    .await;
    assert_eq!(status, 201, "{rental}");
    (
        rental["rental_id"].as_str().unwrap().to_owned(),
        serde_json::from_value(rental["gpu_uuids"].clone()).unwrap(),
    )
}

async fn ended(base: &str, renter: &str, rental_id: &str) -> Value {
    let path = format!("/v1/rentals/{rental_id}");
    eventually(&format!("rental {rental_id} ended"), 90, || async {
        let (_, view) = call(base, "GET", &path, renter, None).await;
        view["status"] == "ended" && view["job_status"] == "ended"
    })
    .await;
    call(base, "GET", &path, renter, None).await.1
}

async fn log_text(base: &str, renter: &str, rental_id: &str) -> String {
    let (status, log) = call(
        base,
        "GET",
        &format!("/v1/rentals/{rental_id}/logs"),
        renter,
        None,
    )
    .await;
    assert_eq!(status, 200, "{log}");
    log["text"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rented_jobs_run_as_real_containers_with_only_their_gpus_and_limits() {
    let Some(engine) = engine() else { return };
    let db = gpunex_tests::TestDb::sqlite();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    let _server = start_server_with(&db.url, port, dir.path(), &["--dev-mode"]).await;
    let market = market(&base, &admin).await;
    let renter = market.renter.clone();
    // The agent on this host, its jobs in the real daemon: 96 MiB and half a CPU per GPU, no
    // network (this daemon runs without a bridge).
    // It reaches the daemon only through the guard (ADR 0010), started once the machine's GPUs
    // are known.
    let state = dir.path().join("agent-state");
    let guard_socket = dir.path().join("guard").join("docker.sock");
    let _agent = Command::new(AGENT)
        .args(["--server", &base, "--state-dir", state.to_str().unwrap()])
        .args(["--simulate", "2xH100", "--runtime", "docker"])
        .args(["--docker-socket", guard_socket.to_str().unwrap()])
        .args([
            "--job-memory-mib-per-gpu",
            "96",
            "--job-cpus-per-gpu",
            "0.5",
        ])
        .args(["--job-network", "none", "--job-log-mib", "1"])
        .args(["--heartbeat-interval", "500ms", "--poll-interval", "300ms"])
        .args(["--usage-interval", "1s", "run"])
        .env("GPUNEX_AGENT_TOKEN", &market.agent_token)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    market.price_and_wait_listed(&base, &admin, 2).await;
    let machine = machine(&base, &admin, market.machine_id).await;
    let gpus: Vec<String> = machine["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gpu_uuid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(gpus.len(), 2, "{machine}");
    let (_guard, started_at) = start_guard(&engine, dir.path(), &gpus).await;
    assert_eq!(started_at, guard_socket);

    // 1. A job that completes, and one the renter cancels, side by side on the two GPUs.
    let (done_id, done_gpus) = rent(
        &base,
        &renter,
        CUDA_BASE,
        "echo \"visible=$NVIDIA_VISIBLE_DEVICES uid=$(id -u)\"; sleep 3; echo finished",
    )
    .await;
    let (cancel_id, _) = rent(
        &base,
        &renter,
        CUDA_BASE,
        "echo started; trap 'echo stopping; exit 143' TERM; while true; do sleep 1; done",
    )
    .await;
    eventually("the first job's container", 60, || async {
        container(&done_id).is_some()
    })
    .await;
    // What the daemon was asked for, read back from the daemon.
    let inspected = container(&done_id).unwrap();
    let host = &inspected["HostConfig"];
    assert_eq!(host["Memory"], json!(96_u64 << 20), "{host}");
    assert_eq!(host["MemorySwap"], json!(96_u64 << 20));
    assert_eq!(host["NanoCpus"], json!(500_000_000_u64));
    assert_eq!(host["PidsLimit"], json!(4_096));
    assert_eq!(host["CapDrop"], json!(["ALL"]));
    assert_eq!(host["CapAdd"], Value::Null);
    assert_eq!(host["SecurityOpt"], json!(["no-new-privileges:true"]));
    assert_eq!(host["Privileged"], json!(false));
    assert_eq!(host["NetworkMode"], json!("none"));
    assert_eq!(host["PidMode"], json!(""));
    assert_eq!(host["IpcMode"], json!("private"));
    assert!(
        host["Binds"].is_null() || host["Binds"] == json!([]),
        "{host}"
    );
    assert!(inspected["Mounts"] == json!([]), "{inspected}");
    assert!(host["Devices"].is_null() || host["Devices"] == json!([]));
    assert_eq!(host["DeviceRequests"][0]["Driver"], "nvidia");
    assert_eq!(host["DeviceRequests"][0]["DeviceIDs"], json!(done_gpus));
    assert_eq!(
        inspected["Config"]["Labels"]["io.gpunex.rental_id"],
        json!(done_id)
    );

    let done = ended(&base, &renter, &done_id).await;
    assert_eq!(done["cause"], "completed", "{done}");
    assert_eq!(done["job_evidence"]["exit_code"], 0, "{done}");
    // The container is removed; its output is kept for the renter.
    assert!(container(&done_id).is_none(), "the container is removed");
    let text = log_text(&base, &renter, &done_id).await;
    assert_eq!(
        text,
        format!("visible={} uid=0\nfinished\n", done_gpus.join(",")),
        "{text}"
    );

    eventually("the second job's output", 60, || async {
        log_text(&base, &renter, &cancel_id).await == "started\n"
    })
    .await;
    let (status, cancelled) = call(
        &base,
        "POST",
        &format!("/v1/rentals/{cancel_id}/end"),
        &renter,
        Some(json!({"evidence": "enough"})),
    )
    .await;
    assert_eq!(status, 200, "{cancelled}");
    let cancelled = ended(&base, &renter, &cancel_id).await;
    assert_eq!(cancelled["cause"], "renter_cancelled", "{cancelled}");
    assert_eq!(cancelled["job_evidence"]["exit_code"], 143, "{cancelled}");
    assert!(container(&cancel_id).is_none());
    eventually("the cancelled job's last words", 30, || async {
        log_text(&base, &renter, &cancel_id).await == "started\nstopping\n"
    })
    .await;

    // 2. A job that outgrows its memory is OOM-killed, and reported so.
    let (oom_id, _) = rent(
        &base,
        &renter,
        CUDA_BASE,
        "echo filling; a=a; while true; do a=\"$a$a\"; done",
    )
    .await;
    let oom = ended(&base, &renter, &oom_id).await;
    assert_eq!(oom["cause"], "completed", "{oom}");
    assert_eq!(oom["job_evidence"]["exit_code"], 137, "{oom}");
    let detail = oom["job_evidence"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("out of memory") && detail.contains("96 MiB"),
        "{detail}"
    );
    assert!(
        oom["evidence"].as_str().unwrap().contains("out of memory"),
        "{oom}"
    );
    assert_eq!(log_text(&base, &renter, &oom_id).await, "filling\n");

    // 3. An image the daemon lacks is pulled from the registry; one the registry lacks fails
    // the start with Docker's own words.
    let pulled = format!("{}/gpunex/job:1", engine.registry);
    docker_ok(&["tag", CUDA_BASE, &pulled]);
    docker_ok(&["push", &pulled]);
    docker_ok(&["rmi", &pulled]);
    let (pulled_id, _) = rent(&base, &renter, &pulled, "echo pulled").await;
    let view = ended(&base, &renter, &pulled_id).await;
    assert_eq!(view["cause"], "completed", "{view}");
    assert_eq!(log_text(&base, &renter, &pulled_id).await, "pulled\n");
    docker_ok(&["image", "inspect", &pulled]);
    let missing = format!("{}/gpunex/missing:1", engine.registry);
    let (missing_id, _) = rent(&base, &renter, &missing, "true").await;
    let path = format!("/v1/rentals/{missing_id}");
    eventually("the missing image's rental ended", 90, || async {
        call(&base, "GET", &path, &renter, None).await.1["status"] == "ended"
    })
    .await;
    let (_, view) = call(&base, "GET", &path, &renter, None).await;
    let evidence = view["evidence"].as_str().unwrap_or_default();
    assert!(
        evidence.contains("cannot pull") && evidence.contains("missing"),
        "Docker's reason is kept: {view}"
    );
    db.cleanup().await;
}

#[tokio::test]
async fn the_guard_refuses_what_would_reach_the_host_even_if_the_agent_asks() {
    let Some(engine) = engine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_guard, socket) = start_guard(&engine, dir.path(), &["GPU-aa".to_owned()]).await;
    // What the agent's job containers look like, with the docker CLI's flags.
    let job = [
        "--label",
        "io.gpunex.rental_id=test",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges:true",
        "--memory",
        "64m",
        "--memory-swap",
        "64m",
        "--cpus",
        "0.5",
        "--pids-limit",
        "100",
        "--network",
        "none",
    ];
    let create = |extra: &[&str], command: &[&str]| {
        let mut args = vec!["create"];
        args.extend(job);
        args.extend(extra);
        args.push(CUDA_BASE);
        args.extend(command);
        through_guard(&socket, &args)
    };
    // Allowed: a job container on a designated GPU; started, waited for, its logs read, removed.
    let out = create(&["--gpus", "device=GPU-aa"], &["sh", "-c", "echo inside"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    for args in [vec!["start", &id], vec!["wait", &id]] {
        let out = through_guard(&socket, &args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let logs = through_guard(&socket, &["logs", &id]);
    assert_eq!(String::from_utf8_lossy(&logs.stdout), "inside\n");
    assert!(through_guard(&socket, &["rm", &id]).status.success());

    // Refused, each with its reason, and nothing created.
    for (extra, said) in [
        (vec!["-v", "/:/host"], "Binds is not allowed"),
        (
            vec!["--mount", "type=bind,src=/,dst=/host"],
            "Mounts is not allowed",
        ),
        (vec!["--privileged"], "privileged"),
        (vec!["--device", "/dev/null"], "Devices is not allowed"),
        (vec!["--pid", "host"], "PidMode"),
        (vec!["--ipc", "host"], "IpcMode"),
        (vec!["--uts", "host"], "UTSMode"),
        (vec!["--userns", "host"], "UsernsMode"),
        (vec!["--cap-add", "SYS_ADMIN"], "CapAdd"),
        (
            vec!["--security-opt", "seccomp=unconfined"],
            "seccomp=unconfined",
        ),
        (
            vec!["--security-opt", "apparmor=unconfined"],
            "apparmor=unconfined",
        ),
        (vec!["--sysctl", "net.ipv4.ip_forward=1"], "Sysctls"),
        (vec!["--gpus", "all"], "never a count or all"),
        (
            vec!["--gpus", "device=GPU-zz"],
            "GPU-zz is not one the provider designated",
        ),
        (vec!["--restart", "always"], "never restarts"),
    ] {
        let out = create(&extra, &["true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} must be refused");
        assert!(
            stderr.contains("refused by the GPUnex guard") && stderr.contains(said),
            "{extra:?}: {stderr}"
        );
    }
    // The host's network, through the agent's own flags' path too.
    let mut args = vec!["create"];
    args.extend(job.iter().take(job.len() - 2));
    args.extend(["--network", "host", CUDA_BASE, "true"]);
    let out = through_guard(&socket, &args);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NetworkMode host"),
        "{out:?}"
    );
    // Without the limits or the label.
    let out = through_guard(&socket, &["create", CUDA_BASE, "true"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("label"),
        "{out:?}"
    );
    let created = docker_ok(&["ps", "-aq", "--filter", "label=io.gpunex.rental_id=test"]);
    assert_eq!(created, "", "nothing was created");

    // The host's other containers are out of reach: not listed, stopped, entered or removed.
    let other = format!("gpunex-guard-other-{}", std::process::id());
    docker_ok(&[
        "run",
        "-d",
        "--network",
        "none",
        "--name",
        &other,
        CUDA_BASE,
        "sleep",
        "60",
    ]);
    for args in [
        vec!["ps"],
        vec!["stop", &other],
        vec!["kill", &other],
        vec!["rm", "-f", &other],
        vec!["exec", &other, "true"],
        vec!["cp", &format!("{other}:/etc/passwd"), "-"],
        vec!["commit", &other],
        vec!["volume", "create"],
        vec!["network", "ls"],
        vec!["info"],
    ] {
        let out = through_guard(&socket, &args);
        assert!(!out.status.success(), "{args:?} must be refused");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("refused by the GPUnex guard"),
            "{args:?}: {stderr}"
        );
    }
    let state = docker_ok(&["inspect", "-f", "{{.State.Running}}", &other]);
    assert_eq!(state.trim(), "true", "the other container still runs");
    docker_ok(&["rm", "-f", &other]);
}

const UNKNOWN_TOKEN: &str = "gpnx_0190a1b2c3d4e5f60718293a4b5c6d7e_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A host's NVIDIA driver, as far as the installer asks: GPUNEX STAND-IN (no GPU here) that
/// lists the same two GPUs as the base image's stand-in.
fn driver_stand_in(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("driver-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = bin.join("nvidia-smi");
    std::fs::write(
        &path,
        "#!/bin/sh\n# GPUNEX STAND-IN for the NVIDIA driver's nvidia-smi.\ncase \"$*\" in\n  *uuid*) printf 'GPU-00000000-0000-4000-8000-0000000000a1\\nGPU-00000000-0000-4000-8000-0000000000a2\\n' ;;\n  *) echo 'GPUNEX STAND-IN nvidia-smi (no real GPU)' ;;\nesac\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `curl -fsSL <base>/agent/install.sh | bash -s -- ARGS` without a terminal (its own session,
/// standard input empty), in `env`.
fn install_without_terminal(base: &str, args: &str, env: &[(&str, String)]) -> Output {
    let mut command = std::process::Command::new("setsid");
    command
        .args(["bash", "-c"])
        .arg(format!(
            "curl -fsSL {base}/agent/install.sh | bash -s -- {args}"
        ))
        .stdin(std::process::Stdio::null())
        .env_remove("GPUNEX_AGENT_TOKEN");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn containers() -> Vec<String> {
    docker_ok(&[
        "ps",
        "-a",
        "--filter",
        "name=gpunex-agent",
        "--format",
        "{{.Names}} {{.Status}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_installer_one_liner_takes_a_machine_online_then_upgrades_and_uninstalls() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(_engine) = engine() else { return };
    let image = agent_image();
    let db = gpunex_tests::TestDb::sqlite();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let admin = admin_token(&db.url, dir.path());
    let _server = start_server_with(
        &db.url,
        port,
        dir.path(),
        &["--dev-mode", "--public-url", &base, "--agent-image", image],
    )
    .await;
    let market = market(&base, &admin).await;
    let root = dir.path().join("host-root");
    let path = format!(
        "{}:{}",
        driver_stand_in(dir.path()).display(),
        std::env::var("PATH").unwrap()
    );
    let env = [
        ("PATH", path.clone()),
        ("GPUNEX_INSTALL_ROOT", root.display().to_string()),
        // DEVELOPMENT ONLY: simulated GPUs on a development platform; the agent reaches the
        // platform on this host's loopback.
        ("GPUNEX_AGENT_SIMULATE", "2xH100".to_owned()),
        ("GPUNEX_AGENT_NETWORK", "host".to_owned()),
        ("LANG", "C.UTF-8".to_owned()),
    ];

    // Failures say what to do, before anything is installed.
    let mut no_driver = env.clone();
    no_driver[0].1 = std::env::var("PATH").unwrap();
    for (env, said) in [
        (
            no_driver.to_vec(),
            "nvidia-smi not found. Install the NVIDIA driver",
        ),
        (
            [
                &env[..],
                &[("DOCKER_HOST", "unix:///nonexistent.sock".to_owned())],
            ]
            .concat(),
            "Docker does not answer: make sure Docker is installed and running",
        ),
        (
            env.to_vec(),
            "no token: run this in a terminal so it can ask, or set GPUNEX_AGENT_TOKEN",
        ),
        (
            [
                &env[..],
                &[("GPUNEX_AGENT_TOKEN", UNKNOWN_TOKEN.to_owned())],
            ]
            .concat(),
            "the platform refused the token (401)",
        ),
        (
            [
                &env[..],
                &[("GPUNEX_AGENT_TOKEN", "not-a-token".to_owned())],
            ]
            .concat(),
            "that is not a GPUnex token",
        ),
    ] {
        let out = install_without_terminal(&base, "", &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(said),
            "{said}: {stderr}"
        );
    }
    let out = install_without_terminal(
        &base,
        "--gpus GPU-zz",
        &[
            &env[..],
            &[("GPUNEX_AGENT_TOKEN", market.agent_token.clone())],
        ]
        .concat(),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("GPU GPU-zz is not on this machine"));
    assert!(
        containers().is_empty(),
        "nothing started: {:?}",
        containers()
    );

    // The guide's one-liner, in a terminal: the installer asks for the token there (its standard
    // input is the pipe) without echoing it.
    let started = std::time::Instant::now();
    let mut child = Command::new("script")
        .args([
            "-qfec",
            &format!("curl -fsSL {base}/agent/install.sh | bash"),
            "/dev/null",
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env_remove("GPUNEX_AGENT_TOKEN")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0_u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("GPUnex agent token") {
        let n = tokio::time::timeout(std::time::Duration::from_secs(120), stdout.read(&mut chunk))
            .await
            .expect("the installer asks for the token")
            .unwrap();
        assert!(
            n > 0,
            "the installer ended before asking: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&chunk[..n]);
    }
    stdin
        .write_all(format!("{}\n", market.agent_token).as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(240), async {
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).await.unwrap();
        seen.extend(rest);
        child.wait().await.unwrap()
    })
    .await
    .expect("the installer finishes");
    let output = String::from_utf8_lossy(&seen).into_owned();
    let to_online = started.elapsed();
    eprintln!("installer: one-liner to online in {:.1?}", to_online);
    assert!(status.success(), "{output}");
    assert!(output.contains("the machine is online"), "{output}");
    assert!(
        !output.contains(&market.agent_token),
        "the token is not echoed"
    );
    for step in ["1/6", "2/6", "3/6", "4/6", "5/6", "6/6"] {
        assert!(output.contains(step), "{step}: {output}");
    }

    // `docker ps | grep gpunex-agent` shows it Up, beside its guard.
    let listed = containers();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for name in ["gpunex-agent ", "gpunex-agent-guard "] {
        assert!(
            listed
                .iter()
                .any(|l| l.starts_with(name) && l[name.len()..].starts_with("Up")),
            "{name}: {listed:?}"
        );
    }
    let view = machine(&base, &admin, market.machine_id).await;
    assert_eq!(view["status"], "online", "{view}");
    // The agent: an unprivileged user, restarting with the host, no Docker socket; the guard
    // holds it.
    let agent: Value = serde_json::from_str(&docker_ok(&["inspect", "gpunex-agent"])).unwrap();
    let agent = &agent[0];
    assert_eq!(agent["Config"]["User"], "10001:10001");
    assert_eq!(
        agent["HostConfig"]["RestartPolicy"]["Name"],
        "unless-stopped"
    );
    assert_eq!(agent["HostConfig"]["CapDrop"], json!(["ALL"]));
    let mounts = agent["Mounts"].to_string();
    assert!(!mounts.contains("docker.sock"), "{mounts}");
    assert_eq!(
        agent["HostConfig"]["DeviceRequests"][0]["DeviceIDs"],
        json!([
            "GPU-00000000-0000-4000-8000-0000000000a1",
            "GPU-00000000-0000-4000-8000-0000000000a2"
        ])
    );
    let guard: Value =
        serde_json::from_str(&docker_ok(&["inspect", "gpunex-agent-guard"])).unwrap();
    assert!(
        guard[0]["Mounts"]
            .to_string()
            .contains("/var/run/docker.sock")
    );
    assert_eq!(guard[0]["HostConfig"]["NetworkMode"], "none");
    assert_eq!(guard[0]["HostConfig"]["ReadonlyRootfs"], true);
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let config = std::fs::metadata(root.join("etc/gpunex/agent.toml")).unwrap();
        assert_eq!(config.permissions().mode() & 0o777, 0o600);
        assert_eq!(config.uid(), 10001);
        let folder = std::fs::metadata(root.join("etc/gpunex")).unwrap();
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
    }
    let first_id = agent["Id"].as_str().unwrap().to_owned();

    // A rented job on the installed machine: the agent in its container, which holds no Docker
    // socket, starts it through the guard (the simulated GPUs carry the UUIDs Docker gave the
    // agent's container, which are the ones the guard allows), and the renter reads its output.
    market.price_and_wait_listed(&base, &admin, 2).await;
    let (job_id, job_gpus) = rent(
        &base,
        &market.renter,
        CUDA_BASE,
        "echo \"from the installed agent on $NVIDIA_VISIBLE_DEVICES\"",
    )
    .await;
    assert!(
        job_gpus[0].starts_with("GPU-00000000-0000-4000-8000-0000000000a"),
        "{job_gpus:?}"
    );
    let job = ended(&base, &market.renter, &job_id).await;
    assert_eq!(job["cause"], "completed", "{job}");
    assert_eq!(job["job_evidence"]["exit_code"], 0, "{job}");
    let path = format!("/v1/rentals/{job_id}/logs");
    eventually("the installed agent's job output", 30, || async {
        call(&base, "GET", &path, &market.renter, None).await.1["text"]
            == format!("from the installed agent on {}\n", job_gpus[0])
    })
    .await;

    // A second run upgrades in place: no question (the token is kept), a new container, the
    // same machine, online again.
    let out = install_without_terminal(&base, "", &env);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("upgrade: the token and the machine's identity are kept"),
        "{said}"
    );
    let again: Value = serde_json::from_str(&docker_ok(&["inspect", "gpunex-agent"])).unwrap();
    assert_ne!(again[0]["Id"].as_str().unwrap(), first_id);
    let status = docker_ok(&["exec", "gpunex-agent", "gpunex-agent", "status"]);
    assert!(status.contains(&market.machine_id.to_string()), "{status}");
    assert!(status.contains("platform  online"), "{status}");
    // It reaches Docker through the guard, and its health check passes.
    let docker_line = status.lines().find(|l| l.starts_with("docker")).unwrap();
    assert!(
        docker_line.starts_with("docker    API 1.")
            && docker_line.ends_with(" at /run/gpunex/docker.sock"),
        "{status}"
    );
    docker_ok(&["exec", "gpunex-agent", "gpunex-agent", "health"]);

    // `--uninstall` removes the containers, their volumes and the config.
    let out = install_without_terminal(&base, "--uninstall", &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(containers().is_empty(), "{:?}", containers());
    let volumes = docker_ok(&["volume", "ls", "-q"]);
    assert!(!volumes.contains("gpunex-agent"), "{volumes}");
    assert!(!root.join("etc/gpunex").exists());
    db.cleanup().await;
}
