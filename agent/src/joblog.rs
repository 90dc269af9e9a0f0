//! The latest output of each job, kept on disk until the platform has it.
//!
//! Each job's output is appended to `<state>/job-logs/<rental>.log` as the runtime yields it.
//! The file keeps at most the newest `2 x bound` bytes (when it grows past that it is rewritten
//! with the newest `bound`), so a job printing without end costs a bounded amount of disk. The
//! bytes it holds are `[total - len, total)` of the job's whole output; what was shipped is
//! remembered by offset with the jobs' state, so a restart neither ships a byte twice nor skips
//! one that is still kept. Output older than the newest `bound` bytes may be dropped before it
//! is shipped (the platform is unreachable for a long time, or the job prints faster than it can
//! be shipped); the platform then shows where its copy starts.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use uuid::Uuid;

pub struct JobLogs {
    dir: PathBuf,
    /// The named bound: how much of each job's newest output is kept and shipped, bytes.
    bound: u64,
}

impl JobLogs {
    pub fn new(dir: PathBuf, bound: u64) -> JobLogs {
        JobLogs {
            dir,
            bound: bound.max(1),
        }
    }

    fn path(&self, rental_id: Uuid) -> PathBuf {
        self.dir.join(format!("{rental_id}.log"))
    }

    /// Appends `bytes` to the job's kept output; `total` is the job's output before them.
    /// Returns the new total.
    pub fn append(&self, rental_id: Uuid, total: u64, bytes: &[u8]) -> anyhow::Result<u64> {
        if bytes.is_empty() {
            return Ok(total);
        }
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(rental_id);
        // A job that printed the bound or more at once: only those newest `bound` bytes are
        // kept (the file must stay one contiguous run of the output).
        let whole = bytes.len() as u64 >= self.bound;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(!whole)
            .write(true)
            .truncate(whole)
            .open(&path)?;
        let keep = &bytes[bytes.len().saturating_sub(usize_of(self.bound))..];
        file.write_all(keep)?;
        let len = file.metadata()?.len();
        if len > 2 * self.bound {
            compact(&path, self.bound)?;
        }
        Ok(total + bytes.len() as u64)
    }

    /// The next chunk to ship (at most `max` bytes) after `shipped`, of a job whose output
    /// totals `total`: `(offset, bytes)`, the offset past anything no longer kept.
    pub fn next_chunk(
        &self,
        rental_id: Uuid,
        shipped: u64,
        total: u64,
        max: usize,
    ) -> anyhow::Result<Option<(u64, Vec<u8>)>> {
        if shipped >= total {
            return Ok(None);
        }
        let path = self.path(rental_id);
        let Ok(mut file) = std::fs::File::open(&path) else {
            return Ok(None);
        };
        let len = file.metadata()?.len();
        let kept_from = total.saturating_sub(len);
        let from = shipped.max(kept_from);
        file.seek(SeekFrom::Start(from - kept_from))?;
        let mut bytes = Vec::new();
        file.take(max as u64).read_to_end(&mut bytes)?;
        if bytes.is_empty() {
            return Ok(None);
        }
        Ok(Some((from, bytes)))
    }

    /// Forgets a job's kept output (everything was shipped).
    pub fn remove(&self, rental_id: Uuid) {
        let _ = std::fs::remove_file(self.path(rental_id));
    }
}

fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Rewrites `path` with its newest `keep` bytes (through a temporary file and a rename, so a
/// crash leaves the old or the new file, never half of one).
fn compact(path: &Path, keep: u64) -> anyhow::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(keep)))?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail)?;
    let temporary = path.with_extension("log.tmp");
    std::fs::write(&temporary, &tail)?;
    std::fs::rename(&temporary, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_bound_is_kept_and_shipping_resumes_by_offset() {
        let dir = tempfile::tempdir().unwrap();
        let logs = JobLogs::new(dir.path().join("job-logs"), 10);
        let rental = Uuid::now_v7();
        let mut total = logs.append(rental, 0, b"hello ").unwrap();
        total = logs.append(rental, total, b"world\n").unwrap();
        assert_eq!(total, 12);
        // Nothing shipped yet: from the start, at most `max` bytes a chunk.
        assert_eq!(
            logs.next_chunk(rental, 0, total, 8).unwrap(),
            Some((0, b"hello wo".to_vec()))
        );
        assert_eq!(
            logs.next_chunk(rental, 8, total, 8).unwrap(),
            Some((8, b"rld\n".to_vec()))
        );
        assert_eq!(logs.next_chunk(rental, 12, total, 8).unwrap(), None);
        // Past twice the bound the file keeps the newest 10 bytes: an unshipped start is gone
        // and the next chunk begins where the kept bytes do.
        total = logs.append(rental, total, b"0123456789").unwrap();
        assert_eq!(total, 22);
        assert_eq!(
            std::fs::read(dir.path().join("job-logs").join(format!("{rental}.log"))).unwrap(),
            b"0123456789"
        );
        assert_eq!(
            logs.next_chunk(rental, 8, total, 100).unwrap(),
            Some((12, b"0123456789".to_vec()))
        );
        // One write larger than the bound keeps its newest bytes only.
        let total = logs.append(rental, total, b"abcdefghijklmnop").unwrap();
        assert_eq!(total, 38);
        assert_eq!(
            logs.next_chunk(rental, 22, total, 100).unwrap(),
            Some((28, b"ghijklmnop".to_vec()))
        );
        logs.remove(rental);
        assert_eq!(logs.next_chunk(rental, 22, total, 100).unwrap(), None);
    }
}
