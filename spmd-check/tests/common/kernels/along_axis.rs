//! Ops along one axis: softmax, log_softmax, cumulative sums and maxima, triangles, top-k and arg-reductions.

use std::cmp::Ordering;

use spmd_check::Tensor;

use super::{each_index, groups, one_axis};

use super::reduce::{logsumexp, reduce};

// ----------------------------------------------------------------- softmax

/// Softmax along `axis`, densely: what every device also runs on its blocks.
pub fn softmax(x: &Tensor, axis: usize) -> Tensor {
    let shape = x.shape().to_vec();
    let norm = |i: &[usize], f: &dyn Fn(&[usize]) -> f64| -> Vec<f64> {
        let mut j = i.to_vec();
        (0..shape[axis])
            .map(|k| {
                j[axis] = k;
                f(&j)
            })
            .collect()
    };
    Tensor::from_fn(&shape, |i| {
        let row = norm(i, &|j| x.get(j));
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        (x.get(i) - max).exp() / sum
    })
}

/// Paddle's softmax_grad kernel: `dx = y · (dy − Σ_axis dy·y)`.
pub fn softmax_grad(y: &Tensor, dy: &Tensor, axis: usize) -> Tensor {
    Tensor::from_fn(y.shape(), |i| {
        let mut j = i.to_vec();
        let dot: f64 = (0..y.shape()[axis])
            .map(|k| {
                j[axis] = k;
                dy.get(&j) * y.get(&j)
            })
            .sum();
        y.get(i) * (dy.get(i) - dot)
    })
}

pub fn log_softmax(x: &Tensor, axis: usize) -> Tensor {
    let mut out = x.clone();
    for line in groups(x.shape(), &one_axis(x.rank(), axis)) {
        let v: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let lse = logsumexp(&v);
        for &k in &line {
            out.data_mut()[k] -= lse;
        }
    }
    out
}

/// `dx = dout - softmax(x) · Σ dout` along the axis.
pub fn log_softmax_grad(x: &Tensor, dout: &Tensor, axis: usize) -> Tensor {
    assert_eq!(x.shape(), dout.shape(), "x and out_grad blocks differ");
    let mut dx = dout.clone();
    for line in groups(x.shape(), &one_axis(x.rank(), axis)) {
        let v: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let (lse, sum) = (
            logsumexp(&v),
            line.iter().map(|&k| dout.data()[k]).sum::<f64>(),
        );
        for (&k, a) in line.iter().zip(&v) {
            dx.data_mut()[k] -= (a - lse).exp() * sum;
        }
    }
    dx
}

/// A running sum along `axis`, maybe exclusive, maybe from the end.
pub fn cumsum(x: &Tensor, axis: usize, exclusive: bool, reverse: bool) -> Tensor {
    let n = x.shape()[axis];
    Tensor::from_fn(x.shape(), |i| {
        let k = i[axis];
        let range = match (reverse, exclusive) {
            (false, false) => 0..k + 1,
            (false, true) => 0..k,
            (true, false) => k..n,
            (true, true) => k + 1..n,
        };
        let mut j = i.to_vec();
        range
            .map(|m| {
                j[axis] = m;
                x.get(&j)
            })
            .sum()
    })
}

/// The running max along `axis` and where it was (the last position of a
/// tie).
pub fn cummax(x: &Tensor, axis: usize) -> [Tensor; 2] {
    let arg = Tensor::from_fn(x.shape(), |i| {
        let mut j = i.to_vec();
        let mut best = 0;
        for m in 0..=i[axis] {
            j[axis] = m;
            let v = x.get(&j);
            j[axis] = best;
            if v >= x.get(&j) {
                best = m;
            }
        }
        best as f64
    });
    let out = Tensor::from_fn(x.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = arg.get(i) as usize;
        x.get(&j)
    });
    [out, arg]
}

/// The grad of `cummax` from the saved indices: each output grad goes to
/// the position of its maximum.
pub fn cummax_grad(x_shape: &[usize], indices: &Tensor, axis: usize, dy: &Tensor) -> Tensor {
    assert_eq!(
        dy.shape(),
        indices.shape(),
        "out_grad and indices blocks differ"
    );
    assert_eq!(dy.shape(), x_shape, "out_grad and x blocks differ");
    let mut g = Tensor::full(x_shape, 0.0);
    each_index(dy.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = indices.get(i) as usize;
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

/// `tril` (`lower`) or `triu` of the last two dims around `diagonal`.
pub fn tril_triu(x: &Tensor, diagonal: i64, lower: bool) -> Tensor {
    let r = x.rank();
    Tensor::from_fn(x.shape(), |i| {
        let off = i[r - 1] as i64 - i[r - 2] as i64;
        let keep = if lower {
            off <= diagonal
        } else {
            off >= diagonal
        };
        if keep { x.get(i) } else { 0.0 }
    })
}

/// The first `k` of each line along `axis` sorted (descending when
/// `largest`): values and their indices along the axis.
pub fn top_k(x: &Tensor, axis: usize, k: usize, largest: bool) -> Vec<Tensor> {
    let flags = one_axis(x.rank(), axis);
    let mut shape = x.shape().to_vec();
    shape[axis] = k;
    let (mut out, mut idx) = (Tensor::full(&shape, 0.0), Tensor::full(&shape, 0.0));
    for (line, oline) in groups(x.shape(), &flags).iter().zip(groups(&shape, &flags)) {
        let v = |j: usize| x.data()[line[j]];
        let mut order: Vec<usize> = (0..line.len()).collect();
        order.sort_by(|&a, &b| {
            let o = v(a).partial_cmp(&v(b)).unwrap_or(Ordering::Equal);
            if largest { o.reverse() } else { o }
        });
        for (j, &o) in oline.iter().enumerate() {
            // A device holding less than k of a line fails here.
            out.data_mut()[o] = v(order[j]);
            idx.data_mut()[o] = order[j] as f64;
        }
    }
    vec![out, idx]
}

/// The grad of a selection along `axis`: `dout` scattered back to the
/// positions `indices` name.
pub fn scatter_lines(x_shape: &[usize], axis: usize, indices: &Tensor, dout: &Tensor) -> Tensor {
    assert_eq!(indices.shape(), dout.shape(), "indices and out_grad differ");
    let flags = one_axis(x_shape.len(), axis);
    let (xs, os) = (groups(x_shape, &flags), groups(indices.shape(), &flags));
    assert_eq!(xs.len(), os.len(), "indices do not fit x's block");
    let mut dx = Tensor::full(x_shape, 0.0);
    for (xl, ol) in xs.iter().zip(&os) {
        for &o in ol {
            let j = indices.data()[o] as usize;
            dx.data_mut()[xl[j]] += dout.data()[o];
        }
    }
    dx
}

// ------------------------------------------------------- along one axis

/// argmax / argmin along `axis` (all dims with `flatten`, the index into
/// the flattened tensor, 0-d as Paddle's is): indices as values.
pub fn arg_reduce(x: &Tensor, axis: usize, keepdims: bool, flatten: bool, min: bool) -> Tensor {
    let rank = x.rank();
    let reduced = if flatten {
        vec![true; rank]
    } else {
        one_axis(rank, axis)
    };
    let pick = |v: &[f64]| {
        let better = |a: f64, b: f64| if min { a < b } else { a > b };
        (0..v.len()).fold(0, |best, j| if better(v[j], v[best]) { j } else { best }) as f64
    };
    reduce(x, &reduced, keepdims, pick)
}
