//! Automated GPU benchmarks (issue 18): what one run of the agent's suite reports, whether it is
//! physically plausible, its score against the model's reference, and the verdict (pass, warn,
//! fail) with its reasons and what to fix. Pure and versioned: the same run and references give
//! the same score and verdict at any time, so replaying the log replays them.
//!
//! Every figure is an integer in thousandths of its unit (`795_000` is 795 TFLOPS, `2_680_000`
//! is 2,680 GB/s); ratios are in basis points (`10_000` is the reference). No floats.
//!
//! - **Plausibility**: a FLOPS figure above 1.10 x the datasheet peak, or a bandwidth above
//!   1.05 x, is refused as implausible (consumer cards boost past their rated clocks by a few
//!   percent; nothing runs past physics).
//! - **Reference**: per model and metric, the median of the fleet's latest accepted runs once
//!   [`FLEET_MIN_GPUS`] GPUs of the model have one, else the datasheet's healthy-achieved figure
//!   ([`healthy_ratio_bp`] of the peak: what healthy hardware of that kind reaches, from
//!   published measurements).
//! - **Score**: the weighted mean of each scored figure's ratio to its reference, each capped at
//!   [`RATIO_CAP_BP`] ([`weight_bp`]). Renters see it; it is the sum of its published parts.
//! - **Verdict** ([`verdict`]): `fail` on any scored figure under [`FAIL_BELOW_BP`] of its
//!   reference, wrong results, uncorrectable memory errors, a fatal XID or a critical
//!   temperature; `warn` under [`WARN_BELOW_BP`], on a host-lowered power limit, throttling,
//!   a PCIe link below its maximum under load, or a non-fatal XID. Healthy GPUs of one model
//!   differ by about 5 %, so no GPU fails for being a few percent slow.

use serde::{Deserialize, Serialize};

use crate::gpu::{GpuModel, GpuVariant};

/// The version of the suite's method (shapes, counting conventions) a run follows.
pub const METHOD_VERSION: u32 = 1;
/// The version of the scoring and verdict rules in this module.
pub const VERDICT_VERSION: u32 = 1;

/// GPUs of a model with an accepted run before the fleet median replaces the datasheet.
pub const FLEET_MIN_GPUS: usize = 10;
/// A figure under this share of its reference fails the GPU.
pub const FAIL_BELOW_BP: u64 = 7_500;
/// A figure under this share of its reference warns.
pub const WARN_BELOW_BP: u64 = 9_000;
/// A GPU delisted by a verdict is relisted only when every scored figure is at least this share
/// of its reference (hysteresis: a GPU hovering at the fail line does not flap).
pub const RELIST_FROM_BP: u64 = 8_000;
/// A ratio counts at most this much in the score (a fast GPU cannot hide a slow figure).
pub const RATIO_CAP_BP: u64 = 11_000;
/// FLOPS above this share of the datasheet peak are implausible.
pub const FLOPS_LIMIT_BP: u64 = 11_000;
/// Bandwidth above this share of the datasheet peak is implausible.
pub const BANDWIDTH_LIMIT_BP: u64 = 10_500;
/// Sustained-phase throughput, last window against first, under this share warns...
pub const DEGRADATION_WARN_BP: u64 = 9_000;
/// ...and under this share fails.
pub const DEGRADATION_FAIL_BP: u64 = 7_500;
/// Temperatures (C): sustained at or above warns, peak at or above fails.
pub const TEMPERATURE_WARN_C: i32 = 85;
pub const TEMPERATURE_FAIL_C: i32 = 95;
/// Retired pages at or above this fail (DCGM's line).
pub const RETIRED_PAGES_FAIL: u64 = 63;
/// XIDs that fail a GPU (the union of AWS's and Azure's curated fatal lists).
pub const FATAL_XIDS: &[u32] = &[
    46, 48, 54, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 95, 109, 110, 119, 120,
    136, 140, 142, 143, 151, 155, 156, 158,
];

/// One figure the suite measures.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// cuBLAS SGEMM, TFLOPS.
    Fp32Tflops,
    /// cuBLAS GEMM with TF32 tensor cores explicitly enabled, TFLOPS.
    Tf32Tflops,
    Fp16Tflops,
    Bf16Tflops,
    /// cuBLASLt FP8, where the GPU has it.
    Fp8Tflops,
    /// Device memory, GB/s, counting bytes read plus bytes written (a copy moves 2 bytes a byte).
    MemReadGbS,
    MemWriteGbS,
    MemCopyGbS,
    /// Host to device and back, pinned memory, GB/s of bytes copied.
    HostToDeviceGbS,
    DeviceToHostGbS,
    /// Host properties, reported and compared across the fleet but not scored against a model:
    /// O_DIRECT sequential 1 MiB, MB/s; RTT median to the platform, microseconds; multi-stream
    /// throughput to the platform, Mbit/s.
    SsdReadMbS,
    SsdWriteMbS,
    NetworkRttUs,
    NetworkMbitS,
}

