//! ATen's ops as `torch.export` writes them (`tools/torch_export`): the
//! pointwise ops, views, products, layer norm, mean, attention, and the
//! index arithmetic of masks and positions.

use core::ops::Range;

use super::math::{gelu, gelu_grad, inverse, matmul, permute, sigmoid};
use super::{
    Arg, Call, Elem, Fail, GradCall, Kernel, Want, axis, broadcaster, build, dy, each, extents,
    flag, input, int, ints, num, same_range, saved, text, unbroadcast, want, whole,
};
use crate::tensor::Tensor;

/// The ops this module has kernels for.
pub(super) const NAMES: &[&str] = &[
    "aten.embedding",
    "aten.add.Scalar",
    "aten.sub.Scalar",
    "aten.mul.Scalar",
    "aten.add.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.ne.Scalar",
    "aten.le.Tensor",
    "aten.eq.Tensor",
    "aten.bitwise_and.Tensor",
    "aten.unsqueeze",
    "aten.expand",
    "aten.slice.Tensor",
    "aten.cat",
    "aten.split_with_sizes",
    "aten.view",
    "aten.permute",
    "aten.clone",
    "aten.alias",
    "aten._to_copy",
    "aten.cumsum",
    "aten.index.Tensor",
    "aten.cos",
    "aten.sin",
    "aten.neg",
    "aten.tanh",
    "aten.sigmoid",
    "aten.relu",
    "aten.gelu",
    "aten.rsqrt",
    "aten.pow.Tensor_Scalar",
    "aten.mean.dim",
    "aten.sum.dim_IntList",
    "aten.div.Tensor",
    "aten.bitwise_not",
    "aten.clamp",
    "aten.where.self",
    "aten.copy",
    "aten.full_like",
    "aten._softmax",
    "aten.bmm",
    "aten.topk",
    "aten.gather",
    "aten.scatter.value",
    "aten.slice_scatter",
    "aten.sort",
    "aten.index_select",
    "aten.index_put",
    "aten.div.Scalar_mode",
    "aten.histc",
    "transformers.grouped_mm_fallback",
    "aten.mm",
    "aten.addmm",
    "aten.native_layer_norm",
    "aten.scaled_dot_product_attention",
];

pub(super) fn kernel(name: &str) -> Option<Kernel> {
    let k = |forward, grad| Some(Kernel { forward, grad });
    match name {
        "aten.embedding" => k(embedding, Some(embedding_grad)),
        "aten.add.Scalar" => k(add_scalar, Some(shift_grad)),
        "aten.sub.Scalar" => k(sub_scalar, Some(shift_grad)),
        "aten.mul.Scalar" => k(mul_scalar, Some(mul_scalar_grad)),
        "aten.add.Tensor" => k(add, Some(add_grad)),
        "aten.sub.Tensor" => k(sub, Some(sub_grad)),
        "aten.mul.Tensor" => k(mul, Some(mul_grad)),
        "aten.ne.Scalar" => k(ne_scalar, None),
        "aten.le.Tensor" => k(le, None),
        "aten.eq.Tensor" => k(eq, None),
        "aten.bitwise_and.Tensor" => k(and, None),
        "aten.unsqueeze" => k(unsqueeze, Some(reshape_grad)),
        "aten.view" => k(view, Some(reshape_grad)),
        "aten.expand" => k(expand, Some(expand_grad)),
        "aten.slice.Tensor" => k(slice, Some(slice_grad)),
        "aten.cat" => k(cat, Some(cat_grad)),
        "aten.split_with_sizes" => k(split_with_sizes, Some(split_with_sizes_grad)),
        "aten.permute" => k(permute_op, Some(permute_grad)),
        "aten.clone" | "aten.alias" | "aten._to_copy" => k(identity, Some(identity_grad)),
        "aten.cumsum" => k(cumsum, Some(cumsum_grad)),
        "aten.index.Tensor" => k(index, None),
        "aten.cos" => k(cos, Some(cos_grad)),
        "aten.sin" => k(sin, Some(sin_grad)),
        "aten.neg" => k(neg, Some(neg_grad)),
        "aten.tanh" => k(tanh, Some(tanh_grad)),
        "aten.sigmoid" => k(sigmoid_op, Some(sigmoid_grad)),
        "aten.relu" => k(relu, Some(relu_grad)),
        "aten.gelu" => k(gelu_op, Some(gelu_op_grad)),
        "aten.rsqrt" => k(rsqrt, Some(rsqrt_grad)),
        "aten.pow.Tensor_Scalar" => k(pow, Some(pow_grad)),
        "aten.mean.dim" => k(mean_dim, Some(mean_dim_grad)),
        "aten.sum.dim_IntList" => k(sum_dim, Some(sum_dim_grad)),
        "aten.div.Tensor" => k(div, Some(div_grad)),
        "aten.bitwise_not" => k(not, None),
        "aten.clamp" => k(clamp, Some(clamp_grad)),
        "aten.where.self" => k(where_self, Some(where_self_grad)),
        "aten.copy" => k(copy, Some(copy_grad)),
        "aten.full_like" => k(full_like, Some(full_like_grad)),
        "aten._softmax" => k(
            super::paddle::softmax_dim,
            Some(super::paddle::softmax_dim_grad),
        ),
        "aten.bmm" => k(super::paddle::bmm, Some(super::paddle::bmm_grad)),
        "aten.div.Scalar_mode" => k(div_scalar_mode, Some(div_scalar_mode_grad)),
        "aten.histc" => k(histc, None),
        "transformers.grouped_mm_fallback" => k(grouped_mm, Some(grouped_mm_grad)),
        "aten.topk" | "aten.gather" | "aten.scatter.value" | "aten.slice_scatter" | "aten.sort"
        | "aten.index_select" | "aten.index_put" => super::indexing::kernel(name),
        "aten.mm" => k(mm, Some(mm_grad)),
        "aten.addmm" => k(addmm, Some(addmm_grad)),
        "aten.native_layer_norm" => k(layer_norm, Some(layer_norm_grad)),
        "aten.scaled_dot_product_attention" => k(sdpa, Some(sdpa_grad)),
        _ => None,
    }
}

// ------------------------------------------------------------- pointwise

/// `f` of every element of input 0, whose block must be the output's.
pub(super) fn pointwise(call: &Call<'_>, f: impl Fn(f64) -> f64) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    if x.rank() != out.block.len() {
        return Err(format!(
            "input 0 has rank {}, the result {}",
            x.rank(),
            out.block.len()
        ));
    }
    for d in 0..x.rank() {
        same_range("input 0", &x, d, &out.block[d], d)?;
    }
    Ok(vec![x.value.map(f)])
}

/// The gradient of a pointwise op: `dy · f'(x)` (`df(x, y... )` from the
/// input's and the gradient's elements).
pub(super) fn pointwise_grad(
    call: &GradCall<'_>,
    df: impl Fn(f64) -> f64,
) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    for d in 0..x.rank() {
        same_range("input 0", &x, d, &w.block[d], d)?;
        same_range("the output's gradient", &g, d, &w.block[d], d)?;
    }
    Ok(vec![Some(g.value.zip_with(x.value, |g, x| g * df(x)))])
}

fn scalar_other(call: &Call<'_>) -> Result<f64, Fail> {
    Ok(num(call.attrs, "other", 0.0)? * num(call.attrs, "alpha", 1.0)?)
}

