//! The cost model: devices, links, and what one collective or one op costs.
//!
//! Every constant and its source is listed in `docs/autoshard.md`; every
//! one can be overridden (the CLI's `--peak-tflops`, `--intra-bandwidth`,
//! ...).

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use spmd_core::{Mesh, MeshDim};
use spmd_graph::DType;

/// One accelerator's figures: peak dense matrix throughput, memory, and the
/// links of the node it sits in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Device {
    pub name: String,
    /// Dense tensor-core peak for 16-bit floats (bf16/f16), FLOP/s.
    pub peak_flops_16: f64,
    /// Dense tensor-core peak for 32-bit floats (TF32), FLOP/s.
    pub peak_flops_32: f64,
    /// Device memory, bytes.
    pub memory: u64,
    /// One direction of a device's intra-node links (NVLink), bytes/s.
    pub intra_bandwidth: f64,
    /// One direction of a device's inter-node link (its own NIC), bytes/s.
    pub inter_bandwidth: f64,
    /// Latency of one ring hop inside a node, seconds.
    pub intra_latency: f64,
    /// Latency of one ring hop between nodes, seconds.
    pub inter_latency: f64,
    /// Devices per node.
    pub per_node: usize,
}

const GB: f64 = 1e9;
const GIB: u64 = 1 << 30;

impl Device {
    /// NVIDIA A100 SXM 80GB (datasheet: 312 TFLOPS BF16 dense, 156 TF32
    /// dense, 600 GB/s NVLink both directions; DGX A100: one 200 Gb/s HDR
    /// NIC per GPU).
    pub fn a100() -> Device {
        Device {
            name: "a100".into(),
            peak_flops_16: 312e12,
            peak_flops_32: 156e12,
            memory: 80 * GIB,
            intra_bandwidth: 300.0 * GB,
            inter_bandwidth: 25.0 * GB,
            intra_latency: 5e-6,
            inter_latency: 10e-6,
            per_node: 8,
        }
    }

    /// NVIDIA H100 SXM 80GB (datasheet: 989 TFLOPS BF16 dense, 494 TF32
    /// dense, 900 GB/s NVLink both directions; DGX H100: one 400 Gb/s NDR
    /// NIC per GPU).
    pub fn h100() -> Device {
        Device {
            name: "h100".into(),
            peak_flops_16: 989e12,
            peak_flops_32: 494e12,
            memory: 80 * GIB,
            intra_bandwidth: 450.0 * GB,
            inter_bandwidth: 50.0 * GB,
            intra_latency: 5e-6,
            inter_latency: 10e-6,
            per_node: 8,
        }
    }

    /// NVIDIA H200 SXM 141GB (datasheet: H100's compute and NVLink, 141 GB
    /// of HBM3e).
    pub fn h200() -> Device {
        Device {
            name: "h200".into(),
            memory: 141 * 1_000_000_000,
            ..Device::h100()
        }
    }

    pub const PRESETS: [&'static str; 3] = ["a100", "h100", "h200"];

    /// The peak for arithmetic in `dtype`: 16-bit floats run at the bf16
    /// peak, everything else at the TF32 one.
    pub fn peak_flops(&self, dtype: DType) -> f64 {
        match dtype {
            DType::Bf16 | DType::F16 | DType::I8 => self.peak_flops_16,
            _ => self.peak_flops_32,
        }
    }
}

impl FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        match s.to_ascii_lowercase().as_str() {
            "a100" => Ok(Device::a100()),
            "h100" => Ok(Device::h100()),
            "h200" => Ok(Device::h200()),
            _ => Err(format!(
                "unknown device `{s}` (one of {})",
                Device::PRESETS.join(", ")
            )),
        }
    }
}

/// A collective's algorithm shape, for its latency term.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    AllReduce,
    ReduceScatter,
    AllGather,
    AllToAll,
    Reorder,
}