impl Metric {
    pub const ALL: [Metric; 14] = [
        Metric::Fp32Tflops,
        Metric::Tf32Tflops,
        Metric::Fp16Tflops,
        Metric::Bf16Tflops,
        Metric::Fp8Tflops,
        Metric::MemReadGbS,
        Metric::MemWriteGbS,
        Metric::MemCopyGbS,
        Metric::HostToDeviceGbS,
        Metric::DeviceToHostGbS,
        Metric::SsdReadMbS,
        Metric::SsdWriteMbS,
        Metric::NetworkRttUs,
        Metric::NetworkMbitS,
    ];

    /// The figures every run must carry (FP8 only where the GPU has it).
    pub fn required(variant: &GpuVariant) -> Vec<Metric> {
        let mut required = vec![
            Metric::Fp32Tflops,
            Metric::Tf32Tflops,
            Metric::Fp16Tflops,
            Metric::Bf16Tflops,
            Metric::MemReadGbS,
            Metric::MemWriteGbS,
            Metric::MemCopyGbS,
            Metric::HostToDeviceGbS,
            Metric::DeviceToHostGbS,
        ];
        if variant.fp8_tflops_tenths.is_some() {
            required.push(Metric::Fp8Tflops);
        }
        required
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Fp32Tflops => "fp32_tflops",
            Metric::Tf32Tflops => "tf32_tflops",
            Metric::Fp16Tflops => "fp16_tflops",
            Metric::Bf16Tflops => "bf16_tflops",
            Metric::Fp8Tflops => "fp8_tflops",
            Metric::MemReadGbS => "mem_read_gb_s",
            Metric::MemWriteGbS => "mem_write_gb_s",
            Metric::MemCopyGbS => "mem_copy_gb_s",
            Metric::HostToDeviceGbS => "host_to_device_gb_s",
            Metric::DeviceToHostGbS => "device_to_host_gb_s",
            Metric::SsdReadMbS => "ssd_read_mb_s",
            Metric::SsdWriteMbS => "ssd_write_mb_s",
            Metric::NetworkRttUs => "network_rtt_us",
            Metric::NetworkMbitS => "network_mbit_s",
        }
    }

    fn is_flops(self) -> bool {
        matches!(
            self,
            Metric::Fp32Tflops
                | Metric::Tf32Tflops
                | Metric::Fp16Tflops
                | Metric::Bf16Tflops
                | Metric::Fp8Tflops
        )
    }
}

/// A GPU's PCIe link as the suite read it under load.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieUnderLoad {
    pub generation: u32,
    pub width: u32,
    pub max_generation: u32,
    pub max_width: u32,
}

/// The datasheet peak of `metric` on `variant`, in thousandths of its unit; `None` for the host
/// properties (and FP8 where the GPU has none). Host-device copies: the PCIe link's usable
/// bandwidth, about 1.97 GB/s per Gen4 lane after encoding, doubling per generation.
pub fn peak_milli(
    variant: &GpuVariant,
    metric: Metric,
    pcie: Option<&PcieUnderLoad>,
) -> Option<u64> {
    let tflops = |tenths: u32| u64::from(tenths) * 100;
    match metric {
        Metric::Fp32Tflops => Some(tflops(variant.fp32_tflops_tenths)),
        Metric::Tf32Tflops => Some(tflops(variant.tf32_tensor_tflops_tenths)),
        Metric::Fp16Tflops | Metric::Bf16Tflops => Some(tflops(variant.fp16_tensor_tflops_tenths)),
        Metric::Fp8Tflops => variant.fp8_tflops_tenths.map(tflops),
        Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS => {
            Some(u64::from(variant.memory_bandwidth_gb_s) * 1_000)
        }
        Metric::HostToDeviceGbS | Metric::DeviceToHostGbS => {
            let (generation, width) = pcie.map_or((4, 16), |p| (p.max_generation, p.max_width));
            // 1,969 MB/s per Gen4 lane; Gen3 half, Gen5 double.
            let per_lane_mb = match generation {
                0..=3 => 985,
                4 => 1_969,
                _ => 3_938,
            };
            Some(per_lane_mb * u64::from(width.clamp(1, 16)))
        }
        Metric::SsdReadMbS | Metric::SsdWriteMbS | Metric::NetworkRttUs | Metric::NetworkMbitS => {
            None
        }
    }
}

fn is_hbm(model: &GpuModel) -> bool {
    model.id.starts_with("h1") || model.id.starts_with("h2") || model.id.starts_with("a100")
}

/// What healthy hardware reaches of the datasheet peak, in basis points, from published
/// measurements (`shared/reference/gpu-benchmarking.md`): tensor GEMM ~80 % on SXM parts and
/// ~75 % on PCIe parts, ~55 % on the power-capped L4; SGEMM ~85 % (60 % on the L4); memory
/// 80 % on HBM and 85 % on GDDR; host-device copies 80 % of the link.
pub fn healthy_ratio_bp(model: &GpuModel, variant: &GpuVariant, metric: Metric) -> u64 {
    let capped = model.id == "l4";
    let pcie_part = variant.form_factor == "PCIe" && is_hbm(model);
    match metric {
        Metric::Fp32Tflops if capped => 6_000,
        Metric::Fp32Tflops => 8_500,
        Metric::Tf32Tflops | Metric::Fp16Tflops | Metric::Bf16Tflops if capped => 5_500,
        Metric::Tf32Tflops | Metric::Fp16Tflops | Metric::Bf16Tflops if pcie_part => 7_500,
        Metric::Tf32Tflops | Metric::Fp16Tflops | Metric::Bf16Tflops => 8_000,
        Metric::Fp8Tflops if capped => 5_500,
        Metric::Fp8Tflops => 7_200,
        Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS if is_hbm(model) => 8_000,
        Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS => 8_500,
        Metric::HostToDeviceGbS | Metric::DeviceToHostGbS => 8_000,
        Metric::SsdReadMbS | Metric::SsdWriteMbS | Metric::NetworkRttUs | Metric::NetworkMbitS => {
            10_000
        }
    }
}