fn add_scalar(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let o = scalar_other(c)?;
    pointwise(c, |x| x + o)
}
fn sub_scalar(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let o = scalar_other(c)?;
    pointwise(c, |x| x - o)
}
fn shift_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |_| 1.0)
}
fn mul_scalar(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let o = num(c.attrs, "other", 1.0)?;
    pointwise(c, |x| x * o)
}
fn mul_scalar_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let o = num(c.attrs, "other", 1.0)?;
    pointwise_grad(c, |_| o)
}
fn ne_scalar(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let o = num(c.attrs, "other", 0.0)?;
    pointwise(c, |x| f64::from(u8::from(x != o)))
}
pub(super) fn identity(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, |x| x)
}
pub(super) fn identity_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |_| 1.0)
}
fn cos(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, f64::cos)
}
fn cos_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |x| -x.sin())
}
fn sin(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, f64::sin)
}
fn sin_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, f64::cos)
}
fn neg(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, |x| -x)
}
fn neg_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |_| -1.0)
}
fn tanh(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, f64::tanh)
}
fn tanh_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |x| 1.0 - x.tanh().powi(2))
}
fn sigmoid_op(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, sigmoid)
}
fn sigmoid_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |x| sigmoid(x) * (1.0 - sigmoid(x)))
}
fn relu(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, |x| x.max(0.0))
}
fn relu_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |x| f64::from(u8::from(x > 0.0)))
}
fn approximate(attrs: &spmd_core::Attrs) -> Result<bool, Fail> {
    Ok(text(attrs, "approximate", "none")? == "tanh")
}
fn gelu_op(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let t = approximate(c.attrs)?;
    pointwise(c, |x| gelu(x, t))
}
fn gelu_op_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let t = approximate(c.attrs)?;
    pointwise_grad(c, |x| gelu_grad(x, t))
}
fn rsqrt(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, |x| 1.0 / x.sqrt())
}
fn rsqrt_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    pointwise_grad(c, |x| -0.5 * x.powf(-1.5))
}
fn pow(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let e = num(c.attrs, "exponent", 1.0)?;
    pointwise(c, |x| x.powf(e))
}
fn pow_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let e = num(c.attrs, "exponent", 1.0)?;
    pointwise_grad(c, |x| e * x.powf(e - 1.0))
}

// ------------------------------------------------------------- broadcast

/// `f` of the two inputs' elements, broadcast onto the output's block.
pub(super) fn binary(call: &Call<'_>, f: impl Fn(f64, f64) -> f64) -> Result<Vec<Tensor>, Fail> {
    let (a, b) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let (ra, rb) = (
        broadcaster("input 0", &a, out.block)?,
        broadcaster("input 1", &b, out.block)?,
    );
    let (ad, bd) = (a.value.data(), b.value.data());
    Ok(vec![build(&out.local(), |i| f(ad[ra(i)], bd[rb(i)]))])
}

/// The gradients of `out = a ∘ b`, broadcast: `da = Σ dy · ∂a`, `db = Σ
/// dy · ∂b`, each summed onto its input's block (`∂a`, `∂b` from the
/// inputs' elements).
pub(super) fn binary_grad(
    call: &GradCall<'_>,
    da: impl Fn(f64, f64) -> f64,
    db: impl Fn(f64, f64) -> f64,
) -> Result<Vec<Option<Tensor>>, Fail> {
    let (a, b, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let (ra, rb) = (
        broadcaster("input 0", &a, g.block)?,
        broadcaster("input 1", &b, g.block)?,
    );
    let (ad, bd, gd) = (a.value.data(), b.value.data(), g.value.data());
    let mut out = Vec::new();
    for (k, d) in [&da as &dyn Fn(f64, f64) -> f64, &db]
        .into_iter()
        .enumerate()
    {
        let Some(w) = call.input_grads.get(k).cloned().flatten() else {
            out.push(None);
            continue;
        };
        let mut n = 0;
        let part = build(g.value.shape(), |i| {
            let v = gd[n] * d(ad[ra(i)], bd[rb(i)]);
            n += 1;
            v
        });
        out.push(Some(unbroadcast(
            &format!("input {k}"),
            &part,
            g.block,
            &w,
        )?));
    }
    Ok(out)
}

fn alpha(call: &Call<'_>) -> Result<f64, Fail> {
    num(call.attrs, "alpha", 1.0)
}
fn add(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let k = alpha(c)?;
    binary(c, |a, b| a + k * b)
}
fn add_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let k = num(c.attrs, "alpha", 1.0)?;
    binary_grad(c, |_, _| 1.0, |_, _| k)
}
fn sub(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let k = alpha(c)?;
    binary(c, |a, b| a - k * b)
}
fn sub_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let k = num(c.attrs, "alpha", 1.0)?;
    binary_grad(c, |_, _| 1.0, |_, _| -k)
}
fn mul(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| a * b)
}
fn mul_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    binary_grad(c, |_, b| b, |a, _| a)
}
fn le(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| f64::from(u8::from(a <= b)))
}
fn eq(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| f64::from(u8::from(a == b)))
}
fn and(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| f64::from(u8::from(a != 0.0 && b != 0.0)))
}
fn div(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    binary(c, |a, b| a / b)
}
fn div_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    binary_grad(c, |_, b| 1.0 / b, |a, b| -a / (b * b))
}
fn not(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    pointwise(c, |x| f64::from(u8::from(x == 0.0)))
}

/// `aten.div.Scalar_mode(self, other, rounding_mode)`: the quotient,
/// rounded down (`floor`), toward zero (`trunc`) or not at all.
fn rounding(attrs: &spmd_core::Attrs) -> Result<(f64, Option<bool>), Fail> {
    let other = num(attrs, "other", 1.0)?;
    let mode = match attrs.get("rounding_mode") {
        None => None,
        Some(_) => match text(attrs, "rounding_mode", "")? {
            "floor" => Some(true),
            "trunc" => Some(false),
            m => return Err(format!("rounding mode `{m}`")),
        },
    };
    Ok((other, mode))
}
fn div_scalar_mode(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (other, mode) = rounding(c.attrs)?;
    pointwise(c, |x| match mode {
        None => x / other,
        Some(true) => (x / other).floor(),
        Some(false) => (x / other).trunc(),
    })
}
fn div_scalar_mode_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (other, mode) = rounding(c.attrs)?;
    // A rounded quotient is a step function: no gradient.
    pointwise_grad(c, |_| if mode.is_none() { 1.0 / other } else { 0.0 })
}

/// `aten.histc(self, bins, min, max)`: how many elements of the block fall
/// in each of `bins` equal bins of `[min, max]` (the last one closed);
/// where `min == max` the range is the data's, which only the whole tensor
/// knows.
fn histc(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let bins = usize::try_from(int(call.attrs, "bins", 100)?).map_err(|_| "negative bins")?;
    if out.block.first() != Some(&(0..bins)) {
        return Err("the bins of the result are split".into());
    }
    let (mut lo, mut hi) = (num(call.attrs, "min", 0.0)?, num(call.attrs, "max", 0.0)?);
    if lo == hi {
        for d in 0..x.rank() {
            whole("input 0", &x, d)?;
        }
        let data = x.value.data();
        lo = data.iter().copied().fold(f64::INFINITY, f64::min);
        hi = data.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if lo == hi {
            (lo, hi) = (lo - 1.0, hi + 1.0);
        }
    }
    let mut counts = Tensor::full(&[bins], 0.0);
    for &v in x.value.data() {
        if (lo..=hi).contains(&v) {
            let b = (((v - lo) / (hi - lo)) * bins as f64) as usize;
            counts.data_mut()[b.min(bins - 1)] += 1.0;
        }
    }
    Ok(vec![counts])
}

