//! The simulated mesh: which block of a tensor each device holds, the values a
//! device holds for a partial tensor, the reduction of partial results over
//! their mesh dims, and what a device's blocks say about each einsum axis.
//!
//! Blocks follow `numpy.array_split` (Paddle's uneven split): a dim of extent
//! `e` split into `n` parts gives the first `e % n` parts one element more.
//! A dim co-sharded over mesh dims `[m0, m1, ...]` (major to minor) is split
//! into `|m0|·|m1|·…` parts, and the device at coordinates `c` holds part
//! `(c[m0]·|m1| + c[m1])·… `.

use core::fmt;
use core::ops::Range;

use spmd_core::{DimsMapping, DistAttr, Mesh, ReduceType, Sharding};

use crate::check::{Finding, Holding};
use crate::eval::{Acc, Slot};
use crate::tensor::{Tensor, for_each_index, splitmix};

/// One device of the mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// Row-major index in the mesh.
    pub rank: usize,
    /// Coordinates, one per mesh dim.
    pub coord: Vec<usize>,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {} (mesh coords {:?})", self.rank, self.coord)
    }
}

/// Every device of the mesh, in rank order.
pub fn devices(mesh: &Mesh) -> Vec<Device> {
    let mut out = Vec::with_capacity(mesh.size());
    for_each_index(mesh.shape(), |c| {
        out.push(Device {
            rank: out.len(),
            coord: c.to_vec(),
        })
    });
    out
}

/// Part `index` of `0..extent` split into `parts` as `numpy.array_split` does.
pub fn split_range(extent: usize, parts: usize, index: usize) -> Range<usize> {
    let (q, r) = (extent / parts, extent % parts);
    let start = index * q + index.min(r);
    start..start + q + usize::from(index < r)
}

/// The range of a dim of extent `extent` split by `sharding` that the device
/// at `coord` holds.
pub fn dim_range(extent: usize, sharding: &Sharding, mesh: &Mesh, coord: &[usize]) -> Range<usize> {
    let mut parts = 1;
    let mut index = 0;
    for m in sharding.iter() {
        let n = mesh.dim(m);
        parts *= n;
        index = index * n + coord[m as usize];
    }
    split_range(extent, parts, index)
}

/// The block (one range per dim) of a tensor that a device holds.
pub fn block_of(
    shape: &[usize],
    mapping: &DimsMapping,
    mesh: &Mesh,
    coord: &[usize],
) -> Vec<Range<usize>> {
    shape
        .iter()
        .zip(mapping.as_slice())
        .map(|(&e, s)| dim_range(e, s, mesh, coord))
        .collect()
}

/// Checks that an attr is well formed for a tensor of rank `rank` on `mesh`.
pub(crate) fn validate(
    tensor: &str,
    attr: &DistAttr,
    rank: usize,
    mesh: &Mesh,
) -> Result<(), Finding> {
    let bad = |why: String| Err(Finding::Malformed(format!("{tensor}: {attr} {why}")));
    if attr.dims_mapping.rank() != rank {
        return bad(format!(
            "has {} dims for a tensor of rank {rank}",
            attr.dims_mapping.rank()
        ));
    }
    let mut used = vec![false; mesh.rank()];
    for s in attr.dims_mapping.as_slice() {
        for m in s.iter() {
            if m as usize >= mesh.rank() {
                return bad(format!("names mesh dim {m} of a rank-{} mesh", mesh.rank()));
            }
            if std::mem::replace(&mut used[m as usize], true) {
                return bad(format!("uses mesh dim {m} twice"));
            }
        }
    }
    for (m, _) in attr.partial.iter() {
        if m as usize >= mesh.rank() {
            return bad(format!(
                "is partial over mesh dim {m} of a rank-{} mesh",
                mesh.rank()
            ));
        }
        if used[m as usize] {
            return bad(format!(
                "is partial over mesh dim {m}, which also shards it"
            ));
        }
    }
    Ok(())
}

