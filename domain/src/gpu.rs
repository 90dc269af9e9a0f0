//! The catalog of supported GPU models and their reference figures.
//!
//! Figures are dense (no sparsity) datasheet peaks from `shared/reference/gpu-benchmarking.md`,
//! stored as integers: TFLOPS in tenths (`989` TFLOPS is `9_890`), bandwidth in GB/s. A model not
//! in this catalog may still be offered by name; it is then evaluated case by case.
use crate::codes::ErrorCode;

/// One form factor of a model: the same name can ship as SXM and PCIe with different limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuVariant {
    pub form_factor: &'static str,
    pub memory_bandwidth_gb_s: u32,
    pub fp32_tflops_tenths: u32,
    pub tf32_tensor_tflops_tenths: u32,
    pub fp16_tensor_tflops_tenths: u32,
    pub fp8_tflops_tenths: Option<u32>,
    pub power_w: u32,
    /// NVML `pci_info().pci_device_id >> 16`, the reliable key for detection.
    pub pci_device_id: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuModel {
    /// Stable id used in requests and events, e.g. `h100-80gb`.
    pub id: &'static str,
    pub name: &'static str,
    pub vram_gb: u32,
    pub variants: &'static [GpuVariant],
}

/// The supported models (the provider guide's list).
pub const GPU_CATALOG: &[GpuModel] = &[
    GpuModel {
        id: "h100-80gb",
        name: "NVIDIA H100 80GB",
        vram_gb: 80,
        variants: &[
            GpuVariant {
                form_factor: "SXM5",
                memory_bandwidth_gb_s: 3_350,
                fp32_tflops_tenths: 670,
                tf32_tensor_tflops_tenths: 4_947,
                fp16_tensor_tflops_tenths: 9_890,
                fp8_tflops_tenths: Some(19_790),
                power_w: 700,
                pci_device_id: Some(0x2330),
            },
            GpuVariant {
                form_factor: "PCIe",
                memory_bandwidth_gb_s: 2_000,
                fp32_tflops_tenths: 510,
                tf32_tensor_tflops_tenths: 3_780,
                fp16_tensor_tflops_tenths: 7_560,
                fp8_tflops_tenths: Some(15_130),
                power_w: 350,
                pci_device_id: Some(0x2331),
            },
        ],
    },
    GpuModel {
        id: "a100-40gb",
        name: "NVIDIA A100 40GB",
        vram_gb: 40,
        variants: &[
            GpuVariant {
                form_factor: "SXM4",
                memory_bandwidth_gb_s: 1_555,
                fp32_tflops_tenths: 195,
                tf32_tensor_tflops_tenths: 1_560,
                fp16_tensor_tflops_tenths: 3_120,
                fp8_tflops_tenths: None,
                power_w: 400,
                pci_device_id: Some(0x20b0),
            },
            GpuVariant {
                form_factor: "PCIe",
                memory_bandwidth_gb_s: 1_555,
                fp32_tflops_tenths: 195,
                tf32_tensor_tflops_tenths: 1_560,
                fp16_tensor_tflops_tenths: 3_120,
                fp8_tflops_tenths: None,
                power_w: 250,
                pci_device_id: Some(0x20f1),
            },
        ],
    },
    GpuModel {
        id: "a100-80gb",
        name: "NVIDIA A100 80GB",
        vram_gb: 80,
        variants: &[
            GpuVariant {
                form_factor: "SXM4",
                memory_bandwidth_gb_s: 2_039,
                fp32_tflops_tenths: 195,
                tf32_tensor_tflops_tenths: 1_560,
                fp16_tensor_tflops_tenths: 3_120,
                fp8_tflops_tenths: None,
                power_w: 400,
                pci_device_id: Some(0x20b2),
            },
            GpuVariant {
                form_factor: "PCIe",
                memory_bandwidth_gb_s: 1_935,
                fp32_tflops_tenths: 195,
                tf32_tensor_tflops_tenths: 1_560,
                fp16_tensor_tflops_tenths: 3_120,
                fp8_tflops_tenths: None,
                power_w: 300,
                pci_device_id: Some(0x20b5),
            },
        ],
    },
    GpuModel {
        id: "l40s",
        name: "NVIDIA L40S",
        vram_gb: 48,
        variants: &[GpuVariant {
            form_factor: "PCIe",
            memory_bandwidth_gb_s: 864,
            fp32_tflops_tenths: 916,
            tf32_tensor_tflops_tenths: 1_830,
            fp16_tensor_tflops_tenths: 3_620,
            fp8_tflops_tenths: Some(7_330),
            power_w: 350,
            pci_device_id: Some(0x26b9),
        }],
    },
    GpuModel {
        id: "l4",
        name: "NVIDIA L4",
        vram_gb: 24,
        variants: &[GpuVariant {
            form_factor: "PCIe",
            memory_bandwidth_gb_s: 300,
            fp32_tflops_tenths: 303,
            tf32_tensor_tflops_tenths: 600,
            fp16_tensor_tflops_tenths: 1_210,
            fp8_tflops_tenths: Some(2_425),
            power_w: 72,
            pci_device_id: Some(0x27b8),
        }],
    },
    GpuModel {
        id: "rtx-4090",
        name: "NVIDIA GeForce RTX 4090",
        vram_gb: 24,
        // FP16 tensor with FP32 accumulate (330.3 with FP16 accumulate).
        variants: &[GpuVariant {
            form_factor: "PCIe",
            memory_bandwidth_gb_s: 1_008,
            fp32_tflops_tenths: 826,
            tf32_tensor_tflops_tenths: 826,
            fp16_tensor_tflops_tenths: 1_652,
            fp8_tflops_tenths: Some(3_303),
            power_w: 450,
            pci_device_id: None,
        }],
    },
    GpuModel {
        id: "rtx-a6000",
        name: "NVIDIA RTX A6000",
        vram_gb: 48,
        // Dense figures: the datasheet's 309.7 TFLOPS is the sparse FP16 figure.
        variants: &[GpuVariant {
            form_factor: "PCIe",
            memory_bandwidth_gb_s: 768,
            fp32_tflops_tenths: 387,
            tf32_tensor_tflops_tenths: 774,
            fp16_tensor_tflops_tenths: 1_548,
            fp8_tflops_tenths: None,
            power_w: 300,
            pci_device_id: Some(0x2230),
        }],
    },
];

