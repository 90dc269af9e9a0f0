//! Provider machines and their GPUs: what an agent detected, how it compares with what the
//! provider declared, whether a machine is online, and how much downtime is the provider's.
//!
//! The ledger records state changes only: a registration (the machine and each GPU), an online or
//! offline transition, a GPU condition starting or ending, a platform outage. Per-heartbeat
//! telemetry is bounded time series outside the log (see `docs/agent.md`).

use crate::codes::ErrorCode;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::gpu::{GPU_CATALOG, ModelAdded};
use crate::onboarding::{GpuEntry, GpuModelChoice};
use crate::time::{MICROS_PER_SECOND, Timestamp};

/// Most GPUs one machine may report (an 8-GPU node is the usual maximum; 64 leaves room).
pub const MACHINE_GPUS_MAX: usize = 64;
/// Longest free-text field an agent reports (names, versions, CPU model), in characters.
pub const AGENT_TEXT_CHARS_MAX: usize = 200;
/// VRAM matches a model when NVML's total is within this band of the marketing capacity
/// (decimal GB): NVML reports slightly more or less than the label (an 80 GB H100 reads 81,559
/// MiB, 1.07x; an L4 23,034 MiB, 1.006x). Percent of `vram_gb x 10^9` bytes.
pub const VRAM_BAND_PERCENT: (u64, u64) = (94, 112);
/// How far ahead of the server's clock an agent's timestamp may be.
pub const AGENT_CLOCK_SKEW_MAX_MICROS: i64 = 300 * MICROS_PER_SECOND;

/// The host a GPU sits in, as the agent saw it. `None` means the agent could not tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct HostInfo {
    pub hostname: String,
    pub cpu_model: Option<String>,
    pub cpu_cores: Option<u32>,
    pub ram_mib: Option<u64>,
    pub disk_total_gib: Option<u64>,
    pub disk_free_gib: Option<u64>,
    pub os: Option<String>,
    pub kernel: Option<String>,
}

impl HostInfo {
    /// A host of which nothing is known but its name.
    pub fn named(hostname: &str) -> HostInfo {
        HostInfo {
            hostname: hostname.to_owned(),
            cpu_model: None,
            cpu_cores: None,
            ram_mib: None,
            disk_total_gib: None,
            disk_free_gib: None,
            os: None,
            kernel: None,
        }
    }
}

/// A PCIe link: generation and lane count. Links train down at idle, so the current values are
/// only meaningful under load; the maximum is what the slot and card support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct PcieLink {
    pub generation: Option<u32>,
    pub width: Option<u32>,
}

/// One GPU as detected. Every field a GPU or driver does not support is `None` (unknown), never
/// an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct DetectedGpu {
    /// NVML's UUID, e.g. `GPU-8f1c2a4e-...`: stable across reboots and slots.
    pub gpu_uuid: String,
    pub index: u32,
    pub name: String,
    /// NVML `pci_device_id >> 16`: the reliable key for the model.
    pub pci_device_id: Option<u16>,
    pub pci_bus_id: Option<String>,
    /// Total memory as NVML reports it (below or above the marketing capacity).
    pub vram_mib: u64,
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, e.g. `12.4`.
    pub cuda_driver_version: Option<String>,
    pub pcie_current: PcieLink,
    pub pcie_max: PcieLink,
    pub power_limit_w: Option<u32>,
    pub default_power_limit_w: Option<u32>,
    pub ecc_enabled: Option<bool>,
    pub mig_enabled: Option<bool>,
}

impl DetectedGpu {
    /// Whether the power limit was lowered below the card's default (a capped GPU is slower).
    pub fn power_limit_lowered(&self) -> Option<bool> {
        Some(self.power_limit_w? < self.default_power_limit_w?)
    }
}

/// How a detected GPU was mapped to the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum ModelMatch {
    /// The PCI device id names a catalog model.
    PciDeviceId,
    /// No device id match; the name and VRAM fit one model.
    NameAndVram,
    /// Not a catalog model.
    None,
}

/// The catalog model a detected GPU is, and how that was decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identified {
    pub model_id: Option<String>,
    pub method: ModelMatch,
    /// Matched by device id but with less memory than the model has.
    pub vram_below_model: bool,
}

/// Whether `vram_mib` (binary) is within [`VRAM_BAND_PERCENT`] of `vram_gb` (decimal).
pub fn vram_matches(vram_mib: u64, vram_gb: u32) -> bool {
    let bytes = u128::from(vram_mib) * 1_048_576;
    let label = u128::from(vram_gb) * 1_000_000_000;
    let (low, high) = VRAM_BAND_PERCENT;
    bytes * 100 >= label * u128::from(low) && bytes * 100 <= label * u128::from(high)
}

fn vram_below(vram_mib: u64, vram_gb: u32) -> bool {
    let bytes = u128::from(vram_mib) * 1_048_576;
    bytes * 100 < u128::from(vram_gb) * 1_000_000_000 * u128::from(VRAM_BAND_PERCENT.0)
}

/// The words of a GPU name that identify the model: lowercase, without `nvidia`, `geforce`,
/// memory sizes (`80gb`) and memory kinds (`hbm3`, `pcie`, `sxm5`).
fn name_words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .filter(|w| !w.is_empty())
        .filter(|w| !matches!(w.as_str(), "nvidia" | "geforce" | "tesla"))
        .filter(|w| !(w.ends_with("gb") && w[..w.len() - 2].bytes().all(|b| b.is_ascii_digit())))
        .filter(|w| !(w.starts_with("hbm") || w.starts_with("gddr")))
        .filter(|w| !(w.starts_with("sxm") || w == "pcie" || w == "nvl"))
        .collect()
}

/// Whether the model's words appear, in order and adjacent, among the detected name's words
/// (`l4` does not match `L40S`).
fn name_contains(detected: &str, model: &str) -> bool {
    let detected = name_words(detected);
    let model = name_words(model);
    !model.is_empty() && detected.windows(model.len()).any(|window| window == model)
}