/// What a device holds of a tensor laid out as `attr`: its block, and when
/// `attr` is partial, its contribution to each value (contributions that the
/// partial dims' reductions, taken in increasing mesh-dim order, turn back
/// into the value; hashed, so a device that drops or doubles one is caught).
pub(crate) fn local_value(
    global: &Tensor,
    attr: &DistAttr,
    mesh: &Mesh,
    device: &Device,
    salt: u64,
) -> Tensor {
    let block = block_of(global.shape(), &attr.dims_mapping, mesh, &device.coord);
    let mut local = global.block(&block);
    if !attr.partial.is_partial() {
        return local;
    }
    let partial: Vec<(u8, ReduceType)> = attr.partial.iter().collect();
    let shape = local.shape().to_vec();
    let mut gi = vec![0; shape.len()];
    let mut k = 0;
    for_each_index(&shape, |i| {
        for (d, r) in block.iter().enumerate() {
            gi[d] = r.start + i[d];
        }
        let flat = global.offset(&gi) as u64;
        let mut v = local.data()[k];
        // Split over the last-reduced mesh dim first.
        let mut prefix = salt;
        for &(m, reduce) in partial.iter().rev() {
            let n = mesh.dim(m);
            let c = device.coord[m as usize];
            let h = |c2: usize| {
                splitmix(prefix ^ splitmix(flat ^ ((m as u64) << 40) ^ ((c2 as u64) << 48)))
            };
            v = contribution(reduce, v, n, c, h);
            prefix = splitmix(prefix ^ ((c as u64) << 8) ^ m as u64);
        }
        local.data_mut()[k] = v;
        k += 1;
    });
    local
}

/// Coordinate `c`'s share of `v` split over `n` devices with `reduce`.
fn contribution(reduce: ReduceType, v: f64, n: usize, c: usize, h: impl Fn(usize) -> u64) -> f64 {
    // A small non-zero integer per other coordinate.
    let r = |c2: usize| ((h(c2) % 9) as f64) - 4.0;
    let pos = |c2: usize| (h(c2) % 4) as f64 + 1.0;
    match reduce {
        ReduceType::Sum | ReduceType::Avg => {
            let scale = if reduce == ReduceType::Avg {
                n as f64
            } else {
                1.0
            };
            if c == 0 {
                scale * v - (1..n).map(r).sum::<f64>()
            } else {
                r(c)
            }
        }
        ReduceType::Max => {
            if c == 0 {
                v
            } else {
                v - pos(c)
            }
        }
        ReduceType::Min => {
            if c == 0 {
                v
            } else {
                v + pos(c)
            }
        }
        ReduceType::Prod => {
            // Powers of two: the division is exact.
            let f = |c2: usize| {
                let sign = if h(c2) & 16 == 0 { 1.0 } else { -1.0 };
                sign * [0.5, 2.0, 4.0, 0.25][(h(c2) % 4) as usize]
            };
            if c == 0 {
                v / (1..n).map(f).product::<f64>()
            } else {
                f(c)
            }
        }
        ReduceType::Any => {
            if c == 0 {
                v
            } else {
                0.0
            }
        }
        ReduceType::All => {
            if c == 0 {
                v
            } else {
                1.0
            }
        }
    }
}

/// Reduces every device's partial result over the partial mesh dims of
/// `attr`, one mesh dim at a time in increasing order, as a sequence of
/// all-reduces would. Devices reduced together must hold results of one shape.
pub(crate) fn reduce_partials(
    tensor: &str,
    attr: &DistAttr,
    mesh: &Mesh,
    devices: &[Device],
    mut locals: Vec<Tensor>,
) -> Result<Vec<Tensor>, Finding> {
    let stride = crate::tensor::strides(mesh.shape());
    for (m, reduce) in attr.partial.iter() {
        let m = m as usize;
        let mut next = Vec::with_capacity(locals.len());
        for dev in devices {
            let base = dev.rank - dev.coord[m] * stride[m];
            let group: Vec<usize> = (0..mesh.shape()[m]).map(|c| base + c * stride[m]).collect();
            let first = &locals[group[0]];
            for &g in &group[1..] {
                if locals[g].shape() != first.shape() {
                    return Err(Finding::PartialShapes {
                        tensor: tensor.to_string(),
                        attr: attr.clone(),
                        first: (devices[group[0]].clone(), first.shape().to_vec()),
                        second: (devices[g].clone(), locals[g].shape().to_vec()),
                    });
                }
            }
            let data = (0..first.len())
                .map(|k| {
                    let mut acc = Acc::new(reduce);
                    group.iter().for_each(|&g| acc.push(locals[g].data()[k]));
                    acc.finish()
                })
                .collect();
            next.push(Tensor::new(first.shape(), data));
        }
        locals = next;
    }
    Ok(locals)
}

/// Whether two values agree: equal, both NaN, or both finite and within a
/// relative 1e-9 (an infinity agrees only with itself: a tolerance relative
/// to it would let any value pass).
pub(crate) fn close(a: f64, b: f64) -> bool {
    a == b
        || (a.is_nan() && b.is_nan())
        || (a.is_finite() && b.is_finite() && (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0))
}

