//! A tensor on the simulated mesh: every device's block under one layout,
//! and the collectives of a reshard plan, each moving data only between the
//! devices of its group.

use core::ops::Range;

use spmd_core::{DimsMapping, DistAttr, Mesh, MeshDim, MeshSet, Partial, ReduceType, Sharding};
use spmd_graph::steps::Step;

use crate::eval::combine;
use crate::mesh_sim::{Device, block_of};
use crate::tensor::Tensor;

/// A tensor as the devices hold it: one block per device (rank order),
/// laid out as `attr` (a partial tensor's blocks are contributions).
#[derive(Clone, Debug)]
pub(crate) struct Dist {
    pub(crate) attr: DistAttr,
    pub(crate) blocks: Vec<Tensor>,
}

/// A device's block differs from the dense run's.
#[derive(Clone, Debug)]
pub(crate) struct Mismatch {
    pub(crate) device: usize,
    /// The global index of the first element that differs.
    pub(crate) index: Vec<usize>,
    pub(crate) got: f64,
    pub(crate) want: f64,
}

/// Two values agree: relative error below 1e-8 (the runs add in different
/// orders), or both infinite of one sign, or both NaN.
pub(crate) fn close(a: f64, b: f64) -> bool {
    if a == b || (a.is_nan() && b.is_nan()) {
        return true;
    }
    // An infinity agrees only with itself (a tolerance relative to it
    // would let any value pass).
    a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-8 * (1.0 + a.abs().max(b.abs()))
}

/// What a device holds of a value partial over mesh dims it is not the
/// first of: the reduction's identity where one exists (a sum's zero), the
/// value itself where holding it several times changes nothing (a max).
fn identity(r: ReduceType, v: f64) -> f64 {
    match r {
        ReduceType::Sum => 0.0,
        ReduceType::Prod => 1.0,
        _ => v,
    }
}

/// The block ranges device `d` holds under `mapping`.
pub(crate) fn ranges(
    shape: &[usize],
    mapping: &DimsMapping,
    mesh: &Mesh,
    d: &Device,
) -> Vec<Range<usize>> {
    block_of(shape, mapping, mesh, &d.coord)
}

impl Dist {
    /// `dense` laid out as `attr`: each device's block; over a partial mesh
    /// dim the first device holds the value and the others the reduction's
    /// identity.
    pub(crate) fn scatter(
        dense: &Tensor,
        attr: &DistAttr,
        mesh: &Mesh,
        devices: &[Device],
    ) -> Dist {
        let blocks = devices
            .iter()
            .map(|d| {
                let mut b = dense.block(&ranges(dense.shape(), &attr.dims_mapping, mesh, d));
                for (m, r) in attr.partial.iter() {
                    if d.coord[m as usize] != 0 {
                        b = b.map(|v| identity(r, v));
                    }
                }
                b
            })
            .collect();
        Dist {
            attr: attr.clone(),
            blocks,
        }
    }

