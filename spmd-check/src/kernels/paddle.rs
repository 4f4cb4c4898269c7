//! Paddle's ops as the built-in library names them (the graphs written
//! with `spmd-graph`'s builder, `graphs/gpt_layer.json`), and `add`, which
//! every backward graph's gradient sums run.

use super::aten::{
    binary, binary_grad, identity, identity_grad, lookup, lookup_grad, normalize, normalize_grad,
    perm_of, permuted, permuted_grad, pointwise, pointwise_grad, reshape_grad, view,
};
use super::math::{gelu, gelu_grad};
use super::{
    Arg, Call, Fail, GradCall, Kernel, Want, axis, broadcaster, dy, extents, flag, input, int,
    ints, num, same_range, saved, want, whole,
};
use crate::tensor::Tensor;

pub(super) const NAMES: &[&str] = &[
    "add",
    "matmul",
    "transpose",
    "reshape",
    "layer_norm",
    "embedding",
    "split",
    "scale",
    "softmax",
    "gelu",
    "assign",
    "mean_all",
];

pub(super) fn kernel(name: &str) -> Option<Kernel> {
    let k = |forward, grad| Some(Kernel { forward, grad });
    match name {
        "add" => k(add, Some(add_grad)),
        "matmul" => k(matmul_op, Some(matmul_grad)),
        "transpose" => k(transpose, Some(transpose_grad)),
        "reshape" => k(view, Some(reshape_grad)),
        "layer_norm" => k(layer_norm, Some(layer_norm_grad)),
        "embedding" => k(embedding, Some(embedding_grad)),
        "split" => k(split, Some(split_grad)),
        "scale" => k(scale, Some(scale_grad)),
        "softmax" => k(softmax, Some(softmax_grad)),
        "gelu" => k(gelu_op, Some(gelu_op_grad)),
        "assign" => k(identity, Some(identity_grad)),
        "mean_all" => k(mean_all, Some(mean_all_grad)),
        _ => None,
    }
}

fn add(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| a + b)
}
fn add_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    binary_grad(c, |_, _| 1.0, |_, _| 1.0)
}

/// `x @ y` over batches (numpy broadcast of the dims before the last two;
/// a 1-d operand is not supported), with `trans_x`/`trans_y`.
fn matmul_op(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, y) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let (tx, ty) = (
        flag(call.attrs, "trans_x", false)?,
        flag(call.attrs, "trans_y", false)?,
    );
    batched(&x, &y, tx, ty, out)
}

/// The batch dims of an operand of a batched product, read as broadcast
/// onto the result's batch block.
/// ATen's `bmm(self, mat2)`: `[b, m, k] @ [b, k, n]`.
pub(super) fn bmm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, y) = (input(call, 0)?, input(call, 1)?);
    if x.rank() != 3 || y.rank() != 3 {
        return Err("bmm of operands that are not 3-d".into());
    }
    batched(&x, &y, false, false, want(call, 0)?)
}

pub(super) fn bmm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, y, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    batched_grad(call, &x, &y, &g, false, false)
}

fn batch_part<'a>(a: &Arg<'a>) -> (Arg<'a>, Vec<usize>) {
    let r = a.rank();
    let lead = &a.shape[..r - 2];
    (
        Arg {
            value: a.value,
            block: &a.block[..r - 2],
            shape: lead,
            elem: a.elem,
        },
        extents(&a.block[r - 2..]),
    )
}

