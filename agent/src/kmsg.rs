//! XIDs from the kernel log (`/dev/kmsg`): NVML reports an XID only to a process registered for
//! events when it happens, so the suite also reads the kernel's ring buffer for the driver's
//! `NVRM: Xid (PCI:0000:3b:00): 79, ...` lines, including those from while the agent was down.
//! Each record carries a sequence number; the agent remembers the last one it read, so an XID is
//! reported once. Reading `/dev/kmsg` needs the device in the container and `CAP_SYSLOG` where
//! `kernel.dmesg_restrict` is set (docs/agent.md); without them the suite says so and relies on
//! NVML's events during the run.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

/// One XID line: the record's sequence number, the GPU's PCI address as the driver writes it
/// (`0000:3b:00`, lower case) and the XID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidRecord {
    pub seq: u64,
    pub pci: String,
    pub xid: u32,
}

/// Parses one `/dev/kmsg` record (`PRIORITY,SEQ,MICROS,FLAGS;MESSAGE`).
pub fn parse(record: &str) -> Option<XidRecord> {
    let (header, message) = record.split_once(';')?;
    let seq = header.split(',').nth(1)?.trim().parse().ok()?;
    let rest = message.split("NVRM: Xid (").nth(1)?;
    let (address, after) = rest.split_once(')')?;
    let pci = address
        .trim()
        .strip_prefix("PCI:")
        .unwrap_or(address.trim());
    let xid = after
        .trim_start_matches(':')
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some(XidRecord {
        seq,
        pci: pci.to_ascii_lowercase(),
        xid,
    })
}

/// The driver's form of NVML's bus id (`00000000:3B:00.0` is `0000:3b:00`).
pub fn driver_address(nvml_bus_id: &str) -> String {
    let lower = nvml_bus_id.to_ascii_lowercase();
    let without_function = lower.rsplit_once('.').map_or(lower.as_str(), |(a, _)| a);
    let mut parts = without_function.split(':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(domain), Some(bus), Some(device)) => {
            let domain = &domain[domain.len().saturating_sub(4)..];
            format!("{domain}:{bus}:{device}")
        }
        _ => without_function.to_owned(),
    }
}

/// The XID records after `after` in the kernel log, and the last sequence number read (to pass
/// next time). An error says why the log cannot be read.
pub fn read_after(after: Option<u64>) -> Result<(Vec<XidRecord>, Option<u64>), String> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open("/dev/kmsg")
        .map_err(|error| format!("the kernel log (/dev/kmsg) cannot be read: {error}"))?;
    let mut records = Vec::new();
    let mut last = after;
    // One record per read; at most the whole ring buffer.
    let mut buffer = vec![0_u8; 8_192];
    for _ in 0..1_000_000 {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                let text = String::from_utf8_lossy(&buffer[..read]);
                let seq = text
                    .split(',')
                    .nth(1)
                    .and_then(|s| s.trim().parse::<u64>().ok());
                if let Some(seq) = seq {
                    last = Some(last.map_or(seq, |l| l.max(seq)));
                }
                if let Some(record) = parse(&text)
                    && after.is_none_or(|a| record.seq > a)
                {
                    records.push(record);
                }
            }
            // Overwritten while reading: the next read goes on from the oldest left.
            Err(error) if error.raw_os_error() == Some(nix::errno::Errno::EPIPE as i32) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) => return Err(format!("reading the kernel log failed: {error}")),
        }
    }
    Ok((records, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_are_parsed_and_other_lines_ignored() {
        let line = "4,2471,113884529,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.";
        assert_eq!(
            parse(line),
            Some(XidRecord {
                seq: 2471,
                pci: "0000:3b:00".to_owned(),
                xid: 79
            })
        );
        let older = "4,12,5,-;NVRM: Xid (PCI:0000:AF:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error";
        assert_eq!(parse(older).unwrap().xid, 48);
        assert_eq!(parse(older).unwrap().pci, "0000:af:00");
        assert_eq!(parse("6,13,6,-;usb 1-1: new device"), None);
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse("4,x,1,-;NVRM: Xid (PCI:0000:3b:00): 79"), None);
    }

    #[test]
    fn nvml_bus_ids_match_the_drivers_addresses() {
        assert_eq!(driver_address("00000000:3B:00.0"), "0000:3b:00");
        assert_eq!(driver_address("0000:af:00.0"), "0000:af:00");
    }

    #[test]
    fn an_unreadable_log_is_an_error_not_a_panic() {
        // Readable or not on this machine, the call answers; read again from where it stopped,
        // it returns nothing older.
        match read_after(None) {
            Ok((_, last)) => {
                let (again, _) = read_after(last).unwrap();
                assert!(again.iter().all(|r| Some(r.seq) > last), "{again:?}");
            }
            Err(why) => assert!(why.starts_with("the kernel log"), "{why}"),
        }
    }
}