/// Maps a detected GPU to a catalog model: by PCI device id among the built-in models, else by
/// name and VRAM among the built-in and added models.
pub fn identify(gpu: &DetectedGpu, added: &[ModelAdded]) -> Identified {
    if let Some(device) = gpu.pci_device_id
        && let Some(model) = GPU_CATALOG.iter().find(|model| {
            model
                .variants
                .iter()
                .any(|variant| variant.pci_device_id == Some(device))
        })
    {
        return Identified {
            model_id: Some(model.id.to_owned()),
            method: ModelMatch::PciDeviceId,
            vram_below_model: vram_below(gpu.vram_mib, model.vram_gb),
        };
    }
    let by_name = GPU_CATALOG
        .iter()
        .map(|m| (m.id, m.name, m.vram_gb))
        .chain(
            added
                .iter()
                .map(|m| (m.model_id.as_str(), m.name.as_str(), m.vram_gb)),
        )
        .find(|(_, name, vram_gb)| {
            name_contains(&gpu.name, name) && vram_matches(gpu.vram_mib, *vram_gb)
        });
    match by_name {
        Some((id, _, _)) => Identified {
            model_id: Some(id.to_owned()),
            method: ModelMatch::NameAndVram,
            vram_below_model: false,
        },
        None => Identified {
            model_id: None,
            method: ModelMatch::None,
            vram_below_model: false,
        },
    }
}

/// Why an agent's report is refused, with the JSON pointer of the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ReportError {
    pub field: String,
    pub code: ErrorCode,
    pub message: String,
}

fn report_error(
    field: impl Into<String>,
    code: ErrorCode,
    message: impl Into<String>,
) -> ReportError {
    ReportError {
        field: field.into(),
        code,
        message: message.into(),
    }
}

