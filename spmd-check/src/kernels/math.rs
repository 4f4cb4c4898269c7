//! Scalar functions the kernels share, and small dense linear algebra.

use crate::tensor::Tensor;

/// The error function, to about 1e-15: its Taylor series near zero, the
/// continued fraction of `erfc` further out.
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let value = if a < 2.5 {
        // erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1))
        let (mut term, mut sum, x2) = (a, a, a * a);
        for n in 1..200 {
            term *= -x2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / core::f64::consts::PI.sqrt()
    } else {
        // erfc(x) = exp(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
        let mut f = a;
        for k in (1..=60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / core::f64::consts::PI.sqrt() / f
    };
    value.copysign(x)
}

/// The standard normal density.
fn phi(x: f64) -> f64 {
    (-0.5 * x * x).exp() / (2.0 * core::f64::consts::PI).sqrt()
}

/// GELU: exact (`x Φ(x)`), or its tanh approximation.
pub(crate) fn gelu(x: f64, tanh: bool) -> f64 {
    if tanh {
        let u = (2.0 / core::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        0.5 * x * (1.0 + u.tanh())
    } else {
        0.5 * x * (1.0 + erf(x / core::f64::consts::SQRT_2))
    }
}

/// The derivative of [`gelu`].
pub(crate) fn gelu_grad(x: f64, tanh: bool) -> f64 {
    if tanh {
        let c = (2.0 / core::f64::consts::PI).sqrt();
        let u = c * (x + 0.044715 * x * x * x);
        let t = u.tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
    } else {
        0.5 * (1.0 + erf(x / core::f64::consts::SQRT_2)) + x * phi(x)
    }
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `a [m, k] @ b [k, n]`, where `ta`/`tb` read `a`/`b` transposed (their
/// stored shapes `[k, m]`/`[n, k]`).
pub(crate) fn matmul(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> Result<Tensor, String> {
    let (&[a0, a1], &[b0, b1]) = (a.shape(), b.shape()) else {
        return Err(format!("matmul of {:?} and {:?}", a.shape(), b.shape()));
    };
    let (m, k) = if ta { (a1, a0) } else { (a0, a1) };
    let (k2, n) = if tb { (b1, b0) } else { (b0, b1) };
    if k != k2 {
        return Err(format!(
            "the contraction holds {k} elements in one operand and {k2} in the other"
        ));
    }
    // Untransposed copies, so that the inner loop runs over contiguous rows.
    let a = if ta { permute(a, &[1, 0]) } else { a.clone() };
    let b = if tb { permute(b, &[1, 0]) } else { b.clone() };
    let (ad, bd) = (a.data(), b.data());
    let mut out = vec![0.0; m * n];
    for (row, a_row) in out
        .chunks_exact_mut(n.max(1))
        .zip(ad.chunks_exact(k.max(1)))
    {
        for (&x, b_row) in a_row.iter().zip(bd.chunks_exact(n.max(1))) {
            if x == 0.0 {
                continue;
            }
            for (o, &y) in row.iter_mut().zip(b_row) {
                *o += x * y;
            }
        }
    }
    Ok(Tensor::new(&[m, n], out))
}

/// `t` with its dims permuted: result dim `d` is `t`'s dim `perm[d]`.
pub(crate) fn permute(t: &Tensor, perm: &[usize]) -> Tensor {
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape()[p]).collect();
    let strides = t.strides();
    let mut out = Vec::with_capacity(t.len());
    super::each(&shape, |i| {
        let off: usize = i.iter().zip(perm).map(|(&x, &p)| x * strides[p]).sum();
        out.push(t.data()[off]);
    });
    Tensor::new(&shape, out)
}

/// The inverse of a permutation.
pub(crate) fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (d, &p) in perm.iter().enumerate() {
        inv[p] = d;
    }
    inv
}
