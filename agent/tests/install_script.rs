//! The installer (`agent/docker/install.sh`) against stub `nvidia-smi` and `docker` commands:
//! no Docker engine or NVIDIA driver runs on the test machines, so this checks the script's own
//! logic (preflight checks, token handling, the config it writes, the docker commands it would
//! run), not Docker itself.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TOKEN: &str = "gpnx_0190a1b2c3d4e5f60718293a4b5c6d7e_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/install.sh")
}

/// A directory of stub commands that log their arguments; `docker info` fails when asked.
fn stubs(dir: &Path, docker_daemon_up: bool, with_nvidia_smi: bool) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // Only the tools the script needs, so a real nvidia-smi or docker on the host is not found.
    for tool in ["mkdir", "cat", "chmod", "sed"] {
        let real = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let log = dir.join("calls.log");
    let write = |name: &str, body: String| {
        let path = bin.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    if with_nvidia_smi {
        write(
            "nvidia-smi",
            format!(
                "#!/bin/sh\necho \"nvidia-smi $*\" >> {}\necho '0, NVIDIA H100 80GB HBM3, 81559 MiB, 550.54.15'\n",
                log.display()
            ),
        );
    }
    let info = if docker_daemon_up { "exit 0" } else { "exit 1" };
    write(
        "docker",
        format!(
            "#!/bin/sh\necho \"docker $*\" >> {}\n[ \"$1\" = info ] && {info}\nexit 0\n",
            log.display()
        ),
    );
    bin
}

fn install(dir: &Path, bin: &Path, args: &[&str], token: Option<&str>) -> Output {
    let bash = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap();
    let mut command = Command::new(bash);
    command
        .arg(script())
        .args(args)
        .env("PATH", bin)
        .env("GPUNEX_INSTALL_ROOT", dir.join("root"))
        .env_remove("GPUNEX_AGENT_TOKEN")
        .stdin(std::process::Stdio::null());
    if let Some(token) = token {
        command.env("GPUNEX_AGENT_TOKEN", token);
    }
    command.output().unwrap()
}

#[test]
fn a_dry_run_checks_the_host_writes_a_private_config_and_prints_the_container() {
    let dir = tempfile::tempdir().unwrap();
    let bin = stubs(dir.path(), true, true);
    let out = install(
        dir.path(),
        &bin,
        &["--dry-run", "--server", "http://10.0.0.5:8080"],
        Some(TOKEN),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.path().join("root/etc/gpunex/agent.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("token = \"{TOKEN}\"")), "{text}");
    assert!(
        text.contains("server_url = \"http://10.0.0.5:8080\""),
        "{text}"
    );
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token file is readable by root only");
    // The guide's checks ran; the token never appears on a command line.
    let calls = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    assert!(
        calls.contains("docker run --rm --gpus all nvidia/cuda:12.4.0-base-ubuntu22.04 nvidia-smi"),
        "{calls}"
    );
    assert!(!calls.contains(TOKEN) && !stdout.contains(TOKEN));
    assert!(
        stdout.contains("would run: docker run --rm --gpus all -v /etc/gpunex:/etc/gpunex:ro"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "would run: docker run -d --name gpunex-agent --restart unless-stopped --gpus all"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("-v /var/run/docker.sock:/var/run/docker.sock gpunex/agent:latest run"),
        "the service reaches the Docker Engine API to run jobs: {stdout}"
    );
}

#[test]
fn missing_prerequisites_and_bad_tokens_stop_it_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(bool, bool, Option<&str>, &str); 4] = [
        (true, false, Some(TOKEN), "nvidia-smi not found"),
        (false, true, Some(TOKEN), "the Docker daemon is not running"),
        (
            true,
            true,
            Some("not-a-token"),
            "does not look like a GPUnex token",
        ),
        (true, true, None, "no token"),
    ];
    for (i, (daemon, nvidia, token, message)) in cases.into_iter().enumerate() {
        let case = dir.path().join(i.to_string());
        let bin = stubs(&case, daemon, nvidia);
        let out = install(&case, &bin, &["--dry-run"], token);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} should fail");
        assert!(stderr.contains(message), "case {i}: {stderr}");
        assert!(!case.join("root/etc/gpunex/agent.toml").exists() || token == Some(TOKEN));
    }
}