/// Names people write for catalog models (the provider guide writes "H100" and "A100 80GB"),
/// besides each model's id and display name. Matched by [`model_key`].
pub const MODEL_ALIASES: &[(&str, &[&str])] = &[
    (
        "h100-80gb",
        &[
            "H100",
            "H100 80GB",
            "H100 SXM",
            "H100 SXM5",
            "H100 PCIe",
            "H100 HBM3",
        ],
    ),
    (
        "a100-40gb",
        &["A100 40GB", "A100 SXM4 40GB", "A100 PCIe 40GB"],
    ),
    (
        "a100-80gb",
        &["A100 80GB", "A100 SXM4 80GB", "A100 PCIe 80GB"],
    ),
    ("l40s", &["L40S", "L40S 48GB"]),
    ("l4", &["L4", "L4 24GB"]),
    (
        "rtx-4090",
        &["RTX 4090", "GeForce RTX 4090", "4090", "RTX 4090 24GB"],
    ),
    ("rtx-a6000", &["RTX A6000", "A6000", "RTX A6000 48GB"]),
];

/// Names that fit more than one catalog model: the name alone cannot say which.
pub const AMBIGUOUS_NAMES: &[(&str, &[&str])] = &[("A100", &["a100-40gb", "a100-80gb"])];

/// How a model name compares: lower case, without the maker's names (`nvidia`, `geforce`),
/// spaces, hyphens, parentheses or any other punctuation. `NVIDIA H100 (80 GB)`, `h100 80gb` and
/// `H100-80GB` are all `h10080gb`.
pub fn model_key(text: &str) -> String {
    let lower = text.to_lowercase();
    let mut key = String::with_capacity(lower.len());
    for word in lower.split(|c: char| !c.is_alphanumeric()) {
        if word != "nvidia" && word != "geforce" {
            key.push_str(word);
        }
    }
    key
}