/// `aten.clamp(self, min, max)`'s bounds (either may be absent).
fn bounds(attrs: &spmd_core::Attrs) -> Result<(f64, f64), Fail> {
    Ok((
        num(attrs, "min", f64::NEG_INFINITY)?,
        num(attrs, "max", f64::INFINITY)?,
    ))
}
fn clamp(c: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (lo, hi) = bounds(c.attrs)?;
    pointwise(c, |x| x.max(lo).min(hi))
}
fn clamp_grad(c: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (lo, hi) = bounds(c.attrs)?;
    pointwise_grad(c, |x| f64::from(u8::from(lo <= x && x <= hi)))
}

/// `aten.where.self(condition, self, other)`: `self` where the condition
/// holds, `other` elsewhere, all three broadcast onto the result's block.
fn where_self(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (c, a, b) = (input(call, 0)?, input(call, 1)?, input(call, 2)?);
    let out = want(call, 0)?;
    let (rc, ra, rb) = (
        broadcaster("the condition", &c, out.block)?,
        broadcaster("input 1", &a, out.block)?,
        broadcaster("input 2", &b, out.block)?,
    );
    let (cd, ad, bd) = (c.value.data(), a.value.data(), b.value.data());
    Ok(vec![build(&out.local(), |i| {
        if cd[rc(i)] != 0.0 {
            ad[ra(i)]
        } else {
            bd[rb(i)]
        }
    })])
}
fn where_self_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (c, g) = (saved(call, 0)?, dy(call, 0)?);
    let rc = broadcaster("the condition", &c, g.block)?;
    let cd = c.value.data();
    let mut grads = vec![None];
    for (k, taken) in [(1, true), (2, false)] {
        let Some(w) = call.input_grads.get(k).cloned().flatten() else {
            grads.push(None);
            continue;
        };
        let mut n = 0;
        let part = build(g.value.shape(), |i| {
            let v = g.value.data()[n];
            n += 1;
            if (cd[rc(i)] != 0.0) == taken { v } else { 0.0 }
        });
        grads.push(Some(unbroadcast(
            &format!("input {k}"),
            &part,
            g.block,
            &w,
        )?));
    }
    Ok(grads)
}

/// `aten.copy(self, src)`: `src`'s values broadcast into `self`'s shape.
fn copy(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let src = input(call, 1)?;
    let out = want(call, 0)?;
    let read = broadcaster("input 1", &src, out.block)?;
    let d = src.value.data();
    Ok(vec![build(&out.local(), |i| d[read(i)])])
}
fn copy_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let w = |k: usize| call.input_grads.get(k).cloned().flatten();
    Ok(vec![
        // `self`'s values are overwritten: no gradient reaches them.
        w(0).map(|w| Tensor::full(&w.local(), 0.0)),
        match w(1) {
            Some(w) => Some(unbroadcast("input 1", g.value, g.block, &w)?),
            None => None,
        },
    ])
}

/// `aten.full_like(self, fill_value)`: the value everywhere, whatever
/// `self` holds.
fn full_like(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let v = num(call.attrs, "fill_value", 0.0)?;
    Ok(vec![Tensor::full(&want(call, 0)?.local(), v)])
}
fn full_like_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    Ok(vec![
        call.input_grads
            .first()
            .cloned()
            .flatten()
            .map(|w| Tensor::full(&w.local(), 0.0)),
    ])
}

// ------------------------------------------------------------------ views

/// Input 0's block read as the output's block: the same elements in the
/// same order (a view, an unsqueeze).
pub(super) fn view(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let shape = want(call, 0)?.local();
    relabel(x.value, &shape)
}

fn relabel(x: &Tensor, shape: &[usize]) -> Result<Vec<Tensor>, Fail> {
    if shape.iter().product::<usize>() != x.len() {
        return Err(format!(
            "a block of {} elements ({:?}) cannot be viewed as a block of shape {shape:?}",
            x.len(),
            x.shape()
        ));
    }
    Ok(vec![Tensor::new(shape, x.data().to_vec())])
}

fn unsqueeze(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, out.block.len())?;
    for k in 0..x.rank() {
        let e = if k < d { k } else { k + 1 };
        same_range("input 0", &x, k, &out.block[e], e)?;
    }
    view(call)
}

/// The gradient of a view: the output's gradient block read as the
/// input's.
pub(super) fn reshape_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    Ok(vec![Some(relabel(g.value, &w.local())?.remove(0))])
}

/// The permutation attribute of a tensor of rank `rank`.
pub(super) fn perm_of(
    call_attrs: &spmd_core::Attrs,
    name: &str,
    rank: usize,
) -> Result<Vec<usize>, Fail> {
    let p = ints(call_attrs, name)?.ok_or_else(|| format!("attribute `{name}` is missing"))?;
    let p: Vec<usize> = p.iter().map(|&d| axis(d, rank)).collect::<Result<_, _>>()?;
    let mut seen = vec![false; rank];
    if p.len() != rank || p.iter().any(|&d| std::mem::replace(&mut seen[d], true)) {
        return Err(format!("{p:?} is not a permutation of {rank} dims"));
    }
    Ok(p)
}

/// The output of permuting input 0 by `perm`.
pub(super) fn permuted(call: &Call<'_>, perm: &[usize]) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    for (d, &p) in perm.iter().enumerate() {
        same_range("input 0", &x, p, &out.block[d], d)?;
    }
    Ok(vec![permute(x.value, perm)])
}

/// The gradient of a permutation by `perm`.
pub(super) fn permuted_grad(
    call: &GradCall<'_>,
    perm: &[usize],
) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    for (d, &p) in perm.iter().enumerate() {
        same_range("the output's gradient", &g, d, &w.block[p], p)?;
    }
    Ok(vec![Some(permute(g.value, &inverse(perm)))])
}

fn permute_op(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let perm = perm_of(call.attrs, "dims", input(call, 0)?.rank())?;
    permuted(call, &perm)
}
fn permute_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let perm = perm_of(call.attrs, "dims", saved(call, 0)?.rank())?;
    permuted_grad(call, &perm)
}

fn expand(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let read = broadcaster("input 0", &x, out.block)?;
    let xd = x.value.data();
    Ok(vec![build(&out.local(), |i| xd[read(i)])])
}
fn expand_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    Ok(vec![Some(unbroadcast("input 0", g.value, g.block, &w)?)])
}

/// A slice's dim, start and step, and its length, for an input dim of
/// extent `n` (ATen's clamping of out-of-range bounds).
fn slice_bounds(
    attrs: &spmd_core::Attrs,
    rank: usize,
    n: usize,
) -> Result<(usize, usize, usize), Fail> {
    let d = axis(int(attrs, "dim", 0)?, rank)?;
    let step = int(attrs, "step", 1)?;
    if step < 1 {
        return Err(format!("a slice step of {step}"));
    }
    let clamp = |v: i64| -> usize {
        let v = if v < 0 { v + n as i64 } else { v };
        v.clamp(0, n as i64) as usize
    };
    // (The end bound decides the output's extent, which the call gives.)
    let start = clamp(int(attrs, "start", 0)?);
    Ok((d, start, step as usize))
}

fn slice(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let (d, start, step) =
        slice_bounds(call.attrs, x.rank(), x.shape[d_of(call.attrs, x.rank())?])?;
    for k in (0..x.rank()).filter(|&k| k != d) {
        same_range("input 0", &x, k, &out.block[k], k)?;
    }
    let (xs, xd) = (extents(x.block), x.value.data());
    let mut fail = None;
    let t = build(&out.local(), |i| {
        let g = start + (out.block[d].start + i[d]) * step;
        if !x.block[d].contains(&g) {
            fail.get_or_insert(format!(
                "the slice reads input 0 dim {d} at {g}, outside the [{}..{}) it holds",
                x.block[d].start, x.block[d].end
            ));
            return 0.0;
        }
        let mut j = i.to_vec();
        j[d] = g - x.block[d].start;
        xd[super::offset(&xs, &j)]
    });
    fail.map_or(Ok(vec![t]), Err)
}

