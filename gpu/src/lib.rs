//! The benchmark suite's GPU measurements (issue 18), on a real NVIDIA GPU through the CUDA
//! driver, cuBLAS and cuBLASLt, loaded when the suite runs: a machine without them gets one
//! sentence ([`SuiteError::Unavailable`]), never a panic.
//!
//! What is measured and how (docs/benchmarks.md, "The suite on a real GPU"):
//!
//! - **GEMMs**: square `n x n x n` (default 8192) with random-normal inputs made on the host; FP32
//!   (`cublasSgemm`, default math: no tensor cores), TF32 (cuBLASLt, `CUBLAS_COMPUTE_32F_FAST_TF32`:
//!   tensor cores explicitly asked for), FP16 and BF16 (`cublasGemmEx`, FP32 accumulation) and,
//!   where the GPU has it (compute capability 8.9 and later), FP8 E4M3 (cuBLASLt, "TN" layout, BF16
//!   output). Three warm-up GEMMs, then [`Plan::trials`] trials, each timed with CUDA events around
//!   as many GEMMs as last at least [`Plan::min_trial`]. A GEMM counts `2 n^3` floating-point
//!   operations.
//! - **Correctness** (a GPU can be fast and wrong): the result of the first warm-up GEMM and that
//!   of the last trial must be bit-for-bit the same (cuBLAS is deterministic for one
//!   configuration on one GPU), and 64 sampled elements must match the host's product within
//!   the precision's error bound ([`tolerance`]). FP8 is checked by the first comparison only.
//! - **Device memory**: buffers of [`Plan::memory_bytes`] (at least 1 GiB): read is
//!   `cublasSasum` over the buffer (bytes read), write is `cuMemsetD8` (bytes written), copy is
//!   `cuMemcpyDtoD` (bytes read plus bytes written: twice the buffer).
//! - **Host to device and back**: page-locked host memory of [`Plan::host_copy_bytes`], bytes
//!   copied. The observer is called while each copy is in flight, so the PCIe link is read under
//!   load.
//! - **Sustained phase**: FP16 GEMMs back to back for [`Plan::sustained`], throughput per window of
//!   [`Plan::window`]; the observer samples the GPU (clocks, power, temperature, clock-event
//!   mask) at least every [`Plan::sample_every`].
//!
//! Figures are integers in thousandths of their unit: TFLOPS x 1,000 is FLOP per nanosecond, GB/s
//! x 1,000 is bytes x 1,000 per nanosecond (10^9 bytes a gigabyte).
//!
//! Unsafe code lives in [`cuda`] only (ADR 0011).

use std::time::Duration;

pub mod cuda;

/// One GEMM precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Precision {
    Fp32,
    Tf32,
    Fp16,
    Bf16,
    Fp8,
}

impl Precision {
    pub const ALL: [Precision; 5] = [
        Precision::Fp32,
        Precision::Tf32,
        Precision::Fp16,
        Precision::Bf16,
        Precision::Fp8,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
        }
    }
}

/// What the suite runs: sizes, trials and durations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The GEMMs' `n` (a multiple of 16, at least 256).
    pub gemm_size: usize,
    /// Timed trials of each figure.
    pub trials: u32,
    /// Each GEMM trial runs as many GEMMs as last at least this long.
    pub min_trial: Duration,
    /// Device-memory buffers, bytes (at least 1 GiB; a multiple of 4).
    pub memory_bytes: u64,
    /// Host-device copies, bytes.
    pub host_copy_bytes: u64,
    /// The sustained phase.
    pub sustained: Duration,
    /// The sustained phase's windows (first against last).
    pub window: Duration,
    /// How often the observer samples the GPU in the sustained phase (at most a second).
    pub sample_every: Duration,
}

