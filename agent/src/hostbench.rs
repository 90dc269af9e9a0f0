//! The suite's host figures (issue 18): storage and the network to the platform, measured for
//! real on any host (`gpunex-agent bench-host`), reported beside the GPU figures and compared
//! across the fleet, never scored against a GPU model.
//!
//! - **Storage**: a file in the state directory, written then read back in 1 MiB blocks by
//!   several threads at once, each at its own offsets, with `O_DIRECT` (the page cache measures
//!   memory, not the disk); every block read back is checked against what was written. A file
//!   system that refuses `O_DIRECT` (tmpfs, some overlay set-ups) is measured with buffered I/O,
//!   `fsync` after the writes and the written range dropped from the cache (`POSIX_FADV_DONTNEED`)
//!   before the reads, and the result says so (`direct: false`). MB/s counts bytes moved, 10^6 a
//!   megabyte.
//! - **Network**: the round trip is the median of many small requests to the platform
//!   (`GET /healthz`); the throughput is several parallel downloads from the platform's own
//!   endpoint (`GET /v1/agent/speedtest`), since one stream is window-limited. Mbit/s counts
//!   payload bits, 10^6 a megabit.
//!
//! Figures are integers in thousandths of their unit, with the median and the 10th and 90th
//! percentiles of their trials, as the platform reads them.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use gpunex_domain::benchmark::{Figure, Metric};
use serde::Serialize;

/// One block of the storage test.
pub const BLOCK: usize = 1 << 20;
/// O_DIRECT needs buffers, offsets and lengths aligned to the device's block size; 4 KiB covers
/// the devices in use.
const ALIGN: usize = 4_096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageFigures {
    pub read: Figure,
    pub write: Figure,
    /// Whether the file system took `O_DIRECT` (else buffered I/O with the cache dropped).
    pub direct: bool,
    pub bytes: u64,
    pub threads: usize,
}

/// The median and 10th/90th percentiles of `values` as a figure.
pub fn figure(metric: Metric, mut values: Vec<u64>) -> Figure {
    values.sort_unstable();
    let at = |pct: usize| {
        values
            .get(values.len().saturating_sub(1) * pct / 100)
            .copied()
            .unwrap_or(0)
    };
    Figure {
        metric,
        median_milli: at(50),
        p10_milli: at(10),
        p90_milli: at(90),
        trials: u32::try_from(values.len()).unwrap_or(u32::MAX),
    }
}

/// Bytes per microsecond are MB/s; in thousandths.
fn mb_s_milli(bytes: u64, micros: u128) -> u64 {
    u64::try_from(u128::from(bytes) * 1_000 / micros.max(1)).unwrap_or(u64::MAX)
}

/// The 8-byte words of the block at `offset`, derived from the offset and `seed`.
fn fill(block: &mut [u8], offset: u64, seed: u64) {
    for (i, word) in block.chunks_exact_mut(8).enumerate() {
        let value = (offset + (i as u64) * 8) ^ seed;
        word.copy_from_slice(&value.to_le_bytes());
    }
}

/// An aligned block inside `buffer` (`BLOCK + ALIGN` bytes).
fn aligned(buffer: &mut [u8]) -> &mut [u8] {
    let start = buffer.as_ptr().align_offset(ALIGN).min(ALIGN);
    &mut buffer[start..start + BLOCK]
}

fn is_einval(error: &std::io::Error) -> bool {
    error.raw_os_error() == Some(nix::errno::Errno::EINVAL as i32)
}

/// Writes then reads back `bytes` (rounded up to whole blocks per thread) in `dir`, `trials`
/// times, with `threads` threads. The file is removed afterwards.
pub fn storage(
    dir: &Path,
    bytes: u64,
    threads: usize,
    trials: u32,
) -> anyhow::Result<StorageFigures> {
    let threads = threads.clamp(1, 64);
    let blocks_per_thread = bytes.div_ceil(BLOCK as u64 * threads as u64).max(1);
    let total = blocks_per_thread * BLOCK as u64 * threads as u64;
    let path = dir.join(format!("gpunex-bench-{}.tmp", uuid::Uuid::now_v7()));
    let direct = match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(nix::fcntl::OFlag::O_DIRECT.bits())
        .open(&path)
    {
        Ok(file) => {
            // Some file systems open with O_DIRECT and refuse the first aligned write.
            let mut buffer = vec![0_u8; BLOCK + ALIGN];
            let probe = file.write_at(aligned(&mut buffer), 0);
            drop(file);
            match probe {
                Ok(_) => true,
                Err(error) if is_einval(&error) => false,
                Err(error) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(anyhow::anyhow!("cannot write {}: {error}", path.display()));
                }
            }
        }
        Err(error) if is_einval(&error) => false,
        Err(error) => {
            return Err(anyhow::anyhow!(
                "cannot create a test file in {}: {error}",
                dir.display()
            ));
        }
    };
    let result = measure(&path, direct, blocks_per_thread, threads, trials, total);
    let _ = std::fs::remove_file(&path);
    let (writes, reads) = result?;
    Ok(StorageFigures {
        read: figure(Metric::SsdReadMbS, reads),
        write: figure(Metric::SsdWriteMbS, writes),
        direct,
        bytes: total,
        threads,
    })
}