fn check_text(field: &str, text: &str, required: bool) -> Result<(), ReportError> {
    if required && text.trim().is_empty() {
        return Err(report_error(
            field,
            ErrorCode::Required,
            "must not be blank",
        ));
    }
    if text.chars().count() > AGENT_TEXT_CHARS_MAX {
        return Err(report_error(
            field,
            ErrorCode::TooLong,
            format!("at most {AGENT_TEXT_CHARS_MAX} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(report_error(
            field,
            ErrorCode::InvalidCharacters,
            "control characters",
        ));
    }
    Ok(())
}

fn check_optional_text(field: &str, text: Option<&str>) -> Result<(), ReportError> {
    text.map_or(Ok(()), |text| check_text(field, text, true))
}

/// A GPU UUID as NVML prints it: `GPU-` or `MIG-` then hex digits and dashes, at most 96 bytes.
pub fn valid_gpu_uuid(text: &str) -> bool {
    (text.starts_with("GPU-") || text.starts_with("MIG-"))
        && text.len() > 4
        && text.len() <= 96
        && text[4..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
}

fn check_range<T: PartialOrd + Copy + std::fmt::Display>(
    field: &str,
    value: Option<T>,
    min: T,
    max: T,
) -> Result<(), ReportError> {
    match value {
        Some(value) if value < min || value > max => Err(report_error(
            field,
            ErrorCode::OutOfRange,
            format!("must be from {min} to {max}, got {value}"),
        )),
        _ => Ok(()),
    }
}

/// Checks what an agent detected: a host and 1 to [`MACHINE_GPUS_MAX`] GPUs with distinct
/// UUIDs and indexes and plausible figures.
pub fn validate_inventory(host: &HostInfo, gpus: &[DetectedGpu]) -> Result<(), ReportError> {
    check_text("/host/hostname", &host.hostname, true)?;
    check_optional_text("/host/cpu_model", host.cpu_model.as_deref())?;
    check_optional_text("/host/os", host.os.as_deref())?;
    check_optional_text("/host/kernel", host.kernel.as_deref())?;
    check_range("/host/cpu_cores", host.cpu_cores, 1, 4096)?;
    check_range("/host/ram_mib", host.ram_mib, 1, 64 * 1024 * 1024)?;
    check_range("/host/disk_total_gib", host.disk_total_gib, 0, 1024 * 1024)?;
    if let (Some(free), Some(total)) = (host.disk_free_gib, host.disk_total_gib)
        && free > total
    {
        return Err(report_error(
            "/host/disk_free_gib",
            ErrorCode::OutOfRange,
            "more free disk than disk",
        ));
    }
    if gpus.is_empty() {
        return Err(report_error(
            "/gpus",
            ErrorCode::NoGpus,
            "a machine reports at least one GPU",
        ));
    }
    if gpus.len() > MACHINE_GPUS_MAX {
        return Err(report_error(
            "/gpus",
            ErrorCode::TooManyGpus,
            format!("at most {MACHINE_GPUS_MAX} GPUs per machine"),
        ));
    }
    for (i, gpu) in gpus.iter().enumerate() {
        let at = |name: &str| format!("/gpus/{i}/{name}");
        if !valid_gpu_uuid(&gpu.gpu_uuid) {
            return Err(report_error(
                at("gpu_uuid"),
                ErrorCode::InvalidGpuUuid,
                "must read GPU-<hex and dashes>, at most 96 characters",
            ));
        }
        if gpus[..i].iter().any(|other| other.gpu_uuid == gpu.gpu_uuid) {
            return Err(report_error(
                at("gpu_uuid"),
                ErrorCode::DuplicateGpu,
                "reported twice",
            ));
        }
        if gpus[..i].iter().any(|other| other.index == gpu.index) {
            return Err(report_error(
                at("index"),
                ErrorCode::DuplicateIndex,
                "reported twice",
            ));
        }
        check_range(
            &at("index"),
            Some(gpu.index),
            0,
            MACHINE_GPUS_MAX as u32 - 1,
        )?;
        check_text(&at("name"), &gpu.name, true)?;
        check_optional_text(&at("pci_bus_id"), gpu.pci_bus_id.as_deref())?;
        check_optional_text(&at("driver_version"), gpu.driver_version.as_deref())?;
        check_optional_text(
            &at("cuda_driver_version"),
            gpu.cuda_driver_version.as_deref(),
        )?;
        // 1 GiB to 4 TiB: no GPU is outside this.
        check_range(&at("vram_mib"), Some(gpu.vram_mib), 1024, 4 * 1024 * 1024)?;
        for (name, link) in [
            ("pcie_current", gpu.pcie_current),
            ("pcie_max", gpu.pcie_max),
        ] {
            check_range(&at(&format!("{name}/generation")), link.generation, 1, 7)?;
            check_range(&at(&format!("{name}/width")), link.width, 1, 32)?;
        }
        check_range(&at("power_limit_w"), gpu.power_limit_w, 1, 2_000)?;
        check_range(
            &at("default_power_limit_w"),
            gpu.default_power_limit_w,
            1,
            2_000,
        )?;
    }
    Ok(())
}

/// NVML clock-event (throttle) reason bits.
pub mod clock_events {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL: u64 = 0x20;
    pub const HW_THERMAL: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
    pub const DISPLAY_CLOCK: u64 = 0x100;
    /// The bits that mean trouble under load (`SW_POWER_CAP` and `GPU_IDLE` are normal).
    pub const TROUBLE: u64 = HW_SLOWDOWN | HW_THERMAL | SW_THERMAL | HW_POWER_BRAKE;

    /// Every known bit with its name, for display.
    pub const NAMES: &[(u64, &str)] = &[
        (GPU_IDLE, "gpu_idle"),
        (APPLICATIONS_CLOCKS_SETTING, "applications_clocks_setting"),
        (SW_POWER_CAP, "sw_power_cap"),
        (HW_SLOWDOWN, "hw_slowdown"),
        (SYNC_BOOST, "sync_boost"),
        (SW_THERMAL, "sw_thermal"),
        (HW_THERMAL, "hw_thermal"),
        (HW_POWER_BRAKE, "hw_power_brake"),
        (DISPLAY_CLOCK, "display_clock"),
    ];

    /// The names of the bits set in `mask`; unknown bits are listed as hex.
    pub fn names(mask: u64) -> Vec<String> {
        let mut names: Vec<String> = NAMES
            .iter()
            .filter(|(bit, _)| mask & bit != 0)
            .map(|(_, name)| (*name).to_owned())
            .collect();
        let known = NAMES.iter().fold(0, |all, (bit, _)| all | bit);
        if mask & !known != 0 {
            names.push(format!("unknown_0x{:x}", mask & !known));
        }
        names
    }
}

/// One GPU's sample in a heartbeat. `None` means the GPU does not report that figure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct GpuSample {
    pub gpu_uuid: String,
    pub utilization_pct: Option<u32>,
    pub memory_used_mib: Option<u64>,
    pub temperature_c: Option<i32>,
    /// Milliwatts, as NVML reports power.
    pub power_draw_mw: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    /// NVML clock-event reason bits ([`clock_events`]).
    pub clock_event_reasons: Option<u64>,
    /// Volatile (since driver load) ECC error counts.
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
}

/// Checks a heartbeat's samples against the machine's registered GPUs (UUID and VRAM).
pub fn validate_samples(
    samples: &[GpuSample],
    registered: &[DetectedGpu],
) -> Result<(), ReportError> {
    if samples.len() > MACHINE_GPUS_MAX {
        return Err(report_error(
            "/gpus",
            ErrorCode::TooManyGpus,
            format!("at most {MACHINE_GPUS_MAX} GPUs per machine"),
        ));
    }
    for (i, sample) in samples.iter().enumerate() {
        let at = |name: &str| format!("/gpus/{i}/{name}");
        if samples[..i].iter().any(|s| s.gpu_uuid == sample.gpu_uuid) {
            return Err(report_error(
                at("gpu_uuid"),
                ErrorCode::DuplicateGpu,
                "reported twice",
            ));
        }
        let Some(gpu) = registered.iter().find(|g| g.gpu_uuid == sample.gpu_uuid) else {
            return Err(report_error(
                at("gpu_uuid"),
                ErrorCode::UnknownGpu,
                "not a GPU registered on this machine; register again after a hardware change",
            ));
        };
        check_range(&at("utilization_pct"), sample.utilization_pct, 0, 100)?;
        check_range(
            &at("memory_used_mib"),
            sample.memory_used_mib,
            0,
            gpu.vram_mib,
        )?;
        check_range(&at("temperature_c"), sample.temperature_c, -40, 150)?;
        check_range(&at("power_draw_mw"), sample.power_draw_mw, 0, 2_000_000)?;
        check_range(&at("sm_clock_mhz"), sample.sm_clock_mhz, 0, 5_000)?;
        check_range(
            &at("ecc_corrected"),
            sample.ecc_corrected,
            0,
            i64::MAX as u64,
        )?;
        check_range(
            &at("ecc_uncorrected"),
            sample.ecc_uncorrected,
            0,
            i64::MAX as u64,
        )?;
        check_range(
            &at("clock_event_reasons"),
            sample.clock_event_reasons,
            0,
            i64::MAX as u64,
        )?;
    }
    Ok(())
}

/// A GPU condition the agent watches for; each start and end is an event, the evidence that
/// later decides whether an interrupted job was the provider's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum GpuCondition {
    /// Clock-event bit HW_SLOWDOWN.
    HwSlowdown,
    /// HW_THERMAL or SW_THERMAL.
    Thermal,
    /// HW_POWER_BRAKE.
    PowerBrake,
    /// The volatile uncorrected ECC count rose.
    EccUncorrected,
    /// NVML no longer answers for the GPU (fell off the bus).
    Lost,
}

impl GpuCondition {
    /// The conditions a sample shows (all but `Lost`, which is the absence of a sample).
    pub fn in_sample(sample: &GpuSample, previous: Option<&GpuSample>) -> Vec<GpuCondition> {
        let mut found = Vec::new();
        let reasons = sample.clock_event_reasons.unwrap_or(0);
        if reasons & clock_events::HW_SLOWDOWN != 0 {
            found.push(GpuCondition::HwSlowdown);
        }
        if reasons & (clock_events::HW_THERMAL | clock_events::SW_THERMAL) != 0 {
            found.push(GpuCondition::Thermal);
        }
        if reasons & clock_events::HW_POWER_BRAKE != 0 {
            found.push(GpuCondition::PowerBrake);
        }
        if let (Some(now), Some(before)) = (
            sample.ecc_uncorrected,
            previous.and_then(|p| p.ecc_uncorrected),
        ) && now > before
        {
            found.push(GpuCondition::EccUncorrected);
        }
        found
    }
}