/// How much each scored figure counts in the score, basis points of the whole (the present
/// figures' weights are renormalised: a GPU without FP8 is scored on the rest).
pub fn weight_bp(metric: Metric) -> u64 {
    match metric {
        Metric::Fp16Tflops | Metric::Bf16Tflops => 1_500,
        Metric::Tf32Tflops | Metric::Fp32Tflops => 1_250,
        Metric::Fp8Tflops => 500,
        Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS => 1_000,
        Metric::HostToDeviceGbS | Metric::DeviceToHostGbS => 500,
        Metric::SsdReadMbS | Metric::SsdWriteMbS | Metric::NetworkRttUs | Metric::NetworkMbitS => 0,
    }
}

/// One measured figure: the median of its trials and their 10th and 90th percentiles.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figure {
    pub metric: Metric,
    pub median_milli: u64,
    pub p10_milli: u64,
    pub p90_milli: u64,
    pub trials: u32,
}

/// What the suite read of the GPU's health, before and after its load.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSignals {
    /// Whether two identical GEMMs gave the same result (and a slice matched the host's).
    pub results_verified: bool,
    /// Volatile double-bit (uncorrectable) ECC errors during the run.
    pub ecc_uncorrected: u64,
    pub retired_pages: u64,
    pub row_remap_pending: bool,
    pub row_remap_failed: bool,
    /// XIDs seen since the previous run (NVML events and the kernel log).
    pub xids: Vec<u32>,
    /// The clock-event bits seen under load that mean trouble (HW slowdown, thermal, power
    /// brake), as NVML's mask.
    pub throttle_mask: u64,
    /// Sustained-phase throughput, last window against the first, basis points.
    pub sustained_ratio_bp: u64,
    pub max_temperature_c: i32,
    /// Temperature held for most of the sustained phase.
    pub sustained_temperature_c: i32,
    pub power_limit_w: u32,
    pub default_power_limit_w: u32,
    pub pcie: Option<PcieUnderLoad>,
    /// PCIe replays (link-level retransmissions) during the run: recorded as evidence, not
    /// judged by verdict v1. Runs recorded before the field existed read 0.
    #[serde(default)]
    pub pcie_replays: u64,
}

/// One run of the suite on one GPU, as its machine's agent reports it.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub gpu_uuid: String,
    pub method_version: u32,
    pub figures: Vec<Figure>,
    pub health: HealthSignals,
}

impl Run {
    pub fn figure(&self, metric: Metric) -> Option<&Figure> {
        self.figures.iter().find(|f| f.metric == metric)
    }
}

/// Why a run is refused before it is scored.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Implausible {
    /// A figure above what the hardware can do.
    AbovePhysicalLimit {
        metric: Metric,
        measured_milli: u64,
        limit_milli: u64,
    },
    /// Percentiles out of order, or no trials.
    InconsistentSpread { metric: Metric },
    /// The same figure twice.
    DuplicateFigure { metric: Metric },
}

/// Checks a run against physics: every FLOPS figure at most [`FLOPS_LIMIT_BP`] of its peak,
/// every bandwidth at most [`BANDWIDTH_LIMIT_BP`], percentiles in order.
pub fn check_plausible(variant: &GpuVariant, run: &Run) -> Result<(), Implausible> {
    for (i, figure) in run.figures.iter().enumerate() {
        if run.figures[..i].iter().any(|f| f.metric == figure.metric) {
            return Err(Implausible::DuplicateFigure {
                metric: figure.metric,
            });
        }
        if figure.trials == 0
            || figure.p10_milli > figure.median_milli
            || figure.median_milli > figure.p90_milli
        {
            return Err(Implausible::InconsistentSpread {
                metric: figure.metric,
            });
        }
        let Some(peak) = peak_milli(variant, figure.metric, run.health.pcie.as_ref()) else {
            continue;
        };
        let limit_bp = if figure.metric.is_flops() {
            FLOPS_LIMIT_BP
        } else {
            BANDWIDTH_LIMIT_BP
        };
        let limit = peak.saturating_mul(limit_bp) / 10_000;
        if figure.p90_milli > limit {
            return Err(Implausible::AbovePhysicalLimit {
                metric: figure.metric,
                measured_milli: figure.p90_milli,
                limit_milli: limit,
            });
        }
    }
    Ok(())
}

/// Where a reference comes from.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ReferenceSource {
    /// The median of this many GPUs' latest accepted runs.
    Fleet { gpus: usize },
    /// The datasheet peak times [`healthy_ratio_bp`].
    Datasheet,
}

