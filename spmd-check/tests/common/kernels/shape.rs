//! Joins, cuts, broadcasts and paddings: concat, split, stack, slice bounds, tile, expand_as, pad.

use spmd_check::Tensor;

use super::indexing::put;
use super::{add_dim, axis_index, drop_dim, each_index};

use super::indexing::take;

// ---------------------------------------------------------------- kernels

/// `xs` joined along `axis` (the other dims must agree: blocks that do not
/// fail the device).
pub fn concat(xs: &[Tensor], axis: usize) -> Tensor {
    let mut shape = xs[0].shape().to_vec();
    for x in xs {
        for d in (0..shape.len()).filter(|&d| d != axis) {
            assert_eq!(x.shape()[d], shape[d], "concat of {:?}", x.shape());
        }
    }
    shape[axis] = xs.iter().map(|x| x.shape()[axis]).sum();
    Tensor::from_fn(&shape, |i| {
        let (mut j, mut k) = (i.to_vec(), i[axis]);
        for x in xs {
            if k < x.shape()[axis] {
                j[axis] = k;
                return x.get(&j);
            }
            k -= x.shape()[axis];
        }
        unreachable!()
    })
}

/// `x` cut along `axis` into pieces of `sizes`.
pub fn split(x: &Tensor, axis: usize, sizes: &[usize]) -> Vec<Tensor> {
    assert_eq!(
        sizes.iter().sum::<usize>(),
        x.shape()[axis],
        "sections {sizes:?} of a dim of {}",
        x.shape()[axis]
    );
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            let piece: Vec<usize> = (at..at + n).collect();
            at += n;
            take(x, axis, &piece)
        })
        .collect()
}

/// `xs` (one shape) joined along a new dim at `axis`.
pub fn stack(xs: &[Tensor], axis: usize) -> Tensor {
    for x in xs {
        assert_eq!(x.shape(), xs[0].shape(), "stack of different blocks");
    }
    let parts: Vec<Tensor> = xs.iter().map(|x| add_dim(x, axis)).collect();
    concat(&parts, axis)
}

/// Paddle's `split` sections: one may be -1, the rest of the dim.
pub fn sections(extent: usize, given: &[i64]) -> Vec<usize> {
    let known: i64 = given.iter().filter(|&&s| s >= 0).sum();
    given
        .iter()
        .map(|&s| if s < 0 { extent as i64 - known } else { s })
        .map(|s| usize::try_from(s).expect("sections longer than the dim"))
        .collect()
}

/// Paddle's `slice` bounds on a dim of extent `n`: negative from the end,
/// clamped.
pub fn slice_range(n: usize, start: i64, end: i64) -> std::ops::Range<usize> {
    let clamp = |v: i64| (if v < 0 { v + n as i64 } else { v }).clamp(0, n as i64) as usize;
    let (s, e) = (clamp(start), clamp(end));
    s..e.max(s)
}

/// The indices a strided slice takes on a dim of extent `n`.
pub fn strided_range(n: usize, start: i64, end: i64, stride: i64) -> Vec<usize> {
    let n = n as i64;
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = Vec::new();
    if stride > 0 {
        let (mut s, e) = (norm(start).clamp(0, n), norm(end).clamp(0, n));
        while s < e {
            out.push(s as usize);
            s += stride;
        }
    } else {
        let (mut s, e) = (norm(start).clamp(-1, n - 1), norm(end).clamp(-1, n - 1));
        while s > e {
            out.push(s as usize);
            s += stride;
        }
    }
    out
}

/// Paddle's `tile`: `repeat_times` aligned to the right.
pub fn tile(x: &Tensor, reps: &[i64]) -> Tensor {
    let rank = x.rank().max(reps.len());
    let xs = padded(x.shape(), rank);
    let r: Vec<usize> = padded_reps(reps, rank);
    let out: Vec<usize> = xs.iter().zip(&r).map(|(a, b)| a * b).collect();
    let x = Tensor::new(&xs, x.data().to_vec());
    Tensor::from_fn(&out, |i| {
        let j: Vec<usize> = i.iter().zip(&xs).map(|(a, n)| a % n).collect();
        x.get(&j)
    })
}

pub fn tile_grad(x_shape: &[usize], reps: &[i64], dy: &Tensor) -> Tensor {
    let rank = x_shape.len().max(reps.len());
    let xs = padded(x_shape, rank);
    let mut g = Tensor::full(&xs, 0.0);
    each_index(dy.shape(), |i| {
        let j: Vec<usize> = i.iter().zip(&xs).map(|(a, n)| a % n).collect();
        g.set(&j, g.get(&j) + dy.get(i));
    });
    Tensor::new(x_shape, g.data().to_vec())
}

/// `shape` with leading 1s up to `rank`.
pub fn padded(shape: &[usize], rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank - shape.len()];
    s.extend_from_slice(shape);
    s
}