fn d_of(attrs: &spmd_core::Attrs, rank: usize) -> Result<usize, Fail> {
    axis(int(attrs, "dim", 0)?, rank)
}

fn slice_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let (d, start, step) =
        slice_bounds(call.attrs, x.rank(), x.shape[d_of(call.attrs, x.rank())?])?;
    for k in (0..x.rank()).filter(|&k| k != d) {
        same_range("the output's gradient", &g, k, &w.block[k], k)?;
    }
    let ws = w.local();
    let mut out = Tensor::full(&ws, 0.0);
    let (gd, od) = (g.value.data(), out.data_mut());
    let mut n = 0;
    each(g.value.shape(), |i| {
        let p = start + (g.block[d].start + i[d]) * step;
        if w.block[d].contains(&p) {
            let mut j = i.to_vec();
            j[d] = p - w.block[d].start;
            od[super::offset(&ws, &j)] += gd[n];
        }
        n += 1;
    });
    Ok(vec![Some(out)])
}

/// Where each of `n` parts starts along a dim, from their extents.
fn offsets(extents: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut at = 0;
    extents
        .map(|e| {
            let s = at;
            at += e;
            s
        })
        .collect()
}

/// The element of `parts` (blocks of consecutive parts of one dim `d`,
/// part `k` starting at `starts[k]`) at global position `p` along `d` and
/// local index `i` elsewhere.
fn read_parts(
    parts: &[Arg<'_>],
    starts: &[usize],
    d: usize,
    p: usize,
    i: &[usize],
) -> Result<f64, Fail> {
    let k = starts.partition_point(|&s| s <= p).saturating_sub(1);
    let part = &parts[k];
    let local = p - starts[k];
    if !part.block[d].contains(&local) {
        return Err(format!(
            "the result needs part {k} dim {d} at {local}, outside the [{}..{}) held",
            part.block[d].start, part.block[d].end
        ));
    }
    let mut j = i.to_vec();
    j[d] = local - part.block[d].start;
    Ok(part.value.data()[super::offset(&extents(part.block), &j)])
}

fn cat(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let parts: Vec<Arg<'_>> = call.inputs.iter().flatten().copied().collect();
    let out = want(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, out.block.len())?;
    // ATen skips 1-d empty tensors in a concatenation.
    let parts: Vec<Arg<'_>> = parts.into_iter().filter(|p| p.shape != [0]).collect();
    for (k, p) in parts.iter().enumerate() {
        for e in (0..p.rank()).filter(|&e| e != d) {
            same_range(&format!("input {k}"), p, e, &out.block[e], e)?;
        }
    }
    let starts = offsets(parts.iter().map(|p| p.shape[d]));
    let mut fail = None;
    let t = build(&out.local(), |i| {
        read_parts(&parts, &starts, d, out.block[d].start + i[d], i).unwrap_or_else(|e| {
            fail.get_or_insert(e);
            0.0
        })
    });
    fail.map_or(Ok(vec![t]), Err)
}

fn cat_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, g.rank())?;
    let shapes: Vec<usize> = call
        .inputs
        .iter()
        .flatten()
        .map(|p| if p.shape == [0] { 0 } else { p.shape[d] })
        .collect();
    let starts = offsets(shapes.into_iter());
    let mut out = Vec::new();
    for (k, w) in call.input_grads.iter().enumerate() {
        let Some(w) = w else {
            out.push(None);
            continue;
        };
        if w.shape == [0] {
            out.push(Some(Tensor::full(&[0], 0.0)));
            continue;
        }
        let mut fail = None;
        let t = build(&w.local(), |i| {
            let p = starts[k] + w.block[d].start + i[d];
            read_parts(&[g], &[0], d, p, i).unwrap_or_else(|e| {
                fail.get_or_insert(e);
                0.0
            })
        });
        out.push(Some(fail.map_or(Ok(t), Err)?));
    }
    Ok(out)
}

fn split_with_sizes(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, x.rank())?;
    let sizes = ints(call.attrs, "split_sizes")?.ok_or("attribute `split_sizes` is missing")?;
    let starts = offsets(sizes.iter().map(|&s| s.max(0) as usize));
    call.outputs
        .iter()
        .enumerate()
        .map(|(k, out)| {
            for e in (0..x.rank()).filter(|&e| e != d) {
                same_range("input 0", &x, e, &out.block[e], e)?;
            }
            let mut fail = None;
            let t = build(&out.local(), |i| {
                let p = starts[k] + out.block[d].start + i[d];
                read_parts(&[x], &[0], d, p, i).unwrap_or_else(|e| {
                    fail.get_or_insert(e);
                    0.0
                })
            });
            fail.map_or(Ok(t), Err)
        })
        .collect()
}

fn split_with_sizes_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, x.rank())?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let sizes = ints(call.attrs, "split_sizes")?.ok_or("attribute `split_sizes` is missing")?;
    let starts = offsets(sizes.iter().map(|&s| s.max(0) as usize));
    let parts: Vec<Arg<'_>> = call.output_grads.to_vec();
    let mut fail = None;
    let t = build(&w.local(), |i| {
        read_parts(&parts, &starts, d, w.block[d].start + i[d], i).unwrap_or_else(|e| {
            fail.get_or_insert(e);
            0.0
        })
    });
    Ok(vec![Some(fail.map_or(Ok(t), Err)?)])
}

// -------------------------------------------------------- along one axis

fn cumsum(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, x.rank())?;
    whole("input 0", &x, d)?;
    let mut out = identity(call)?.remove(0);
    scan(&mut out, d, false);
    Ok(vec![out])
}

fn cumsum_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let g = dy(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, g.rank())?;
    whole("the output's gradient", &g, d)?;
    let mut out = g.value.clone();
    scan(&mut out, d, true);
    Ok(vec![Some(out)])
}

/// Running sums along dim `d`, from the end when `reverse`.
fn scan(t: &mut Tensor, d: usize, reverse: bool) {
    let shape = t.shape().to_vec();
    let stride: usize = shape[d + 1..].iter().product();
    let n = shape[d];
    let data = t.data_mut();
    for outer in 0..shape[..d].iter().product::<usize>() {
        for inner in 0..stride {
            let at = |k: usize| outer * n * stride + k * stride + inner;
            let mut acc = 0.0;
            for step in 0..n {
                let k = if reverse { n - 1 - step } else { step };
                acc += data[at(k)];
                data[at(k)] = acc;
            }
        }
    }
}