#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    pub value_milli: u64,
    pub source: ReferenceSource,
}

/// The median of `values` (the lower middle of an even count); `None` when empty.
pub fn median(values: &mut [u64]) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

/// The reference for `metric` on this model: the fleet's median of `fleet` (each GPU's latest
/// accepted figure) once it holds [`FLEET_MIN_GPUS`], else the datasheet's healthy figure.
pub fn reference(
    model: &GpuModel,
    variant: &GpuVariant,
    metric: Metric,
    pcie: Option<&PcieUnderLoad>,
    fleet: &[u64],
) -> Option<Reference> {
    let mut values = fleet.to_vec();
    reference_of_median(
        model,
        variant,
        metric,
        pcie,
        fleet.len(),
        median(&mut values),
    )
}

/// [`reference`] given the fleet's size and median (a fold keeps them sorted rather than
/// sorting them again for every run).
pub fn reference_of_median(
    model: &GpuModel,
    variant: &GpuVariant,
    metric: Metric,
    pcie: Option<&PcieUnderLoad>,
    fleet_gpus: usize,
    fleet_median: Option<u64>,
) -> Option<Reference> {
    if fleet_gpus >= FLEET_MIN_GPUS
        && let Some(value_milli) = fleet_median
    {
        return Some(Reference {
            value_milli,
            source: ReferenceSource::Fleet { gpus: fleet_gpus },
        });
    }
    let peak = peak_milli(variant, metric, pcie)?;
    Some(Reference {
        value_milli: peak * healthy_ratio_bp(model, variant, metric) / 10_000,
        source: ReferenceSource::Datasheet,
    })
}

/// One scored figure: measured against its reference.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub metric: Metric,
    pub measured_milli: u64,
    pub reference: Reference,
    pub ratio_bp: u64,
    pub weight_bp: u64,
}

/// A run's score: the weighted mean of its parts' capped ratios, basis points of the reference
/// (10,000 is exactly the reference; renters see it as a percentage).
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Score {
    pub score_bp: u64,
    pub parts: Vec<Part>,
    pub version: u32,
}

/// Scores a plausible run, each figure against `reference_of(metric)`. Host properties are not
/// scored.
pub fn score(run: &Run, reference_of: impl Fn(Metric) -> Option<Reference>) -> Score {
    let mut parts = Vec::new();
    for figure in &run.figures {
        let weight = weight_bp(figure.metric);
        if weight == 0 {
            continue;
        }
        let Some(reference) = reference_of(figure.metric) else {
            continue;
        };
        let ratio_bp = figure.median_milli.saturating_mul(10_000) / reference.value_milli.max(1);
        parts.push(Part {
            metric: figure.metric,
            measured_milli: figure.median_milli,
            reference,
            ratio_bp,
            weight_bp: weight,
        });
    }
    parts.sort_by_key(|p| p.metric);
    let total_weight: u64 = parts.iter().map(|p| p.weight_bp).sum();
    let weighted: u64 = parts
        .iter()
        .map(|p| p.ratio_bp.min(RATIO_CAP_BP) * p.weight_bp)
        .sum();
    Score {
        score_bp: weighted.checked_div(total_weight).unwrap_or(0),
        parts,
        version: VERDICT_VERSION,
    }
}

/// The outcome of a verdict.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Warn,
    Fail,
}

/// One reason for a verdict: a stable code, its weight, what was seen and what to do.
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    pub outcome: Outcome,
    pub evidence: String,
    pub guidance: String,
}

#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub outcome: Outcome,
    pub reasons: Vec<Reason>,
    pub version: u32,
}

fn tenths(milli: u64) -> String {
    format!("{}.{}", milli / 1_000, (milli % 1_000) / 100)
}

fn percent(bp: u64) -> String {
    format!("{}.{} %", bp / 100, (bp % 100) / 10)
}

