//! Hooks that observe inference step by step (for `explain`). The default
//! [`NoTrace`] compiles to nothing, so the fast path pays for none of it.

use crate::attr::{ReduceType, Sharding};
use crate::error::{AxisName, TensorRef};
use crate::mesh::{MeshDim, MeshSet};

/// Observer of one inference call. Every method has an empty default.
pub trait Trace {
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
    /// `mesh_dim` was claimed by several axes; `kept` keeps it, `lost` loses it.
    fn conflict(&mut self, mesh_dim: MeshDim, kept: AxisName, lost: AxisName) {
        let _ = (mesh_dim, kept, lost);
    }
    /// `axis` (extent `extent`) lost `mesh_dim` because the shard would be uneven.
    fn not_divisible(&mut self, axis: AxisName, extent: usize, mesh_dim: MeshDim) {
        let _ = (axis, extent, mesh_dim);
    }
    /// Output `output` is partial over `mesh_dims` because it lacks `axis`.
    fn partial(&mut self, output: usize, axis: AxisName, mesh_dims: MeshSet, reduce: ReduceType) {
        let _ = (output, axis, mesh_dims, reduce);
    }
}

/// The observer that observes nothing.
pub struct NoTrace;

impl Trace for NoTrace {}
