//! Which device holds which block of a tensor: the arithmetic behind `show`.
//!
//! Devices are numbered row-major over the mesh (device `i * 4 + j` of a
//! `2x4` mesh sits at coordinates `(i, j)`). A tensor dim split over mesh dims
//! `[a, b]` (major first) has `mesh[a] * mesh[b]` blocks, and the device at
//! coordinates `c` holds block `c[a] * mesh[b] + c[b]`. An uneven split is
//! balanced, as Paddle splits and as the soundness checker simulates: the
//! first `extent % blocks` blocks are one longer (10 over 4: 3, 3, 2, 2).

use spmd_core::{DistAttr, Mesh, MeshDim, ReduceType};

/// How one tensor dim is split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimSplit {
    pub extent: usize,
    /// Major first; empty = replicated.
    pub mesh_dims: Vec<MeshDim>,
    /// `(start, end)` of each block.
    pub bounds: Vec<(usize, usize)>,
}

impl DimSplit {
    pub fn blocks(&self) -> usize {
        self.bounds.len()
    }
    /// Whether every block has the same length.
    pub fn even(&self) -> bool {
        self.extent.is_multiple_of(self.blocks())
    }
}

/// A tensor's layout on a mesh.
#[derive(Clone, Debug)]
pub struct Layout {
    pub mesh: Vec<usize>,
    pub dims: Vec<DimSplit>,
    /// Partial mesh dims with their reduce types.
    pub partial: Vec<(MeshDim, ReduceType)>,
}

/// Row-major coordinates of device `id`.
pub fn coords(mesh: &[usize], mut id: usize) -> Vec<usize> {
    let mut c = vec![0; mesh.len()];
    for (i, &n) in mesh.iter().enumerate().rev() {
        c[i] = id % n;
        id /= n;
    }
    c
}

/// The device at row-major coordinates `c`.
pub fn device(mesh: &[usize], c: &[usize]) -> usize {
    c.iter().zip(mesh).fold(0, |id, (&x, &n)| id * n + x)
}

/// Paddle's balanced split of `extent` into `blocks` (docs/semantics.md §2).
fn bounds(extent: usize, blocks: usize) -> Vec<(usize, usize)> {
    let blocks = blocks.max(1);
    let (q, r) = (extent / blocks, extent % blocks);
    (0..blocks)
        .map(|b| {
            let start = b * q + b.min(r);
            (start, start + q + usize::from(b < r))
        })
        .collect()
}

impl Layout {
    /// The layout of a tensor of `shape` laid out as `attr` on `mesh`. The
    /// attr must fit (see `TensorArg::check`).
    pub fn new(mesh: &Mesh, shape: &[usize], attr: &DistAttr) -> Layout {
        let dims = shape
            .iter()
            .enumerate()
            .map(|(d, &extent)| {
                let mesh_dims: Vec<MeshDim> = attr
                    .dims_mapping
                    .get(d)
                    .map(|s| s.iter().collect::<Vec<_>>())
                    .unwrap_or_default();
                let blocks = mesh_dims.iter().map(|&m| mesh.dim(m)).product();
                DimSplit {
                    extent,
                    mesh_dims,
                    bounds: bounds(extent, blocks),
                }
            })
            .collect();
        Layout {
            mesh: mesh.shape().to_vec(),
            dims,
            partial: attr.partial.iter().collect(),
        }
    }

    pub fn devices(&self) -> usize {
        self.mesh.iter().product()
    }

    /// The block index along tensor dim `d` held by the device at `c`.
    pub fn block_of(&self, d: usize, c: &[usize]) -> usize {
        self.dims[d]
            .mesh_dims
            .iter()
            .fold(0, |b, &m| b * self.mesh[m as usize] + c[m as usize])
    }

    /// The block (one index per tensor dim) device `id` holds.
    pub fn block_of_device(&self, id: usize) -> Vec<usize> {
        let c = coords(&self.mesh, id);
        (0..self.dims.len()).map(|d| self.block_of(d, &c)).collect()
    }

