//! Reductions over a set of dims with any combining function, their grads, and the norms.

use spmd_check::Tensor;

use super::groups;

pub fn reduced_shape(shape: &[usize], reduced: &[bool], keep: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(reduced)
        .filter_map(|(&n, &r)| match (r, keep) {
            (false, _) => Some(n),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// `f` of each group of `x`'s values.
pub fn reduce(x: &Tensor, reduced: &[bool], keep: bool, f: impl Fn(&[f64]) -> f64) -> Tensor {
    let data = groups(x.shape(), reduced)
        .iter()
        .map(|g| f(&g.iter().map(|&k| x.data()[k]).collect::<Vec<_>>()))
        .collect();
    Tensor::new(&reduced_shape(x.shape(), reduced, keep), data)
}

/// The grad of a reduction: `dx[k] = dout[group of k] · df(group, j,
/// out[group])` for the `j`-th element of its group. Paddle's grad kernels
/// read the forward `out` (the whole group's result) rather than recompute
/// it from the block of x a device holds.
pub fn reduce_grad(
    x: &Tensor,
    reduced: &[bool],
    out: &Tensor,
    dout: &Tensor,
    df: impl Fn(&[f64], usize, f64) -> f64,
) -> Tensor {
    let gs = groups(x.shape(), reduced);
    assert_eq!(dout.len(), gs.len(), "out_grad does not fit x's block");
    assert_eq!(out.len(), gs.len(), "out does not fit x's block");
    let mut dx = Tensor::full(x.shape(), 0.0);
    for ((g, &d), &o) in gs.iter().zip(dout.data()).zip(out.data()) {
        let vals: Vec<f64> = g.iter().map(|&k| x.data()[k]).collect();
        for (j, &k) in g.iter().enumerate() {
            dx.data_mut()[k] = d * df(&vals, j, o);
        }
    }
    dx
}

pub fn logsumexp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m + v.iter().map(|a| (a - m).exp()).sum::<f64>().ln()
}

pub fn p_norm(p: f64, v: &[f64]) -> f64 {
    let abs = v.iter().map(|a| a.abs());
    match p {
        f64::INFINITY => abs.fold(0.0, f64::max),
        f64::NEG_INFINITY => abs.fold(f64::INFINITY, f64::min),
        0.0 => abs.filter(|&a| a != 0.0).count() as f64,
        p => abs.map(|a| a.powf(p)).sum::<f64>().powf(1.0 / p),
    }
}

/// Of element `j`, given the norm `n`.
pub fn p_norm_grad(p: f64, v: &[f64], j: usize, n: f64) -> f64 {
    let a = v[j];
    match p {
        // Distinct magnitudes: one element attains the extreme.
        f64::INFINITY | f64::NEG_INFINITY => {
            if a.abs() == n {
                a.signum()
            } else {
                0.0
            }
        }
        0.0 => 0.0,
        p => a.signum() * (a.abs() / n).powf(p - 1.0),
    }
}