pub fn padded_reps(reps: &[i64], rank: usize) -> Vec<usize> {
    let mut r = vec![1; rank - reps.len()];
    r.extend(reps.iter().map(|&v| v as usize));
    r
}

/// `x` broadcast to `y`'s (block) shape. `x_global` tells the broadcast
/// dims (global extent 1) from dims whose block has extent 1.
pub fn expand_as(x: &Tensor, y_shape: &[usize], x_global: &[usize]) -> Tensor {
    let off = y_shape.len() - x.rank();
    for d in 0..x.rank() {
        if x_global[d] != 1 {
            assert_eq!(
                x.shape()[d],
                y_shape[off + d],
                "x {:?} for y {y_shape:?}",
                x.shape()
            );
        }
    }
    Tensor::from_fn(y_shape, |i| {
        let j: Vec<usize> = (0..x.rank())
            .map(|d| if x_global[d] == 1 { 0 } else { i[off + d] })
            .collect();
        x.get(&j)
    })
}

pub fn expand_as_grad(x_shape: &[usize], x_global: &[usize], dy: &Tensor) -> Tensor {
    let off = dy.rank() - x_shape.len();
    let mut g = Tensor::full(x_shape, 0.0);
    each_index(dy.shape(), |i| {
        let j: Vec<usize> = (0..x_shape.len())
            .map(|d| if x_global[d] == 1 { 0 } else { i[off + d] })
            .collect();
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

/// Paddle's `pad` with zeros: a `(before, after)` pair per dim.
pub fn pad(x: &Tensor, paddings: &[i64]) -> Tensor {
    let p: Vec<usize> = paddings.iter().map(|&v| v as usize).collect();
    let shape: Vec<usize> = (0..x.rank())
        .map(|d| x.shape()[d] + p[2 * d] + p[2 * d + 1])
        .collect();
    Tensor::from_fn(&shape, |i| {
        let mut j = Vec::with_capacity(i.len());
        for d in 0..i.len() {
            match i[d].checked_sub(p[2 * d]) {
                Some(k) if k < x.shape()[d] => j.push(k),
                _ => return 0.0,
            }
        }
        x.get(&j)
    })
}

/// The grad of `pad`: the output grad without its padding.
pub fn pad_grad(paddings: &[i64], dy: &Tensor) -> Tensor {
    let p: Vec<usize> = paddings.iter().map(|&v| v as usize).collect();
    let shape: Vec<usize> = (0..dy.rank())
        .map(|d| dy.shape()[d] - p[2 * d] - p[2 * d + 1])
        .collect();
    Tensor::from_fn(&shape, |i| {
        let j: Vec<usize> = (0..i.len()).map(|d| i[d] + p[2 * d]).collect();
        dy.get(&j)
    })
}

/// The index lists a (strided) slice takes, per dim of `shape`.
#[derive(Clone, Debug)]
pub struct SliceAttrs {
    pub axes: Vec<i64>,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    /// Empty for `slice`.
    pub strides: Vec<i64>,
    pub decrease: Vec<i64>,
}

impl SliceAttrs {
    pub fn picks(&self, shape: &[usize]) -> Vec<Vec<usize>> {
        let mut picks: Vec<Vec<usize>> = shape.iter().map(|&n| (0..n).collect()).collect();
        for (k, &a) in self.axes.iter().enumerate() {
            let d = axis_index(a, shape.len());
            picks[d] = match self.strides.get(k) {
                Some(&s) => strided_range(shape[d], self.starts[k], self.ends[k], s),
                None => slice_range(shape[d], self.starts[k], self.ends[k]).collect(),
            };
        }
        picks
    }

    pub fn apply(&self, x: &Tensor) -> Tensor {
        let mut out = x.clone();
        for (d, p) in self.picks(x.shape()).iter().enumerate() {
            out = take(&out, d, p);
        }
        let mut dropped: Vec<usize> = self
            .decrease
            .iter()
            .map(|&a| axis_index(a, x.rank()))
            .collect();
        dropped.sort_unstable();
        for &d in dropped.iter().rev() {
            out = drop_dim(&out, d);
        }
        out
    }

    pub fn grad(&self, x_shape: &[usize], dy: &Tensor) -> Tensor {
        let picks = self.picks(x_shape);
        let mut dy = dy.clone();
        let mut dropped: Vec<usize> = self
            .decrease
            .iter()
            .map(|&a| axis_index(a, x_shape.len()))
            .collect();
        dropped.sort_unstable();
        for &d in &dropped {
            dy = add_dim(&dy, d);
        }
        // Scatter back one dim at a time.
        let mut shape: Vec<usize> = picks.iter().map(Vec::len).collect();
        for (d, p) in picks.iter().enumerate() {
            shape[d] = x_shape[d];
            dy = put(&dy, &shape, d, p);
        }
        dy
    }
}