/// The GiB the issue asks device-memory buffers to reach at least.
pub const MIN_MEMORY_BYTES: u64 = 1 << 30;

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            gemm_size: 8_192,
            trials: 10,
            min_trial: Duration::from_millis(25),
            memory_bytes: 2 << 30,
            host_copy_bytes: 256 << 20,
            sustained: Duration::from_secs(60),
            window: Duration::from_secs(10),
            sample_every: Duration::from_millis(500),
        }
    }
}

impl Plan {
    /// Why this plan cannot run, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.gemm_size < 256 || !self.gemm_size.is_multiple_of(16) || self.gemm_size > 32_768 {
            return Err(format!(
                "the GEMM size must be a multiple of 16 between 256 and 32768, not {}",
                self.gemm_size
            ));
        }
        if self.trials == 0 || self.trials > 1_000 {
            return Err("trials must be between 1 and 1000".to_owned());
        }
        if self.memory_bytes < MIN_MEMORY_BYTES
            || !self.memory_bytes.is_multiple_of(4)
            || self.memory_bytes / 4 > i32::MAX as u64
        {
            return Err(format!(
                "device-memory buffers must be at least 1 GiB and at most 8 GiB, a multiple of 4 bytes, not {}",
                self.memory_bytes
            ));
        }
        if self.host_copy_bytes < (1 << 20) {
            return Err("host-device copies must be at least 1 MiB".to_owned());
        }
        if self.sample_every.is_zero() || self.sample_every > Duration::from_secs(1) {
            return Err("the sustained phase samples at least once a second".to_owned());
        }
        if self.window.is_zero() || self.window > self.sustained {
            return Err("the sustained phase's windows must fit in it".to_owned());
        }
        Ok(())
    }
}

/// Where the suite is, for the observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Gemm(Precision),
    Memory,
    /// A host-device copy is in flight.
    HostCopy,
    /// Back-to-back FP16 GEMMs.
    Sustained,
}

/// What the caller does while the suite runs: say whether to stop (a rental arrived), and read
/// the GPU's sensors (NVML) when asked.
pub trait Observer {
    fn cancelled(&mut self) -> bool;
    fn sample(&mut self, phase: Phase);
}

/// The trials of one figure, thousandths of its unit each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trials {
    pub values_milli: Vec<u64>,
}

/// One precision's GEMMs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmResult {
    pub precision: Precision,
    /// TFLOPS x 1,000 per trial.
    pub trials: Trials,
    /// GEMMs per trial.
    pub per_trial: u32,
    /// Why the result is wrong, if it is.
    pub wrong: Option<String>,
}

/// Everything the suite measured on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Measured {
    pub device_name: String,
    pub compute_capability: (i32, i32),
    pub gemm: Vec<GemmResult>,
    /// GB/s x 1,000 per trial.
    pub mem_read: Trials,
    pub mem_write: Trials,
    pub mem_copy: Trials,
    pub host_to_device: Trials,
    pub device_to_host: Trials,
    /// FP16 TFLOPS x 1,000 per window of the sustained phase, in order.
    pub sustained_windows_milli: Vec<u64>,
    pub sustained_elapsed: Duration,
    pub memory_bytes: u64,
    pub elapsed: Duration,
}

impl Measured {
    /// Whether every GEMM's result was right.
    pub fn results_verified(&self) -> bool {
        self.gemm.iter().all(|g| g.wrong.is_none())
    }

