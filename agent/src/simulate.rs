//! A SIMULATED GPU source, for development and tests on machines without NVIDIA GPUs.
//!
//! Selected only by `--simulate SPEC` (e.g. `4xH100`, `2xa100-80gb,1xl40s`); the registration
//! then says `simulated: true`, and the platform records the machine as simulated and never
//! lists it to renters unless the server runs in its explicit development mode. Figures follow a
//! deterministic pattern so tests can predict them.

use gpunex_domain::fleet::{DetectedGpu, GpuSample, PcieLink, clock_events};
use gpunex_domain::gpu::{GPU_CATALOG, GpuModel, find_model};
use uuid::Uuid;

use crate::reading::Reading;

/// Most simulated GPUs on one machine.
pub const SIMULATED_GPUS_MAX: u32 = 64;

/// A parsed `--simulate` value: how many GPUs of which catalog model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimSpec {
    pub groups: Vec<(u32, &'static GpuModel)>,
    /// Toggle the `hw_slowdown` clock event on GPU 0 every this many samples (a flapping GPU, to
    /// exercise condition events). `None`: healthy GPUs.
    pub condition_every: Option<u32>,
}

impl SimSpec {
    /// Parses `4xH100`, `h100-80gb`, `2xA100-80GB,1xL40S`. Models are catalog ids or names, or an
    /// unambiguous prefix of an id (`h100`).
    pub fn parse(text: &str) -> Result<SimSpec, String> {
        let mut groups = Vec::new();
        let mut total = 0_u32;
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!("`{text}`: empty entry; write e.g. 4xH100,2xL40S"));
            }
            let (count, model) = match part.split_once(['x', 'X']) {
                Some((count, model))
                    if !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    let count: u32 = count
                        .parse()
                        .map_err(|_| format!("`{part}`: the count is not a whole number"))?;
                    (count, model)
                }
                _ => (1, part),
            };
            if count == 0 {
                return Err(format!("`{part}`: at least one GPU"));
            }
            total = total.saturating_add(count);
            groups.push((count, resolve_model(model)?));
        }
        if total > SIMULATED_GPUS_MAX {
            return Err(format!(
                "`{text}`: {total} GPUs; a machine has at most {SIMULATED_GPUS_MAX}"
            ));
        }
        Ok(SimSpec {
            groups,
            condition_every: None,
        })
    }
}

