//! The suite on a real GPU (issue 18): the GPU figures from `gpunex-gpu` (cuBLAS GEMMs, device
//! memory, host-device copies, the sustained phase), the GPU's sensors and health from NVML
//! before, during and after, XIDs from NVML events and the kernel log, and the host figures
//! (storage and the network to the platform, `hostbench`). It runs on its own thread; the
//! service loop asks it to stop when a rental arrives (customers first).
//!
//! Preconditions, checked first: the GPU is not in MIG mode (the suite measures whole GPUs) and
//! no other compute process runs on it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpunex_domain::benchmark::{Figure, HealthSignals, METHOD_VERSION, Metric, PcieUnderLoad, Run};
use gpunex_domain::benchmark_log::Environment;
use gpunex_domain::fleet::clock_events;
use gpunex_gpu::{Measured, Observer, Phase, Plan, SuiteError, Trials};
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::structs::device::FieldId;

use crate::hostbench;

/// NVML's field ids for row remapping (`NVML_FI_DEV_REMAPPED_PENDING`, `..._FAILURE`).
const REMAPPED_PENDING: u32 = 144;
const REMAPPED_FAILURE: u32 = 145;

/// What the storage test writes and reads back.
pub const STORAGE_BYTES: u64 = 1 << 30;

/// What the suite on a real GPU needs besides the GPU.
#[derive(Debug, Clone)]
pub struct RealSuite {
    pub plan: Plan,
    /// Where the storage test writes its file (the agent's state directory).
    pub state_dir: PathBuf,
    pub storage_bytes: u64,
    /// The platform, for the network figures.
    pub server: String,
    pub token: String,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Finished {
    pub run: Run,
    pub environment: Environment,
    /// The last kernel-log record read (the next run reads after it).
    pub kmsg_seq: Option<u64>,
    /// What could not be measured or read, in sentences.
    pub notes: Vec<String>,
    pub measured: Measured,
    pub elapsed: Duration,
}

/// One sample of the sustained phase.
#[derive(Debug, Clone, Copy)]
struct Sample {
    sm_clock_mhz: Option<u32>,
    memory_clock_mhz: Option<u32>,
    temperature_c: Option<i32>,
}

/// What the sensors showed while the suite ran.
#[derive(Debug, Clone, Default)]
struct Sensors {
    sustained: Vec<Sample>,
    max_temperature_c: i32,
    /// Trouble clock-event bits seen under load.
    trouble: u64,
    /// The best PCIe link seen while a copy was in flight.
    pcie: Option<(u32, u32)>,
}

struct NvmlObserver<'a> {
    device: nvml_wrapper::Device<'a>,
    cancel: &'a AtomicBool,
    seen: Sensors,
}

impl Observer for NvmlObserver<'_> {
    fn cancelled(&mut self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    fn sample(&mut self, phase: Phase) {
        let temperature = self
            .device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .and_then(|t| i32::try_from(t).ok());
        let seen = &mut self.seen;
        if let Some(t) = temperature {
            seen.max_temperature_c = seen.max_temperature_c.max(t);
        }
        if let Ok(reasons) = self.device.current_throttle_reasons() {
            seen.trouble |= reasons.bits() & clock_events::TROUBLE;
        }
        match phase {
            Phase::HostCopy => {
                if let (Ok(generation), Ok(width)) = (
                    self.device.current_pcie_link_gen(),
                    self.device.current_pcie_link_width(),
                ) {
                    seen.pcie = Some(seen.pcie.map_or((generation, width), |(g, w)| {
                        (g.max(generation), w.max(width))
                    }));
                }
            }
            Phase::Sustained => seen.sustained.push(Sample {
                sm_clock_mhz: self.device.clock_info(Clock::SM).ok(),
                memory_clock_mhz: self.device.clock_info(Clock::Memory).ok(),
                temperature_c: temperature,
            }),
            Phase::Gemm(_) | Phase::Memory => {}
        }
    }
}

/// The health counters read before and after the load.
#[derive(Debug, Clone, Default)]
struct Health {
    ecc_uncorrected: Option<u64>,
    retired_pages: Option<u64>,
    remap_pending: bool,
    remap_failed: bool,
    pcie_replays: Option<u64>,
}