impl Collective {
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::ReduceScatter => "reduce-scatter",
            Collective::AllGather => "all-gather",
            Collective::AllToAll => "all-to-all",
            Collective::Reorder => "reorder",
        }
    }

    /// Ring hops a group of `n` devices takes: an all-reduce is a
    /// reduce-scatter then an all-gather.
    fn hops(self, n: usize) -> f64 {
        let n = n.saturating_sub(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * n,
            Collective::Reorder => 1.0,
            _ => n,
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The device and how the mesh sits on the machines: which mesh dims stay
/// inside a node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostModel {
    pub device: Device,
    /// The fraction of peak a well-shaped op reaches.
    pub efficiency: f64,
    /// Per mesh dim: whether its groups stay inside one node.
    pub intra_node: Vec<bool>,
}

impl CostModel {
    /// Mesh dims are laid out minor-last, as device meshes are: walking
    /// from the last mesh dim, a dim stays inside a node while the product
    /// of the dims walked so far is at most the node's device count.
    pub fn new(device: Device, mesh: &Mesh) -> CostModel {
        let mut product = 1usize;
        let mut intra_node = vec![false; mesh.rank()];
        for d in (0..mesh.rank()).rev() {
            product = product.saturating_mul(mesh.shape()[d]);
            intra_node[d] = product <= device.per_node;
        }
        CostModel {
            device,
            efficiency: 0.6,
            intra_node,
        }
    }

    /// Alpha-beta time of one collective moving `bytes` per device over
    /// `mesh_dims`: ring hops times the hop latency, plus bytes over the
    /// slowest link the group crosses.
    pub fn collective_time(
        &self,
        kind: Collective,
        mesh: &Mesh,
        mesh_dims: &[MeshDim],
        bytes: u64,
    ) -> f64 {
        let n: usize = mesh_dims.iter().map(|&d| mesh.dim(d)).product();
        if n <= 1 {
            return 0.0;
        }
        let inter = mesh_dims
            .iter()
            .any(|&d| !self.intra_node.get(d as usize).copied().unwrap_or(false));
        let (latency, bandwidth) = if inter {
            (self.device.inter_latency, self.device.inter_bandwidth)
        } else {
            (self.device.intra_latency, self.device.intra_bandwidth)
        };
        kind.hops(n) * latency + bytes as f64 / bandwidth
    }

    /// Seconds for `flops` of arithmetic in `dtype` on one device.
    pub fn compute_time(&self, flops: f64, dtype: DType) -> f64 {
        flops / (self.device.peak_flops(dtype) * self.efficiency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesh_dims_inside_a_node_are_the_minor_ones() {
        let m = CostModel::new(Device::h100(), &Mesh::new(&[4, 8]).unwrap());
        assert_eq!(m.intra_node, [false, true]);
        let m = CostModel::new(Device::h100(), &Mesh::new(&[2, 4]).unwrap());
        assert_eq!(m.intra_node, [true, true]);
        let m = CostModel::new(Device::h100(), &Mesh::new(&[16]).unwrap());
        assert_eq!(m.intra_node, [false]);
    }

    #[test]
    fn a_collective_costs_hops_times_latency_plus_bytes_over_bandwidth() {
        let mesh = Mesh::new(&[4, 8]).unwrap();
        let m = CostModel::new(Device::h100(), &mesh);
        let intra = m.collective_time(Collective::AllReduce, &mesh, &[1], 450_000_000);
        assert!((intra - (14.0 * 5e-6 + 1e-3)).abs() < 1e-12, "{intra}");
        // Crossing nodes uses the NIC even when one dim is intra-node.
        let both = m.collective_time(Collective::AllGather, &mesh, &[0, 1], 50_000_000);
        assert!((both - (31.0 * 10e-6 + 1e-3)).abs() < 1e-12, "{both}");
        assert_eq!(
            m.collective_time(Collective::AllGather, &mesh, &[], 1 << 20),
            0.0
        );
    }

    #[test]
    fn presets_parse_by_name_and_unknown_names_list_them() {
        assert_eq!("H100".parse::<Device>().unwrap(), Device::h100());
        let e = "v100".parse::<Device>().unwrap_err();
        assert!(e.contains("a100, h100, h200"), "{e}");
    }
}