/// The catalog model named by its id, its display name or an alias, in any spelling
/// [`model_key`] folds (`H100-80GB`, `NVIDIA H100 80GB` and `H100` all find `h100-80gb`).
pub fn find_model(id_or_name: &str) -> Option<&'static GpuModel> {
    let wanted = model_key(id_or_name);
    if wanted.is_empty() {
        return None;
    }
    GPU_CATALOG.iter().find(|model| {
        model_key(model.id) == wanted
            || model_key(model.name) == wanted
            || MODEL_ALIASES.iter().any(|(id, aliases)| {
                *id == model.id && aliases.iter().any(|alias| model_key(alias) == wanted)
            })
    })
}

/// What a model name resolves to in a catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution<'a> {
    Found(&'a str),
    /// The name fits several models (`A100`): these ids.
    Ambiguous(&'static [&'static str]),
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_ids_are_unique_and_figures_are_dense_and_plausible() {
        for (i, model) in GPU_CATALOG.iter().enumerate() {
            assert!(
                GPU_CATALOG[i + 1..]
                    .iter()
                    .all(|other| other.id != model.id),
                "{}",
                model.id
            );
            assert!(!model.variants.is_empty());
            for v in model.variants {
                // Tensor FP16 is at least FP32 and no more than 20x it; dense, never the 2x sparse figure.
                assert!(
                    v.fp16_tensor_tflops_tenths >= v.fp32_tflops_tenths,
                    "{} {}",
                    model.id,
                    v.form_factor
                );
                assert!(
                    v.fp16_tensor_tflops_tenths <= 20 * v.fp32_tflops_tenths,
                    "{}",
                    model.id
                );
            }
        }
        assert_eq!(
            find_model("rtx-a6000").map(|m| m.variants[0].fp16_tensor_tflops_tenths),
            Some(1_548)
        );
        assert_eq!(find_model("h100-80gb").map(|m| m.vram_gb), Some(80));
        assert!(find_model("h200").is_none());
        let at = crate::time::Timestamp::from_unix_micros(0);
        let h200 = Catalog::BUILT_IN
            .add("h200-141gb", "NVIDIA H200 141GB", 141, "cli", at)
            .unwrap();
        let added = [h200];
        let catalog = Catalog { added: &added };
        assert_eq!(catalog.find_id("NVIDIA h200 141GB"), Some("h200-141gb"));
        assert_eq!(catalog.find_id("h100-80gb"), Some("h100-80gb"));
        assert_eq!(
            catalog.add("h200-141gb", "Other", 1, "cli", at),
            Err(CatalogRejection::AlreadyListed)
        );
        assert_eq!(
            catalog.add("new-1", "NVIDIA H100 80GB", 80, "cli", at),
            Err(CatalogRejection::AlreadyListed)
        );
        assert_eq!(
            catalog.add("Bad Id", "x", 1, "cli", at),
            Err(CatalogRejection::InvalidId)
        );
        assert_eq!(
            catalog.add("ok-id", "x", 0, "cli", at),
            Err(CatalogRejection::InvalidVram)
        );
        assert_eq!(find_model("H100-80GB").map(|m| m.id), Some("h100-80gb"));
        for (written, id) in [
            ("H100", "h100-80gb"),
            ("H100 80GB", "h100-80gb"),
            ("NVIDIA H100 (80 GB)", "h100-80gb"),
            ("h100 sxm", "h100-80gb"),
            ("A100 80GB", "a100-80gb"),
            ("a100-40gb", "a100-40gb"),
            ("RTX 4090", "rtx-4090"),
            ("NVIDIA GeForce RTX 4090", "rtx-4090"),
            ("RTX A6000 (48 GB)", "rtx-a6000"),
            ("L40S", "l40s"),
        ] {
            assert_eq!(
                Catalog::BUILT_IN.resolve(written),
                Resolution::Found(id),
                "{written}"
            );
        }
        assert_eq!(
            Catalog::BUILT_IN.resolve("A100"),
            Resolution::Ambiguous(&["a100-40gb", "a100-80gb"])
        );
        for unknown in ["MI300X", "", "H1000", "   "] {
            assert_eq!(
                Catalog::BUILT_IN.resolve(unknown),
                Resolution::Unknown,
                "{unknown}"
            );
        }
        // Every alias finds its own model and no other.
        for (id, aliases) in MODEL_ALIASES {
            for alias in *aliases {
                assert_eq!(find_model(alias).map(|m| m.id), Some(*id), "{alias}");
            }
        }
        assert_eq!(
            find_model("nvidia rtx a6000").map(|m| m.id),
            Some("rtx-a6000")
        );
    }
}