/// `aten.index.Tensor` with its index tensors on consecutive dims (the
/// others `None`): the result holds the dims before them, the index
/// tensors' broadcast shape, and the dims after.
fn index(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let slots: Vec<Option<Arg<'_>>> = call.inputs[1..].to_vec();
    let present: Vec<usize> = (0..slots.len()).filter(|&k| slots[k].is_some()).collect();
    let (Some(&first), Some(&last)) = (present.first(), present.last()) else {
        return Err("no index tensor".into());
    };
    if last - first + 1 != present.len() {
        return Err("index tensors on dims that are not consecutive".into());
    }
    let idx: Vec<Arg<'_>> = present
        .iter()
        .map(|&k| slots[k].expect("present"))
        .collect();
    let b = idx.iter().map(Arg::rank).max().unwrap_or(0);
    for d in first..=last {
        whole("input 0", &x, d)?;
    }
    for d in 0..first {
        same_range("input 0", &x, d, &out.block[d], d)?;
    }
    for d in last + 1..x.rank() {
        let e = d - (last + 1) + first + b;
        same_range("input 0", &x, d, &out.block[e], e)?;
    }
    let middle = &out.block[first..first + b];
    let readers: Vec<_> = idx
        .iter()
        .enumerate()
        .map(|(k, a)| broadcaster(&format!("index {k}"), a, middle))
        .collect::<Result<_, _>>()?;
    let xs = extents(x.block);
    let mut fail = None;
    let t = build(&out.local(), |i| {
        let mut j = Vec::with_capacity(x.rank());
        j.extend_from_slice(&i[..first]);
        for (k, (a, read)) in idx.iter().zip(&readers).enumerate() {
            let v = a.value.data()[read(&i[first..first + b])];
            let n = x.shape[first + k] as i64;
            let p = v as i64;
            let p = if p < 0 { p + n } else { p };
            if !(0..n).contains(&p) {
                fail.get_or_insert(format!(
                    "index {v} out of range for dim {} of {n}",
                    first + k
                ));
                return 0.0;
            }
            j.push(p as usize);
        }
        j.extend_from_slice(&i[first + b..]);
        x.value.data()[super::offset(&xs, &j)]
    });
    fail.map_or(Ok(vec![t]), Err)
}

// -------------------------------------------------------------- reduction

/// The reduced dims of `mean.dim` over a tensor of rank `rank`.
fn reduced(attrs: &spmd_core::Attrs, rank: usize) -> Result<Vec<bool>, Fail> {
    let mut r = vec![false; rank];
    match ints(attrs, "dim")? {
        None => r.iter_mut().for_each(|x| *x = true),
        Some(v) if v.is_empty() => r.iter_mut().for_each(|x| *x = true),
        Some(v) => {
            for d in v {
                r[axis(d, rank)?] = true;
            }
        }
    }
    Ok(r)
}

/// Where each input dim goes in the output (`None`: reduced away).
fn kept_dims(red: &[bool], keepdim: bool) -> Vec<Option<usize>> {
    let mut e = 0;
    red.iter()
        .map(|&r| {
            if r && !keepdim {
                None
            } else {
                e += 1;
                Some(e - 1)
            }
        })
        .collect()
}

fn mean_dim(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    sum_or_mean(call, true)
}

fn sum_dim(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    sum_or_mean(call, false)
}

/// The sum over the reduced dims of the block a device holds, divided by
/// their count there when `average`.
fn sum_or_mean(call: &Call<'_>, average: bool) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let out = want(call, 0)?;
    let red = reduced(call.attrs, x.rank())?;
    let keep = flag(call.attrs, "keepdim", false)?;
    let to = kept_dims(&red, keep);
    for (d, e) in to.iter().enumerate() {
        if let (Some(e), false) = (e, red[d]) {
            same_range("input 0", &x, d, &out.block[*e], *e)?;
        }
    }
    let xs = extents(x.block);
    let count: usize = xs
        .iter()
        .zip(&red)
        .filter(|(_, r)| **r)
        .map(|(n, _)| n)
        .product();
    let mut sum = Tensor::full(&out.local(), 0.0);
    let os = out.local();
    let mut n = 0;
    each(&xs, |i| {
        let j: Vec<usize> = i
            .iter()
            .enumerate()
            .filter_map(|(d, &v)| to[d].map(|_| if red[d] { 0 } else { v }))
            .collect();
        sum.data_mut()[super::offset(&os, &j)] += x.value.data()[n];
        n += 1;
    });
    if !average {
        return Ok(vec![sum]);
    }
    Ok(vec![sum.map(|s| s / count.max(1) as f64)])
}

fn mean_dim_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    sum_or_mean_grad(call, true)
}

fn sum_dim_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    sum_or_mean_grad(call, false)
}

/// Each element's gradient: its result's, shared over the whole reduced
/// count when `average`.
fn sum_or_mean_grad(call: &GradCall<'_>, average: bool) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let red = reduced(call.attrs, x.rank())?;
    let keep = flag(call.attrs, "keepdim", false)?;
    let to = kept_dims(&red, keep);
    for (d, e) in to.iter().enumerate() {
        if let (Some(e), false) = (e, red[d]) {
            same_range("the output's gradient", &g, *e, &w.block[d], d)?;
        }
    }
    let ws = w.local();
    // The grad op reads the input for its (global) shape alone: each
    // element's share is over the whole tensor's count.
    let count: usize = if average {
        w.shape
            .iter()
            .zip(&red)
            .filter(|(_, r)| **r)
            .map(|(n, _)| n)
            .product()
    } else {
        1
    };
    let gs = extents(g.block);
    Ok(vec![Some(build(&ws, |i| {
        let j: Vec<usize> = i
            .iter()
            .enumerate()
            .filter_map(|(d, &v)| to[d].map(|_| if red[d] { 0 } else { v }))
            .collect();
        g.value.data()[super::offset(&gs, &j)] / count.max(1) as f64
    }))])
}

// --------------------------------------------------------------- products

/// `a @ b` of two 2-d blocks whose contraction ranges agree, onto the
/// output's block (`ta`, `tb`: an operand stored transposed).
pub(super) fn product(
    a: &Arg<'_>,
    b: &Arg<'_>,
    ta: bool,
    tb: bool,
    out: &[Range<usize>],
) -> Result<Tensor, Fail> {
    let (am, ak) = if ta { (1, 0) } else { (0, 1) };
    let (bk, bn) = if tb { (1, 0) } else { (0, 1) };
    if a.block[ak] != b.block[bk] {
        return Err(format!(
            "the contraction: input 0 holds [{}..{}), input 1 holds [{}..{})",
            a.block[ak].start, a.block[ak].end, b.block[bk].start, b.block[bk].end
        ));
    }
    same_range("input 0", a, am, &out[0], 0)?;
    same_range("input 1", b, bn, &out[1], 1)?;
    matmul(a.value, b.value, ta, tb)
}

fn mm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (a, b) = (input(call, 0)?, input(call, 1)?);
    Ok(vec![product(&a, &b, false, false, want(call, 0)?.block)?])
}

/// The gradients of `out = a @ b` from `g = d out`: `da = g bᵀ`, `db = aᵀ g`.
fn product_grads(
    a: &Arg<'_>,
    b: &Arg<'_>,
    g: &Arg<'_>,
    wa: Option<&Want<'_>>,
    wb: Option<&Want<'_>>,
) -> Result<[Option<Tensor>; 2], Fail> {
    let da = match wa {
        Some(w) => Some(product(g, b, false, true, w.block)?),
        None => None,
    };
    let db = match wb {
        Some(w) => Some(product(a, g, true, false, w.block)?),
        None => None,
    };
    Ok([da, db])
}

fn mm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (a, b, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let w = |k: usize| call.input_grads.get(k).and_then(|w| w.as_ref());
    Ok(product_grads(&a, &b, &g, w(0), w(1))?.to_vec())
}

fn addmm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (bias, a, b) = (input(call, 0)?, input(call, 1)?, input(call, 2)?);
    let out = want(call, 0)?;
    let (beta, alpha) = (
        num(call.attrs, "beta", 1.0)?,
        num(call.attrs, "alpha", 1.0)?,
    );
    let p = product(&a, &b, false, false, out.block)?;
    let read = broadcaster("input 0", &bias, out.block)?;
    let bd = bias.value.data();
    let mut n = 0;
    Ok(vec![build(&out.local(), |i| {
        let v = beta * bd[read(i)] + alpha * p.data()[n];
        n += 1;
        v
    })])
}