/// `fleet.machine_registered`: an agent registered (or re-registered, after a hardware change)
/// its machine. Followed in the same append by one `fleet.gpu_detected` per GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineRegistered {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub host: HostInfo,
    pub agent_version: String,
    /// GPUs from the agent's simulated source: recorded, never listed to renters outside an
    /// explicit development deployment.
    pub simulated: bool,
    pub gpu_count: u32,
    /// The agent's clock when it detected the hardware (informational; the log's own time is the
    /// server's).
    pub detected_at: Timestamp,
}

/// `fleet.gpu_detected`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuDetected {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub gpu: DetectedGpu,
    pub model_id: Option<String>,
    pub model_match: ModelMatch,
    pub vram_below_model: bool,
    pub power_limit_lowered: Option<bool>,
}

/// `fleet.declaration_compared`: the provider's registered GPUs against its approved
/// application, after a registration changed them. The latest one is the current comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclarationCompared {
    pub provider_id: Uuid,
    pub application_id: Uuid,
    /// The registration that triggered this comparison.
    pub machine_id: Uuid,
    pub declared: Vec<ModelCount>,
    pub detected: Vec<ModelCount>,
    pub discrepancies: Vec<Discrepancy>,
}

/// GPUs of one model: a catalog id, or `unlisted:<name>` for anything else.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ModelCount {
    pub model: String,
    pub count: u32,
}

/// One way the detected hardware differs from the declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum Discrepancy {
    /// Declared more GPUs of a model than all registered machines have.
    FewerGpus {
        model: String,
        declared: u32,
        detected: u32,
    },
    /// More GPUs of a declared model than declared.
    MoreGpus {
        model: String,
        declared: u32,
        detected: u32,
    },
    /// A model that was not declared at all.
    UndeclaredModel { model: String, detected: u32 },
    /// A GPU with less memory than its model has.
    LessVram {
        gpu_uuid: String,
        model: String,
        detected_mib: u64,
        model_vram_gb: u32,
    },
}

/// The key a GPU is counted under: its catalog id, else `unlisted:<lowercase name>`.
pub fn model_key(model_id: Option<&str>, name: &str) -> String {
    match model_id {
        Some(id) => id.to_owned(),
        None => format!("unlisted:{}", name.trim().to_lowercase()),
    }
}

/// Compares declared GPU entries with the GPUs detected on all of a provider's machines.
/// An unlisted declared model matches detected unlisted GPUs whose name contains its words.
pub fn compare_declaration(
    declared: &[GpuEntry],
    detected: &[GpuDetected],
) -> (Vec<ModelCount>, Vec<ModelCount>, Vec<Discrepancy>) {
    let mut wanted: BTreeMap<String, u32> = BTreeMap::new();
    for entry in declared {
        let key = match &entry.model {
            GpuModelChoice::Catalog(id) => id.clone(),
            GpuModelChoice::Unlisted(name) => model_key(None, name),
        };
        *wanted.entry(key).or_default() += entry.quantity;
    }
    let mut found: BTreeMap<String, u32> = BTreeMap::new();
    let mut discrepancies = Vec::new();
    for gpu in detected {
        let mut key = model_key(gpu.model_id.as_deref(), &gpu.gpu.name);
        if gpu.model_id.is_none()
            && let Some(declared_key) = wanted.keys().find(|k| {
                k.strip_prefix("unlisted:")
                    .is_some_and(|name| name_contains(&gpu.gpu.name, name))
            })
        {
            key = declared_key.clone();
        }
        *found.entry(key).or_default() += 1;
        if gpu.vram_below_model
            && let Some(model) = gpu.model_id.as_deref().and_then(crate::gpu::find_model)
        {
            discrepancies.push(Discrepancy::LessVram {
                gpu_uuid: gpu.gpu.gpu_uuid.clone(),
                model: model.id.to_owned(),
                detected_mib: gpu.gpu.vram_mib,
                model_vram_gb: model.vram_gb,
            });
        }
    }
    for (model, &declared) in &wanted {
        let detected = found.get(model).copied().unwrap_or(0);
        if detected < declared {
            discrepancies.push(Discrepancy::FewerGpus {
                model: model.clone(),
                declared,
                detected,
            });
        } else if detected > declared {
            discrepancies.push(Discrepancy::MoreGpus {
                model: model.clone(),
                declared,
                detected,
            });
        }
    }
    for (model, &detected) in &found {
        if !wanted.contains_key(model) {
            discrepancies.push(Discrepancy::UndeclaredModel {
                model: model.clone(),
                detected,
            });
        }
    }
    let counts = |map: &BTreeMap<String, u32>| {
        map.iter()
            .map(|(model, &count)| ModelCount {
                model: model.clone(),
                count,
            })
            .collect()
    };
    (counts(&wanted), counts(&found), discrepancies)
}

/// `fleet.machine_online`: the first heartbeat after registration or after being offline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineOnline {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    /// When the server received that heartbeat.
    pub at: Timestamp,
}

/// `fleet.machine_offline`: heartbeats stopped for longer than the grace period. Dated at the
/// last heartbeat: the machine was last known alive then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineOffline {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub last_heartbeat_at: Timestamp,
    /// When the watchdog noticed.
    pub detected_at: Timestamp,
    pub grace_seconds: u32,
}

/// `fleet.gpu_condition_changed`: the agent saw a condition start or end on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConditionChanged {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub gpu_uuid: String,
    pub condition: GpuCondition,
    pub active: bool,
    /// The agent's clock when it saw the change.
    pub observed_at: Timestamp,
    /// The sample that showed it (absent for `lost`).
    pub evidence: Option<GpuSample>,
}

/// `platform.outage_recorded`: the platform itself was not running (no server ticked its
/// liveness) from `from` to `until`. That time is never a provider's downtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformOutageRecorded {
    pub from: Timestamp,
    pub until: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetEvent {
    MachineRegistered(MachineRegistered),
    GpuDetected(GpuDetected),
    DeclarationCompared(DeclarationCompared),
    MachineOnline(MachineOnline),
    MachineOffline(MachineOffline),
    GpuConditionChanged(GpuConditionChanged),
    PlatformOutageRecorded(PlatformOutageRecorded),
}

const OUTAGE_NAMESPACE: Uuid = Uuid::from_u128(0x3d0c_91e2_5b7a_4f16_a8e4_0c6b_72d9_15f3);