/// `catalog.model_added`: an admin adds a model evaluated case by case to the catalog. Its
/// reference figures arrive with the benchmark capability; the catalog entry gives the id,
/// the name applicants may use, and the VRAM.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAdded {
    pub model_id: String,
    pub name: String,
    pub vram_gb: u32,
    pub added_at: crate::time::Timestamp,
    pub added_by: String,
}

/// Why a model cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogRejection {
    #[error("the id must be 2 to 32 characters of a-z, 0-9 and -")]
    InvalidId,
    #[error("the name must be 1 to 100 characters on one line")]
    InvalidName,
    #[error("VRAM must be 1 to 1024 GB")]
    InvalidVram,
    #[error("a model with this id or name is already in the catalog")]
    AlreadyListed,
}

impl CatalogRejection {
    pub fn code(&self) -> ErrorCode {
        match self {
            CatalogRejection::InvalidId => ErrorCode::InvalidModelId,
            CatalogRejection::InvalidName => ErrorCode::InvalidModelName,
            CatalogRejection::InvalidVram => ErrorCode::InvalidVram,
            CatalogRejection::AlreadyListed => ErrorCode::AlreadyListed,
        }
    }
}

/// The built-in models and those admins added: where applications look a model up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Catalog<'a> {
    pub added: &'a [ModelAdded],
}

impl<'a> Catalog<'a> {
    pub const BUILT_IN: Catalog<'static> = Catalog { added: &[] };

    /// The catalog id of the model named by `id_or_name` (its id, name or an alias, in any
    /// spelling [`model_key`] folds); `None` if unknown or ambiguous.
    pub fn find_id(&self, id_or_name: &str) -> Option<&'a str>
    where
        'static: 'a,
    {
        match self.resolve(id_or_name) {
            Resolution::Found(id) => Some(id),
            Resolution::Ambiguous(_) | Resolution::Unknown => None,
        }
    }

    /// What `id_or_name` names: one model, several (an ambiguous name), or none.
    pub fn resolve(&self, id_or_name: &str) -> Resolution<'a>
    where
        'static: 'a,
    {
        if let Some(model) = find_model(id_or_name) {
            return Resolution::Found(model.id);
        }
        let wanted = model_key(id_or_name);
        if let Some((_, ids)) = AMBIGUOUS_NAMES
            .iter()
            .find(|(name, _)| model_key(name) == wanted)
        {
            return Resolution::Ambiguous(ids);
        }
        self.added
            .iter()
            .find(|m| {
                !wanted.is_empty()
                    && (model_key(&m.model_id) == wanted || model_key(&m.name) == wanted)
            })
            .map_or(Resolution::Unknown, |m| {
                Resolution::Found(m.model_id.as_str())
            })
    }

    /// Checks and builds a `model_added` event.
    pub fn add(
        &self,
        model_id: &str,
        name: &str,
        vram_gb: u32,
        added_by: &str,
        at: crate::time::Timestamp,
    ) -> Result<ModelAdded, CatalogRejection> {
        let id_ok = (2..=32).contains(&model_id.len())
            && model_id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !id_ok {
            return Err(CatalogRejection::InvalidId);
        }
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
            return Err(CatalogRejection::InvalidName);
        }
        if !(1..=1024).contains(&vram_gb) {
            return Err(CatalogRejection::InvalidVram);
        }
        if self.find_id(model_id).is_some() || self.find_id(name).is_some() {
            return Err(CatalogRejection::AlreadyListed);
        }
        Ok(ModelAdded {
            model_id: model_id.to_owned(),
            name: name.to_owned(),
            vram_gb,
            added_at: at,
            added_by: added_by.to_owned(),
        })
    }
}