fn health(device: &nvml_wrapper::Device<'_>) -> Health {
    let retired = [
        RetirementCause::MultipleSingleBitEccErrors,
        RetirementCause::DoubleBitEccError,
    ]
    .into_iter()
    .map(|cause| device.retired_pages(cause).map(|pages| pages.len() as u64))
    .collect::<Result<Vec<u64>, _>>()
    .ok()
    .map(|counts| counts.iter().sum());
    let flag = |sample: &Result<nvml_wrapper::struct_wrappers::device::FieldValueSample, _>| {
        matches!(
            sample.as_ref().map(|s| s.value.as_ref()),
            Ok(Ok(SampleValue::U32(1..)
                | SampleValue::U64(1..)
                | SampleValue::I64(1..)))
        )
    };
    let remaps = device
        .field_values_for(&[FieldId(REMAPPED_PENDING), FieldId(REMAPPED_FAILURE)])
        .unwrap_or_default();
    Health {
        ecc_uncorrected: device
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok(),
        retired_pages: retired,
        remap_pending: remaps.first().is_some_and(flag),
        remap_failed: remaps.get(1).is_some_and(flag),
        pcie_replays: device.pcie_replay_counter().ok().map(u64::from),
    }
}

fn figure(metric: Metric, trials: &Trials) -> Figure {
    hostbench::figure(metric, trials.values_milli.clone())
}

