//! What a GPU can do, as the analytical step time ([`crate::roofline`]) reads it: dense
//! matrix throughput in 16-bit and 8-bit floating point, memory bandwidth and size, and the
//! bandwidth between GPUs of one engine and what it runs over.
//!
//! The table holds the vendors' published figures for common GPUs, each with where it is
//! published. Throughput is dense (the datasheets' "with sparsity" figures halved) and, for
//! GeForce cards, with 32-bit accumulation (what vLLM's kernels use). A GPU not in the table
//! is described by a small YAML file with the same keys as [`Gpu`] (`routerlab replay --gpu
//! my-gpu.yaml`); a profile is such a file with the efficiencies a fit on a measured run of
//! that GPU found.

use serde::{Deserialize, Serialize};

/// One GPU's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Its name.
    pub name: String,
    /// Dense bf16/fp16 matrix throughput, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense fp8 matrix throughput, TFLOP/s (the bf16 figure on a GPU without fp8 units).
    pub fp8_tflops: f64,
    /// Memory bandwidth, GB/s (10^9 bytes).
    pub memory_gb_s: f64,
    /// Memory, GiB, as the driver reports it.
    pub memory_gib: f64,
    /// Bandwidth from one GPU to the others of its engine (NVLink, Infinity Fabric or
    /// PCIe), GB/s in each direction.
    pub interconnect_gb_s: f64,
    /// What that bandwidth runs over [default: fabric]. A collective over PCIe costs more
    /// a step and reaches less of the link than one over a GPU-to-GPU fabric
    /// ([`crate::roofline::Efficiency::typical`]).
    #[serde(default)]
    pub link: Link,
    /// Where the figures come from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// What it achieved of its limits on a measured run (a profile, which `calibrate
    /// --gpu-profile-out` writes): the analytical step time's efficiencies on this GPU
    /// [default: typical ones].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<crate::roofline::Efficiency>,
}

/// What the GPUs of one engine reach each other over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Link {
    /// A GPU-to-GPU fabric: NVLink, AMD's Infinity Fabric.
    #[default]
    Fabric,
    /// PCIe, through a switch or the host.
    Pcie,
}

impl Link {
    /// Its name, as a GPU description spells it.
    pub fn name(self) -> &'static str {
        match self {
            Link::Fabric => "fabric",
            Link::Pcie => "pcie",
        }
    }
}

/// The largest GPU description read, bytes.
const MAX_GPU_FILE_BYTES: u64 = 64 << 10;

/// A row of the table: name, bf16 and fp8 TFLOP/s, memory GB/s, memory GiB, interconnect
/// GB/s, what it runs over, source.
type Row = (&'static str, f64, f64, f64, f64, f64, Link, &'static str);

/// The table.
const TABLE: &[Row] = &[
    (
        "A100-40GB",
        312.0,
        312.0,
        1555.0,
        39.39,
        300.0,
        Link::Fabric,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40 GB; no fp8 units; NVLink 600 GB/s both ways); memory as CUDA reports it (PyTorch's out-of-memory message: 39.39 GiB total capacity)",
    ),
    (
        "A100-80GB",
        312.0,
        312.0,
        2039.0,
        79.25,
        300.0,
        Link::Fabric,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80 GB; no fp8 units; NVLink 600 GB/s both ways); memory as CUDA reports it (PyTorch's out-of-memory message: 79.25 GiB total capacity)",
    ),
    (
        "H100-SXM",
        989.5,
        1979.0,
        3350.0,
        79.6,
        450.0,
        Link::Fabric,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5; NVLink 900 GB/s both ways)",
    ),
    (
        "H100-PCIe",
        756.5,
        1513.0,
        2000.0,
        79.6,
        64.0,
        Link::Pcie,
        "NVIDIA H100 Tensor Core GPU datasheet (PCIe; PCIe Gen5 128 GB/s both ways, no NVLink bridge)",
    ),
    (
        "H200",
        989.5,
        1979.0,
        4800.0,
        139.8,
        450.0,
        Link::Fabric,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM; NVLink 900 GB/s both ways)",
    ),
    (
        "B200",
        2250.0,
        4500.0,
        8000.0,
        178.4,
        900.0,
        Link::Fabric,
        "NVIDIA HGX B200 datasheet (per GPU; NVLink 1.8 TB/s both ways)",
    ),
    (
        "L40S",
        362.05,
        733.0,
        864.0,
        44.4,
        32.0,
        Link::Pcie,
        "NVIDIA L40S datasheet (PCIe Gen4 64 GB/s both ways)",
    ),
    (
        "L4",
        121.0,
        242.5,
        300.0,
        22.0,
        32.0,
        Link::Pcie,
        "NVIDIA L4 Tensor Core GPU datasheet (PCIe Gen4 64 GB/s both ways)",
    ),
    (
        "RTX-4090",
        165.2,
        330.3,
        1008.0,
        23.5,
        32.0,
        Link::Pcie,
        "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090 (FP32 accumulate; PCIe Gen4 64 GB/s both ways)",
    ),
    (
        "RTX-PRO-6000",
        503.8,
        1007.6,
        1792.0,
        95.59,
        64.0,
        Link::Pcie,
        "NVIDIA RTX PRO 6000 Blackwell datasheet (4,000 AI TOPS = sparse FP4, halved per precision step and for density; PCIe Gen5 128 GB/s both ways)",
    ),
    (
        "MI300X",
        1307.4,
        2614.9,
        5300.0,
        192.0,
        448.0,
        Link::Fabric,
        "AMD Instinct MI300X datasheet (Infinity Fabric 896 GB/s peer bandwidth both ways)",
    ),
];