/// The verdict on a scored run (version [`VERDICT_VERSION`]): a pure function of the run's
/// signals and its score, so it can be replayed for any past run.
pub fn verdict(variant: &GpuVariant, run: &Run, score: &Score) -> Verdict {
    let mut reasons = Vec::new();
    let mut reason = |code: &str, outcome: Outcome, evidence: String, guidance: &str| {
        reasons.push(Reason {
            code: code.to_owned(),
            outcome,
            evidence,
            guidance: guidance.to_owned(),
        });
    };
    let health = &run.health;
    for metric in Metric::required(variant) {
        if run.figure(metric).is_none() {
            reason(
                "incomplete_run",
                Outcome::Fail,
                format!("the run has no {} figure", metric.name()),
                "Update the agent and let the suite run to its end; it is retried automatically.",
            );
        }
    }
    if !health.results_verified {
        reason(
            "wrong_results",
            Outcome::Fail,
            "two identical matrix products gave different results".to_owned(),
            "The GPU computes wrong answers: check its cooling and clocks (no overclock), reseat it, and contact the vendor if it persists.",
        );
    }
    if health.ecc_uncorrected > 0 {
        reason(
            "ecc_uncorrected",
            Outcome::Fail,
            format!("{} uncorrectable ECC errors", health.ecc_uncorrected),
            "Reset the GPU (nvidia-smi -r) or reboot so pending pages retire; if errors return, the GPU needs RMA.",
        );
    }
    if health.retired_pages >= RETIRED_PAGES_FAIL || health.row_remap_failed {
        reason(
            "memory_retired",
            Outcome::Fail,
            format!(
                "{} retired pages, row remap failed: {}",
                health.retired_pages, health.row_remap_failed
            ),
            "The GPU's memory has run out of spare rows: it needs RMA.",
        );
    } else if health.row_remap_pending {
        reason(
            "row_remap_pending",
            Outcome::Fail,
            "a row remap is pending".to_owned(),
            "Reset the GPU (nvidia-smi -r) or reboot to apply the pending row remap; the GPU is re-tested after.",
        );
    }
    let mut xids = health.xids.clone();
    xids.sort_unstable();
    xids.dedup();
    let (fatal, other): (Vec<u32>, Vec<u32>) = xids.iter().partition(|x| FATAL_XIDS.contains(x));
    if !fatal.is_empty() {
        reason(
            "fatal_xid",
            Outcome::Fail,
            format!("XID {fatal:?} reported by the driver"),
            "See NVIDIA's XID catalog for each code; reboot, check power and PCIe seating; a GPU that keeps reporting them needs RMA.",
        );
    }
    if !other.is_empty() {
        reason(
            "xid",
            Outcome::Warn,
            format!("XID {other:?} reported by the driver"),
            "Usually an application error; if it repeats without renters' jobs, check the driver version.",
        );
    }
    if health.max_temperature_c >= TEMPERATURE_FAIL_C {
        reason(
            "temperature_critical",
            Outcome::Fail,
            format!("{} C under load", health.max_temperature_c),
            "Improve cooling: airflow, fan curves, room temperature, dust; the GPU is re-tested after.",
        );
    } else if health.sustained_temperature_c >= TEMPERATURE_WARN_C {
        reason(
            "temperature_high",
            Outcome::Warn,
            format!("{} C sustained under load", health.sustained_temperature_c),
            "Improve cooling before it throttles.",
        );
    }
    if health.sustained_ratio_bp < DEGRADATION_FAIL_BP {
        reason(
            "sustained_degradation",
            Outcome::Fail,
            format!(
                "throughput fell to {} of its start during the sustained phase",
                percent(health.sustained_ratio_bp)
            ),
            "The GPU cannot hold its clocks under load: check cooling and power delivery.",
        );
    } else if health.sustained_ratio_bp < DEGRADATION_WARN_BP {
        reason(
            "sustained_degradation",
            Outcome::Warn,
            format!(
                "throughput fell to {} of its start during the sustained phase",
                percent(health.sustained_ratio_bp)
            ),
            "Check cooling and power delivery.",
        );
    }
    let trouble = crate::fleet::clock_events::TROUBLE;
    if health.throttle_mask & trouble != 0 {
        reason(
            "throttling",
            Outcome::Warn,
            format!(
                "clock events under load: {}",
                crate::fleet::clock_events::names(health.throttle_mask & trouble).join(", ")
            ),
            "Thermal or power throttling: check cooling and the power supply.",
        );
    }
    if health.power_limit_w > 0 && health.power_limit_w < health.default_power_limit_w {
        reason(
            "power_limit_lowered",
            Outcome::Warn,
            format!(
                "power limit {} W, default {} W",
                health.power_limit_w, health.default_power_limit_w
            ),
            "The host lowered the power limit (nvidia-smi -pl): figures are scored as measured; restore the default for the full score.",
        );
    }
    if let Some(pcie) = &health.pcie
        && (pcie.generation < pcie.max_generation || pcie.width < pcie.max_width)
    {
        reason(
            "pcie_link_degraded",
            Outcome::Warn,
            format!(
                "PCIe Gen{} x{} under load, the GPU and slot support Gen{} x{}",
                pcie.generation, pcie.width, pcie.max_generation, pcie.max_width
            ),
            "Reseat the GPU, check the riser and the slot's BIOS settings.",
        );
    }
    for part in &score.parts {
        let evidence = format!(
            "{} {} against a reference of {} ({})",
            part.metric.name(),
            tenths(part.measured_milli),
            tenths(part.reference.value_milli),
            percent(part.ratio_bp)
        );
        if part.ratio_bp < FAIL_BELOW_BP {
            reason(
                "below_floor",
                Outcome::Fail,
                evidence,
                guidance_for(part.metric),
            );
        } else if part.ratio_bp < WARN_BELOW_BP {
            reason(
                "below_reference",
                Outcome::Warn,
                evidence,
                guidance_for(part.metric),
            );
        }
    }
    let outcome = reasons
        .iter()
        .map(|r| r.outcome)
        .max()
        .unwrap_or(Outcome::Pass);
    Verdict {
        outcome,
        reasons,
        version: VERDICT_VERSION,
    }
}

fn guidance_for(metric: Metric) -> &'static str {
    match metric {
        Metric::HostToDeviceGbS | Metric::DeviceToHostGbS => {
            "Host-device copies are slow: check the PCIe link width and generation (reseat, riser, slot, BIOS)."
        }
        Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS => {
            "Memory bandwidth is low: check for memory errors and clocks; a GPU that stays low needs RMA."
        }
        _ => {
            "Compute is slow: check cooling, power limit and clocks, and that nothing else runs on the GPU."
        }
    }
}

