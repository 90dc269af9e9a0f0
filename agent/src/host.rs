//! The host around the GPUs: CPU, RAM, disk, OS and kernel, read from `/proc`, `/etc` and
//! `statvfs`. Inside the container the kernel and `/proc` are the host's; the OS name is read
//! from `/host/etc/os-release` when the installer mounts it, else from the container's own.
//! Anything unreadable is `None`.

use std::path::Path;

use gpunex_domain::fleet::HostInfo;

pub fn detect(state_dir: &Path) -> HostInfo {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let os_release = std::fs::read_to_string("/host/etc/os-release")
        .or_else(|_| std::fs::read_to_string("/etc/os-release"))
        .unwrap_or_default();
    let disk = nix::sys::statvfs::statvfs(state_dir).ok();
    let gib = |blocks: u64, size: u64| blocks.saturating_mul(size) / (1024 * 1024 * 1024);
    HostInfo {
        hostname: hostname(),
        cpu_model: cpu_model(&cpuinfo),
        cpu_cores: std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok()),
        ram_mib: mem_total_mib(&meminfo),
        disk_total_gib: disk.as_ref().map(|d| gib(d.blocks(), d.fragment_size())),
        disk_free_gib: disk
            .as_ref()
            .map(|d| gib(d.blocks_available(), d.fragment_size())),
        os: pretty_name(&os_release),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|k| one_line(&k))
            .filter(|k| !k.is_empty()),
    }
}

fn one_line(text: &str) -> String {
    text.trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(gpunex_domain::fleet::AGENT_TEXT_CHARS_MAX)
        .collect()
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .map(|h| one_line(&h))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            matches!(key.trim(), "model name" | "Model" | "cpu model").then(|| one_line(value))
        })
        .filter(|m| !m.is_empty())
}

fn mem_total_mib(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib / 1024)
    })
}

fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|line| {
        let value = line.strip_prefix("PRETTY_NAME=")?;
        Some(one_line(value.trim_matches('"'))).filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_and_os_release() {
        assert_eq!(
            cpu_model("processor : 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"),
            Some("AMD EPYC 9654 96-Core Processor".to_owned())
        );
        assert_eq!(
            mem_total_mib("MemTotal:       2113528 kB\nMemFree: 1 kB\n"),
            Some(2063)
        );
        assert_eq!(
            pretty_name("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.4 LTS\"\n"),
            Some("Ubuntu 22.04.4 LTS".to_owned())
        );
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn this_host_is_readable() {
        let host = detect(Path::new("."));
        assert!(!host.hostname.is_empty());
        // The host part passes the platform's checks; only the (absent) GPUs are refused.
        let refused = gpunex_domain::fleet::validate_inventory(&host, &[]).unwrap_err();
        assert_eq!(refused.code, "no_gpus");
    }
}