    /// The devices that differ from `d` only along `dims`, in rank order.
    fn group<'d>(
        devices: &'d [Device],
        d: &Device,
        dims: MeshSet,
    ) -> impl Iterator<Item = &'d Device> {
        let d = d.clone();
        devices.iter().filter(move |e| {
            e.coord
                .iter()
                .zip(&d.coord)
                .enumerate()
                .all(|(m, (a, b))| a == b || dims.contains(m as MeshDim))
        })
    }

    /// The values the devices' blocks stand for: their own blocks, or,
    /// partial, the reduction of each partial group's contributions.
    fn reduced(&self, devices: &[Device]) -> Vec<Tensor> {
        let mut held: Vec<Tensor> = self.blocks.clone();
        // Contributions are reduced one mesh dim at a time, each with its
        // reduce type (a group's blocks cover the same ranges).
        for (m, r) in self.attr.partial.iter() {
            held = devices
                .iter()
                .map(|e| {
                    let members: Vec<&Device> =
                        Self::group(devices, e, MeshSet::single(m)).collect();
                    let mut out = held[e.rank].clone();
                    for (k, slot) in out.data_mut().iter_mut().enumerate() {
                        *slot = combine(r, members.iter().map(|x| held[x.rank].data()[k]));
                    }
                    out
                })
                .collect();
        }
        held
    }

    /// Compares every device's value with its block of `dense`; the
    /// largest difference when all agree.
    pub(crate) fn verify(
        &self,
        dense: &Tensor,
        mesh: &Mesh,
        devices: &[Device],
    ) -> Result<f64, Mismatch> {
        let mut worst = 0.0f64;
        let values = self.reduced(devices);
        for d in devices {
            let r = ranges(dense.shape(), &self.attr.dims_mapping, mesh, d);
            let want = dense.block(&r);
            let got = &values[d.rank];
            if got.shape() != want.shape() {
                return Err(Mismatch {
                    device: d.rank,
                    index: r.iter().map(|r| r.start).collect(),
                    got: f64::NAN,
                    want: f64::NAN,
                });
            }
            for (k, (&g, &w)) in got.data().iter().zip(want.data()).enumerate() {
                if !close(g, w) {
                    let local = crate::tensor::unflatten(want.shape(), k);
                    return Err(Mismatch {
                        device: d.rank,
                        index: local.iter().zip(&r).map(|(i, r)| i + r.start).collect(),
                        got: g,
                        want: w,
                    });
                }
                if g.is_finite() && w.is_finite() {
                    worst = worst.max((g - w).abs());
                }
            }
        }
        Ok(worst)
    }

    /// This tensor after one step of a reshard toward `target`, each device
    /// taking its new block only from the devices of the step's group.
    pub(crate) fn step(
        &self,
        step: &Step,
        target: &DistAttr,
        shape: &[usize],
        mesh: &Mesh,
        devices: &[Device],
    ) -> Result<Dist, String> {
        let mut to = self.attr.clone();
        // The mesh dims of `dim` once `added` join it, in the target's order.
        let placed = |to: &DistAttr, dim: usize, added: &[MeshDim]| -> Sharding {
            let now = to.dims_mapping[dim];
            let want: Vec<MeshDim> = target.dims_mapping[dim]
                .iter()
                .filter(|m| now.contains(*m) || added.contains(m))
                .collect();
            let mut s = Sharding::co(&want).unwrap_or_default();
            for &m in added {
                if !s.contains(m) {
                    s.push(m);
                }
            }
            s
        };
        let set = |dims: &[MeshDim]| dims.iter().fold(MeshSet::EMPTY, |s, &m| s.with(m));
        match step {
            Step::AllReduce { reduce, mesh_dims } => {
                to.partial.remove(set(mesh_dims));
                self.redistribute(to, set(mesh_dims), Some(*reduce), shape, mesh, devices)
            }
            Step::ReduceScatter {
                reduce,
                tensor_dim,
                mesh_dims,
            } => {
                to.partial.remove(set(mesh_dims));
                let s = placed(&to, *tensor_dim, mesh_dims);
                *to.dims_mapping.get_mut(*tensor_dim).ok_or("no such dim")? = s;
                self.redistribute(to, set(mesh_dims), Some(*reduce), shape, mesh, devices)
            }
            Step::AllToAll {
                mesh_dim,
                from_dim,
                to_dim,
            } => {
                let from = to.dims_mapping[*from_dim].without(*mesh_dim);
                *to.dims_mapping.get_mut(*from_dim).ok_or("no such dim")? = from;
                let s = placed(&to, *to_dim, &[*mesh_dim]);
                *to.dims_mapping.get_mut(*to_dim).ok_or("no such dim")? = s;
                self.redistribute(to, MeshSet::single(*mesh_dim), None, shape, mesh, devices)
            }
            Step::AllGather {
                tensor_dim,
                mesh_dims,
            } => {
                let mut s = to.dims_mapping[*tensor_dim];
                for &m in mesh_dims {
                    s = s.without(m);
                }
                *to.dims_mapping.get_mut(*tensor_dim).ok_or("no such dim")? = s;
                self.redistribute(to, set(mesh_dims), None, shape, mesh, devices)
            }
            Step::Reorder {
                tensor_dim,
                mesh_dims,
            } => {
                let s = placed(&to, *tensor_dim, &[]);
                *to.dims_mapping.get_mut(*tensor_dim).ok_or("no such dim")? = s;
                self.redistribute(to, set(mesh_dims), None, shape, mesh, devices)
            }
            Step::Slice {
                tensor_dim,
                mesh_dims,
            } => {
                let s = placed(&to, *tensor_dim, mesh_dims);
                *to.dims_mapping.get_mut(*tensor_dim).ok_or("no such dim")? = s;
                // Local: a device keeps part of what it holds.
                self.redistribute(to, MeshSet::EMPTY, None, shape, mesh, devices)
            }
            Step::MakePartial { reduce, mesh_dims } => {
                let mut p = to.partial;
                for &m in mesh_dims {
                    p.set(m, *reduce);
                }
                to.partial = p;
                let blocks = devices
                    .iter()
                    .map(|d| {
                        let first = mesh_dims.iter().all(|&m| d.coord[m as usize] == 0);
                        let b = &self.blocks[d.rank];
                        if first {
                            b.clone()
                        } else {
                            b.map(|v| identity(*reduce, v))
                        }
                    })
                    .collect();
                Ok(Dist { attr: to, blocks })
            }
        }
    }

    /// Every device's block under `to`, assembled from the blocks the
    /// devices of its group (those differing from it only along `dims`)
    /// hold; with `reduce`, the contributions of the group along `dims`
    /// are reduced (one from each combination of coordinates along them).
    fn redistribute(
        &self,
        to: DistAttr,
        dims: MeshSet,
        reduce: Option<ReduceType>,
        shape: &[usize],
        mesh: &Mesh,
        devices: &[Device],
    ) -> Result<Dist, String> {
        let old: Vec<Vec<Range<usize>>> = devices
            .iter()
            .map(|d| ranges(shape, &self.attr.dims_mapping, mesh, d))
            .collect();
        let mut blocks = Vec::with_capacity(devices.len());
        for d in devices {
            let r = ranges(shape, &to.dims_mapping, mesh, d);
            let members: Vec<&Device> = Self::group(devices, d, dims).collect();
            // With a reduction, one contribution per coordinate along `dims`.
            let classes: Vec<Vec<&Device>> = match reduce {
                None => vec![members],
                Some(_) => {
                    let key = |e: &Device| -> Vec<usize> {
                        dims.iter().map(|m| e.coord[m as usize]).collect()
                    };
                    let mut keys: Vec<Vec<usize>> = members.iter().map(|e| key(e)).collect();
                    keys.sort();
                    keys.dedup();
                    keys.iter()
                        .map(|k| members.iter().copied().filter(|e| &key(e) == k).collect())
                        .collect()
                }
            };
            let local: Vec<usize> = r.iter().map(|r| r.end - r.start).collect();
            // Each class's values for the new block, copied from the parts
            // of it its members hold (replicas hold the same data).
            let mut parts = Vec::with_capacity(classes.len());
            for class in &classes {
                let mut part = Tensor::full(&local, f64::NAN);
                let mut covered = vec![false; part.len()];
                for e in class {
                    copy_overlap(
                        &self.blocks[e.rank],
                        &old[e.rank],
                        &mut part,
                        &mut covered,
                        &r,
                    );
                }
                if let Some(k) = covered.iter().position(|c| !c) {
                    let at = crate::tensor::unflatten(&local, k);
                    let global: Vec<usize> = at.iter().zip(&r).map(|(i, r)| i + r.start).collect();
                    return Err(format!(
                        "{d} needs element {global:?}, which no device of its group holds"
                    ));
                }
                parts.push(part);
            }
            let block = match reduce {
                None => parts.swap_remove(0),
                Some(red) => {
                    let mut out = parts[0].clone();
                    for (k, slot) in out.data_mut().iter_mut().enumerate() {
                        *slot = combine(red, parts.iter().map(|p| p.data()[k]));
                    }
                    out
                }
            };
            blocks.push(block);
        }
        Ok(Dist { attr: to, blocks })
    }
}