/// Compares every device's (reduced) result with its claimed block of the
/// dense result.
pub(crate) fn compare(
    tensor: &str,
    attr: &DistAttr,
    mesh: &Mesh,
    devices: &[Device],
    results: &[Tensor],
    expected: &Tensor,
) -> Result<(), Finding> {
    let mut first: Option<Finding> = None;
    let mut wrong = 0;
    for (dev, got) in devices.iter().zip(results) {
        let block = block_of(expected.shape(), &attr.dims_mapping, mesh, &dev.coord);
        let want = expected.block(&block);
        if want.shape() != got.shape() {
            return Err(Finding::WrongShape {
                tensor: tensor.to_string(),
                attr: attr.clone(),
                device: dev.clone(),
                block,
                expected: want.shape().to_vec(),
                got: got.shape().to_vec(),
            });
        }
        let bad = want
            .data()
            .iter()
            .zip(got.data())
            .position(|(&w, &g)| !close(w, g));
        if let Some(k) = bad {
            wrong += 1;
            if first.is_none() {
                let mut index = Vec::new();
                let mut rest = k;
                for (d, s) in want.strides().iter().enumerate() {
                    index.push(block[d].start + rest / s);
                    rest %= s;
                }
                first = Some(Finding::WrongValue {
                    tensor: tensor.to_string(),
                    attr: attr.clone(),
                    device: dev.clone(),
                    block,
                    index,
                    expected: want.data()[k],
                    got: got.data()[k],
                    wrong_devices: 0,
                    devices: devices.len(),
                });
            }
        }
    }
    match first {
        Some(Finding::WrongValue {
            tensor,
            attr,
            device,
            block,
            index,
            expected,
            got,
            devices,
            ..
        }) => Err(Finding::WrongValue {
            tensor,
            attr,
            device,
            block,
            index,
            expected,
            got,
            wrong_devices: wrong,
            devices,
        }),
        _ => Ok(()),
    }
}

/// A tensor a device reads for an einsum: its slots, global shape and block.
pub(crate) struct Operand<'a> {
    pub name: String,
    pub slots: &'a [Slot],
    pub shape: &'a [usize],
    pub block: Vec<Range<usize>>,
}

