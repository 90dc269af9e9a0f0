//! What sampling one GPU yields, from NVML or the simulation alike.

use gpunex_domain::fleet::GpuSample;

/// One GPU's answer to a sample: figures, or the GPU is gone (fell off the bus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    Sample(GpuSample),
    Lost { gpu_uuid: String, reason: String },
}