fn addmm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (a, b, g) = (saved(call, 1)?, saved(call, 2)?, dy(call, 0)?);
    let (beta, alpha) = (
        num(call.attrs, "beta", 1.0)?,
        num(call.attrs, "alpha", 1.0)?,
    );
    let w = |k: usize| call.input_grads.get(k).and_then(|w| w.as_ref());
    let dbias = match w(0) {
        Some(wb) => Some(unbroadcast("input 0", g.value, g.block, wb)?.map(|v| beta * v)),
        None => None,
    };
    let [da, db] = product_grads(&a, &b, &g, w(1), w(2))?;
    Ok(vec![
        dbias,
        da.map(|t| t.map(|v| alpha * v)),
        db.map(|t| t.map(|v| alpha * v)),
    ])
}

/// `transformers.grouped_mm_fallback(input, weight, offs)`: row `t` of
/// `input` `[rows, k]` times expert `e`'s `weight[e]` `[k, n]`, `e` the
/// first expert whose cumulative row count `offs[e]` is past `t`. Rows and
/// experts are whole (`offs` holds global row positions); `k` may be split
/// alike in `input` and `weight` (a partial sum), and `n` too.
struct Grouped<'a> {
    input: Arg<'a>,
    weight: Arg<'a>,
    /// Each row's expert.
    expert: Vec<Option<usize>>,
}

impl<'a> Grouped<'a> {
    fn of(inputs: &[Option<Arg<'a>>]) -> Result<Grouped<'a>, Fail> {
        let get = |i: usize| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .ok_or_else(|| format!("input {i} is missing"))
        };
        let (input, weight, offs) = (get(0)?, get(1)?, get(2)?);
        if input.rank() != 2 || weight.rank() != 3 || offs.rank() != 1 {
            return Err(
                "grouped_mm_fallback takes [rows, k], [experts, k, n] and [experts]".into(),
            );
        }
        whole("input 0", &input, 0)?;
        whole("input 1", &weight, 0)?;
        whole("input 2", &offs, 0)?;
        if input.block[1] != weight.block[1] {
            return Err(format!(
                "the contraction: input 0 holds [{}..{}), input 1 holds [{}..{})",
                input.block[1].start,
                input.block[1].end,
                weight.block[1].start,
                weight.block[1].end
            ));
        }
        let ends = offs.value.data();
        let expert = (0..input.shape[0])
            .map(|t| ends.iter().position(|&end| (t as f64) < end))
            .collect();
        Ok(Grouped {
            input,
            weight,
            expert,
        })
    }
}

fn grouped_mm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let gm = Grouped::of(call.inputs)?;
    let out = want(call, 0)?;
    same_range("input 0", &gm.input, 0, &out.block[0], 0)?;
    same_range("input 1", &gm.weight, 2, &out.block[1], 1)?;
    let (k, n) = (gm.weight.value.shape()[1], gm.weight.value.shape()[2]);
    let (x, w) = (gm.input.value.data(), gm.weight.value.data());
    Ok(vec![build(&out.local(), |i| {
        let Some(e) = gm.expert[i[0]] else {
            return 0.0;
        };
        (0..k)
            .map(|c| x[i[0] * k + c] * w[(e * k + c) * n + i[1]])
            .sum()
    })])
}

fn grouped_mm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let gm = Grouped::of(call.inputs)?;
    let g = dy(call, 0)?;
    same_range("the output's gradient", &g, 0, &gm.input.block[0], 0)?;
    same_range("the output's gradient", &g, 1, &gm.weight.block[2], 1)?;
    let (k, n) = (gm.weight.value.shape()[1], gm.weight.value.shape()[2]);
    let (x, w, gd) = (
        gm.input.value.data(),
        gm.weight.value.data(),
        g.value.data(),
    );
    let want = |i: usize| call.input_grads.get(i).cloned().flatten();
    let dx = want(0).map(|wx| {
        build(&wx.local(), |i| match gm.expert[i[0]] {
            Some(e) => (0..n)
                .map(|c| gd[i[0] * n + c] * w[(e * k + i[1]) * n + c])
                .sum(),
            None => 0.0,
        })
    });
    let dw = want(1).map(|ww| {
        build(&ww.local(), |i| {
            (0..gm.expert.len())
                .filter(|&t| gm.expert[t] == Some(i[0]))
                .map(|t| x[t * k + i[1]] * gd[t * n + i[2]])
                .sum()
        })
    });
    Ok(vec![dx, dw, None])
}

// ------------------------------------------------------------- embedding

/// `out[.., c] = table[ids[..], c]`: a device holding rows `[r0..r1)` of
/// the table gives zeros for the ids it does not hold (its part of a sum
/// over the row split).
pub(super) fn lookup(table: &Arg<'_>, ids: &Arg<'_>, out: &Want<'_>) -> Result<Tensor, Fail> {
    let r = ids.rank();
    if out.block.len() != r + 1 {
        return Err(format!(
            "ids of rank {r} for a result of rank {}",
            out.block.len()
        ));
    }
    for d in 0..r {
        same_range("the ids", ids, d, &out.block[d], d)?;
    }
    same_range("the table", table, 1, &out.block[r], r)?;
    let rows = table.block[0].clone();
    let width = table.value.shape()[1];
    let (td, id) = (table.value.data(), ids.value.data());
    let mut fail = None;
    let t = build(&out.local(), |i| {
        let k = super::offset(ids.value.shape(), &i[..r]);
        let v = id[k];
        if v < 0.0 || v >= table.shape[0] as f64 {
            fail.get_or_insert(format!("id {v} out of range for {} rows", table.shape[0]));
            return 0.0;
        }
        let row = v as usize;
        if rows.contains(&row) {
            td[(row - rows.start) * width + i[r]]
        } else {
            0.0
        }
    });
    fail.map_or(Ok(t), Err)
}

/// The table's gradient: each output row's gradient added to its id's row
/// (the rows a device holds), `padding` rows left out.
pub(super) fn lookup_grad(
    ids: &Arg<'_>,
    g: &Arg<'_>,
    w: &Want<'_>,
    padding: Option<usize>,
) -> Result<Tensor, Fail> {
    let r = ids.rank();
    for d in 0..r {
        same_range("the ids", ids, d, &g.block[d], d)?;
    }
    same_range("the output's gradient", g, r, &w.block[1], 1)?;
    let rows = w.block[0].clone();
    let width = g.value.shape()[r];
    let mut out = Tensor::full(&w.local(), 0.0);
    let od = out.data_mut();
    for (k, &v) in ids.value.data().iter().enumerate() {
        let row = v as usize;
        if v < 0.0 || !rows.contains(&row) || Some(row) == padding {
            continue;
        }
        for c in 0..width {
            od[(row - rows.start) * width + c] += g.value.data()[k * width + c];
        }
    }
    Ok(out)
}

fn padding(attrs: &spmd_core::Attrs) -> Result<Option<usize>, Fail> {
    let p = int(attrs, "padding_idx", -1)?;
    Ok((p >= 0).then_some(p as usize))
}

fn embedding(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (table, ids) = (input(call, 0)?, input(call, 1)?);
    Ok(vec![lookup(&table, &ids, want(call, 0)?)?])
}

fn embedding_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (ids, g) = (saved(call, 1)?, dy(call, 0)?);
    let dw = match call.input_grads.first().cloned().flatten() {
        Some(w) => Some(lookup_grad(&ids, &g, &w, padding(call.attrs)?)?),
        None => None,
    };
    Ok(vec![dw, None])
}

// ------------------------------------------------------------ layer norm

