//! The process mesh and sets of its dims.

use core::fmt;

use crate::error::SpmdError;

/// Index of a mesh dim.
pub type MeshDim = u8;

/// The largest mesh rank a rule accepts (mesh-dim sets are 8-bit masks).
pub const MAX_MESH_RANK: usize = 8;

/// An N-d grid of devices. Two meshes are the same mesh when their shapes and
/// process ids agree (the ids default to `0..n` in row-major order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    /// The extents, then zeros: a fixed array, so that reading an extent
    /// (inference does per sharded dim) is one bounds check, no spill test.
    extents: [usize; MAX_MESH_RANK],
    rank: u8,
    process_ids: Option<alloc::sync::Arc<[u32]>>,
}

impl Mesh {
    /// The mesh's dims as a bit set (bit `d` for mesh dim `d`).
    #[inline(always)]
    pub(crate) fn on_mesh_bits(&self) -> u8 {
        ((1u32 << self.rank().min(MAX_MESH_RANK)) - 1) as u8
    }

    /// A mesh of this shape; every extent must be at least 1 and the rank at
    /// most [`MAX_MESH_RANK`].
    pub fn new(shape: &[usize]) -> Result<Mesh, SpmdError> {
        // The device count must be representable: products of extents are
        // taken freely later (divisibility, process ids).
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if shape.len() > MAX_MESH_RANK || shape.contains(&0) || count.is_none() {
            return Err(SpmdError::InvalidMesh {
                shape: shape.to_vec(),
            });
        }
        let mut extents = [0; MAX_MESH_RANK];
        extents[..shape.len()].copy_from_slice(shape);
        Ok(Mesh {
            extents,
            rank: shape.len() as u8,
            process_ids: None,
        })
    }

    /// A mesh whose devices carry explicit process ids (row-major).
    pub fn with_process_ids(shape: &[usize], ids: &[u32]) -> Result<Mesh, SpmdError> {
        let mut mesh = Mesh::new(shape)?;
        if ids.len() != mesh.size() {
            return Err(SpmdError::InvalidMesh {
                shape: shape.to_vec(),
            });
        }
        mesh.process_ids = Some(ids.into());
        Ok(mesh)
    }

    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.extents[..self.rank as usize]
    }
    #[inline]
    pub fn rank(&self) -> usize {
        self.rank as usize
    }
    /// Number of devices.
    pub fn size(&self) -> usize {
        self.shape().iter().product()
    }
    /// Extent of one mesh dim (panics past the rank, as indexing does).
    #[inline]
    pub fn dim(&self, d: MeshDim) -> usize {
        self.shape()[d as usize]
    }
    /// The product of the extents of a set of mesh dims.
    pub fn product(&self, dims: MeshSet) -> usize {
        dims.iter().map(|d| self.dim(d)).product()
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.shape().iter().enumerate() {
            if i > 0 {
                f.write_str("x")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// A set of mesh dims as a bitmask.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MeshSet(pub u8);

impl MeshSet {
    pub const EMPTY: MeshSet = MeshSet(0);

    /// The set of one mesh dim; empty for a mesh dim no mesh has (>= 8), which
    /// inference rejects before it builds any set.
    #[inline]
    pub const fn single(d: MeshDim) -> MeshSet {
        if (d as usize) < MAX_MESH_RANK {
            MeshSet(1 << d)
        } else {
            MeshSet::EMPTY
        }
    }
    #[inline]
    pub const fn contains(self, d: MeshDim) -> bool {
        (d as usize) < MAX_MESH_RANK && self.0 & (1 << d) != 0
    }
    /// This set plus mesh dim `d` (unchanged for `d >= 8`, see [`MeshSet::single`]).
    #[inline]
    pub const fn with(self, d: MeshDim) -> MeshSet {
        self.union(MeshSet::single(d))
    }
    #[inline]
    pub const fn union(self, o: MeshSet) -> MeshSet {
        MeshSet(self.0 | o.0)
    }
    #[inline]
    pub const fn minus(self, o: MeshSet) -> MeshSet {
        MeshSet(self.0 & !o.0)
    }
    #[inline]
    pub const fn intersect(self, o: MeshSet) -> MeshSet {
        MeshSet(self.0 & o.0)
    }
    #[inline]
    pub const fn intersects(self, o: MeshSet) -> bool {
        self.0 & o.0 != 0
    }
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Members in increasing order.
    pub fn iter(self) -> impl Iterator<Item = MeshDim> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let d = bits.trailing_zeros() as MeshDim;
            bits &= bits - 1;
            Some(d)
        })
    }
}

impl fmt::Debug for MeshSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Display for MeshSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
