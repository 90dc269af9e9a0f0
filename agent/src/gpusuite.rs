//! The suite on a real GPU (issue 18): the GPU figures from `gpunex-gpu` (cuBLAS GEMMs, device
//! memory, host-device copies, the sustained phase), the GPU's sensors and health from NVML
//! before, during and after, XIDs from NVML events and the kernel log, and the host figures
//! (storage and the network to the platform, `hostbench`). It runs on its own thread; the
//! service loop asks it to stop when a rental arrives (customers first).
//!
//! Preconditions, checked first: the GPU is not in MIG mode (the suite measures whole GPUs) and
//! no other compute process runs on it.

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

struct NvmlObserver<'a> {
    device: nvml_wrapper::Device<'a>,
    cancel: &'a AtomicBool,
    sustained: Vec<Sample>,
    max_temperature_c: i32,
    /// Trouble clock-event bits seen under load.
    trouble: u64,
    /// The best PCIe link seen while a copy was in flight.
    pcie: Option<(u32, u32)>,
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
        if let Some(t) = temperature {
            self.max_temperature_c = self.max_temperature_c.max(t);
        }
        if let Ok(reasons) = self.device.current_throttle_reasons() {
            self.trouble |= reasons.bits() & clock_events::TROUBLE;
        }
        match phase {
            Phase::HostCopy => {
                if let (Ok(generation), Ok(width)) = (
                    self.device.current_pcie_link_gen(),
                    self.device.current_pcie_link_width(),
                ) {
                    self.pcie = Some(self.pcie.map_or((generation, width), |(g, w)| {
                        (g.max(generation), w.max(width))
                    }));
                }
            }
            Phase::Sustained => self.sustained.push(Sample {
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
        sustained: Vec::new(),
        max_temperature_c: idle_temperature_c,
        trouble: 0,
        pcie: None,
    };
    let measured = gpunex_gpu::cuda::run(gpu_uuid, &suite.plan, &mut observer)?;
    let after = health(&device);
    let mut xids = std::collections::BTreeSet::new();
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
    for g in &measured.gemm {
        if let Some(wrong) = &g.wrong {
            notes.push(wrong.clone());
        }
    }
    match hostbench::storage(&suite.state_dir, suite.storage_bytes, 4, 3) {
        Ok(storage) => {
            if !storage.direct {
                notes.push(
                    "the file system refused O_DIRECT: storage measured with buffered I/O, the cache dropped".to_owned(),
                );
            }
            figures.push(storage.read);
            figures.push(storage.write);
        }
        Err(error) => notes.push(format!("storage not measured: {error}")),
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(SuiteError::Cancelled);
    }
    match network(suite) {
        Ok(network) => {
            figures.push(network.rtt);
            figures.push(network.throughput);
        }
        Err(error) => notes.push(format!("network not measured: {error}")),
    }
    let pcie = observer.pcie.map(|(generation, width)| PcieUnderLoad {
        generation,
        width,
        max_generation: device.max_pcie_link_gen().unwrap_or(generation),
        max_width: device.max_pcie_link_width().unwrap_or(width),
    });
    let sustained = &observer.sustained;
    let health = HealthSignals {
        results_verified: measured.results_verified(),
        ecc_uncorrected: after
            .ecc_uncorrected
            .unwrap_or(0)
            .saturating_sub(before.ecc_uncorrected.unwrap_or(0)),
        retired_pages: after.retired_pages.unwrap_or(0),
        row_remap_pending: after.remap_pending,
        row_remap_failed: after.remap_failed,
        xids: xids.into_iter().collect(),
        throttle_mask: observer.trouble,
        sustained_ratio_bp: measured.sustained_ratio_bp(),
        max_temperature_c: observer.max_temperature_c,
        sustained_temperature_c: median(sustained.iter().filter_map(|s| s.temperature_c).collect())
            .unwrap_or(observer.max_temperature_c),
        power_limit_w: device.enforced_power_limit().map_or(0, |mw| mw / 1_000),
        default_power_limit_w: device
            .power_management_limit_default()
            .map_or(0, |mw| mw / 1_000),
        pcie,
        pcie_replays: after
            .pcie_replays
            .unwrap_or(0)
            .saturating_sub(before.pcie_replays.unwrap_or(0)),
    };
    let cuda_version = nvml.sys_cuda_driver_version().map_or_else(
        |_| "unknown".to_owned(),
        |v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        },
    );
    let environment = Environment {
        driver_version: nvml
            .sys_driver_version()
            .unwrap_or_else(|_| "unknown".to_owned()),
        cuda_version,
        sm_clock_mhz: median(sustained.iter().filter_map(|s| s.sm_clock_mhz).collect())
            .unwrap_or(0),
        memory_clock_mhz: median(
            sustained
                .iter()
                .filter_map(|s| s.memory_clock_mhz)
                .collect(),
        )
        .unwrap_or(0),
        idle_temperature_c,
        mig_enabled: false,
        sustained_seconds: u32::try_from(measured.sustained_elapsed.as_secs()).unwrap_or(u32::MAX),
    };
    Ok(Finished {
        run: Run {
            gpu_uuid: gpu_uuid.to_owned(),
            method_version: METHOD_VERSION,
            figures,
            health,
        },
        environment,
        kmsg_seq,
        notes,
        measured,
        elapsed: started.elapsed(),
    })
}

/// The network figures to the platform, from this thread (its own runtime and client).
fn network(suite: &RealSuite) -> anyhow::Result<hostbench::NetworkFigures> {
    let client = crate::client::Client::new(&suite.server, &suite.token)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(hostbench::network(&client, 20, 4, 16 << 20, 3))
}