fn batched(
    x: &Arg<'_>,
    y: &Arg<'_>,
    tx: bool,
    ty: bool,
    out: &Want<'_>,
) -> Result<Vec<Tensor>, Fail> {
    if x.rank() < 2 || y.rank() < 2 {
        return Err("matmul of a 1-d operand".into());
    }
    let r = out.block.len();
    let batch = &out.block[..r - 2];
    let (xb, xm) = batch_part(x);
    let (yb, ym) = batch_part(y);
    let (rx, ry) = (broadcaster("x", &xb, batch)?, broadcaster("y", &yb, batch)?);
    let mat = |a: &Arg<'_>, k: usize, m: &[usize]| {
        let n = m[0] * m[1];
        Tensor::new(m, a.value.data()[k * n..(k + 1) * n].to_vec())
    };
    let xr = x.rank();
    let yr = y.rank();
    let sub = |a: &Arg<'_>, k: usize, m: &[usize], rank: usize| {
        (
            mat(a, k, m),
            [a.block[rank - 2].clone(), a.block[rank - 1].clone()],
        )
    };
    let mut data = Vec::new();
    let mut fail = None;
    super::each(&extents(batch), |i| {
        if fail.is_some() {
            return;
        }
        let (xv, xbk) = sub(x, rx(i), &xm, xr);
        let (yv, ybk) = sub(y, ry(i), &ym, yr);
        let (xa, ya) = (
            Arg {
                value: &xv,
                block: &xbk,
                shape: &x.shape[xr - 2..],
                elem: x.elem,
            },
            Arg {
                value: &yv,
                block: &ybk,
                shape: &y.shape[yr - 2..],
                elem: y.elem,
            },
        );
        match super::aten::product(&xa, &ya, tx, ty, &out.block[r - 2..]) {
            Ok(t) => data.extend_from_slice(t.data()),
            Err(e) => fail = Some(e),
        }
    });
    if let Some(e) = fail {
        return Err(e);
    }
    Ok(vec![Tensor::new(&out.local(), data)])
}

fn matmul_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, y, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let (tx, ty) = (
        flag(call.attrs, "trans_x", false)?,
        flag(call.attrs, "trans_y", false)?,
    );
    if x.rank() != 2 && y.rank() == 2 && !tx {
        // x [.., m, k] @ y [k, n]: dx = g yᵀ batch by batch, dy = Σ xᵀ g
        // over the batch, read as one matrix of the flattened batch.
        return flat_matmul_grad(call, &x, &y, &g, ty);
    }
    if x.rank() != 2 || y.rank() != 2 || g.rank() != 2 {
        return batched_grad(call, &x, &y, &g, tx, ty);
    }
    let w = |k: usize| call.input_grads.get(k).cloned().flatten();
    let dx = match w(0) {
        // dx = g yᵀ (stored transposed: (g yᵀ)ᵀ = y gᵀ).
        Some(wx) => Some(if tx {
            super::aten::product(&y, &g, ty, true, wx.block)?
        } else {
            super::aten::product(&g, &y, false, !ty, wx.block)?
        }),
        None => None,
    };
    let dyv = match w(1) {
        Some(wy) => Some(if ty {
            super::aten::product(&g, &x, true, tx, wy.block)?
        } else {
            super::aten::product(&x, &g, !tx, false, wy.block)?
        }),
        None => None,
    };
    Ok(vec![dx, dyv])
}

/// The gradients of `x [.., m, k] @ y [k, n]` (or `y` stored `[n, k]`),
/// read as one product over the flattened batch rows.
fn flat_matmul_grad(
    call: &GradCall<'_>,
    x: &Arg<'_>,
    y: &Arg<'_>,
    g: &Arg<'_>,
    ty: bool,
) -> Result<Vec<Option<Tensor>>, Fail> {
    let r = x.rank();
    for d in 0..r - 1 {
        same_range("the output's gradient", g, d, &x.block[d], d)?;
    }
    let rows: usize = extents(&x.block[..r - 1]).iter().product();
    let flat = |a: &Arg<'_>| Tensor::new(&[rows, a.value.shape()[r - 1]], a.value.data().to_vec());
    let (xf, gf) = (flat(x), flat(g));
    // The flattened batch rows are one dim; its range is any label both hold.
    let rows_block = [0..rows, x.block[r - 1].clone()];
    let g_block = [0..rows, g.block[r - 1].clone()];
    let xa = Arg {
        value: &xf,
        block: &rows_block,
        shape: &[rows, x.shape[r - 1]],
        elem: x.elem,
    };
    let ga = Arg {
        value: &gf,
        block: &g_block,
        shape: &[rows, g.shape[r - 1]],
        elem: g.elem,
    };
    let w = |k: usize| call.input_grads.get(k).cloned().flatten();
    let dx = match w(0) {
        Some(wx) => {
            let wb = [0..rows, wx.block[r - 1].clone()];
            let t = super::aten::product(&ga, y, false, !ty, &wb)?;
            Some(Tensor::new(&wx.local(), t.data().to_vec()))
        }
        None => None,
    };
    let dyv = match w(1) {
        Some(wy) => Some(if ty {
            super::aten::product(&ga, &xa, true, false, wy.block)?
        } else {
            super::aten::product(&xa, &ga, true, false, wy.block)?
        }),
        None => None,
    };
    Ok(vec![dx, dyv])
}