/// The id of the outage that began at the liveness tick `from`: every watchdog pass (of this
/// server or another, or a retry after a failure) that finds the gap after that tick derives the
/// same id, so the outage is stored once. A UUIDv7 (as every event id) dated at `from`, its
/// random bits taken from a UUIDv5 of the instant.
pub fn outage_event_id(from: Timestamp) -> Uuid {
    let name = format!("outage/{}", from.unix_micros());
    let digest = Uuid::new_v5(&OUTAGE_NAMESPACE, name.as_bytes());
    let mut random = [0_u8; 10];
    random.copy_from_slice(&digest.as_bytes()[..10]);
    let millis = u64::try_from(from.unix_micros().div_euclid(1_000)).unwrap_or(0);
    uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
}

/// Whether the watchdog should declare a machine offline at `now`. The grace period runs from
/// the last heartbeat, or from when this watchdog started watching if that is later: heartbeats
/// that could not arrive because the platform was down do not count against the machine.
pub fn offline_due(
    last_heartbeat: Timestamp,
    watching_since: Timestamp,
    now: Timestamp,
    grace_micros: i64,
) -> bool {
    let since = last_heartbeat.max(watching_since);
    now.unix_micros() - since.unix_micros() > grace_micros
}

/// A half-open span of time `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Span {
    pub from: Timestamp,
    pub until: Timestamp,
}

impl Span {
    pub fn micros(self) -> i64 {
        (self.until.unix_micros() - self.from.unix_micros()).max(0)
    }
}

/// Microseconds a machine was online inside `window`, from its presence transitions (`(online,
/// at)`, oldest first; before the first one it was offline). An online state still open at the end
/// counts up to `window.until`: the caller passes the instant it knows the machine alive until.
/// An offline transition is dated at the last heartbeat, so time after it never counts.
pub fn online_micros(transitions: &[(bool, Timestamp)], window: Span) -> i64 {
    let mut total = 0_i64;
    let mut online_since: Option<Timestamp> = None;
    let mut add = |from: Timestamp, until: Timestamp| {
        let from = from.max(window.from);
        let until = until.min(window.until);
        total += (until.unix_micros() - from.unix_micros()).max(0);
    };
    for &(online, at) in transitions {
        match (online, online_since) {
            (true, None) => online_since = Some(at),
            (false, Some(since)) => {
                add(since, at);
                online_since = None;
            }
            _ => {}
        }
    }
    if let Some(since) = online_since {
        add(since, window.until);
    }
    total
}

/// Sorted, non-overlapping spans covering the same time as `spans` (empty ones dropped).
pub fn merge(spans: &[Span]) -> Vec<Span> {
    let mut sorted: Vec<Span> = spans.iter().copied().filter(|s| s.until > s.from).collect();
    sorted.sort();
    let mut merged: Vec<Span> = Vec::with_capacity(sorted.len());
    for span in sorted {
        match merged.last_mut() {
            Some(last) if span.from <= last.until => last.until = last.until.max(span.until),
            _ => merged.push(span),
        }
    }
    merged
}

/// The provider's downtime inside `window`, in microseconds: time offline minus any time the
/// platform itself was down (recorded outages), each counted once however spans overlap.
pub fn provider_downtime_micros(offline: &[Span], outages: &[Span], window: Span) -> i64 {
    let clip = |s: &Span| Span {
        from: s.from.max(window.from),
        until: s.until.min(window.until),
    };
    let offline = merge(&offline.iter().map(clip).collect::<Vec<_>>());
    let outages = merge(&outages.iter().map(clip).collect::<Vec<_>>());
    let mut total = 0;
    for span in &offline {
        let mut down = span.micros();
        for outage in &outages {
            let overlap = Span {
                from: span.from.max(outage.from),
                until: span.until.min(outage.until),
            };
            down -= overlap.micros();
        }
        total += down;
    }
    total
}

/// The offline spans of one machine from its presence transitions in log order, the last one
/// open until `now`: from each offline's last heartbeat to the next online.
pub fn offline_spans(transitions: &[(bool, Timestamp)], now: Timestamp) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut down_since: Option<Timestamp> = None;
    for &(online, at) in transitions {
        match (online, down_since) {
            (false, None) => down_since = Some(at),
            (true, Some(from)) => {
                spans.push(Span { from, until: at });
                down_since = None;
            }
            _ => {}
        }
    }
    if let Some(from) = down_since {
        spans.push(Span { from, until: now });
    }
    spans
}

/// A machine's registration as its agent reported it.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    pub machine_id: Uuid,
    pub provider_id: Uuid,
    pub host: &'a HostInfo,
    pub agent_version: &'a str,
    pub simulated: bool,
    pub gpus: &'a [DetectedGpu],
    /// The agent's clock when it detected the hardware.
    pub detected_at: Timestamp,
}

/// What a registration is compared with: the provider's approved application (none for a
/// provider an operator made) and its GPUs already registered on other machines.
#[derive(Debug, Clone, Copy)]
pub struct Declared<'a> {
    pub application_id: Uuid,
    pub gpus: &'a [GpuEntry],
    pub registered_elsewhere: &'a [GpuDetected],
}

