//! Indexing: slices taken and put back along an axis, gather, one-hot.

use spmd_check::Tensor;

use super::{add_dim, drop_dim, each_index, indices, with_dim};

/// The slices `index` of `t` along `axis`, in that order.
pub fn take(t: &Tensor, axis: usize, index: &[usize]) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape[axis] = index.len();
    Tensor::from_fn(&shape, |i| {
        let mut j = i.to_vec();
        j[axis] = index[i[axis]];
        t.get(&j)
    })
}

/// `take`'s gradient: `dy` added into zeros of `shape` at the slices
/// `index` along `axis`.
pub fn put(dy: &Tensor, shape: &[usize], axis: usize, index: &[usize]) -> Tensor {
    assert_eq!(dy.shape()[axis], index.len(), "a grad of the wrong extent");
    let mut g = Tensor::full(shape, 0.0);
    each_index(dy.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = index[i[axis]];
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

/// Element indices as a kernel reads them from an index tensor.
pub fn ids(t: &Tensor) -> Vec<usize> {
    t.data()
        .iter()
        .map(|&v| {
            assert!(v >= 0.0 && v.fract() == 0.0, "an index {v}");
            v as usize
        })
        .collect()
}

/// `gather` / `index_select`: the slices of `x` the 1-D or 0-D `index`
/// names along `axis` (a 0-D index drops the dim).
pub fn gather(x: &Tensor, index: &Tensor, axis: usize) -> Tensor {
    let ids = ids(index);
    for &k in &ids {
        assert!(
            k < x.shape()[axis],
            "index {k} of a dim of {}",
            x.shape()[axis]
        );
    }
    let out = take(x, axis, &ids);
    if index.rank() == 0 {
        drop_dim(&out, axis)
    } else {
        out
    }
}

/// The grad of `gather`: `dy` added into zeros at the named slices; `n` is
/// x's (never sharded) extent along `axis`.
pub fn gather_grad(dy: &Tensor, index: &Tensor, axis: usize, n: usize) -> Tensor {
    let dy = if index.rank() == 0 {
        add_dim(dy, axis)
    } else {
        dy.clone()
    };
    let mut shape = dy.shape().to_vec();
    shape[axis] = n;
    put(&dy, &shape, axis, &ids(index))
}

pub fn one_hot(x: &Tensor, classes: usize) -> Tensor {
    let ids = ids(x);
    assert!(ids.iter().all(|&k| k < classes), "an id out of range");
    let mut shape = x.shape().to_vec();
    shape.push(classes);
    let r = x.rank();
    Tensor::from_fn(&shape, |i| f64::from(x.get(&i[..r]) == i[r] as f64))
}

/// `take_along_axis`: `out[i]` is `x[i]` with its `axis` coordinate
/// replaced by `index[i]`.
pub fn take_along_axis(x: &Tensor, index: &Tensor, axis: usize) -> Tensor {
    Tensor::from_fn(index.shape(), |i| {
        x.get(&with_dim(i, axis, index.get(i) as usize))
    })
}

/// `put_along_axis` with `reduce = "add"`: `out = x`, then each `value[p]`
/// added at `p` with its `axis` coordinate replaced by `index[p]`.
pub fn put_along_axis_add(x: &Tensor, index: &Tensor, value: &Tensor, axis: usize) -> Tensor {
    let mut out = x.clone();
    for p in indices(index.shape()) {
        let at = with_dim(&p, axis, index.get(&p) as usize);
        out.set(&at, out.get(&at) + value.get(&p));
    }
    out
}

/// `scatter` with `overwrite`: row `r` of the output is `updates[i]` where
/// `index[i] = r` (the first such `i`), else `x[r]`.
pub fn scatter_rows(x: &Tensor, index: &Tensor, updates: &Tensor) -> Tensor {
    let picked = |r: usize| (0..index.len()).find(|&i| index.get(&[i]) as usize == r);
    Tensor::from_fn(x.shape(), |at| match picked(at[0]) {
        Some(i) => updates.get(&with_dim(at, 0, i)),
        None => x.get(at),
    })
}

/// `roll` by `shift` along `axis`, or over the flattened tensor when `axis`
/// is `None`.
pub fn roll(x: &Tensor, shift: usize, axis: Option<usize>) -> Tensor {
    match axis {
        None => {
            let n = x.len();
            let data: Vec<f64> = (0..n).map(|i| x.data()[(i + n - shift % n) % n]).collect();
            Tensor::new(x.shape(), data)
        }
        Some(axis) => {
            let n = x.shape()[axis];
            Tensor::from_fn(x.shape(), |i| {
                x.get(&with_dim(i, axis, (i[axis] + n - shift % n) % n))
            })
        }
    }
}

/// The coordinates of `x` that `gather_nd`'s `out[at]` reads: the index's
/// batch dims select a row of `index` (the first `k` coordinates of `x`),
/// the rest of `at` the remaining coordinates.
fn gather_nd_source(index: &Tensor, at: &[usize]) -> Vec<usize> {
    let b = index.rank() - 1;
    let k = index.shape()[b];
    let mut src: Vec<usize> = (0..k)
        .map(|d| {
            let mut ii = at[..b].to_vec();
            ii.push(d);
            index.get(&ii) as usize
        })
        .collect();
    src.extend_from_slice(&at[b..]);
    src
}

/// `gather_nd`: `out[at] = x[source(at)]`, shaped as the index's batch
/// dims then `x`'s dims past the `k` indexed ones.
pub fn gather_nd(x: &Tensor, index: &Tensor) -> Tensor {
    let b = index.rank() - 1;
    let k = index.shape()[b];
    let mut shape = index.shape()[..b].to_vec();
    shape.extend_from_slice(&x.shape()[k..]);
    Tensor::from_fn(&shape, |at| x.get(&gather_nd_source(index, at)))
}

/// `gather_nd`'s gradient: `dy` added into zeros at the coordinates each
/// element was read from; `indexed` are `x`'s global extents of the
/// indexed dims (the grad does not read `x`).
pub fn gather_nd_grad(indexed: &[usize], index: &Tensor, dy: &Tensor) -> Tensor {
    let b = index.rank() - 1;
    let mut shape = indexed.to_vec();
    shape.extend_from_slice(&dy.shape()[b..]);
    let mut g = Tensor::full(&shape, 0.0);
    for at in indices(dy.shape()) {
        let src = gather_nd_source(index, &at);
        g.set(&src, g.get(&src) + dy.get(&at));
    }
    g
}

/// `moe_combine`: `y[s, h] = Σ_k weights[s, k] · x[index[s, k], h]`.
pub fn moe_combine(x: &Tensor, weights: &Tensor, index: &Tensor) -> Tensor {
    let (s, k) = (weights.shape()[0], weights.shape()[1]);
    Tensor::from_fn(&[s, x.shape()[1]], |i| {
        (0..k)
            .map(|j| weights.get(&[i[0], j]) * x.get(&[index.get(&[i[0], j]) as usize, i[1]]))
            .sum()
    })
}