    /// The last window's throughput against the first, basis points (10,000 when there is one
    /// window or none).
    pub fn sustained_ratio_bp(&self) -> u64 {
        match (
            self.sustained_windows_milli.first(),
            self.sustained_windows_milli.last(),
        ) {
            (Some(&first), Some(&last)) if first > 0 => last.saturating_mul(10_000) / first,
            _ => 10_000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// No CUDA driver library or no cuBLAS: one sentence.
    #[error("{0}")]
    Unavailable(String),
    #[error("no CUDA device has the UUID {0}")]
    NoSuchGpu(String),
    #[error("the suite cannot run on {gpu}: {why}")]
    Precondition { gpu: String, why: String },
    /// The observer asked to stop (a rental arrived).
    #[error("cancelled")]
    Cancelled,
    #[error("CUDA failed during {step}: {error}")]
    Cuda { step: String, error: String },
}

/// TFLOPS x 1,000 (FLOP per nanosecond) of `flops` in `ns`.
pub fn tflops_milli(flops: u128, ns: u64) -> u64 {
    u64::try_from(flops / u128::from(ns.max(1))).unwrap_or(u64::MAX)
}

/// GB/s x 1,000 of `bytes` in `ns`.
pub fn gb_s_milli(bytes: u128, ns: u64) -> u64 {
    u64::try_from(bytes * 1_000 / u128::from(ns.max(1))).unwrap_or(u64::MAX)
}

/// The floating-point operations of one `n x n x n` GEMM.
pub fn gemm_flops(n: usize) -> u128 {
    let n = n as u128;
    2 * n * n * n
}

/// How many GEMMs a trial runs so that it lasts at least `min_trial`, from one GEMM's time
/// (between 1 and 1,000).
pub fn per_trial(one_ns: u64, min_trial: Duration) -> u32 {
    let wanted = u64::try_from(min_trial.as_nanos()).unwrap_or(u64::MAX);
    u32::try_from(wanted.div_ceil(one_ns.max(1)).clamp(1, 1_000)).unwrap_or(1_000)
}

/// A CUDA event interval (milliseconds, as the driver gives it) in nanoseconds.
#[allow(clippy::float_arithmetic)]
pub fn event_ns(elapsed_ms: f32) -> u64 {
    if elapsed_ms.is_finite() && elapsed_ms > 0.0 {
        // Saturating: a float-to-int cast clamps.
        (f64::from(elapsed_ms) * 1_000_000.0) as u64
    } else {
        0
    }
}

/// `count` random-normal values from `seed` (xorshift64*, the sum of four uniforms scaled to unit
/// variance): the same seed gives the same matrix on every host, so results can be checked.
#[allow(clippy::float_arithmetic)]
pub fn normal_values(seed: u64, count: usize) -> Vec<f32> {
    let mut state = seed | 1;
    let mut uniform = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        // 24 bits: exact in f32, in [0, 1).
        bits as f32 / (1_u32 << 24) as f32
    };
    // Four uniforms sum to mean 2, variance 1/3.
    let scale = 3_f32.sqrt();
    (0..count)
        .map(|_| (uniform() + uniform() + uniform() + uniform() - 2.0) * scale)
        .collect()
}

/// The GPU UUID as NVML writes it (`GPU-` and the 16 bytes in 8-4-4-4-12 hex groups).
pub fn uuid_text(bytes: [u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The error bound an element of a GEMM result may be off by, from the host's product of the
/// same (already rounded) inputs: `reference` is the host's value in f64, `l1` the sum of the
/// absolute products `|a_ik b_kj|`.
///
/// - FP32: accumulation rounding, bounded by `2^-16 l1` (well above what a right GPU shows).
/// - TF32: inputs rounded to 10 mantissa bits on the GPU (the host used the f32 values): `2^-10
///   l1`.
/// - FP16 and BF16 (FP32 accumulation): the output rounded to the format, `2^-10 |c|` and `2^-7
///   |c|`, plus `2^-16 l1` for the accumulation.
#[allow(clippy::float_arithmetic)]
pub fn tolerance(precision: Precision, reference: f64, l1: f64) -> f64 {
    let accumulation = l1 / 65_536.0;
    match precision {
        Precision::Fp32 => accumulation,
        Precision::Tf32 => l1 / 1_024.0,
        Precision::Fp16 => reference.abs() / 1_024.0 + accumulation,
        Precision::Bf16 | Precision::Fp8 => reference.abs() / 128.0 + accumulation,
    }
}

/// Checks sampled elements of a column-major `n x n` product `c = a b` against the host's: the
/// first element off by more than [`tolerance`] (or not finite), if any. `a`, `b` and `c` are the
/// values as the GPU held them, widened to f32.
#[allow(clippy::float_arithmetic)]
pub fn check_product(
    precision: Precision,
    n: usize,
    a: &[f32],
    b: &[f32],
    c: &[f32],
    samples: usize,
) -> Result<(), String> {
    if a.len() != n * n || b.len() != n * n || c.len() != n * n {
        return Err("the matrices are not n x n".to_owned());
    }
    if let Some(position) = c.iter().position(|v| !v.is_finite()) {
        return Err(format!(
            "element {position} of the {} result is not a finite number",
            precision.name()
        ));
    }
    for sample in 0..samples {
        // Spread over rows and columns, corners included.
        let i = (sample * 7_919) % n;
        let j = (sample * 104_729 + n / 2) % n;
        let mut exact = 0.0_f64;
        let mut l1 = 0.0_f64;
        for k in 0..n {
            let product = f64::from(a[i + k * n]) * f64::from(b[k + j * n]);
            exact += product;
            l1 += product.abs();
        }
        let got = f64::from(c[i + j * n]);
        let bound = tolerance(precision, exact, l1);
        if (got - exact).abs() > bound {
            return Err(format!(
                "the {} result is wrong at row {i}, column {j}: {got} where the host computes {exact:.4} (allowed error {bound:.4})",
                precision.name()
            ));
        }
    }
    Ok(())
}

/// The first position where two results differ bit for bit, if any.
pub fn first_difference<T: PartialEq + Copy + Into<f32>>(
    first: &[T],
    second: &[T],
) -> Option<usize> {
    if first.len() != second.len() {
        return Some(first.len().min(second.len()));
    }
    first
        .iter()
        .zip(second)
        .position(|(x, y)| x != y || !(*x).into().is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_flop_and_bytes_per_nanosecond() {
        // 2 x 8192^3 FLOP in 1.1 ms: 999.5 TFLOPS.
        assert_eq!(tflops_milli(gemm_flops(8_192), 1_100_000), 999_556);
        // 2 GiB in 1 ms: 2,147.483 GB/s.
        assert_eq!(gb_s_milli(2 << 30, 1_000_000), 2_147_483);
        assert_eq!(tflops_milli(1, 0), 1, "no division by zero");
        assert_eq!(event_ns(1.5), 1_500_000);
        assert_eq!(event_ns(f32::NAN), 0);
        assert_eq!(event_ns(-1.0), 0);
    }

    #[test]
    fn a_trial_runs_enough_gemms_to_last() {
        assert_eq!(per_trial(1_600_000, Duration::from_millis(25)), 16);
        assert_eq!(per_trial(90_000_000, Duration::from_millis(25)), 1);
        assert_eq!(per_trial(0, Duration::from_millis(25)), 1_000);
    }

    #[test]
    fn uuids_are_written_as_nvml_writes_them() {
        let bytes = [
            0x6f, 0x2a, 0x1b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5, 0xd6,
            0xe7, 0xf8,
        ];
        assert_eq!(uuid_text(bytes), "GPU-6f2a1b3c-4d5e-6f70-8192-a3b4c5d6e7f8");
    }

    #[test]
    #[allow(clippy::float_arithmetic)]
    fn random_inputs_are_normal_and_reproducible() {
        let values = normal_values(7, 100_000);
        assert_eq!(values, normal_values(7, 100_000));
        assert_ne!(values, normal_values(8, 100_000));
        let mean = values.iter().map(|v| f64::from(*v)).sum::<f64>() / 100_000.0;
        let variance = values
            .iter()
            .map(|v| (f64::from(*v) - mean).powi(2))
            .sum::<f64>()
            / 100_000.0;
        assert!(mean.abs() < 0.02, "{mean}");
        assert!((variance - 1.0).abs() < 0.03, "{variance}");
    }

    #[allow(clippy::float_arithmetic)]
    fn host_product(n: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0.0_f32; n * n];
        for j in 0..n {
            for i in 0..n {
                c[i + j * n] = (0..n).map(|k| a[i + k * n] * b[k + j * n]).sum();
            }
        }
        c
    }

    #[test]
    #[allow(clippy::float_arithmetic)]
    fn a_right_product_passes_and_a_wrong_one_is_named() {
        let n = 64;
        let a = normal_values(1, n * n);
        let b = normal_values(2, n * n);
        let c = host_product(n, &a, &b);
        for precision in [Precision::Fp32, Precision::Tf32, Precision::Fp16] {
            check_product(precision, n, &a, &b, &c, 64).unwrap();
        }
        // A flipped exponent bit, as a faulty GPU gives.
        let mut wrong = c.clone();
        let (i, j) = (0, n / 2);
        wrong[i + j * n] = f32::from_bits(wrong[i + j * n].to_bits() ^ (1 << 27));
        let error = check_product(Precision::Fp32, n, &a, &b, &wrong, 64).unwrap_err();
        assert!(error.contains(&format!("row {i}, column {j}")), "{error}");
        // A small error passes BF16's bound and fails FP32's.
        let mut off = c.clone();
        off[i + j * n] += c[i + j * n].abs() / 200.0 + 0.01;
        check_product(Precision::Bf16, n, &a, &b, &off, 64).unwrap();
        check_product(Precision::Fp32, n, &a, &b, &off, 64).unwrap_err();
        let mut infinite = c;
        infinite[5] = f32::INFINITY;
        assert!(
            check_product(Precision::Fp16, n, &a, &b, &infinite, 1)
                .unwrap_err()
                .contains("not a finite number")
        );
    }

    #[test]
    fn repeated_results_must_match_bit_for_bit() {
        assert_eq!(first_difference(&[1.0_f32, 2.0], &[1.0, 2.0]), None);
        assert_eq!(
            first_difference(&[1.0_f32, 2.0], &[1.0, 2.000_001]),
            Some(1)
        );
        assert_eq!(first_difference(&[f32::NAN], &[f32::NAN]), Some(0));
        assert_eq!(first_difference(&[1.0_f32], &[1.0, 2.0]), Some(1));
    }

    #[test]
    fn plans_are_checked_before_anything_runs() {
        Plan::default().check().unwrap();
        let small = Plan {
            memory_bytes: 512 << 20,
            ..Plan::default()
        };
        assert!(small.check().unwrap_err().contains("at least 1 GiB"));
        let odd = Plan {
            gemm_size: 1_000,
            ..Plan::default()
        };
        assert!(odd.check().is_err());
        let rare = Plan {
            sample_every: Duration::from_secs(2),
            ..Plan::default()
        };
        assert!(rare.check().is_err());
    }

    #[test]
    fn the_sustained_ratio_is_last_window_against_first() {
        let measured = |windows: Vec<u64>| Measured {
            device_name: String::new(),
            compute_capability: (9, 0),
            gemm: Vec::new(),
            mem_read: Trials {
                values_milli: Vec::new(),
            },
            mem_write: Trials {
                values_milli: Vec::new(),
            },
            mem_copy: Trials {
                values_milli: Vec::new(),
            },
            host_to_device: Trials {
                values_milli: Vec::new(),
            },
            device_to_host: Trials {
                values_milli: Vec::new(),
            },
            sustained_windows_milli: windows,
            sustained_elapsed: Duration::ZERO,
            memory_bytes: 0,
            elapsed: Duration::ZERO,
        };
        assert_eq!(
            measured(vec![800_000, 700_000, 600_000]).sustained_ratio_bp(),
            7_500
        );
        assert_eq!(measured(Vec::new()).sustained_ratio_bp(), 10_000);
    }
}