/// A registration's events: on the machine's stream `fleet.machine_registered` then one
/// `fleet.gpu_detected` per GPU (identified against the catalog and the models added to it);
/// and, when the provider has an approved application, the `fleet.declaration_compared` of all
/// its GPUs (this machine's new ones instead of its old) against it.
pub fn decide_registration(
    registration: &Registration<'_>,
    added: &[ModelAdded],
    declared: Option<&Declared<'_>>,
) -> (Vec<FleetEvent>, Option<DeclarationCompared>) {
    let Registration {
        machine_id,
        provider_id,
        ..
    } = *registration;
    let gpus: Vec<GpuDetected> = registration
        .gpus
        .iter()
        .map(|gpu| {
            let identified = identify(gpu, added);
            GpuDetected {
                machine_id,
                provider_id,
                gpu: gpu.clone(),
                model_id: identified.model_id,
                model_match: identified.method,
                vram_below_model: identified.vram_below_model,
                power_limit_lowered: gpu.power_limit_lowered(),
            }
        })
        .collect();
    let comparison = declared.map(|declared| {
        let all: Vec<GpuDetected> = declared
            .registered_elsewhere
            .iter()
            .filter(|g| {
                g.machine_id != machine_id && !gpus.iter().any(|n| n.gpu.gpu_uuid == g.gpu.gpu_uuid)
            })
            .cloned()
            .chain(gpus.iter().cloned())
            .collect();
        let (declared_counts, detected, discrepancies) = compare_declaration(declared.gpus, &all);
        DeclarationCompared {
            provider_id,
            application_id: declared.application_id,
            machine_id,
            declared: declared_counts,
            detected,
            discrepancies,
        }
    });
    let mut events = Vec::with_capacity(gpus.len() + 1);
    events.push(FleetEvent::MachineRegistered(MachineRegistered {
        machine_id,
        provider_id,
        host: registration.host.clone(),
        agent_version: registration.agent_version.to_owned(),
        simulated: registration.simulated,
        gpu_count: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
        detected_at: registration.detected_at,
    }));
    events.extend(gpus.into_iter().map(FleetEvent::GpuDetected));
    (events, comparison)
}

/// `fleet.machine_online` when a heartbeat finds the machine offline (or never yet online);
/// nothing when it is online already.
pub fn decide_online(
    machine_id: Uuid,
    provider_id: Uuid,
    online: bool,
    at: Timestamp,
) -> Option<FleetEvent> {
    (!online).then_some(FleetEvent::MachineOnline(MachineOnline {
        machine_id,
        provider_id,
        at,
    }))
}