/// Every GPU of the table.
pub fn known_gpus() -> Vec<Gpu> {
    TABLE
        .iter()
        .map(
            |&(name, bf16, fp8, bw, gib, interconnect, link, source)| Gpu {
                name: name.into(),
                bf16_tflops: bf16,
                fp8_tflops: fp8,
                memory_gb_s: bw,
                memory_gib: gib,
                interconnect_gb_s: interconnect,
                link,
                source: source.into(),
                efficiency: None,
            },
        )
        .collect()
}

/// Names match without case, `-`, `_` or spaces: `h100-sxm`, `H100 SXM`, `h100_sxm`.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

impl Gpu {
    /// The GPU `spec` names: one of the table, or a YAML file describing one (a path ending
    /// `.yaml`/`.yml`, or any existing file).
    pub fn resolve(spec: &str) -> Result<Gpu, String> {
        let path = std::path::Path::new(spec);
        let looks_like_file = spec.ends_with(".yaml") || spec.ends_with(".yml") || path.is_file();
        if looks_like_file {
            return Gpu::from_file(path);
        }
        let want = folded(spec);
        known_gpus()
            .into_iter()
            .find(|g| folded(&g.name) == want)
            .ok_or_else(|| {
                let names: Vec<String> = known_gpus().into_iter().map(|g| g.name).collect();
                format!(
                    "unknown GPU `{spec}`: one of {}, or a YAML file with the keys name, bf16_tflops, fp8_tflops, memory_gb_s, memory_gib, interconnect_gb_s and optionally link",
                    names.join(", ")
                )
            })
    }

    /// A GPU described in the YAML file at `path`; the error names the file.
    pub fn from_file(path: &std::path::Path) -> Result<Gpu, String> {
        let fail = |why: String| format!("{}: {why}", path.display());
        let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot read: {e}")))?;
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(file, MAX_GPU_FILE_BYTES + 1),
            &mut text,
        )
        .map_err(|e| fail(format!("cannot read: {e}")))?;
        if text.len() as u64 > MAX_GPU_FILE_BYTES {
            return Err(fail(format!(
                "a GPU description is at most {MAX_GPU_FILE_BYTES} bytes"
            )));
        }
        let gpu: Gpu = serde_yaml::from_str(&text).map_err(|e| fail(e.to_string()))?;
        gpu.validate().map_err(fail)?;
        Ok(gpu)
    }

    /// Every figure finite and positive.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("bf16_tflops", self.bf16_tflops),
            ("fp8_tflops", self.fp8_tflops),
            ("memory_gb_s", self.memory_gb_s),
            ("memory_gib", self.memory_gib),
            ("interconnect_gb_s", self.interconnect_gb_s),
        ] {
            if !value.is_finite() || value <= 0.0 {
                return Err(format!(
                    "GPU `{}`: `{key}` must be a positive number, not {value}",
                    self.name
                ));
            }
        }
        Ok(())
    }

    /// The memory, bytes.
    pub fn memory_bytes(&self) -> u64 {
        (self.memory_gib * (1u64 << 30) as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gpu_of_the_table_is_valid_sourced_and_found_by_its_name() {
        let gpus = known_gpus();
        assert_eq!(gpus.len(), 11);
        for gpu in &gpus {
            gpu.validate().unwrap();
            assert!(!gpu.source.is_empty(), "{}", gpu.name);
            assert!(gpu.fp8_tflops >= gpu.bf16_tflops, "{}", gpu.name);
            // The link is what the source says the bandwidth runs over.
            assert_eq!(
                gpu.link == Link::Pcie,
                gpu.source.contains("PCIe Gen"),
                "{}",
                gpu.name
            );
            assert_eq!(Gpu::resolve(&gpu.name.to_lowercase()).unwrap(), *gpu);
        }
        assert_eq!(Gpu::resolve("h100 sxm").unwrap().name, "H100-SXM");
        let err = Gpu::resolve("V100").unwrap_err();
        assert!(
            err.contains("unknown GPU `V100`") && err.contains("MI300X"),
            "{err}"
        );
    }

    #[test]
    fn a_users_gpu_is_read_from_yaml_and_a_bad_one_names_its_file_and_key() {
        let dir = std::env::temp_dir().join(format!("routerlab-gpu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("mine.yaml");
        std::fs::write(
            &good,
            "name: mine\nbf16_tflops: 100\nfp8_tflops: 200\nmemory_gb_s: 500\nmemory_gib: 16\ninterconnect_gb_s: 16\n",
        )
        .unwrap();
        let gpu = Gpu::resolve(good.to_str().unwrap()).unwrap();
        assert_eq!((gpu.name.as_str(), gpu.memory_gb_s), ("mine", 500.0));
        let bad = dir.join("bad.yaml");
        std::fs::write(
            &bad,
            "name: bad\nbf16_tflops: 0\nfp8_tflops: 200\nmemory_gb_s: 500\nmemory_gib: 16\ninterconnect_gb_s: 16\n",
        )
        .unwrap();
        let err = Gpu::resolve(bad.to_str().unwrap()).unwrap_err();
        assert!(
            err.contains("bad.yaml") && err.contains("`bf16_tflops`"),
            "{err}"
        );
        let typo = dir.join("typo.yaml");
        std::fs::write(&typo, "name: t\nbf16_tflop: 1\n").unwrap();
        let err = Gpu::resolve(typo.to_str().unwrap()).unwrap_err();
        assert!(
            err.contains("typo.yaml") && err.contains("bf16_tflop"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