/// Rows of a layer norm: the dims before `begin` index rows, the dims from
/// `begin` on (held whole) make one row. `out`, then each row's mean and
/// inverse standard deviation.
pub(super) fn normalize(
    x: &Arg<'_>,
    w: Option<&Arg<'_>>,
    b: Option<&Arg<'_>>,
    begin: usize,
    eps: f64,
) -> Result<(Tensor, Vec<f64>, Vec<f64>), Fail> {
    for d in begin..x.rank() {
        whole("the input", x, d)?;
    }
    let n: usize = x.shape[begin..].iter().product();
    for (what, p) in [("the weight", w), ("the bias", b)] {
        if let Some(p) = p
            && p.value.len() != n
        {
            return Err(format!(
                "{what} holds {} of the {n} values of a row",
                p.value.len()
            ));
        }
    }
    let rows = x.value.len() / n.max(1);
    let xd = x.value.data();
    let (mut out, mut mean, mut rstd) = (vec![0.0; xd.len()], vec![0.0; rows], vec![0.0; rows]);
    for r in 0..rows {
        let row = &xd[r * n..(r + 1) * n];
        let m = row.iter().sum::<f64>() / n as f64;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / n as f64;
        let s = 1.0 / (v + eps).sqrt();
        for j in 0..n {
            let scale = w.map_or(1.0, |w| w.value.data()[j]);
            let shift = b.map_or(0.0, |b| b.value.data()[j]);
            out[r * n + j] = (row[j] - m) * s * scale + shift;
        }
        (mean[r], rstd[r]) = (m, s);
    }
    Ok((Tensor::new(x.value.shape(), out), mean, rstd))
}

/// The gradients of [`normalize`]: the input's, the weight's and the bias's
/// (summed over the rows held), from the output's gradient and, when given,
/// the gradients of each row's mean and of its inverse standard deviation
/// (`dstd_is_var`: the second statistic is the variance instead).
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize_grad(
    x: &Arg<'_>,
    w: Option<&Arg<'_>>,
    g: &Arg<'_>,
    dmean: Option<&[f64]>,
    dstat: Option<&[f64]>,
    dstat_is_var: bool,
    begin: usize,
    eps: f64,
) -> Result<[Tensor; 3], Fail> {
    for d in 0..x.rank() {
        same_range("the output's gradient", g, d, &x.block[d], d)?;
    }
    let (_, mean, rstd) = normalize(x, w, None, begin, eps)?;
    let n: usize = x.shape[begin..].iter().product();
    let rows = mean.len();
    let (xd, gd) = (x.value.data(), g.value.data());
    let (mut dx, mut dw, mut db) = (vec![0.0; xd.len()], vec![0.0; n], vec![0.0; n]);
    for r in 0..rows {
        let (m, s) = (mean[r], rstd[r]);
        let at = r * n..(r + 1) * n;
        let (row, gr) = (&xd[at.clone()], &gd[at]);
        let xhat: Vec<f64> = row.iter().map(|a| (a - m) * s).collect();
        let gs: Vec<f64> = (0..n)
            .map(|j| gr[j] * w.map_or(1.0, |w| w.value.data()[j]))
            .collect();
        let mg = gs.iter().sum::<f64>() / n as f64;
        let mgx = gs.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        for j in 0..n {
            let mut d = s * (gs[j] - mg - xhat[j] * mgx);
            if let Some(dm) = dmean {
                d += dm[r] / n as f64;
            }
            if let Some(ds) = dstat {
                // d rstd / dx = -rstd³ (x - mean) / n; d var / dx = 2 (x - mean) / n.
                let dv = 2.0 * (row[j] - m) / n as f64;
                d += ds[r]
                    * if dstat_is_var {
                        dv
                    } else {
                        -0.5 * s * s * s * dv
                    };
            }
            dx[r * n + j] = d;
            dw[j] += gr[j] * xhat[j];
            db[j] += gr[j];
        }
    }
    let ps = &x.shape[begin..];
    Ok([
        Tensor::new(x.value.shape(), dx),
        Tensor::new(ps, dw),
        Tensor::new(ps, db),
    ])
}

fn norm_begin(call_attrs: &spmd_core::Attrs, rank: usize) -> Result<usize, Fail> {
    let shape =
        ints(call_attrs, "normalized_shape")?.ok_or("attribute `normalized_shape` is missing")?;
    rank.checked_sub(shape.len())
        .ok_or_else(|| format!("a normalized shape of {} dims over {rank}", shape.len()))
}

fn layer_norm(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let (w, b) = (
        call.inputs.get(1).copied().flatten(),
        call.inputs.get(2).copied().flatten(),
    );
    let begin = norm_begin(call.attrs, x.rank())?;
    let eps = num(call.attrs, "eps", 1e-5)?;
    let (out, mean, rstd) = normalize(&x, w.as_ref(), b.as_ref(), begin, eps)?;
    let stat = |v: Vec<f64>, o: usize| -> Result<Tensor, Fail> {
        let shape = want(call, o)?.local();
        if shape.iter().product::<usize>() != v.len() {
            return Err(format!("output {o}'s block {shape:?} for {} rows", v.len()));
        }
        Ok(Tensor::new(&shape, v))
    };
    Ok(vec![out, stat(mean, 1)?, stat(rstd, 2)?])
}

fn layer_norm_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let w = call.inputs.get(1).copied().flatten();
    let begin = norm_begin(call.attrs, x.rank())?;
    let eps = num(call.attrs, "eps", 1e-5)?;
    let g = dy(call, 0)?;
    let stats = |o: usize| call.output_grads.get(o).map(|a| a.value.data());
    let [dx, dw, db] = normalize_grad(&x, w.as_ref(), &g, stats(1), stats(2), false, begin, eps)?;
    let pick = |k: usize, t: Tensor| call.input_grads.get(k).cloned().flatten().map(|_| t);
    Ok(vec![pick(0, dx), pick(1, dw), pick(2, db)])
}

// ------------------------------------------------------------- attention

/// The dims of attention blocks in ATen's layout: q `[b, hq, s, d]`, k
/// `[b, hk, t, d]`, v `[b, hk, t, e]`, each kv head serving `rep`
/// consecutive query heads (global numbering: a device's first query head
/// is `h0`, its first kv head `k0`).
struct Heads {
    b: usize,
    hq: usize,
    hk: usize,
    s: usize,
    t: usize,
    d: usize,
    e: usize,
    rep: usize,
    h0: usize,
    k0: usize,
    /// Global query and key positions of the first local ones.
    s0: usize,
    t0: usize,
    /// Global sequence lengths (for a causal mask's alignment).
    s_all: usize,
    t_all: usize,
}

fn heads(q: &Arg<'_>, k: &Arg<'_>, v: &Arg<'_>) -> Result<Heads, Fail> {
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        return Err("attention of tensors other than 4-d".into());
    }
    same_range("k", k, 0, &q.block[0], 0)?;
    same_range("v", v, 0, &q.block[0], 0)?;
    whole("q", q, 3)?;
    whole("k", k, 3)?;
    whole("k", k, 2)?;
    same_range("v", v, 2, &k.block[2], 2)?;
    same_range("v", v, 1, &k.block[1], 1)?;
    let (hq, hk) = (q.shape[1], k.shape[1]);
    if hk == 0 || hq % hk != 0 {
        return Err(format!("{hq} query heads for {hk} kv heads"));
    }
    let rep = hq / hk;
    let h = q.block[1].clone();
    // Every query head held reads a kv head held.
    if h.start < h.end && (h.start / rep < k.block[1].start || (h.end - 1) / rep >= k.block[1].end)
    {
        return Err(format!(
            "query heads [{}..{}) read kv heads outside the [{}..{}) held",
            h.start, h.end, k.block[1].start, k.block[1].end
        ));
    }
    let (ql, kl, vl) = (extents(q.block), extents(k.block), extents(v.block));
    Ok(Heads {
        b: ql[0],
        hq: ql[1],
        hk: kl[1],
        s: ql[2],
        t: kl[2],
        d: ql[3],
        e: vl[3],
        rep,
        h0: h.start,
        k0: k.block[1].start,
        s0: q.block[2].start,
        t0: k.block[2].start,
        s_all: q.shape[2],
        t_all: k.shape[2],
    })
}

