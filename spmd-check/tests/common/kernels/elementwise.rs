//! Elementwise ops with a twist: `where` with numpy broadcasting, a bias added along the last dim, swiglu, label smoothing.

use spmd_check::Tensor;

use super::{at, broadcast, unbroadcast, unflatten};

/// `where(c, x, y)`, densely and on every device's blocks.
pub fn select(t: &[Tensor]) -> Vec<Tensor> {
    let shape = broadcast(&[t[0].shape(), t[1].shape(), t[2].shape()]);
    vec![Tensor::from_fn(&shape, |i| {
        if at(&t[0], i) != 0.0 {
            at(&t[1], i)
        } else {
            at(&t[2], i)
        }
    })]
}

/// `where`'s grad kernel: `dx = Σ [c] dy`, `dy_y = Σ [!c] dy`, each summed
/// over the dims its input was broadcast along.
pub fn select_grad(t: &[Tensor], dy: &Tensor) -> Vec<Tensor> {
    let pick = |on: bool| {
        Tensor::from_fn(dy.shape(), |i| {
            if (at(&t[0], i) != 0.0) == on {
                dy.get(i)
            } else {
                0.0
            }
        })
    };
    vec![
        unbroadcast(&pick(true), t[1].shape()),
        unbroadcast(&pick(false), t[2].shape()),
    ]
}

/// `a + b` with `b` broadcast from the right (a bias over the last dims).
pub fn add_bias(a: &Tensor, b: &Tensor) -> Tensor {
    let skip = a.rank() - b.rank();
    Tensor::from_fn(a.shape(), |i| a.get(i) + b.get(&i[skip..]))
}

// ----------------------------------------------------- swiglu, label_smooth
pub fn sigmoid(a: f64) -> f64 {
    1.0 / (1.0 + (-a).exp())
}

pub fn silu(a: f64) -> f64 {
    a * sigmoid(a)
}

pub fn silu_grad(a: f64) -> f64 {
    let s = sigmoid(a);
    s + a * s * (1.0 - s)
}

/// `silu(x) · y`, y broadcast over x's leading dims; without y, `silu` of
/// the first half of x's last dim times the second half.
pub fn swiglu(x: &Tensor, y: Option<&Tensor>) -> Tensor {
    let r = x.rank();
    match y {
        Some(y) => {
            let off = r - y.rank();
            assert_eq!(y.shape(), &x.shape()[off..], "y does not broadcast to x");
            Tensor::from_fn(x.shape(), |i| silu(x.get(i)) * y.get(&i[off..]))
        }
        None => {
            let n = x.shape()[r - 1] / 2;
            assert_eq!(2 * n, x.shape()[r - 1], "an odd last dim of x");
            let mut shape = x.shape().to_vec();
            shape[r - 1] = n;
            Tensor::from_fn(&shape, |i| {
                let mut j = i.to_vec();
                j[r - 1] += n;
                silu(x.get(i)) * x.get(&j)
            })
        }
    }
}

/// `dx` and (with y) `dy`, summed over the dims y is broadcast along.
pub fn swiglu_grad(x: &Tensor, y: Option<&Tensor>, dout: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    match y {
        Some(y) => {
            assert_eq!(dout.shape(), x.shape(), "out_grad and x blocks differ");
            let off = r - y.rank();
            let dx = Tensor::from_fn(x.shape(), |i| {
                dout.get(i) * y.get(&i[off..]) * silu_grad(x.get(i))
            });
            let mut dy = Tensor::full(y.shape(), 0.0);
            for flat in 0..x.len() {
                let i = unflatten(flat, x.shape());
                let k = dy.offset(&i[off..]);
                dy.data_mut()[k] += dout.get(&i) * silu(x.get(&i));
            }
            vec![dx, dy]
        }
        None => {
            let n = x.shape()[r - 1] / 2;
            let mut dx = Tensor::full(x.shape(), 0.0);
            for flat in 0..dout.len() {
                let i = unflatten(flat, dout.shape());
                let mut j = i.clone();
                j[r - 1] += n;
                let (a, b, g) = (x.get(&i), x.get(&j), dout.get(&i));
                dx.set(&i, g * b * silu_grad(a));
                dx.set(&j, g * silu(a));
            }
            vec![dx]
        }
    }
}

pub const SMOOTHING: f64 = 0.25;

/// `(1 - ε) label + ε prior`, the prior broadcast over the leading dims;
/// without one, the uniform prior over the classes (the last dim).
pub fn label_smooth(label: &Tensor, prior: Option<&Tensor>) -> Tensor {
    let r = label.rank();
    let classes = label.shape()[r - 1] as f64;
    Tensor::from_fn(label.shape(), |i| {
        let p = prior.map_or(1.0 / classes, |p| {
            // numpy broadcasting: the prior's dims of extent 1 stretch.
            let at: Vec<usize> = i[r - p.rank()..]
                .iter()
                .zip(p.shape())
                .map(|(&i, &n)| if n == 1 { 0 } else { i })
                .collect();
            p.get(&at)
        });
        (1.0 - SMOOTHING) * label.get(i) + SMOOTHING * p
    })
}