fn measure(
    path: &Path,
    direct: bool,
    blocks_per_thread: u64,
    threads: usize,
    trials: u32,
    total: u64,
) -> anyhow::Result<(Vec<u64>, Vec<u64>)> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    if direct {
        options.custom_flags(nix::fcntl::OFlag::O_DIRECT.bits());
    }
    let file = options.open(path)?;
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for trial in 0..u64::from(trials.max(1)) {
        let seed = 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(trial + 1);
        let started = Instant::now();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let workers: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let file = &file;
                    scope.spawn(move || -> std::io::Result<()> {
                        let mut buffer = vec![0_u8; BLOCK + ALIGN];
                        for b in 0..blocks_per_thread {
                            let offset = (t * blocks_per_thread + b) * BLOCK as u64;
                            let block = aligned(&mut buffer);
                            fill(block, offset, seed);
                            file.write_all_at(block, offset)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for worker in workers {
                worker
                    .join()
                    .map_err(|_| anyhow::anyhow!("a storage writer panicked"))??;
            }
            Ok(())
        })?;
        file.sync_all()?;
        writes.push(mb_s_milli(total, started.elapsed().as_micros()));
        if !direct {
            // What was just written must come from the disk, not the cache.
            nix::fcntl::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
                i64::try_from(total).unwrap_or(i64::MAX),
                nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            )?;
        }
        let started = Instant::now();
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let workers: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let file = &file;
                    scope.spawn(move || -> anyhow::Result<()> {
                        let mut buffer = vec![0_u8; BLOCK + ALIGN];
                        let mut expected = vec![0_u8; BLOCK];
                        for b in 0..blocks_per_thread {
                            let offset = (t * blocks_per_thread + b) * BLOCK as u64;
                            let block = aligned(&mut buffer);
                            file.read_exact_at(block, offset)?;
                            fill(&mut expected, offset, seed);
                            anyhow::ensure!(
                                block == expected.as_slice(),
                                "the disk returned other data than was written at offset {offset}"
                            );
                        }
                        Ok(())
                    })
                })
                .collect();
            for worker in workers {
                worker
                    .join()
                    .map_err(|_| anyhow::anyhow!("a storage reader panicked"))??;
            }
            Ok(())
        })?;
        reads.push(mb_s_milli(total, started.elapsed().as_micros()));
    }
    Ok((writes, reads))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkFigures {
    pub rtt: Figure,
    pub throughput: Figure,
    pub streams: usize,
    pub bytes_per_stream: u64,
}

/// The round trip (the median of `pings` requests to `/healthz`, microseconds) and the
/// throughput of `streams` parallel downloads of `bytes` from the platform's speed test, `trials`
/// times.
pub async fn network(
    client: &crate::client::Client,
    pings: usize,
    streams: usize,
    bytes: u64,
    trials: u32,
) -> anyhow::Result<NetworkFigures> {
    let mut rtts = Vec::with_capacity(pings);
    for _ in 0..pings.max(1) {
        let started = Instant::now();
        client.ping().await?;
        // Microseconds in thousandths: nanoseconds.
        rtts.push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }
    let streams = streams.clamp(1, 16);
    let mut rates = Vec::new();
    for _ in 0..trials.max(1) {
        let started = Instant::now();
        let downloads = (0..streams).map(|_| client.speedtest(bytes));
        let mut received = 0_u64;
        for result in futures_util::future::join_all(downloads).await {
            received += result?;
        }
        let micros = started.elapsed().as_micros().max(1);
        // Mbit/s in thousandths: bytes x 8 x 1,000 / microseconds.
        rates.push(u64::try_from(u128::from(received) * 8_000 / micros).unwrap_or(u64::MAX));
    }
    Ok(NetworkFigures {
        rtt: figure(Metric::NetworkRttUs, rtts),
        throughput: figure(Metric::NetworkMbitS, rates),
        streams,
        bytes_per_stream: bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_writes_reads_back_and_checks_every_block() {
        let dir = tempfile::tempdir().unwrap();
        let figures = storage(dir.path(), 8 * BLOCK as u64, 4, 3).unwrap();
        assert_eq!((figures.bytes, figures.threads), (8 * BLOCK as u64, 4));
        for f in [&figures.read, &figures.write] {
            assert_eq!(f.trials, 3);
            assert!(f.p10_milli <= f.median_milli && f.median_milli <= f.p90_milli);
            assert!(f.median_milli > 0, "{f:?}");
        }
        // Nothing left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let error = storage(Path::new("/nonexistent/gpunex"), BLOCK as u64, 1, 1).unwrap_err();
        assert!(
            error.to_string().contains("cannot create a test file"),
            "{error}"
        );
    }

    #[test]
    fn figures_take_the_median_and_the_spread() {
        let f = figure(Metric::SsdReadMbS, vec![5, 1, 3, 4, 2]);
        assert_eq!(
            (f.median_milli, f.p10_milli, f.p90_milli, f.trials),
            (3, 1, 4, 5)
        );
    }
}
