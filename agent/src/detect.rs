//! Where GPUs come from: NVML on a real host, or a simulation for machines without GPUs.
//!
//! Both sources answer the same two questions: what GPUs are here (`inventory`) and how each is
//! doing now (`sample`). Anything a GPU does not support is `None` (unknown), never an error.

use gpunex_domain::fleet::{DetectedGpu, GpuSample, PcieLink};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::error::NvmlError;

pub use crate::reading::Reading;
pub use crate::simulate::Simulated;

/// The sentence printed when no NVIDIA driver is installed.
pub const DRIVER_NOT_FOUND: &str = "NVIDIA driver not found: libnvidia-ml.so.1 could not be loaded";

#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    #[error(
        "{DRIVER_NOT_FOUND} ({0}); install the NVIDIA driver, or run with --simulate for development"
    )]
    DriverNotFound(String),
    #[error("NVML failed: {0}")]
    Nvml(String),
    #[error("no NVIDIA GPU found: NVML reports 0 devices")]
    NoGpus,
}

pub enum GpuSource {
    Nvml(Box<Nvml>),
    Simulated(Simulated),
}

impl GpuSource {
    /// NVML, failing with one clear sentence when the driver is missing.
    pub fn nvml() -> Result<GpuSource, DetectError> {
        match Nvml::init() {
            Ok(nvml) => Ok(GpuSource::Nvml(Box::new(nvml))),
            Err(
                error @ (NvmlError::LibloadingError(_)
                | NvmlError::LibraryNotFound
                | NvmlError::FailedToLoadSymbol(_)
                | NvmlError::DriverNotLoaded),
            ) => Err(DetectError::DriverNotFound(error.to_string())),
            Err(error) => Err(DetectError::Nvml(error.to_string())),
        }
    }

    pub fn is_simulated(&self) -> bool {
        matches!(self, GpuSource::Simulated(_))
    }

    /// Every GPU on the host, in NVML index order.
    pub fn inventory(&self) -> Result<Vec<DetectedGpu>, DetectError> {
        match self {
            GpuSource::Nvml(nvml) => nvml_inventory(nvml),
            GpuSource::Simulated(simulated) => Ok(simulated.inventory()),
        }
    }

    /// A reading of each GPU in `gpus` (UUIDs from the inventory).
    pub fn sample(&mut self, gpus: &[DetectedGpu]) -> Vec<Reading> {
        match self {
            GpuSource::Nvml(nvml) => gpus
                .iter()
                .map(|gpu| nvml_sample(nvml, &gpu.gpu_uuid))
                .collect(),
            GpuSource::Simulated(simulated) => simulated.sample(gpus),
        }
    }
}

fn nvml_error(error: NvmlError) -> DetectError {
    DetectError::Nvml(error.to_string())
}

fn nvml_inventory(nvml: &Nvml) -> Result<Vec<DetectedGpu>, DetectError> {
    let count = nvml.device_count().map_err(nvml_error)?;
    if count == 0 {
        return Err(DetectError::NoGpus);
    }
    let driver_version = nvml.sys_driver_version().ok();
    let cuda_driver_version = nvml.sys_cuda_driver_version().ok().map(|v| {
        format!(
            "{}.{}",
            nvml_wrapper::cuda_driver_version_major(v),
            nvml_wrapper::cuda_driver_version_minor(v)
        )
    });
    let mut gpus = Vec::with_capacity(count as usize);
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(nvml_error)?;
        let pci = device.pci_info().ok();
        gpus.push(DetectedGpu {
            gpu_uuid: device.uuid().map_err(nvml_error)?,
            index,
            name: device.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
            // The upper 16 bits are the device id, the lower the vendor (0x10de).
            pci_device_id: pci
                .as_ref()
                .and_then(|p| u16::try_from(p.pci_device_id >> 16).ok()),
            pci_bus_id: pci.map(|p| p.bus_id),
            vram_mib: device
                .memory_info()
                .map(|m| m.total / (1024 * 1024))
                .map_err(nvml_error)?,
            driver_version: driver_version.clone(),
            cuda_driver_version: cuda_driver_version.clone(),
            pcie_current: PcieLink {
                generation: device.current_pcie_link_gen().ok(),
                width: device.current_pcie_link_width().ok(),
            },
            pcie_max: PcieLink {
                generation: device.max_pcie_link_gen().ok(),
                width: device.max_pcie_link_width().ok(),
            },
            // NVML reports milliwatts.
            power_limit_w: device.power_management_limit().ok().map(|mw| mw / 1000),
            default_power_limit_w: device
                .power_management_limit_default()
                .ok()
                .map(|mw| mw / 1000),
            ecc_enabled: device.is_ecc_enabled().ok().map(|e| e.currently_enabled),
            mig_enabled: device.mig_mode().ok().map(|m| m.current == 1),
        });
    }
    Ok(gpus)
}

fn nvml_sample(nvml: &Nvml, gpu_uuid: &str) -> Reading {
    let device = match nvml.device_by_uuid(gpu_uuid) {
        Ok(device) => device,
        Err(error) => {
            return Reading::Lost {
                gpu_uuid: gpu_uuid.to_owned(),
                reason: error.to_string(),
            };
        }
    };
    if let Err(NvmlError::GpuLost) = device.temperature(TemperatureSensor::Gpu) {
        return Reading::Lost {
            gpu_uuid: gpu_uuid.to_owned(),
            reason: "GPU has fallen off the bus".to_owned(),
        };
    }
    Reading::Sample(GpuSample {
        gpu_uuid: gpu_uuid.to_owned(),
        utilization_pct: device.utilization_rates().ok().map(|u| u.gpu),
        memory_used_mib: device.memory_info().ok().map(|m| m.used / (1024 * 1024)),
        temperature_c: device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .and_then(|t| i32::try_from(t).ok()),
        power_draw_mw: device.power_usage().ok().map(u64::from),
        sm_clock_mhz: device.clock_info(Clock::SM).ok(),
        clock_event_reasons: device.current_throttle_reasons().ok().map(|r| r.bits()),
        ecc_corrected: device
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .ok(),
        ecc_uncorrected: device
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok(),
    })
}