/// The gradients of a batched product whose operands share their batch
/// dims (attention's `q kᵀ` and `p v`): each batch's pair of 2-d products.
fn batched_grad(
    call: &GradCall<'_>,
    x: &Arg<'_>,
    y: &Arg<'_>,
    g: &Arg<'_>,
    tx: bool,
    ty: bool,
) -> Result<Vec<Option<Tensor>>, Fail> {
    let r = g.rank();
    if x.rank() != r || y.rank() != r {
        return Err("a batched matmul grad whose operands broadcast their batch".into());
    }
    for d in 0..r - 2 {
        same_range("x", x, d, &g.block[d], d)?;
        same_range("y", y, d, &g.block[d], d)?;
    }
    let batch: usize = extents(&g.block[..r - 2]).iter().product();
    let m2 = |a: &Arg<'_>| extents(&a.block[r - 2..]);
    let part = |a: &Arg<'_>, k: usize| {
        let m = m2(a);
        let n = m[0] * m[1];
        Tensor::new(&m, a.value.data()[k * n..(k + 1) * n].to_vec())
    };
    let w = |k: usize| call.input_grads.get(k).cloned().flatten();
    let (mut dx, mut dyv) = (Vec::new(), Vec::new());
    for k in 0..batch {
        let (xv, yv, gv) = (part(x, k), part(y, k), part(g, k));
        let mk =
            |a: &Arg<'_>, v: &Tensor| (v.clone(), [a.block[r - 2].clone(), a.block[r - 1].clone()]);
        let ((xv, xb), (yv, yb), (gv, gb)) = (mk(x, &xv), mk(y, &yv), mk(g, &gv));
        let xa = Arg {
            value: &xv,
            block: &xb,
            shape: &x.shape[r - 2..],
            elem: x.elem,
        };
        let ya = Arg {
            value: &yv,
            block: &yb,
            shape: &y.shape[r - 2..],
            elem: y.elem,
        };
        let ga = Arg {
            value: &gv,
            block: &gb,
            shape: &g.shape[r - 2..],
            elem: g.elem,
        };
        if let Some(wx) = w(0) {
            let t = if tx {
                super::aten::product(&ya, &ga, ty, true, &wx.block[r - 2..])?
            } else {
                super::aten::product(&ga, &ya, false, !ty, &wx.block[r - 2..])?
            };
            dx.extend_from_slice(t.data());
        }
        if let Some(wy) = w(1) {
            let t = if ty {
                super::aten::product(&ga, &xa, true, tx, &wy.block[r - 2..])?
            } else {
                super::aten::product(&xa, &ga, !tx, false, &wy.block[r - 2..])?
            };
            dyv.extend_from_slice(t.data());
        }
    }
    Ok(vec![
        w(0).map(|wx| Tensor::new(&wx.local(), dx)),
        w(1).map(|wy| Tensor::new(&wy.local(), dyv)),
    ])
}

fn transpose(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let perm = perm_of(call.attrs, "perm", input(call, 0)?.rank())?;
    permuted(call, &perm)
}
fn transpose_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let perm = perm_of(call.attrs, "perm", saved(call, 0)?.rank())?;
    permuted_grad(call, &perm)
}

fn epsilon(attrs: &spmd_core::Attrs) -> Result<f64, Fail> {
    num(attrs, "epsilon", 1e-5)
}

