//! Normalizations: layer_norm, rms_norm, and the statistics-by-group form of group_norm, instance_norm and batch_norm.

use spmd_check::Tensor;

use super::{groups, one_axis, unflatten};

// --------------------------------------------------------------- layer_norm
pub const EPSILON: f64 = 1e-5;

/// The rows a layer norm normalizes: how many, and how long.
pub fn norm_rows(x: &Tensor, begin: usize) -> (usize, usize) {
    (
        x.shape()[..begin].iter().product(),
        x.shape()[begin..].iter().product(),
    )
}

/// Paddle's layer_norm kernel: `out`, then `mean` and `variance` (biased)
/// of shape `x.shape[..begin]`. `scale` and `bias` hold one value per
/// element of a row (a device holding part of a row gets a mismatch).
pub fn layer_norm(
    x: &Tensor,
    scale: Option<&Tensor>,
    bias: Option<&Tensor>,
    begin: usize,
) -> Vec<Tensor> {
    let (rows, n) = norm_rows(x, begin);
    for p in [scale, bias].into_iter().flatten() {
        assert_eq!(
            p.len(),
            n,
            "a parameter of {} values for rows of {n}",
            p.len()
        );
    }
    let (mut mean, mut var, mut out) = (vec![0.0; rows], vec![0.0; rows], vec![0.0; x.len()]);
    for r in 0..rows {
        let row = &x.data()[r * n..(r + 1) * n];
        let m = row.iter().sum::<f64>() / n as f64;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / n as f64;
        let sd = (v + EPSILON).sqrt();
        for j in 0..n {
            let w = scale.map_or(1.0, |s| s.data()[j]);
            let b = bias.map_or(0.0, |s| s.data()[j]);
            out[r * n + j] = (row[j] - m) / sd * w + b;
        }
        (mean[r], var[r]) = (m, v);
    }
    let lead = &x.shape()[..begin];
    vec![
        Tensor::new(x.shape(), out),
        Tensor::new(lead, mean),
        Tensor::new(lead, var),
    ]
}

/// Paddle's layer_norm_grad kernel: `x_grad`, `scale_grad`, `bias_grad`
/// from x, scale, the saved mean and variance and `out_grad`; with
/// `stats_grads` (the grads of mean and variance, the derived grad form)
/// their contributions to `x_grad` too. `scale_grad` and `bias_grad` sum
/// over the rows a device holds.
pub fn layer_norm_grad(
    x: &Tensor,
    scale: Option<&Tensor>,
    mean: &Tensor,
    var: &Tensor,
    dy: &Tensor,
    stats_grads: Option<(&Tensor, &Tensor)>,
    begin: usize,
) -> [Tensor; 3] {
    let (rows, n) = norm_rows(x, begin);
    assert_eq!(dy.shape(), x.shape(), "out_grad and x blocks differ");
    for s in [
        Some(mean),
        Some(var),
        stats_grads.map(|g| g.0),
        stats_grads.map(|g| g.1),
    ]
    .into_iter()
    .flatten()
    {
        assert_eq!(s.len(), rows, "statistics of {} rows for {rows}", s.len());
    }
    if let Some(s) = scale {
        assert_eq!(s.len(), n, "a scale of {} values for rows of {n}", s.len());
    }
    let (mut dx, mut dscale, mut dbias) = (vec![0.0; x.len()], vec![0.0; n], vec![0.0; n]);
    for r in 0..rows {
        let at = r * n..(r + 1) * n;
        let (row, g_out) = (&x.data()[at.clone()], &dy.data()[at]);
        let (m, sd) = (mean.data()[r], (var.data()[r] + EPSILON).sqrt());
        let xhat: Vec<f64> = row.iter().map(|a| (a - m) / sd).collect();
        let g: Vec<f64> = (0..n)
            .map(|j| g_out[j] * scale.map_or(1.0, |s| s.data()[j]))
            .collect();
        let mean_g = g.iter().sum::<f64>() / n as f64;
        let mean_gx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        for j in 0..n {
            let mut d = (g[j] - mean_g - xhat[j] * mean_gx) / sd;
            if let Some((dmean, dvar)) = stats_grads {
                // d mean / dx = 1/n, d var / dx = 2 (x - mean) / n.
                d += dmean.data()[r] / n as f64 + dvar.data()[r] * 2.0 * (row[j] - m) / n as f64;
            }
            dx[r * n + j] = d;
            dscale[j] += g_out[j] * xhat[j];
            dbias[j] += g_out[j];
        }
    }
    [
        Tensor::new(x.shape(), dx),
        Tensor::new(&[n], dscale),
        Tensor::new(&[n], dbias),
    ]
}

/// Paddle's `fused_rms_norm` over the last dim: `out` and `invvar`.
pub fn rms_norm(x: &Tensor, w: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    let n = x.shape()[r - 1];
    assert_eq!(w.len(), n, "a scale of {} values for rows of {n}", w.len());
    let mut out = x.clone();
    let mut inv = Vec::new();
    for line in groups(x.shape(), &one_axis(r, r - 1)) {
        let ms = line.iter().map(|&k| x.data()[k].powi(2)).sum::<f64>() / n as f64;
        let s = 1.0 / (ms + EPSILON).sqrt();
        for (j, &k) in line.iter().enumerate() {
            out.data_mut()[k] *= s * w.data()[j];
        }
        inv.push(s);
    }
    vec![out, Tensor::new(&x.shape()[..r - 1], inv)]
}