fn resolve_model(text: &str) -> Result<&'static GpuModel, String> {
    if let Some(model) = find_model(text) {
        return Ok(model);
    }
    let wanted = text.trim().to_ascii_lowercase();
    let candidates: Vec<&GpuModel> = GPU_CATALOG
        .iter()
        .filter(|m| m.id.starts_with(&wanted))
        .collect();
    match candidates.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "`{text}` is not a catalog model; choose from {}",
            GPU_CATALOG
                .iter()
                .map(|m| m.id)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        many => Err(format!(
            "`{text}` is ambiguous: {}",
            many.iter().map(|m| m.id).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The simulated GPUs of one machine.
#[derive(Debug, Clone)]
pub struct Simulated {
    spec: SimSpec,
    machine_id: Uuid,
    /// The UUIDs the container runtime gave the agent's container (`NVIDIA_VISIBLE_DEVICES`,
    /// which `docker run --gpus "device=..."` sets), used for the first GPUs: a simulated agent
    /// in its container then names the GPUs the guard was told to allow, as NVML would.
    runtime_uuids: Vec<String>,
    tick: u64,
}

impl Simulated {
    pub fn new(spec: SimSpec, machine_id: Uuid) -> Simulated {
        Simulated {
            spec,
            machine_id,
            runtime_uuids: Vec::new(),
            tick: 0,
        }
    }

    /// Names the first GPUs after the container runtime's `NVIDIA_VISIBLE_DEVICES` value: its
    /// `GPU-...` UUIDs, in order (`all`, indexes and anything else are ignored).
    pub fn with_runtime_uuids(mut self, visible: Option<&str>) -> Simulated {
        self.runtime_uuids = visible
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|id| {
                id.len() <= 96
                    && id.starts_with("GPU-")
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
            .map(str::to_owned)
            .collect();
        self
    }

    pub fn inventory(&self) -> Vec<DetectedGpu> {
        let mut gpus = Vec::new();
        let mut index = 0_u32;
        for (count, model) in &self.spec.groups {
            let variant = model.variants.first();
            let datacenter = !model.id.starts_with("rtx");
            let generation = if model.id.starts_with('h') { 5 } else { 4 };
            for _ in 0..*count {
                gpus.push(DetectedGpu {
                    gpu_uuid: self
                        .runtime_uuids
                        .get(index as usize)
                        .cloned()
                        .unwrap_or_else(|| simulated_gpu_uuid(self.machine_id, index)),
                    index,
                    name: model.name.to_owned(),
                    pci_device_id: variant.and_then(|v| v.pci_device_id),
                    pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + index)),
                    // NVML reports about 7% more MiB than the label's decimal GB.
                    vram_mib: u64::from(model.vram_gb) * 1_000_000_000 * 107 / 100 / 1_048_576,
                    driver_version: Some("550.54.15 (simulated)".to_owned()),
                    cuda_driver_version: Some("12.4".to_owned()),
                    pcie_current: PcieLink {
                        generation: Some(1),
                        width: Some(16),
                    },
                    pcie_max: PcieLink {
                        generation: Some(generation),
                        width: Some(16),
                    },
                    power_limit_w: variant.map(|v| v.power_w),
                    default_power_limit_w: variant.map(|v| v.power_w),
                    ecc_enabled: Some(datacenter),
                    mig_enabled: datacenter.then_some(false),
                });
                index += 1;
            }
        }
        gpus
    }

    /// The next sample of each GPU: utilization walks a fixed pattern, the rest follows it.
    pub fn sample(&mut self, gpus: &[DetectedGpu]) -> Vec<Reading> {
        self.tick += 1;
        let tick = self.tick;
        let slowed = self
            .spec
            .condition_every
            .is_some_and(|every| every > 0 && (tick / u64::from(every)) % 2 == 1);
        gpus.iter()
            .map(|gpu| {
                let utilization = ((tick * 7 + u64::from(gpu.index) * 13) % 101) as u32;
                let power_w = u64::from(gpu.power_limit_w.unwrap_or(300));
                let mut reasons = if utilization == 0 {
                    clock_events::GPU_IDLE
                } else {
                    0
                };
                if slowed && gpu.index == 0 {
                    reasons |= clock_events::HW_SLOWDOWN;
                }
                Reading::Sample(GpuSample {
                    gpu_uuid: gpu.gpu_uuid.clone(),
                    utilization_pct: Some(utilization),
                    memory_used_mib: Some(gpu.vram_mib * u64::from(utilization) / 100),
                    temperature_c: Some(35 + (utilization as i32) * 40 / 100),
                    power_draw_mw: Some(
                        power_w * 1000 * (20 + u64::from(utilization) * 80 / 100) / 100,
                    ),
                    sm_clock_mhz: Some(if utilization == 0 { 345 } else { 1_980 }),
                    clock_event_reasons: Some(reasons),
                    ecc_corrected: Some(0),
                    ecc_uncorrected: Some(0),
                })
            })
            .collect()
    }
}

/// A simulated GPU's UUID: derived from the machine id and index, so it is stable across
/// restarts and unique across machines.
pub fn simulated_gpu_uuid(machine_id: Uuid, index: u32) -> String {
    let hex = machine_id.simple().to_string();
    format!(
        "GPU-{}-{}-{}-{}-{:08x}{:04x}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        u32::from_str_radix(&hex[20..28], 16).unwrap_or(0),
        index
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpunex_domain::fleet::{HostInfo, identify, validate_inventory};

    #[test]
    fn specs_parse_and_refuse_clearly() {
        let spec = SimSpec::parse("4xH100").unwrap();
        assert_eq!(spec.groups.len(), 1);
        assert_eq!(spec.groups[0].0, 4);
        assert_eq!(spec.groups[0].1.id, "h100-80gb");
        let spec = SimSpec::parse("2xa100-80gb, 1xL40S").unwrap();
        assert_eq!(spec.groups[1].1.id, "l40s");
        assert_eq!(SimSpec::parse("rtx-4090").unwrap().groups[0].0, 1);
        assert!(SimSpec::parse("2xA100").unwrap_err().contains("ambiguous"));
        assert!(
            SimSpec::parse("2xB200")
                .unwrap_err()
                .contains("not a catalog model")
        );
        assert!(SimSpec::parse("0xH100").is_err());
        assert!(SimSpec::parse("65xH100").is_err());
        assert!(SimSpec::parse("4xH100,").is_err());
    }

    #[test]
    fn simulated_gpus_are_valid_and_identified_as_their_model() {
        let spec = SimSpec::parse("2xH100,1xrtx-4090,1xL4").unwrap();
        let machine = Uuid::now_v7();
        let gpus = Simulated::new(spec, machine).inventory();
        let host = HostInfo::named("sim");
        validate_inventory(&host, &gpus).unwrap();
        let ids: Vec<_> = gpus
            .iter()
            .map(|g| identify(g, &[]).model_id.unwrap())
            .collect();
        assert_eq!(ids, ["h100-80gb", "h100-80gb", "rtx-4090", "l4"]);
        // Stable across restarts, distinct across machines.
        assert_eq!(
            gpus,
            Simulated::new(SimSpec::parse("2xH100,1xrtx-4090,1xL4").unwrap(), machine).inventory()
        );
        // In a container given two GPUs by UUID, the first two are named after them.
        let named = Simulated::new(SimSpec::parse("2xH100,1xL4").unwrap(), machine)
            .with_runtime_uuids(Some("GPU-aaaa-1, GPU-bbbb-2,3,all"))
            .inventory();
        let uuids: Vec<&str> = named.iter().map(|g| g.gpu_uuid.as_str()).collect();
        assert_eq!(uuids[..2], ["GPU-aaaa-1", "GPU-bbbb-2"]);
        assert_eq!(uuids[2], gpus[2].gpu_uuid);
        let other = Simulated::new(SimSpec::parse("1xH100").unwrap(), Uuid::now_v7()).inventory();
        assert_ne!(other[0].gpu_uuid, gpus[0].gpu_uuid);
    }

    #[test]
    fn samples_pass_the_platform_checks() {
        let mut spec = SimSpec::parse("2xH100").unwrap();
        spec.condition_every = Some(2);
        let mut simulated = Simulated::new(spec, Uuid::now_v7());
        let gpus = simulated.inventory();
        let mut slowed = 0;
        for _ in 0..20 {
            for reading in simulated.sample(&gpus) {
                let Reading::Sample(sample) = reading else {
                    panic!("simulated GPUs are never lost");
                };
                gpunex_domain::fleet::validate_samples(std::slice::from_ref(&sample), &gpus)
                    .unwrap();
                if sample.clock_event_reasons.unwrap() & clock_events::HW_SLOWDOWN != 0 {
                    slowed += 1;
                }
            }
        }
        assert_eq!(slowed, 10, "GPU 0 slowed on half the samples");
    }
}