    /// The devices holding a block, and how they hold it: groups of devices
    /// that differ only along partial mesh dims hold contributions to one
    /// value; different groups hold copies. Without partial dims every group
    /// has one device. Ordered by device id.
    pub fn holders(&self, block: &[usize]) -> Vec<Vec<usize>> {
        let mut groups: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
        for id in 0..self.devices() {
            if self.block_of_device(id) != block {
                continue;
            }
            let mut key = coords(&self.mesh, id);
            for &(m, _) in &self.partial {
                key[m as usize] = 0;
            }
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, g)) => g.push(id),
                None => groups.push((key, vec![id])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// The shape of the block device `id` holds.
    pub fn local_shape(&self, id: usize) -> Vec<usize> {
        self.block_of_device(id)
            .iter()
            .zip(&self.dims)
            .map(|(&b, d)| d.bounds[b].1 - d.bounds[b].0)
            .collect()
    }
}

/// The shape of device 0's block (the largest one when uneven).
pub fn local_shape(mesh: &Mesh, shape: &[usize], attr: &DistAttr) -> Vec<usize> {
    Layout::new(mesh, shape, attr).local_shape(0)
}

/// Device ids as ranges: `0-3,8-11`.
pub fn id_ranges(ids: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(match j - i {
            0 => ids[i].to_string(),
            1 => format!("{},{}", ids[i], ids[j]),
            _ => format!("{}-{}", ids[i], ids[j]),
        });
        i = j + 1;
    }
    out.join(",")
}