/// The id of the `index`-th event an agent-delivered event expands into (a registration becomes
/// a machine event and one per GPU). Index 0 is the agent's own id; the others flip bits of the
/// v7 id's random tail, so they stay valid v7 ids and a re-sent delivery derives the same ids.
pub fn derived_event_id(base: Uuid, index: u16) -> Uuid {
    let mut bytes = *base.as_bytes();
    let tail = u16::from_be_bytes([bytes[14], bytes[15]]) ^ index;
    bytes[14..16].copy_from_slice(&tail.to_be_bytes());
    Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onboarding::{Availability, Location};

    fn ts(seconds: i64) -> Timestamp {
        Timestamp::from_unix_micros(seconds * MICROS_PER_SECOND)
    }

    fn gpu(uuid: &str, name: &str, device: Option<u16>, vram_mib: u64) -> DetectedGpu {
        DetectedGpu {
            gpu_uuid: uuid.to_owned(),
            index: 0,
            name: name.to_owned(),
            pci_device_id: device,
            pci_bus_id: None,
            vram_mib,
            driver_version: Some("550.54.15".to_owned()),
            cuda_driver_version: Some("12.4".to_owned()),
            pcie_current: PcieLink::default(),
            pcie_max: PcieLink::default(),
            power_limit_w: Some(700),
            default_power_limit_w: Some(700),
            ecc_enabled: Some(true),
            mig_enabled: None,
        }
    }

    #[test]
    fn models_are_identified_by_device_id_then_by_name_and_vram() {
        let h100 = gpu("GPU-1", "NVIDIA H100 80GB HBM3", Some(0x2330), 81_559);
        let found = identify(&h100, &[]);
        assert_eq!(found.model_id.as_deref(), Some("h100-80gb"));
        assert_eq!(found.method, ModelMatch::PciDeviceId);
        assert!(!found.vram_below_model);

        // The RTX 4090 has no device id in the catalog: name and VRAM decide.
        let rtx = gpu("GPU-2", "NVIDIA GeForce RTX 4090", Some(0x2684), 24_564);
        let found = identify(&rtx, &[]);
        assert_eq!(found.model_id.as_deref(), Some("rtx-4090"));
        assert_eq!(found.method, ModelMatch::NameAndVram);

        // Names alone are ambiguous between the A100s: VRAM picks one.
        let a100 = gpu("GPU-3", "NVIDIA A100-SXM4-40GB", None, 40_960);
        assert_eq!(identify(&a100, &[]).model_id.as_deref(), Some("a100-40gb"));
        let a100 = gpu("GPU-3", "NVIDIA A100-SXM4-80GB", None, 81_920);
        assert_eq!(identify(&a100, &[]).model_id.as_deref(), Some("a100-80gb"));

        // `L4` must not match an L40S by name.
        let l40s = gpu("GPU-4", "NVIDIA L40S", None, 46_068);
        assert_eq!(identify(&l40s, &[]).model_id.as_deref(), Some("l40s"));
        let l4 = gpu("GPU-5", "NVIDIA L4", None, 23_034);
        assert_eq!(identify(&l4, &[]).model_id.as_deref(), Some("l4"));

        // A device id that names a model, with less memory than the model has.
        let short = gpu("GPU-6", "NVIDIA H100 80GB HBM3", Some(0x2330), 40_000);
        assert!(identify(&short, &[]).vram_below_model);

        // Not in the catalog until an admin adds it.
        let h200 = gpu("GPU-7", "NVIDIA H200", Some(0x2335), 143_771);
        assert_eq!(identify(&h200, &[]).method, ModelMatch::None);
        let added = ModelAdded {
            model_id: "h200-141gb".to_owned(),
            name: "NVIDIA H200".to_owned(),
            vram_gb: 141,
            added_at: ts(0),
            added_by: "cli".to_owned(),
        };
        assert_eq!(
            identify(&h200, std::slice::from_ref(&added))
                .model_id
                .as_deref(),
            Some("h200-141gb")
        );
    }

    #[test]
    fn vram_band_accepts_real_nvml_totals() {
        for (mib, gb) in [
            (81_559, 80),
            (40_960, 40),
            (23_034, 24),
            (24_564, 24),
            (49_140, 48),
            (46_068, 48),
            (143_771, 141),
        ] {
            assert!(vram_matches(mib, gb), "{mib} MiB for {gb} GB");
        }
        assert!(!vram_matches(40_960, 80));
        assert!(!vram_matches(81_920, 40));
    }

    fn detected(model: Option<&str>, name: &str, uuid: &str) -> GpuDetected {
        GpuDetected {
            machine_id: Uuid::nil(),
            provider_id: Uuid::nil(),
            gpu: gpu(uuid, name, None, 81_559),
            model_id: model.map(str::to_owned),
            model_match: ModelMatch::PciDeviceId,
            vram_below_model: false,
            power_limit_lowered: None,
        }
    }

    #[test]
    fn a_registration_replaces_the_machines_old_gpus_in_the_comparison() {
        let (machine, other, provider) =
            (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let host = HostInfo::named("node-1");
        let new = [gpu(
            "GPU-new",
            "NVIDIA H100 80GB HBM3",
            Some(0x2330),
            81_559,
        )];
        let detected = |machine_id, uuid: &str| GpuDetected {
            machine_id,
            provider_id: provider,
            gpu: gpu(uuid, "NVIDIA H100 80GB HBM3", Some(0x2330), 81_559),
            model_id: Some("h100-80gb".to_owned()),
            model_match: ModelMatch::PciDeviceId,
            vram_below_model: false,
            power_limit_lowered: Some(false),
        };
        // This machine's old GPU is replaced; the other machine's stays.
        let registered = [
            detected(machine, "GPU-old"),
            detected(other, "GPU-elsewhere"),
        ];
        let declared_gpus = [entry(GpuModelChoice::Catalog("h100-80gb".to_owned()), 3)];
        let registration = Registration {
            machine_id: machine,
            provider_id: provider,
            host: &host,
            agent_version: "1.0.0",
            simulated: false,
            gpus: &new,
            detected_at: ts(100),
        };
        let declared = Declared {
            application_id: Uuid::from_u128(9),
            gpus: &declared_gpus,
            registered_elsewhere: &registered,
        };
        let (events, compared) = decide_registration(&registration, &[], Some(&declared));
        assert!(matches!(&events[0], FleetEvent::MachineRegistered(r) if r.gpu_count == 1));
        assert!(matches!(&events[1], FleetEvent::GpuDetected(g)
            if g.model_id.as_deref() == Some("h100-80gb") && g.machine_id == machine));
        assert_eq!(events.len(), 2);
        let compared = compared.unwrap();
        assert_eq!(compared.detected[0].count, 2, "{compared:?}");
        assert!(
            matches!(
                &compared.discrepancies[..],
                [Discrepancy::FewerGpus {
                    declared: 3,
                    detected: 2,
                    ..
                }]
            ),
            "{compared:?}"
        );
        // No approved application (an operator-made provider): nothing to compare.
        assert!(decide_registration(&registration, &[], None).1.is_none());
        // A heartbeat records a machine online only when it is not.
        assert!(decide_online(machine, provider, true, ts(5)).is_none());
        assert!(matches!(decide_online(machine, provider, false, ts(5)),
            Some(FleetEvent::MachineOnline(MachineOnline { at, .. })) if at == ts(5)));
    }

    fn entry(model: GpuModelChoice, quantity: u32) -> GpuEntry {
        GpuEntry {
            model,
            quantity,
            system_ram_gb: 512,
            upload_mbps: 1000,
            download_mbps: 1000,
            availability: Availability::AlwaysOn,
            location: Location {
                city: "Madrid".to_owned(),
                country: "ES".to_owned(),
                region: "eu-south".to_owned(),
            },
        }
    }

    #[test]
    fn declared_eight_detected_four_is_a_discrepancy() {
        let declared = [entry(GpuModelChoice::Catalog("h100-80gb".to_owned()), 8)];
        let found: Vec<_> = (0..4)
            .map(|i| detected(Some("h100-80gb"), "NVIDIA H100", &format!("GPU-{i}")))
            .chain([detected(Some("l40s"), "NVIDIA L40S", "GPU-9")])
            .collect();
        let (wanted, seen, discrepancies) = compare_declaration(&declared, &found);
        assert_eq!(
            wanted,
            vec![ModelCount {
                model: "h100-80gb".to_owned(),
                count: 8
            }]
        );
        assert_eq!(seen.len(), 2);
        assert_eq!(
            discrepancies,
            vec![
                Discrepancy::FewerGpus {
                    model: "h100-80gb".to_owned(),
                    declared: 8,
                    detected: 4
                },
                Discrepancy::UndeclaredModel {
                    model: "l40s".to_owned(),
                    detected: 1
                },
            ]
        );
        let exact: Vec<_> = (0..8)
            .map(|i| detected(Some("h100-80gb"), "NVIDIA H100", &format!("GPU-{i}")))
            .collect();
        assert!(compare_declaration(&declared, &exact).2.is_empty());
    }

    #[test]
    fn unlisted_declarations_match_by_name() {
        let declared = [entry(GpuModelChoice::Unlisted("NVIDIA H200".to_owned()), 2)];
        let found = [
            detected(None, "NVIDIA H200", "GPU-a"),
            detected(None, "NVIDIA H200 NVL", "GPU-b"),
        ];
        assert!(compare_declaration(&declared, &found).2.is_empty());
    }

    #[test]
    fn bad_inventories_are_refused_with_the_field() {
        let host = HostInfo {
            hostname: "node-7".to_owned(),
            cpu_model: None,
            cpu_cores: Some(64),
            ram_mib: Some(512 * 1024),
            disk_total_gib: Some(2000),
            disk_free_gib: Some(1500),
            os: None,
            kernel: None,
        };
        let ok = gpu("GPU-0a", "NVIDIA H100", Some(0x2330), 81_559);
        assert!(validate_inventory(&host, std::slice::from_ref(&ok)).is_ok());
        assert_eq!(validate_inventory(&host, &[]).unwrap_err().code, "no_gpus");
        let mut bad = ok.clone();
        bad.gpu_uuid = "GPU-zz".to_owned();
        assert_eq!(
            validate_inventory(&host, &[bad]).unwrap_err().field,
            "/gpus/0/gpu_uuid"
        );
        let mut twin = ok.clone();
        twin.index = 1;
        assert_eq!(
            validate_inventory(&host, &[ok.clone(), twin])
                .unwrap_err()
                .code,
            "duplicate_gpu"
        );
        let mut huge = ok.clone();
        huge.power_limit_w = Some(9_000);
        assert_eq!(
            validate_inventory(&host, &[huge]).unwrap_err().field,
            "/gpus/0/power_limit_w"
        );
    }

    #[test]
    fn samples_are_checked_against_the_registered_gpu() {
        let registered = [gpu("GPU-0a", "NVIDIA H100", Some(0x2330), 81_559)];
        let sample = GpuSample {
            gpu_uuid: "GPU-0a".to_owned(),
            utilization_pct: Some(97),
            memory_used_mib: Some(80_000),
            temperature_c: Some(71),
            power_draw_mw: Some(650_000),
            sm_clock_mhz: Some(1_980),
            clock_event_reasons: Some(clock_events::SW_POWER_CAP),
            ecc_corrected: Some(0),
            ecc_uncorrected: Some(0),
        };
        assert!(validate_samples(std::slice::from_ref(&sample), &registered).is_ok());
        let mut hot = sample.clone();
        hot.temperature_c = Some(400);
        assert_eq!(
            validate_samples(&[hot], &registered).unwrap_err().field,
            "/gpus/0/temperature_c"
        );
        let mut overfull = sample.clone();
        overfull.memory_used_mib = Some(90_000);
        assert_eq!(
            validate_samples(&[overfull], &registered).unwrap_err().code,
            "out_of_range"
        );
        let mut stranger = sample.clone();
        stranger.gpu_uuid = "GPU-ff".to_owned();
        assert_eq!(
            validate_samples(&[stranger], &registered).unwrap_err().code,
            "unknown_gpu"
        );
    }

    #[test]
    fn conditions_come_from_clock_events_and_ecc() {
        let base = GpuSample {
            gpu_uuid: "GPU-0a".to_owned(),
            utilization_pct: None,
            memory_used_mib: None,
            temperature_c: None,
            power_draw_mw: None,
            sm_clock_mhz: None,
            clock_event_reasons: Some(clock_events::GPU_IDLE | clock_events::SW_POWER_CAP),
            ecc_corrected: None,
            ecc_uncorrected: Some(3),
        };
        // Idle and power cap are normal.
        assert!(GpuCondition::in_sample(&base, Some(&base)).is_empty());
        let mut bad = base.clone();
        bad.clock_event_reasons = Some(clock_events::HW_SLOWDOWN | clock_events::SW_THERMAL);
        bad.ecc_uncorrected = Some(4);
        assert_eq!(
            GpuCondition::in_sample(&bad, Some(&base)),
            vec![
                GpuCondition::HwSlowdown,
                GpuCondition::Thermal,
                GpuCondition::EccUncorrected
            ]
        );
        assert_eq!(
            clock_events::names(0x8 | 0x4000),
            vec!["hw_slowdown".to_owned(), "unknown_0x4000".to_owned()]
        );
    }

    #[test]
    fn the_grace_period_restarts_when_the_platform_comes_back() {
        let grace = 60 * MICROS_PER_SECOND;
        // Watching since long before: 61 s of silence is offline.
        assert!(offline_due(ts(1_000), ts(0), ts(1_061), grace));
        assert!(!offline_due(ts(1_000), ts(0), ts(1_060), grace));
        // The server was down from 1_010 and came back at 5_000: the machine gets a full grace
        // period from 5_000 before it is declared offline.
        assert!(!offline_due(ts(1_000), ts(5_000), ts(5_030), grace));
        assert!(offline_due(ts(1_000), ts(5_000), ts(5_061), grace));
    }

    #[test]
    fn platform_outages_are_not_provider_downtime() {
        let window = Span {
            from: ts(0),
            until: ts(10_000),
        };
        // Offline from its last heartbeat at 1_000 until it came back at 6_000; the platform was
        // down from 1_010 to 5_000 (overlapping records of one outage merge).
        let offline = offline_spans(
            &[(true, ts(0)), (false, ts(1_000)), (true, ts(6_000))],
            ts(10_000),
        );
        assert_eq!(
            offline,
            vec![Span {
                from: ts(1_000),
                until: ts(6_000)
            }]
        );
        let outages = [
            Span {
                from: ts(1_010),
                until: ts(4_000),
            },
            Span {
                from: ts(3_000),
                until: ts(5_000),
            },
        ];
        assert_eq!(
            provider_downtime_micros(&offline, &outages, window),
            (10 + 1_000) * MICROS_PER_SECOND
        );
        // Without the outage the whole span is the provider's.
        assert_eq!(
            provider_downtime_micros(&offline, &[], window),
            5_000 * MICROS_PER_SECOND
        );
        // Still offline: the open span runs to `now`, clipped to the window.
        let open = offline_spans(&[(true, ts(0)), (false, ts(9_000))], ts(12_000));
        assert_eq!(
            provider_downtime_micros(&open, &[], window),
            1_000 * MICROS_PER_SECOND
        );
    }

    #[test]
    fn outage_ids_are_v7_and_follow_the_instant_the_outage_began() {
        let a = outage_event_id(ts(1_700_000_000));
        assert_eq!(a.get_version_num(), 7);
        assert_eq!(a, outage_event_id(ts(1_700_000_000)));
        assert_ne!(
            a,
            outage_event_id(Timestamp::from_unix_micros(
                1_700_000_000 * MICROS_PER_SECOND + 1
            ))
        );
    }

    #[test]
    fn derived_ids_are_distinct_v7_ids() {
        let base = Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_1234);
        assert_eq!(derived_event_id(base, 0), base);
        let ids: Vec<Uuid> = (0..70).map(|i| derived_event_id(base, i)).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(id.get_version_num(), 7);
            assert!(ids[..i].iter().all(|other| other != id));
        }
    }

    #[test]
    fn online_time_counts_only_between_online_and_the_last_heartbeat() {
        let t = |s: i64| Timestamp::from_unix_micros(s * 1_000_000);
        let window = Span {
            from: t(100),
            until: t(1_000),
        };
        assert_eq!(online_micros(&[], window), 0);
        // Online from before the window, offline (last heartbeat) at 400, back at 700, still on.
        let transitions = [(true, t(50)), (false, t(400)), (true, t(700))];
        assert_eq!(online_micros(&transitions, window), (300 + 300) * 1_000_000);
        // A repeated online changes nothing; offline before any online neither.
        let noisy = [
            (false, t(10)),
            (true, t(50)),
            (true, t(60)),
            (false, t(400)),
        ];
        assert_eq!(online_micros(&noisy, window), 300 * 1_000_000);
    }
}
