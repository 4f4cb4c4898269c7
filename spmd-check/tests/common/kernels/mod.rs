//! Reference kernels: what each library op computes, written plainly on
//! whole [`Tensor`]s, one module per op family. The properties run them on
//! every device's blocks (the checker's premise: a sound answer makes the
//! local kernel compute the right blocks) and on the global tensors, and
//! compare. Every kernel with a gradient has its grad beside it; the
//! families' `reference_grads_match_central_differences` tests check those
//! against finite differences, so a wrong reference cannot hide a wrong
//! rule.
//!
//! This module holds the index helpers the kernels share.

pub mod along_axis;
pub mod attention;
pub mod elementwise;
pub mod indexing;
pub mod loss;
pub mod norm;
pub mod reduce;
pub mod shape;

use spmd_check::Tensor;

/// A Paddle axis attribute (negative counts from the end) as a dim of a
/// tensor of rank `rank`.
pub fn axis_index(axis: i64, rank: usize) -> usize {
    axis.rem_euclid(rank.max(1) as i64) as usize
}

// ------------------------------------------------------- kernel helpers

/// Calls `f` with every multi-index of `shape`.
pub fn each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    Tensor::from_fn(shape, |i| {
        f(i);
        0.0
    });
}

/// `t` without its dim `axis`, which has extent 1.
pub fn drop_dim(t: &Tensor, axis: usize) -> Tensor {
    assert_eq!(t.shape()[axis], 1, "dropping dim {axis} of {:?}", t.shape());
    let mut shape = t.shape().to_vec();
    shape.remove(axis);
    Tensor::new(&shape, t.data().to_vec())
}

/// `t` with a dim of extent 1 inserted at `axis`.
pub fn add_dim(t: &Tensor, axis: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape.insert(axis, 1);
    Tensor::new(&shape, t.data().to_vec())
}

// ---------------------------------------------------------- index helpers
pub fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut i = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        i[d] = flat % shape[d];
        flat /= shape[d];
    }
    i
}

/// `0..rank` without `axis`.
pub fn others(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank).filter(|&d| d != axis).collect()
}

// ------------------------------------------------------------------- where

/// The numpy broadcast of shapes (right-aligned, size 1 stretches).
pub fn broadcast(shapes: &[&[usize]]) -> Vec<usize> {
    let w = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..w)
        .map(|d| {
            shapes
                .iter()
                .filter_map(|s| (d + s.len()).checked_sub(w).map(|k| s[k]))
                .fold(1, |a, e| {
                    assert!(a == 1 || e == 1 || a == e, "cannot broadcast {shapes:?}");
                    if a == 1 { e } else { a }
                })
        })
        .collect()
}

/// The element of `t` that output index `i` (of a broadcast) reads.
pub fn at(t: &Tensor, i: &[usize]) -> f64 {
    let off = i.len() - t.rank();
    let j: Vec<usize> = t
        .shape()
        .iter()
        .enumerate()
        .map(|(d, &e)| if e == 1 { 0 } else { i[off + d] })
        .collect();
    t.get(&j)
}

/// `g` (of the broadcast shape) summed onto `shape` over the dims it was
/// broadcast along.
pub fn unbroadcast(g: &Tensor, shape: &[usize]) -> Tensor {
    let mut out = Tensor::full(shape, 0.0);
    let off = g.rank() - shape.len();
    let mut j = vec![0; shape.len()];
    for flat in 0..g.len() {
        let mut rest = flat;
        let mut i = vec![0; g.rank()];
        for d in (0..g.rank()).rev() {
            i[d] = rest % g.shape()[d];
            rest /= g.shape()[d];
        }
        for (d, jd) in j.iter_mut().enumerate() {
            *jd = if shape[d] == 1 { 0 } else { i[off + d] };
        }
        let v = out.get(&j) + g.get(&i);
        out.set(&j, v);
    }
    out
}

/// The flat offsets of a tensor's elements grouped by their index on the
/// dims not `reduced`: groups in row-major order of those dims, each in
/// row-major order (for one reduced axis, the order along it).
pub fn groups(shape: &[usize], reduced: &[bool]) -> Vec<Vec<usize>> {
    let kept: Vec<usize> = shape
        .iter()
        .zip(reduced)
        .map(|(&n, &r)| if r { 1 } else { n })
        .collect();
    let mut out = vec![Vec::new(); kept.iter().product()];
    for flat in 0..shape.iter().product() {
        let i = unflatten(flat, shape);
        let k = i
            .iter()
            .zip(&kept)
            .fold(0, |k, (&i, &n)| k * n + if n == 1 { 0 } else { i });
        out[k].push(flat);
    }
    out
}

pub fn one_axis(rank: usize, axis: usize) -> Vec<bool> {
    (0..rank).map(|d| d == axis).collect()
}

/// `index` with its dim `axis` replaced by `to`.
pub fn with_dim(index: &[usize], axis: usize, to: usize) -> Vec<usize> {
    let mut i = index.to_vec();
    i[axis] = to;
    i
}

/// Every index of a tensor of this shape, in row-major order.
pub fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![Vec::new()];
    for &n in shape {
        all = all
            .into_iter()
            .flat_map(|i| {
                (0..n).map(move |x| {
                    let mut j = i.clone();
                    j.push(x);
                    j
                })
            })
            .collect();
    }
    all
}