/// What the listing does after a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListingAction {
    /// Nothing changes.
    Keep,
    /// Remove the GPU from the marketplace until a re-test passes.
    Delist,
    /// Back on the marketplace.
    Relist,
}

/// The listing's answer to a verdict, with hysteresis: a GPU delisted by a verdict comes back
/// only on a pass whose every scored figure is at least [`RELIST_FROM_BP`] of its reference.
pub fn listing_action(
    delisted_by_verdict: bool,
    verdict: &Verdict,
    score: &Score,
) -> ListingAction {
    match (delisted_by_verdict, verdict.outcome) {
        (false, Outcome::Fail) => ListingAction::Delist,
        (false, _) => ListingAction::Keep,
        (true, Outcome::Fail) => ListingAction::Keep,
        (true, _) => {
            if score.parts.iter().all(|p| p.ratio_bp >= RELIST_FROM_BP) {
                ListingAction::Relist
            } else {
                ListingAction::Keep
            }
        }
    }
}

/// Simulated runs, clearly marked as such, for development, the simulation and the verdict's
/// own measurement (how many faulty GPUs it catches, how many healthy ones it would delist).
/// Deterministic: a seed picks the noise.
pub mod simulated {
    use super::*;

    /// A simulated GPU's condition.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum Profile {
        Healthy,
        /// Overheats under load: clocks fall, throttle bits, 97 C.
        ThermalThrottling,
        /// The PCIe link trained down to x8: host-device copies at half speed.
        PcieX8,
        /// Memory bandwidth at about 65 % of healthy.
        LowMemoryBandwidth,
        /// The host lowered the power limit to 60 % of its default: compute at about 85 %.
        LoweredPowerLimit,
        /// Uncorrectable ECC errors.
        EccDoubleBit,
        /// XID 79 (the GPU fell off the bus) since the last run.
        FatalXid,
        /// Fast and wrong: two identical GEMMs differ.
        WrongResults,
    }

    impl Profile {
        pub const ALL: [Profile; 8] = [
            Profile::Healthy,
            Profile::ThermalThrottling,
            Profile::PcieX8,
            Profile::LowMemoryBandwidth,
            Profile::LoweredPowerLimit,
            Profile::EccDoubleBit,
            Profile::FatalXid,
            Profile::WrongResults,
        ];

        pub fn name(self) -> &'static str {
            match self {
                Profile::Healthy => "healthy",
                Profile::ThermalThrottling => "thermal_throttling",
                Profile::PcieX8 => "pcie_x8",
                Profile::LowMemoryBandwidth => "low_memory_bandwidth",
                Profile::LoweredPowerLimit => "lowered_power_limit",
                Profile::EccDoubleBit => "ecc_double_bit",
                Profile::FatalXid => "fatal_xid",
                Profile::WrongResults => "wrong_results",
            }
        }

        pub fn parse(text: &str) -> Option<Profile> {
            Profile::ALL.into_iter().find(|p| p.name() == text)
        }
    }

    /// The runs' noise, from a seed.
    struct Noise(crate::splitmix::SplitMix64);

    impl Noise {
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }

        /// About normal, mean 0, standard deviation `sigma_bp` basis points (Irwin-Hall of 12
        /// uniforms), bounded at 6 sigma.
        fn normal_bp(&mut self, sigma_bp: i64) -> i64 {
            let sum: i64 = (0..12)
                .map(|_| i64::try_from(self.next() % 10_000).unwrap_or(0))
                .sum();
            (sum - 60_000) * sigma_bp / 10_000
        }
    }

    fn scaled(value: u64, bp: i64) -> u64 {
        let bp = u64::try_from((10_000 + bp).max(0)).unwrap_or(0);
        value.saturating_mul(bp) / 10_000
    }

    /// A run of `profile` on a GPU of `variant`, its noise from `seed`: healthy GPUs spread
    /// about 5 % within a model (a per-GPU offset of 2 % and a per-figure 1.5 %, one standard
    /// deviation each) around the datasheet's healthy figures.
    pub fn run(
        model: &GpuModel,
        variant: &GpuVariant,
        gpu_uuid: &str,
        profile: Profile,
        seed: u64,
    ) -> Run {
        let mut noise = Noise(crate::splitmix::SplitMix64(seed));
        let gpu_offset = noise.normal_bp(200);
        let pcie_max = PcieUnderLoad {
            generation: if model.id.starts_with('h') { 5 } else { 4 },
            width: 16,
            max_generation: if model.id.starts_with('h') { 5 } else { 4 },
            max_width: 16,
        };
        let mut health = HealthSignals {
            results_verified: true,
            sustained_ratio_bp: u64::try_from(9_800 + noise.normal_bp(50)).unwrap_or(9_800),
            max_temperature_c: 72,
            sustained_temperature_c: 68,
            power_limit_w: variant.power_w,
            default_power_limit_w: variant.power_w,
            pcie: Some(pcie_max),
            ..HealthSignals::default()
        };
        // What each profile does to the figures, basis points of healthy; severities vary from
        // GPU to GPU, from mild (a warning) to plain (a failure).
        let mut severity = |low: u64, high: u64| -> i64 {
            i64::try_from(low + noise.next() % (high - low + 1)).unwrap_or(0)
        };
        let (mut compute_bp, mut memory_bp, mut copy_bp) = (0, 0, 0);
        match profile {
            Profile::ThermalThrottling => {
                compute_bp = -severity(1_000, 3_000);
                memory_bp = -severity(0, 500);
                health.sustained_ratio_bp =
                    u64::try_from(10_000 - severity(1_500, 3_500)).unwrap_or(0);
                health.throttle_mask =
                    crate::fleet::clock_events::HW_THERMAL | crate::fleet::clock_events::SW_THERMAL;
                health.max_temperature_c = 88 + i32::try_from(severity(0, 10)).unwrap_or(0);
                health.sustained_temperature_c = health.max_temperature_c - 4;
            }
            Profile::PcieX8 => {
                copy_bp = -5_000;
                health.pcie = Some(PcieUnderLoad {
                    width: 8,
                    ..pcie_max
                });
            }
            Profile::LowMemoryBandwidth => memory_bp = -severity(1_500, 4_500),
            Profile::LoweredPowerLimit => {
                let share = u32::try_from(severity(50, 90)).unwrap_or(60);
                health.power_limit_w = variant.power_w * share / 100;
                compute_bp = -severity(500, 1_500);
                memory_bp = -severity(0, 300);
            }
            Profile::EccDoubleBit => {
                health.ecc_uncorrected = u64::try_from(severity(1, 20)).unwrap_or(1);
            }
            Profile::FatalXid => health.xids = vec![79],
            Profile::WrongResults => health.results_verified = false,
            Profile::Healthy => {}
        }
        let figures = Metric::ALL
            .into_iter()
            .filter_map(|metric| {
                let healthy = match metric {
                    Metric::SsdReadMbS => 3_000_000,
                    Metric::SsdWriteMbS => 2_500_000,
                    Metric::NetworkRttUs => 20_000_000,
                    Metric::NetworkMbitS => 900_000_000,
                    _ => {
                        peak_milli(variant, metric, Some(&pcie_max))?
                            * healthy_ratio_bp(model, variant, metric)
                            / 10_000
                    }
                };
                let effect = match metric {
                    m if m.is_flops() => compute_bp,
                    Metric::MemReadGbS | Metric::MemWriteGbS | Metric::MemCopyGbS => memory_bp,
                    Metric::HostToDeviceGbS | Metric::DeviceToHostGbS => copy_bp,
                    _ => 0,
                };
                let median = scaled(healthy, gpu_offset + effect + noise.normal_bp(150));
                Some(Figure {
                    metric,
                    median_milli: median,
                    p10_milli: scaled(median, -100),
                    p90_milli: scaled(median, 100),
                    trials: 5,
                })
            })
            .collect();
        Run {
            gpu_uuid: gpu_uuid.to_owned(),
            method_version: METHOD_VERSION,
            figures,
            health,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::simulated::{Profile, run};
    use super::*;
    use crate::gpu::GPU_CATALOG;

    fn h100() -> (&'static GpuModel, &'static GpuVariant) {
        let model = GPU_CATALOG.iter().find(|m| m.id == "h100-80gb").unwrap();
        (model, &model.variants[0])
    }

    fn judge(model: &GpuModel, variant: &GpuVariant, run: &Run) -> (Score, Verdict) {
        check_plausible(variant, run).unwrap();
        let score = score(run, |metric| {
            reference(model, variant, metric, run.health.pcie.as_ref(), &[])
        });
        let verdict = verdict(variant, run, &score);
        (score, verdict)
    }

    #[test]
    fn a_healthy_gpu_passes_near_the_reference_and_the_score_is_its_parts() {
        let (model, variant) = h100();
        let run = run(model, variant, "GPU-a", Profile::Healthy, 7);
        let (score, verdict) = judge(model, variant, &run);
        assert_eq!(verdict.outcome, Outcome::Pass, "{verdict:?}");
        assert!((9_000..=11_000).contains(&score.score_bp), "{score:?}");
        // The score is the weighted mean of its published parts.
        let weight: u64 = score.parts.iter().map(|p| p.weight_bp).sum();
        let sum: u64 = score
            .parts
            .iter()
            .map(|p| p.ratio_bp.min(RATIO_CAP_BP) * p.weight_bp)
            .sum();
        assert_eq!(score.score_bp, sum / weight);
        assert_eq!(
            weight, 10_000,
            "every weighted figure of an H100 is present"
        );
        // BF16 on an H100 SXM: 80 % of 989 TFLOPS is the reference.
        let bf16 = score
            .parts
            .iter()
            .find(|p| p.metric == Metric::Bf16Tflops)
            .unwrap();
        assert_eq!(bf16.reference.value_milli, 791_200);
        assert_eq!(bf16.reference.source, ReferenceSource::Datasheet);
    }

    #[test]
    fn figures_past_physics_are_refused() {
        let (model, variant) = h100();
        let mut run = run(model, variant, "GPU-a", Profile::Healthy, 1);
        let bf16 = run
            .figures
            .iter_mut()
            .find(|f| f.metric == Metric::Bf16Tflops)
            .unwrap();
        // 1.10 x 989 TFLOPS is the limit.
        bf16.median_milli = 1_080_000;
        bf16.p10_milli = 1_070_000;
        bf16.p90_milli = 1_090_000;
        assert_eq!(
            check_plausible(variant, &run),
            Err(Implausible::AbovePhysicalLimit {
                metric: Metric::Bf16Tflops,
                measured_milli: 1_090_000,
                limit_milli: 1_087_900,
            })
        );
        let mut run = simulated::run(model, variant, "GPU-a", Profile::Healthy, 1);
        let memory = run
            .figures
            .iter_mut()
            .find(|f| f.metric == Metric::MemCopyGbS)
            .unwrap();
        memory.p90_milli = 3_350_000 * 106 / 100;
        assert!(matches!(
            check_plausible(variant, &run),
            Err(Implausible::AbovePhysicalLimit {
                metric: Metric::MemCopyGbS,
                ..
            })
        ));
        let mut run = simulated::run(model, variant, "GPU-a", Profile::Healthy, 1);
        run.figures[0].p10_milli = run.figures[0].median_milli + 1;
        assert!(matches!(
            check_plausible(variant, &run),
            Err(Implausible::InconsistentSpread { .. })
        ));
        let mut run = simulated::run(model, variant, "GPU-a", Profile::Healthy, 1);
        let first = run.figures[0];
        run.figures.push(first);
        assert!(matches!(
            check_plausible(variant, &run),
            Err(Implausible::DuplicateFigure { .. })
        ));
    }

    #[test]
    fn the_fleet_median_replaces_the_datasheet_once_enough_gpus_ran() {
        let (model, variant) = h100();
        let fleet: Vec<u64> = (0..9).map(|i| 700_000 + i * 1_000).collect();
        let datasheet = reference(model, variant, Metric::Bf16Tflops, None, &fleet).unwrap();
        assert_eq!(datasheet.source, ReferenceSource::Datasheet);
        let mut fleet = fleet;
        fleet.push(709_000);
        let from_fleet = reference(model, variant, Metric::Bf16Tflops, None, &fleet).unwrap();
        assert_eq!(
            from_fleet,
            Reference {
                value_milli: 704_000,
                source: ReferenceSource::Fleet { gpus: 10 }
            }
        );
    }

    #[test]
    fn each_degraded_profile_gets_its_reason() {
        let (model, variant) = h100();
        // Each profile at several severities: at least this outcome, always this reason.
        for (profile, code, at_least) in [
            (Profile::ThermalThrottling, "throttling", Outcome::Warn),
            (Profile::PcieX8, "pcie_link_degraded", Outcome::Fail),
            (Profile::LowMemoryBandwidth, "below_", Outcome::Warn),
            (
                Profile::LoweredPowerLimit,
                "power_limit_lowered",
                Outcome::Warn,
            ),
            (Profile::EccDoubleBit, "ecc_uncorrected", Outcome::Fail),
            (Profile::FatalXid, "fatal_xid", Outcome::Fail),
            (Profile::WrongResults, "wrong_results", Outcome::Fail),
        ] {
            for seed in 0..20 {
                let run = run(model, variant, "GPU-a", profile, seed);
                let (_, verdict) = judge(model, variant, &run);
                assert!(verdict.outcome >= at_least, "{profile:?}: {verdict:?}");
                assert!(
                    verdict
                        .reasons
                        .iter()
                        .any(|r| r.code.starts_with(code) && !r.guidance.is_empty()),
                    "{profile:?}: {verdict:?}"
                );
            }
        }
        // A power limit the host lowered is never a failure by itself.
        for seed in 0..50 {
            let run = run(model, variant, "GPU-a", Profile::LoweredPowerLimit, seed);
            assert_eq!(judge(model, variant, &run).1.outcome, Outcome::Warn);
        }
    }

    #[test]
    fn a_delisted_gpu_comes_back_only_clearly_above_the_fail_line() {
        let (model, variant) = h100();
        let run = run(model, variant, "GPU-a", Profile::Healthy, 5);
        let (good_score, pass) = judge(model, variant, &run);
        assert_eq!(
            listing_action(true, &pass, &good_score),
            ListingAction::Relist
        );
        assert_eq!(
            listing_action(false, &pass, &good_score),
            ListingAction::Keep
        );
        // A pass with one figure at 77 % of its reference (between the fail and relist lines)
        // keeps it delisted.
        let mut hovering = good_score.clone();
        hovering.parts[0].ratio_bp = 7_700;
        let warn = Verdict {
            outcome: Outcome::Warn,
            reasons: Vec::new(),
            version: VERDICT_VERSION,
        };
        assert_eq!(listing_action(true, &warn, &hovering), ListingAction::Keep);
        let fail = Verdict {
            outcome: Outcome::Fail,
            ..warn
        };
        assert_eq!(
            listing_action(false, &fail, &hovering),
            ListingAction::Delist
        );
        assert_eq!(listing_action(true, &fail, &hovering), ListingAction::Keep);
    }
}