/// Copies the elements `src` (holding `src_ranges` of the tensor) has of
/// `dst` (holding `dst_ranges`), marking them covered.
fn copy_overlap(
    src: &Tensor,
    src_ranges: &[Range<usize>],
    dst: &mut Tensor,
    covered: &mut [bool],
    dst_ranges: &[Range<usize>],
) {
    let overlap: Vec<Range<usize>> = src_ranges
        .iter()
        .zip(dst_ranges)
        .map(|(a, b)| a.start.max(b.start)..a.end.min(b.end))
        .collect();
    if overlap.iter().any(|r| r.is_empty()) {
        return;
    }
    let extent: Vec<usize> = overlap.iter().map(|r| r.end - r.start).collect();
    let (ss, ds) = (src.strides(), dst.strides());
    let base = |ranges: &[Range<usize>], strides: &[usize]| -> usize {
        overlap
            .iter()
            .zip(ranges)
            .zip(strides)
            .map(|((o, r), s)| (o.start - r.start) * s)
            .sum()
    };
    let (sb, db) = (base(src_ranges, &ss), base(dst_ranges, &ds));
    crate::tensor::for_each_index(&extent, |i| {
        let so: usize = sb + i.iter().zip(&ss).map(|(i, s)| i * s).sum::<usize>();
        let d: usize = db + i.iter().zip(&ds).map(|(i, s)| i * s).sum::<usize>();
        dst.data_mut()[d] = src.data()[so];
        covered[d] = true;
    });
}

/// The attr without partial status.
pub(crate) fn complete(a: &DistAttr) -> DistAttr {
    a.clone().with_partial(Partial::NONE)
}