fn median<T: Ord + Copy>(mut values: Vec<T>) -> Option<T> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// Runs the suite on `gpu_uuid`; `kmsg_after`: the kernel-log record the previous run read up
/// to. Returns [`SuiteError::Cancelled`] as soon as `cancel` is set.
pub fn run(
    suite: &RealSuite,
    gpu_uuid: &str,
    kmsg_after: Option<u64>,
    cancel: &AtomicBool,
) -> Result<Finished, SuiteError> {
    let started = Instant::now();
    let nvml = Nvml::init().map_err(|error| {
        SuiteError::Unavailable(format!("{} ({error})", crate::detect::DRIVER_NOT_FOUND))
    })?;
    let device = nvml
        .device_by_uuid(gpu_uuid)
        .map_err(|_| SuiteError::NoSuchGpu(gpu_uuid.to_owned()))?;
    let precondition = |why: String| SuiteError::Precondition {
        gpu: gpu_uuid.to_owned(),
        why,
    };
    if device.mig_mode().is_ok_and(|mode| mode.current == 1) {
        return Err(precondition(
            "MIG is enabled: the suite measures whole GPUs; disable MIG to benchmark it".to_owned(),
        ));
    }
    let others = device.running_compute_processes().unwrap_or_default();
    if !others.is_empty() {
        return Err(precondition(format!(
            "{} other compute process(es) run on it (pid {}); the suite waits until it is free",
            others.len(),
            others
                .iter()
                .map(|p| p.pid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut notes = Vec::new();
    let idle_temperature_c = device
        .temperature(TemperatureSensor::Gpu)
        .ok()
        .and_then(|t| i32::try_from(t).ok())
        .unwrap_or(0);
    let before = health(&device);
    // XIDs during the run, as NVML reports them to a registered process.
    let events = nvml
        .create_event_set()
        .map_err(|e| e.to_string())
        .and_then(|set| {
            device
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .map_err(|e| e.to_string())
        });
    let events = match events {
        Ok(set) => Some(set),
        Err(why) => {
            notes.push(format!("NVML XID events are not available: {why}"));
            None
        }
    };
    let mut observer = NvmlObserver {
        device: nvml
            .device_by_uuid(gpu_uuid)
            .map_err(|_| SuiteError::NoSuchGpu(gpu_uuid.to_owned()))?,
        cancel,
        seen: Sensors {
            max_temperature_c: idle_temperature_c,
            ..Sensors::default()
        },
    };
    let measured = gpunex_gpu::cuda::run(gpu_uuid, &suite.plan, &mut observer)?;
    let after = health(&device);
    let mut xids = BTreeSet::new();
    if let Some(set) = &events {
        while let Ok(event) = set.wait(0) {
            if let Some(XidError::Value(xid)) = event.event_data
                && let Ok(xid) = u32::try_from(xid)
            {
                xids.insert(xid);
            }
        }
    }
    let address = device
        .pci_info()
        .ok()
        .map(|p| crate::kmsg::driver_address(&p.bus_id));
    let kmsg_seq = match crate::kmsg::read_after(kmsg_after) {
        Ok((records, last)) => {
            for record in records {
                if address.as_deref() == Some(record.pci.as_str()) {
                    xids.insert(record.xid);
                }
            }
            last
        }
        Err(why) => {
            notes.push(format!(
                "{why}: XIDs from while the agent was down are not seen"
            ));
            kmsg_after
        }
    };
    if cancel.load(Ordering::Relaxed) {
        return Err(SuiteError::Cancelled);
    }
    for g in &measured.gemm {
        if let Some(wrong) = &g.wrong {
            notes.push(wrong.clone());
        }
    }
    let mut host_figures = Vec::new();
    match hostbench::storage(&suite.state_dir, suite.storage_bytes, 4, 3) {
        Ok(storage) => {
            if !storage.direct {
                notes.push(
                    "the file system refused O_DIRECT: storage measured with buffered I/O, the cache dropped".to_owned(),
                );
            }
            host_figures.push(storage.read);
            host_figures.push(storage.write);
        }
        Err(error) => notes.push(format!("storage not measured: {error}")),
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(SuiteError::Cancelled);
    }
    match network(suite) {
        Ok(network) => {
            host_figures.push(network.rtt);
            host_figures.push(network.throughput);
        }
        Err(error) => notes.push(format!("network not measured: {error}")),
    }
    let readings = Readings {
        seen: observer.seen,
        before,
        after,
        xids,
        pcie_max: (
            device.max_pcie_link_gen().ok(),
            device.max_pcie_link_width().ok(),
        ),
        power_limit_w: device.enforced_power_limit().map_or(0, |mw| mw / 1_000),
        default_power_limit_w: device
            .power_management_limit_default()
            .map_or(0, |mw| mw / 1_000),
        idle_temperature_c,
        driver_version: nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".to_owned()),
        cuda_version: nvml.sys_cuda_driver_version().map_or_else(
            |_| "unknown".to_owned(),
            |v| {
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                )
            },
        ),
    };
    let (run, environment) = assemble(gpu_uuid, &measured, &readings, host_figures);
    Ok(Finished {
        run,
        environment,
        kmsg_seq,
        notes,
        measured,
        elapsed: started.elapsed(),
    })
}

/// What NVML read around the run.
#[derive(Debug, Clone, Default)]
struct Readings {
    seen: Sensors,
    before: Health,
    after: Health,
    xids: BTreeSet<u32>,
    /// The PCIe link's maximum generation and width.
    pcie_max: (Option<u32>, Option<u32>),
    power_limit_w: u32,
    default_power_limit_w: u32,
    idle_temperature_c: i32,
    driver_version: String,
    cuda_version: String,
}

/// The run as the platform reads it, from what the GPU measured, what NVML read and the host's
/// figures: figures in thousandths of their unit (TFLOPS and GB/s as `gpunex_gpu` computes
/// them), counters as their change over the run (retired pages and remaps as they stand after
/// it).
fn assemble(
    gpu_uuid: &str,
    measured: &Measured,
    readings: &Readings,
    host_figures: Vec<Figure>,
) -> (Run, Environment) {
    let mut figures: Vec<Figure> = measured
        .gemm
        .iter()
        .map(|g| {
            let metric = match g.precision {
                gpunex_gpu::Precision::Fp32 => Metric::Fp32Tflops,
                gpunex_gpu::Precision::Tf32 => Metric::Tf32Tflops,
                gpunex_gpu::Precision::Fp16 => Metric::Fp16Tflops,
                gpunex_gpu::Precision::Bf16 => Metric::Bf16Tflops,
                gpunex_gpu::Precision::Fp8 => Metric::Fp8Tflops,
            };
            figure(metric, &g.trials)
        })
        .collect();
    figures.push(figure(Metric::MemReadGbS, &measured.mem_read));
    figures.push(figure(Metric::MemWriteGbS, &measured.mem_write));
    figures.push(figure(Metric::MemCopyGbS, &measured.mem_copy));
    figures.push(figure(Metric::HostToDeviceGbS, &measured.host_to_device));
    figures.push(figure(Metric::DeviceToHostGbS, &measured.device_to_host));
    figures.extend(host_figures);
    let Readings {
        seen,
        before,
        after,
        ..
    } = readings;
    let pcie = seen.pcie.map(|(generation, width)| PcieUnderLoad {
        generation,
        width,
        max_generation: readings.pcie_max.0.unwrap_or(generation),
        max_width: readings.pcie_max.1.unwrap_or(width),
    });
    let since = |after: Option<u64>, before: Option<u64>| {
        after.unwrap_or(0).saturating_sub(before.unwrap_or(0))
    };
    let health = HealthSignals {
        results_verified: measured.results_verified(),
        ecc_uncorrected: since(after.ecc_uncorrected, before.ecc_uncorrected),
        retired_pages: after.retired_pages.unwrap_or(0),
        row_remap_pending: after.remap_pending,
        row_remap_failed: after.remap_failed,
        xids: readings.xids.iter().copied().collect(),
        throttle_mask: seen.trouble,
        sustained_ratio_bp: measured.sustained_ratio_bp(),
        max_temperature_c: seen.max_temperature_c,
        sustained_temperature_c: median(
            seen.sustained
                .iter()
                .filter_map(|s| s.temperature_c)
                .collect(),
        )
        .unwrap_or(seen.max_temperature_c),
        power_limit_w: readings.power_limit_w,
        default_power_limit_w: readings.default_power_limit_w,
        pcie,
        pcie_replays: since(after.pcie_replays, before.pcie_replays),
    };
    let environment = Environment {
        driver_version: readings.driver_version.clone(),
        cuda_version: readings.cuda_version.clone(),
        sm_clock_mhz: median(
            seen.sustained
                .iter()
                .filter_map(|s| s.sm_clock_mhz)
                .collect(),
        )
        .unwrap_or(0),
        memory_clock_mhz: median(
            seen.sustained
                .iter()
                .filter_map(|s| s.memory_clock_mhz)
                .collect(),
        )
        .unwrap_or(0),
        idle_temperature_c: readings.idle_temperature_c,
        mig_enabled: false,
        sustained_seconds: u32::try_from(measured.sustained_elapsed.as_secs()).unwrap_or(u32::MAX),
    };
    let run = Run {
        gpu_uuid: gpu_uuid.to_owned(),
        method_version: METHOD_VERSION,
        figures,
        health,
    };
    (run, environment)
}

/// The network figures to the platform, from this thread (its own runtime and client).
fn network(suite: &RealSuite) -> anyhow::Result<hostbench::NetworkFigures> {
    let client = crate::client::Client::new(&suite.server, &suite.token)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(hostbench::network(&client, 20, 4, 16 << 20, 3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::benchmark::{Outcome, check_plausible, reference, score, verdict};
    use gpunex_domain::gpu::{GpuModel, GpuVariant, find_model};
    use gpunex_gpu::{GemmResult, Precision};

    fn h100_sxm() -> (&'static GpuModel, &'static GpuVariant) {
        let model = find_model("h100-80gb").unwrap();
        let variant = model
            .variants
            .iter()
            .find(|v| v.form_factor == "SXM5")
            .unwrap();
        (model, variant)
    }

    const LINK: PcieUnderLoad = PcieUnderLoad {
        generation: 5,
        width: 16,
        max_generation: 5,
        max_width: 16,
    };

    /// Ten trials within 1 % of `milli`.
    fn trials(milli: u64) -> Trials {
        Trials {
            values_milli: (0..10).map(|i| milli * (995 + i) / 1_000).collect(),
        }
    }

    /// What the suite would measure on a healthy H100 SXM: each figure at the datasheet's
    /// healthy-achieved value, as `gpunex_gpu` computes figures.
    fn healthy() -> Measured {
        let (model, variant) = h100_sxm();
        let at = |metric| {
            trials(
                reference(model, variant, metric, Some(&LINK), &[])
                    .unwrap()
                    .value_milli,
            )
        };
        let gemm = [
            (Precision::Fp32, Metric::Fp32Tflops),
            (Precision::Tf32, Metric::Tf32Tflops),
            (Precision::Fp16, Metric::Fp16Tflops),
            (Precision::Bf16, Metric::Bf16Tflops),
            (Precision::Fp8, Metric::Fp8Tflops),
        ]
        .map(|(precision, metric)| GemmResult {
            precision,
            trials: at(metric),
            per_trial: 4,
            wrong: None,
        });
        Measured {
            device_name: "NVIDIA H100 80GB HBM3".to_owned(),
            compute_capability: (9, 0),
            gemm: gemm.to_vec(),
            mem_read: at(Metric::MemReadGbS),
            mem_write: at(Metric::MemWriteGbS),
            mem_copy: at(Metric::MemCopyGbS),
            host_to_device: at(Metric::HostToDeviceGbS),
            device_to_host: at(Metric::DeviceToHostGbS),
            sustained_windows_milli: vec![640_000, 636_000, 641_000, 638_000, 635_000, 639_000],
            sustained_elapsed: Duration::from_secs(60),
            memory_bytes: 2 << 30,
            elapsed: Duration::from_secs(88),
        }
    }

    fn readings() -> Readings {
        Readings {
            seen: Sensors {
                sustained: vec![
                    Sample {
                        sm_clock_mhz: Some(1_980),
                        memory_clock_mhz: Some(2_619),
                        temperature_c: Some(66),
                    };
                    120
                ],
                max_temperature_c: 69,
                trouble: 0,
                pcie: Some((5, 16)),
            },
            before: Health {
                ecc_uncorrected: Some(5),
                pcie_replays: Some(10),
                ..Health::default()
            },
            after: Health {
                ecc_uncorrected: Some(5),
                pcie_replays: Some(13),
                ..Health::default()
            },
            pcie_max: (Some(5), Some(16)),
            power_limit_w: 700,
            default_power_limit_w: 700,
            idle_temperature_c: 31,
            driver_version: "550.54.15".to_owned(),
            cuda_version: "12.4".to_owned(),
            ..Readings::default()
        }
    }

    fn judge(measured: &Measured, readings: &Readings) -> (Run, u64, Outcome, Vec<String>) {
        let (model, variant) = h100_sxm();
        let (run, _) = assemble("GPU-h100-0", measured, readings, Vec::new());
        check_plausible(variant, &run).unwrap();
        let pcie = run.health.pcie;
        let scored = score(&run, |metric| {
            reference(model, variant, metric, pcie.as_ref(), &[])
        });
        let verdict = verdict(variant, &run, &scored);
        let codes = verdict.reasons.iter().map(|r| r.code.clone()).collect();
        (run, scored.score_bp, verdict.outcome, codes)
    }

    /// The suite's measurements become a run the platform accepts and scores as measured: the
    /// units agree (a healthy H100 scores about 100 % of the datasheet's healthy figures and
    /// passes), every required figure is there, and the counters are the run's own.
    #[test]
    fn a_healthy_gpus_measurements_make_a_plausible_passing_run() {
        let (run, score_bp, outcome, codes) = judge(&healthy(), &readings());
        assert_eq!(outcome, Outcome::Pass, "{codes:?}");
        assert!((9_900..=10_100).contains(&score_bp), "{score_bp}");
        let (model, variant) = h100_sxm();
        for metric in Metric::required(variant) {
            assert!(run.figure(metric).is_some(), "{metric:?}");
        }
        // gpunex_gpu's thousandths are the domain's: an 8192-cubed FP16 GEMM every 1.389 ms on an
        // H100 SXM is its datasheet's healthy figure (989.5 TFLOPS x 80 %).
        let healthy_fp16 = reference(model, variant, Metric::Fp16Tflops, Some(&LINK), &[])
            .unwrap()
            .value_milli;
        let measured = gpunex_gpu::tflops_milli(gpunex_gpu::gemm_flops(8_192), 1_389_000);
        assert!(
            measured.abs_diff(healthy_fp16) < healthy_fp16 / 1_000,
            "{measured} {healthy_fp16}"
        );
        let fp16 = run.figure(Metric::Fp16Tflops).unwrap();
        assert_eq!(fp16.trials, 10);
        assert!(fp16.p10_milli <= fp16.median_milli && fp16.median_milli <= fp16.p90_milli);
        assert_eq!(
            run.health.ecc_uncorrected, 0,
            "the counter's change, not its total"
        );
        assert_eq!(run.health.pcie_replays, 3);
        assert_eq!(run.health.sustained_ratio_bp, 639_000 * 10_000 / 640_000);
        assert_eq!(run.health.sustained_temperature_c, 66);
        assert_eq!(run.health.pcie, Some(LINK));
        let (_, environment) = assemble("GPU-h100-0", &healthy(), &readings(), Vec::new());
        assert_eq!(
            (environment.sm_clock_mhz, environment.sustained_seconds),
            (1_980, 60)
        );
    }

    #[test]
    fn a_wrong_result_new_ecc_errors_or_a_missing_figure_fail_the_run() {
        let mut wrong = healthy();
        wrong.gemm[2].wrong = Some("two identical fp16 GEMMs gave different results".to_owned());
        let (_, _, outcome, codes) = judge(&wrong, &readings());
        assert_eq!(outcome, Outcome::Fail);
        assert!(codes.contains(&"wrong_results".to_owned()), "{codes:?}");

        let mut ecc = readings();
        ecc.after.ecc_uncorrected = Some(7);
        let (run, _, outcome, codes) = judge(&healthy(), &ecc);
        assert_eq!(run.health.ecc_uncorrected, 2);
        assert_eq!(outcome, Outcome::Fail);
        assert!(codes.contains(&"ecc_uncorrected".to_owned()), "{codes:?}");

        // An H100 run without FP8 is incomplete: the suite reports no run rather than this.
        let mut no_fp8 = healthy();
        no_fp8.gemm.retain(|g| g.precision != Precision::Fp8);
        let (_, _, outcome, codes) = judge(&no_fp8, &readings());
        assert_eq!(outcome, Outcome::Fail);
        assert!(codes.contains(&"incomplete_run".to_owned()), "{codes:?}");
    }
}