/// The range of each axis that a device's blocks of `operands` cover, or why
/// they cannot be read together: a local einsum needs every operand to hold
/// the same part of each axis it shares, a size-1 (broadcast or `1`) dim
/// whole, and a compound dim's block to be a box of its factors.
pub(crate) fn axis_ranges(
    operands: &[Operand<'_>],
    extent: &[usize],
    axis_name: &dyn Fn(usize) -> String,
    device: &Device,
) -> Result<Vec<Option<Holding>>, Finding> {
    let mut ranges: Vec<Option<Holding>> = vec![None; extent.len()];
    for op in operands {
        for (d, (slot, range)) in op.slots.iter().zip(&op.block).enumerate() {
            let unreadable = |why: String| Finding::Unreadable {
                device: device.clone(),
                tensor: op.name.clone(),
                dim: d,
                range: range.clone(),
                why,
            };
            let holding = |r: Range<usize>| Holding {
                tensor: op.name.clone(),
                dim: d,
                range: r,
            };
            let axes: Vec<(usize, Range<usize>)> = match slot {
                Slot::Axis(a) if op.shape[d] == 1 && extent[*a] != 1 => {
                    if *range != (0..1) {
                        return Err(unreadable(format!(
                            "the dim is broadcast (size 1 against extent {} of axis {}); a device \
                             holding none of it lacks the value every index reads",
                            extent[*a],
                            axis_name(*a)
                        )));
                    }
                    continue;
                }
                Slot::Axis(a) => vec![(*a, range.clone())],
                Slot::One => {
                    if *range != (0..1) {
                        return Err(unreadable(
                            "the dim is written `1` (size 1); a device holding none of it lacks its value"
                                .into(),
                        ));
                    }
                    continue;
                }
                Slot::Compound(factors) => {
                    let ext: Vec<usize> = factors.iter().map(|&f| extent[f]).collect();
                    match box_of(range.clone(), &ext) {
                        Some(rs) => factors.iter().copied().zip(rs).collect(),
                        None => {
                            let names: String = factors.iter().map(|&f| axis_name(f)).collect();
                            return Err(unreadable(format!(
                                "the dim is ({names}) with extents {ext:?}; the block is not whole \
                                 rows of the minor factors, so the device cannot reshape it"
                            )));
                        }
                    }
                }
            };
            for (a, r) in axes {
                match &ranges[a] {
                    None => ranges[a] = Some(holding(r)),
                    Some(first) => {
                        let known = &first.range;
                        let same = *known == r || (known.is_empty() && r.is_empty());
                        if !same {
                            return Err(Finding::Inconsistent {
                                device: device.clone(),
                                axis: axis_name(a),
                                first: first.clone(),
                                second: holding(r),
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(ranges)
}

/// A flat range of a compound dim as one range per factor (major first), when
/// it is a box: some leading factors fixed, one a sub-range, the rest whole.
/// An empty range is empty in the first factor that can be split (extent > 1):
/// a size-1 factor is whole on every device, like a plain size-1 dim.
pub(crate) fn box_of(range: Range<usize>, extents: &[usize]) -> Option<Vec<Range<usize>>> {
    let n = extents.len();
    if range.is_empty() || extents.contains(&0) {
        let mut out: Vec<Range<usize>> = extents.iter().map(|&e| 0..e).collect();
        let k = extents.iter().position(|&e| e > 1).unwrap_or(0);
        out[k] = 0..0;
        return Some(out);
    }
    let (s, e) = (range.start, range.end);
    for k in (0..n).rev() {
        let inner: usize = extents[k + 1..].iter().product();
        if s % inner != 0 || e % inner != 0 {
            continue;
        }
        let (a, b) = (s / inner, e / inner);
        let ek = extents[k];
        if a / ek != (b - 1) / ek {
            continue;
        }
        let mut out = vec![0..0; n];
        // Leading factors: the digits of a / ek.
        let mut lead = a / ek;
        for j in (0..k).rev() {
            let digit = lead % extents[j];
            out[j] = digit..digit + 1;
            lead /= extents[j];
        }
        out[k] = a % ek..(b - 1) % ek + 1;
        for (j, o) in out.iter_mut().enumerate().skip(k + 1) {
            *o = 0..extents[j];
        }
        return Some(out);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_compound_block_is_empty_in_a_splittable_factor() {
        // (ab) with a of size 1: the emptiness is b's, `a` stays whole as
        // every other tensor holds it (this was a false "inconsistent").
        assert_eq!(box_of(3..3, &[1, 3]), Some(vec![0..1, 0..0]));
        assert_eq!(box_of(0..0, &[2, 3]), Some(vec![0..0, 0..3]));
    }

    #[test]
    fn array_split_blocks() {
        let parts: Vec<_> = (0..3).map(|i| split_range(7, 3, i)).collect();
        assert_eq!(parts, vec![0..3, 3..5, 5..7]);
        let parts: Vec<_> = (0..4).map(|i| split_range(2, 4, i)).collect();
        assert_eq!(parts, vec![0..1, 1..2, 2..2, 2..2]);
    }

    #[test]
    fn co_sharding_is_major_to_minor() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let s = Sharding::co(&[1, 0]).unwrap();
        // 12 split in 6: device (c0, c1) holds part c1 * 2 + c0.
        assert_eq!(dim_range(12, &s, &mesh, &[1, 2]), 10..12);
        assert_eq!(dim_range(12, &s, &mesh, &[1, 0]), 2..4);
    }

    #[test]
    fn compound_boxes() {
        assert_eq!(box_of(2..4, &[3, 2]), Some(vec![1..2, 0..2]));
        assert_eq!(box_of(0..6, &[3, 2]), Some(vec![0..3, 0..2]));
        assert_eq!(box_of(3..5, &[3, 2]), None);
        assert_eq!(box_of(7..9, &[2, 3, 4]), None);
        assert_eq!(box_of(4..8, &[2, 3, 4]), Some(vec![0..1, 1..2, 0..4]));
        assert_eq!(box_of(12..24, &[2, 3, 4]), Some(vec![1..2, 0..3, 0..4]));
        assert_eq!(box_of(2..2, &[3, 2]), Some(vec![0..0, 0..2]));
    }

    #[test]
    fn partial_contributions_reduce_to_the_value() {
        let mesh = Mesh::new(&[3, 2]).unwrap();
        let devs = devices(&mesh);
        let global = Tensor::probe(&[4], 1, crate::Values::Integers);
        for r in ReduceType::ALL {
            let g = if matches!(r, ReduceType::Any | ReduceType::All) {
                global.map(|x| f64::from(x > 0.0))
            } else {
                global.clone()
            };
            let attr = DistAttr::replicated(1)
                .with_partial(spmd_core::Partial::over(spmd_core::MeshSet(0b11), r));
            let locals: Vec<Tensor> = devs
                .iter()
                .map(|d| local_value(&g, &attr, &mesh, d, 5))
                .collect();
            assert_ne!(locals[0], locals[1], "{r}");
            let reduced = reduce_partials("t", &attr, &mesh, &devs, locals).unwrap();
            for t in &reduced {
                assert!(
                    t.data().iter().zip(g.data()).all(|(&a, &b)| close(a, b)),
                    "{r}: {t:?} vs {g:?}"
                );
            }
        }
    }
}