/// Paddle's layer_norm: `out`, each row's mean and its (biased) variance,
/// over the dims from `begin_norm_axis` on.
fn layer_norm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let (w, b) = (
        call.inputs.get(1).copied().flatten(),
        call.inputs.get(2).copied().flatten(),
    );
    let begin = axis(int(call.attrs, "begin_norm_axis", 1)?, x.rank())?;
    let eps = epsilon(call.attrs)?;
    let (out, mean, rstd) = normalize(&x, w.as_ref(), b.as_ref(), begin, eps)?;
    let var: Vec<f64> = rstd.iter().map(|s| 1.0 / (s * s) - eps).collect();
    let stat = |v: Vec<f64>, o: usize| -> Result<Tensor, Fail> {
        let shape = want(call, o)?.local();
        if shape.iter().product::<usize>() != v.len() {
            return Err(format!("output {o}'s block {shape:?} for {} rows", v.len()));
        }
        Ok(Tensor::new(&shape, v))
    };
    Ok(vec![out, stat(mean, 1)?, stat(var, 2)?])
}

fn layer_norm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let w = call.inputs.get(1).copied().flatten();
    let begin = axis(int(call.attrs, "begin_norm_axis", 1)?, x.rank())?;
    let eps = epsilon(call.attrs)?;
    let g = dy(call, 0)?;
    let stats = |o: usize| call.output_grads.get(o).map(|a| a.value.data());
    let [dx, dw, db] = normalize_grad(&x, w.as_ref(), &g, stats(1), stats(2), true, begin, eps)?;
    let pick = |k: usize, t: Tensor| call.input_grads.get(k).cloned().flatten().map(|_| t);
    Ok(vec![pick(0, dx), pick(1, dw), pick(2, db)])
}

/// Paddle's embedding: inputs `(x, weight)`, ids first.
fn embedding(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (ids, table) = (input(call, 0)?, input(call, 1)?);
    Ok(vec![lookup(&table, &ids, want(call, 0)?)?])
}

fn embedding_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (ids, g) = (saved(call, 0)?, dy(call, 0)?);
    let p = int(call.attrs, "padding_idx", -1)?;
    let dw = match call.input_grads.get(1).cloned().flatten() {
        Some(w) => Some(lookup_grad(&ids, &g, &w, (p >= 0).then_some(p as usize))?),
        None => None,
    };
    Ok(vec![None, dw])
}

/// The sections of a split: `sections`, or `num` equal parts.
fn sections(attrs: &spmd_core::Attrs, n: usize) -> Result<Vec<usize>, Fail> {
    if let Some(s) = ints(attrs, "sections")? {
        return Ok(s.iter().map(|&v| v.max(0) as usize).collect());
    }
    let k = int(attrs, "num", 1)?.max(1) as usize;
    Ok(vec![n / k; k])
}

fn split(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let d = axis(int(call.attrs, "axis", 0)?, x.rank())?;
    whole("the input", &x, d)?;
    let parts = sections(call.attrs, x.shape[d])?;
    let mut at = 0;
    let mut out = Vec::new();
    for (k, &n) in parts.iter().enumerate() {
        let w = want(call, k)?;
        for e in (0..x.rank()).filter(|&e| e != d) {
            same_range("the input", &x, e, &w.block[e], e)?;
        }
        let mut block: Vec<_> = (0..x.rank()).map(|e| 0..extents(x.block)[e]).collect();
        block[d] = at + w.block[d].start..at + w.block[d].end;
        out.push(x.value.block(&block));
        at += n;
    }
    Ok(out)
}

fn split_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let d = axis(int(call.attrs, "axis", 0)?, x.rank())?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    whole(
        "the input's gradient",
        &Arg {
            value: x.value,
            block: w.block,
            shape: w.shape,
            elem: x.elem,
        },
        d,
    )?;
    let parts = sections(call.attrs, x.shape[d])?;
    let ws = w.local();
    let mut out = Tensor::full(&ws, 0.0);
    let mut at = 0;
    for (k, &n) in parts.iter().enumerate() {
        let g = dy(call, k)?;
        for e in (0..x.rank()).filter(|&e| e != d) {
            same_range("the output's gradient", &g, e, &w.block[e], e)?;
        }
        let gs = extents(g.block);
        let mut idx = 0;
        super::each(&gs, |i| {
            let mut j = i.to_vec();
            j[d] += at;
            let off = super::offset(&ws, &j);
            out.data_mut()[off] = g.value.data()[idx];
            idx += 1;
        });
        at += n;
    }
    Ok(vec![Some(out)])
}