/// The label of a block: its devices, with partial contributions joined by
/// the reduce op (`0+4`, `max(0,4)`). Falls back to a device list plus
/// `(P)` when that would be longer than `limit` characters.
pub fn block_label(
    groups: &[Vec<usize>],
    partial: &[(MeshDim, ReduceType)],
    limit: usize,
) -> String {
    let mut all: Vec<usize> = groups.iter().flatten().copied().collect();
    all.sort_unstable();
    if partial.is_empty() || groups.iter().all(|g| g.len() <= 1) {
        return id_ranges(&all);
    }
    let same = partial.iter().all(|(_, r)| *r == partial[0].1);
    let join = |g: &Vec<usize>| -> String {
        let ids: Vec<String> = g.iter().map(|d| d.to_string()).collect();
        match (same, partial[0].1) {
            (true, ReduceType::Sum) => ids.join("+"),
            (true, ReduceType::Prod) => ids.join("*"),
            (true, r) => format!("{}({})", r.paddle_name().to_lowercase(), ids.join(",")),
            (false, _) => format!("reduce({})", ids.join(",")),
        }
    };
    let full = groups.iter().map(join).collect::<Vec<_>>().join(" ");
    if full.chars().count() <= limit {
        full
    } else {
        format!("{} (P)", id_ranges(&all))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::{DimsMapping, Partial};

    fn layout(mesh: &[usize], shape: &[usize], attr: DistAttr) -> Layout {
        Layout::new(&Mesh::new(mesh).unwrap(), shape, &attr)
    }

    #[test]
    fn coordinates_are_row_major() {
        assert_eq!(coords(&[2, 4], 5), [1, 1]);
        assert_eq!(coords(&[2, 4], 3), [0, 3]);
        assert_eq!(device(&[2, 4], &[1, 2]), 6);
        for id in 0..24 {
            assert_eq!(device(&[2, 3, 4], &coords(&[2, 3, 4], id)), id);
        }
    }

    #[test]
    fn blocks_of_a_2d_tensor() {
        // dim 0 over mesh dim 1 (4 blocks), dim 1 over mesh dim 0 (2 blocks).
        let l = layout(&[2, 4], &[64, 48], DistAttr::from_paddle(&[1, 0]).unwrap());
        assert_eq!(l.dims[0].bounds, [(0, 16), (16, 32), (32, 48), (48, 64)]);
        assert_eq!(l.dims[1].bounds, [(0, 24), (24, 48)]);
        // device 5 = (1, 1): row block 1, column block 1.
        assert_eq!(l.block_of_device(5), [1, 1]);
        assert_eq!(l.holders(&[1, 1]), [[5]]);
        assert_eq!(l.holders(&[0, 1]), [[4]]);
        assert_eq!(l.local_shape(5), [16, 24]);
    }

    #[test]
    fn replicated_dims_give_copies() {
        let l = layout(&[2, 4], &[8], DistAttr::from_paddle(&[0]).unwrap());
        assert_eq!(l.holders(&[0]), [[0], [1], [2], [3]]);
        assert_eq!(l.holders(&[1]), [[4], [5], [6], [7]]);
        assert_eq!(block_label(&l.holders(&[1]), &l.partial, 20), "4-7");
    }

    #[test]
    fn co_sharding_is_major_first() {
        let attr = DistAttr::new(DimsMapping::from_nested(&[&[1, 0]]).unwrap());
        let l = layout(&[2, 4], &[16], attr);
        // device (i, j) holds block j * 2 + i.
        assert_eq!(l.block_of_device(device(&[2, 4], &[1, 2])), [5]);
        assert_eq!(l.holders(&[5]), [[6]]);
    }

    #[test]
    fn partial_contributions_are_grouped() {
        let p: Partial = [(0, ReduceType::Sum)].into_iter().collect();
        let l = layout(
            &[2, 4],
            &[8],
            DistAttr::from_paddle(&[1]).unwrap().with_partial(p),
        );
        assert_eq!(l.holders(&[2]), [[2, 6]]);
        assert_eq!(block_label(&l.holders(&[2]), &l.partial, 20), "2+6");
        let p: Partial = [(1, ReduceType::Max)].into_iter().collect();
        let l = layout(
            &[2, 4],
            &[8],
            DistAttr::from_paddle(&[0]).unwrap().with_partial(p),
        );
        assert_eq!(l.holders(&[1]), [[4, 5, 6, 7]]);
        assert_eq!(
            block_label(&l.holders(&[1]), &l.partial, 20),
            "max(4,5,6,7)"
        );
        assert_eq!(block_label(&l.holders(&[1]), &l.partial, 5), "4-7 (P)");
    }

    #[test]
    fn uneven_splits() {
        let l = layout(&[4], &[10], DistAttr::from_paddle(&[0]).unwrap());
        // Balanced, as Paddle splits and spmd-check simulates (3, 3, 2, 2,
        // not 3, 3, 3, 1).
        assert_eq!(l.dims[0].bounds, [(0, 3), (3, 6), (6, 8), (8, 10)]);
        assert!(!l.dims[0].even());
        let l = layout(&[4], &[2], DistAttr::from_paddle(&[0]).unwrap());
        assert_eq!(l.dims[0].bounds, [(0, 1), (1, 2), (2, 2), (2, 2)]);
        assert_eq!(l.local_shape(3), [0]);
    }

    #[test]
    fn huge_extents_do_not_overflow() {
        let l = layout(&[2], &[usize::MAX], DistAttr::from_paddle(&[0]).unwrap());
        assert_eq!(l.dims[0].bounds[1].1, usize::MAX);
    }

    #[test]
    fn ranges() {
        assert_eq!(id_ranges(&[0, 1, 2, 3, 8, 9, 10, 11]), "0-3,8-11");
        assert_eq!(id_ranges(&[0, 1, 5]), "0,1,5");
        assert_eq!(id_ranges(&[]), "");
    }

    #[test]
    fn scalar_layout() {
        let l = layout(&[2], &[], DistAttr::replicated(0));
        assert_eq!(l.holders(&[]), [[0], [1]]);
        assert!(l.local_shape(0).is_empty());
    }
}
