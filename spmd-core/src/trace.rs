//! Hooks that observe inference step by step (for `explain`). The default
//! [`NoTrace`] compiles to nothing, so the fast path pays for none of it.

use spmd_notation::Plan;

use crate::dist_attr::{ReduceType, Sharding};
use crate::error::{AxisName, TensorRef};
use crate::mesh::{MeshDim, MeshSet};

/// Observer of one inference call. Every method has an empty default.
/// Object safe: registered rules take `&mut dyn Trace`.
pub trait Trace {
    /// Whether events that cost extra work to find are wanted. [`NoTrace`]
    /// says no, so an untraced call never computes them.
    fn enabled(&self) -> bool {
        true
    }
    /// The plan this call runs on, first: for a template or a notation
    /// built at run time, the one this call's attributes and ranks made.
    fn plan(&mut self, plan: &Plan<'_>) {
        let _ = plan;
    }
    /// `tensor` dim `dim` brought `given` to `axis`, whose sharding is now `now`.
    fn merged(
        &mut self,
        axis: AxisName,
        tensor: TensorRef,
        dim: usize,
        given: Sharding,
        now: Sharding,
    ) {
        let _ = (axis, tensor, dim, given, now);
    }
    /// `tensor` dim `dim`, which never carries a sharding (`1`, a broadcast
    /// size-1 dim, a never-sharded axis), was given `given`: it is replicated,
    /// but its mesh dims count as claimed in first-wins order.
    fn unsharded(&mut self, tensor: TensorRef, dim: usize, given: Sharding) {
        let _ = (tensor, dim, given);
    }
    /// Backward: `tensor` dim `dim` (axis `axis`) is in no output, so it is
    /// replicated (the unsharded-missing-axis fallback).
    fn missing_axis(&mut self, tensor: TensorRef, dim: usize, axis: AxisName) {
        let _ = (tensor, dim, axis);
    }
    /// `mesh_dim` was claimed by several axes; `kept` keeps it, `lost` loses it.
    fn conflict(&mut self, mesh_dim: MeshDim, kept: AxisName, lost: AxisName) {
        let _ = (mesh_dim, kept, lost);
    }
    /// `axis` (extent `extent`) lost `mesh_dim` because the shard would be uneven.
    fn not_divisible(&mut self, axis: AxisName, extent: usize, mesh_dim: MeshDim) {
        let _ = (axis, extent, mesh_dim);
    }
    /// Backward (Partial Stage-II): output `output`'s given partial status over
    /// `mesh_dim` is explained by contracted axis `axis` sharded over it, or,
    /// with `None`, by the inputs being partial over it.
    fn explained(&mut self, output: usize, mesh_dim: MeshDim, axis: Option<AxisName>) {
        let _ = (output, mesh_dim, axis);
    }
    /// Output `output` is partial over `mesh_dims` because it lacks `axis`.
    fn partial(&mut self, output: usize, axis: AxisName, mesh_dims: MeshSet, reduce: ReduceType) {
        let _ = (output, axis, mesh_dims, reduce);
    }
}

/// The observer that observes nothing.
pub struct NoTrace;

impl Trace for NoTrace {
    #[inline]
    fn enabled(&self) -> bool {
        false
    }
}