fn scale(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let s = num(call.attrs, "scale", 1.0)?;
    let b = num(call.attrs, "bias", 0.0)?;
    let after = flag(call.attrs, "bias_after_scale", true)?;
    pointwise(call, |x| if after { s * x + b } else { s * (x + b) })
}
fn scale_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let s = num(call.attrs, "scale", 1.0)?;
    pointwise_grad(call, |_| s)
}

/// `mean_all`: the mean of the elements a device holds (partial `Avg` over
/// the mesh dims that split them: equal blocks' means average to the mean).
fn mean_all(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let d = x.value.data();
    let mean = d.iter().sum::<f64>() / d.len().max(1) as f64;
    Ok(vec![Tensor::new(&[], vec![mean])])
}
/// Its grad: the output grad spread over the whole tensor's count (the grad
/// op reads x for its global shape alone), on any block of x.
fn mean_all_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let n: usize = w.shape.iter().product();
    let share = g.value.data()[0] / n.max(1) as f64;
    Ok(vec![Some(Tensor::full(&w.local(), share))])
}

fn gelu_op(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let t = flag(call.attrs, "approximate", false)?;
    pointwise(call, |x| gelu(x, t))
}
fn gelu_op_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let t = flag(call.attrs, "approximate", false)?;
    pointwise_grad(call, |x| gelu_grad(x, t))
}

/// Softmax along `axis` (held whole), the rows in `t`'s layout.
fn softmax_along(t: &Tensor, d: usize) -> Tensor {
    let shape = t.shape().to_vec();
    let stride: usize = shape[d + 1..].iter().product();
    let n = shape[d];
    let mut out = t.clone();
    let data = out.data_mut();
    for outer in 0..shape[..d].iter().product::<usize>() {
        for inner in 0..stride {
            let at = |k: usize| outer * n * stride + k * stride + inner;
            let max = (0..n)
                .map(|k| data[at(k)])
                .fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = (0..n).map(|k| (data[at(k)] - max).exp()).sum();
            for k in 0..n {
                data[at(k)] = (data[at(k)] - max).exp() / sum;
            }
        }
    }
    out
}

fn softmax(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    softmax_on(call, "axis")
}

fn softmax_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    softmax_grad_on(call, "axis")
}

/// ATen's `_softmax(self, dim, half_to_float)`.
pub(super) fn softmax_dim(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    softmax_on(call, "dim")
}

pub(super) fn softmax_dim_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    softmax_grad_on(call, "dim")
}

/// Softmax along the dim attribute `attr` names.
fn softmax_on(call: &Call<'_>, attr: &str) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let d = axis(int(call.attrs, attr, -1)?, x.rank())?;
    whole("the input", &x, d)?;
    let out = pointwise(call, |v| v)?.remove(0);
    Ok(vec![softmax_along(&out, d)])
}

fn softmax_grad_on(call: &GradCall<'_>, attr: &str) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let d = axis(int(call.attrs, attr, -1)?, x.rank())?;
    whole("the input", &x, d)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    for e in 0..x.rank() {
        same_range("the output's gradient", &g, e, &w.block[e], e)?;
        same_range("the input", &x, e, &w.block[e], e)?;
    }
    let y = softmax_along(x.value, d);
    let shape = y.shape().to_vec();
    let stride: usize = shape[d + 1..].iter().product();
    let n = shape[d];
    let mut dx = y.clone();
    let (yd, gd) = (y.data(), g.value.data());
    let data = dx.data_mut();
    for outer in 0..shape[..d].iter().product::<usize>() {
        for inner in 0..stride {
            let at = |k: usize| outer * n * stride + k * stride + inner;
            let c: f64 = (0..n).map(|k| yd[at(k)] * gd[at(k)]).sum();
            for k in 0..n {
                data[at(k)] = yd[at(k)] * (gd[at(k)] - c);
            }
        }
    }
    Ok(vec![Some(dx)])
}