/// The grads of x and the scale from those of `out` and `invvar`.
pub fn rms_norm_grad(x: &Tensor, w: &Tensor, dout: &Tensor, dinv: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    let n = x.shape()[r - 1];
    assert_eq!(dout.shape(), x.shape(), "out_grad and x blocks differ");
    let lines = groups(x.shape(), &one_axis(r, r - 1));
    assert_eq!(
        dinv.len(),
        lines.len(),
        "invvar_grad does not fit x's block"
    );
    let (mut dx, mut dw) = (x.clone(), Tensor::full(w.shape(), 0.0));
    for (line, &g_inv) in lines.iter().zip(dinv.data()) {
        let xs: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let ms = xs.iter().map(|a| a * a).sum::<f64>() / n as f64;
        let s = 1.0 / (ms + EPSILON).sqrt();
        let through: f64 = line
            .iter()
            .enumerate()
            .map(|(j, &k)| dout.data()[k] * xs[j] * w.data()[j])
            .sum::<f64>()
            + g_inv;
        for (j, &k) in line.iter().enumerate() {
            let g = dout.data()[k];
            dx.data_mut()[k] = g * w.data()[j] * s - through * s.powi(3) * xs[j] / n as f64;
            dw.data_mut()[j] += g * xs[j] * s;
        }
    }
    vec![dx, dw]
}

pub type Index<'a> = &'a dyn Fn(&[usize]) -> usize;

/// Normalizes `x`'s elements in groups (element `i` in group `stat(i)` of
/// `n_stats`), then scales and shifts each by its channel's (`chan(i)`)
/// scale and bias: `out`, and each group's mean and (biased) variance.
pub fn normalize(
    x: &Tensor,
    n_stats: usize,
    stat: Index<'_>,
    chan: Index<'_>,
    scale: &Tensor,
    bias: &Tensor,
) -> (Tensor, Vec<f64>, Vec<f64>) {
    let (mut sum, mut count) = (vec![0.0; n_stats], vec![0.0; n_stats]);
    let index: Vec<Vec<usize>> = (0..x.len()).map(|k| unflatten(k, x.shape())).collect();
    for (i, a) in index.iter().zip(x.data()) {
        sum[stat(i)] += a;
        count[stat(i)] += 1.0;
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, n)| s / n).collect();
    let mut var = vec![0.0; n_stats];
    for (i, a) in index.iter().zip(x.data()) {
        var[stat(i)] += (a - mean[stat(i)]).powi(2) / count[stat(i)];
    }
    let out = Tensor::from_fn(x.shape(), |i| {
        let (s, c) = (stat(i), chan(i));
        (x.get(i) - mean[s]) / (var[s] + EPSILON).sqrt() * scale.data()[c] + bias.data()[c]
    });
    (out, mean, var)
}

/// The grads of x, scale and bias of [`normalize`], from each group's
/// saved mean and inverse standard deviation.
#[allow(clippy::too_many_arguments)]
pub fn normalize_grad(
    x: &Tensor,
    dy: &Tensor,
    stat: Index<'_>,
    chan: Index<'_>,
    mean: &Tensor,
    inv_std: &Tensor,
    scale: &Tensor,
) -> Vec<Tensor> {
    assert_eq!(dy.shape(), x.shape(), "out_grad and x blocks differ");
    let n_stats = mean.len();
    assert_eq!(inv_std.len(), n_stats, "mean and variance blocks differ");
    let index: Vec<Vec<usize>> = (0..x.len()).map(|k| unflatten(k, x.shape())).collect();
    let xhat = |i: &[usize]| (x.get(i) - mean.data()[stat(i)]) * inv_std.data()[stat(i)];
    let g = |i: &[usize]| dy.get(i) * scale.data()[chan(i)];
    let (mut count, mut sum_g, mut sum_gx) =
        (vec![0.0; n_stats], vec![0.0; n_stats], vec![0.0; n_stats]);
    let (mut dscale, mut dbias) = (
        Tensor::full(scale.shape(), 0.0),
        Tensor::full(scale.shape(), 0.0),
    );
    for i in &index {
        // A device holding statistics of other groups fails here.
        let s = stat(i);
        assert!(s < n_stats, "statistic {s} of {n_stats}");
        count[s] += 1.0;
        sum_g[s] += g(i);
        sum_gx[s] += g(i) * xhat(i);
        dscale.data_mut()[chan(i)] += dy.get(i) * xhat(i);
        dbias.data_mut()[chan(i)] += dy.get(i);
    }
    let dx = Tensor::from_fn(x.shape(), |i| {
        let s = stat(i);
        inv_std.data()[s] * (g(i) - sum_g[s] / count[s] - xhat(i) * sum_gx[s] / count[s])
    });
    vec![dx, dscale, dbias]
}