/// The probabilities `[b, hq, s, t]` of the local query heads.
fn probabilities(
    call_attrs: &spmd_core::Attrs,
    q: &Arg<'_>,
    k: &Arg<'_>,
    mask: Option<&Arg<'_>>,
    n: &Heads,
) -> Result<Vec<f64>, Fail> {
    let scale = num(call_attrs, "scale", 1.0 / (q.shape[3] as f64).sqrt())?;
    let causal = flag(call_attrs, "is_causal", false)?;
    if num(call_attrs, "dropout_p", 0.0)? != 0.0 {
        return Err("attention with dropout".into());
    }
    let scores_block = [
        q.block[0].clone(),
        q.block[1].clone(),
        q.block[2].clone(),
        k.block[2].clone(),
    ];
    let read_mask = match mask {
        Some(m) => Some(broadcaster("the mask", m, &scores_block)?),
        None => None,
    };
    let (qd, kd) = (q.value.data(), k.value.data());
    let mut p = vec![0.0; n.b * n.hq * n.s * n.t];
    for b in 0..n.b {
        for h in 0..n.hq {
            let kh = (n.h0 + h) / n.rep - n.k0;
            for s in 0..n.s {
                let row = &mut p[((b * n.hq + h) * n.s + s) * n.t..][..n.t];
                for (t, x) in row.iter_mut().enumerate() {
                    let mut dot = 0.0;
                    for d in 0..n.d {
                        dot += qd[((b * n.hq + h) * n.s + s) * n.d + d]
                            * kd[((b * n.hk + kh) * n.t + t) * n.d + d];
                    }
                    let mut score = dot * scale;
                    if let (Some(m), Some(read)) = (mask, &read_mask) {
                        let v = m.value.data()[read(&[b, h, s, t])];
                        score = match m.elem {
                            Elem::Bool => {
                                if v != 0.0 {
                                    score
                                } else {
                                    f64::NEG_INFINITY
                                }
                            }
                            _ => score + v,
                        };
                    }
                    let (gs, gt) = (n.s0 + s, n.t0 + t);
                    if causal && gt + n.s_all > gs + n.t_all {
                        score = f64::NEG_INFINITY;
                    }
                    *x = score;
                }
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|x| (x - max).exp()).sum();
                for x in row.iter_mut() {
                    *x = (*x - max).exp() / sum;
                }
            }
        }
    }
    Ok(p)
}

fn sdpa(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (q, k, v) = (input(call, 0)?, input(call, 1)?, input(call, 2)?);
    let mask = call.inputs.get(3).copied().flatten();
    let out = want(call, 0)?;
    let n = heads(&q, &k, &v)?;
    for d in 0..3 {
        same_range("q", &q, d, &out.block[d], d)?;
    }
    same_range("v", &v, 3, &out.block[3], 3)?;
    let p = probabilities(call.attrs, &q, &k, mask.as_ref(), &n)?;
    let vd = v.value.data();
    Ok(vec![build(&[n.b, n.hq, n.s, n.e], |i| {
        let [b, h, s, e] = [i[0], i[1], i[2], i[3]];
        let kh = (n.h0 + h) / n.rep - n.k0;
        (0..n.t)
            .map(|t| {
                p[((b * n.hq + h) * n.s + s) * n.t + t] * vd[((b * n.hk + kh) * n.t + t) * n.e + e]
            })
            .sum()
    })])
}

fn sdpa_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (q, k, v) = (saved(call, 0)?, saved(call, 1)?, saved(call, 2)?);
    let mask = call.inputs.get(3).copied().flatten();
    let g = dy(call, 0)?;
    let n = heads(&q, &k, &v)?;
    for d in 0..3 {
        same_range("the output's gradient", &g, d, &q.block[d], d)?;
    }
    same_range("the output's gradient", &g, 3, &v.block[3], 3)?;
    let scale = num(call.attrs, "scale", 1.0 / (q.shape[3] as f64).sqrt())?;
    let p = probabilities(call.attrs, &q, &k, mask.as_ref(), &n)?;
    let (qd, kd, vd, gd) = (
        q.value.data(),
        k.value.data(),
        v.value.data(),
        g.value.data(),
    );
    let (mut dq, mut dk, mut dv) = (
        vec![0.0; qd.len()],
        vec![0.0; kd.len()],
        vec![0.0; vd.len()],
    );
    // The scores' gradient, for a float mask added to them.
    let mut dscores = vec![0.0; p.len()];
    for b in 0..n.b {
        for h in 0..n.hq {
            let kh = (n.h0 + h) / n.rep - n.k0;
            for s in 0..n.s {
                let pr = &p[((b * n.hq + h) * n.s + s) * n.t..][..n.t];
                let go = &gd[((b * n.hq + h) * n.s + s) * n.e..][..n.e];
                // dP = dO · vᵀ; dS = P ∘ (dP - Σ dP ∘ P).
                let dp: Vec<f64> = (0..n.t)
                    .map(|t| {
                        (0..n.e)
                            .map(|e| go[e] * vd[((b * n.hk + kh) * n.t + t) * n.e + e])
                            .sum()
                    })
                    .collect();
                let c: f64 = dp.iter().zip(pr).map(|(a, b)| a * b).sum();
                for t in 0..n.t {
                    dscores[((b * n.hq + h) * n.s + s) * n.t + t] = pr[t] * (dp[t] - c);
                    let ds = pr[t] * (dp[t] - c) * scale;
                    for d in 0..n.d {
                        dq[((b * n.hq + h) * n.s + s) * n.d + d] +=
                            ds * kd[((b * n.hk + kh) * n.t + t) * n.d + d];
                        dk[((b * n.hk + kh) * n.t + t) * n.d + d] +=
                            ds * qd[((b * n.hq + h) * n.s + s) * n.d + d];
                    }
                    for e in 0..n.e {
                        dv[((b * n.hk + kh) * n.t + t) * n.e + e] += pr[t] * go[e];
                    }
                }
            }
        }
    }
    let pick = |i: usize, shape: &[usize], data: Vec<f64>| {
        call.input_grads
            .get(i)
            .cloned()
            .flatten()
            .map(|_| Tensor::new(shape, data))
    };
    let mut out = vec![
        pick(0, q.value.shape(), dq),
        pick(1, k.value.shape(), dk),
        pick(2, v.value.shape(), dv),
    ];
    // A float mask is added to the scores: its gradient is theirs, summed
    // over the dims it broadcasts along. A boolean mask has none (0).
    if let Some(w) = call.input_grads.get(3) {
        out.push(match (w, mask) {
            (Some(w), Some(m)) if m.elem == Elem::Float => {
                let block = [
                    q.block[0].clone(),
                    q.block[1].clone(),
                    q.block[2].clone(),
                    k.block[2].clone(),
                ];
                let ds = Tensor::new(&[n.b, n.hq, n.s, n.t], dscores);
                Some(unbroadcast("the mask", &ds, &block, w)?)
            }
            (Some(w), _) => Some(Tensor::full(&w.local(), 0.0)),
            (None, _) => None,
        });
    }
    Ok(out)
}
