//! ATen's operators as `torch.export` lowers a model to core ATen IR
//! (`tools/torch_export`), under ATen's names and argument names.
//!
//! Where an ATen op is a library op under another name, `lib.rs` registers
//! that rule again under the ATen name, reading ATen's argument names
//! (`RuleInfo::reading`): `aten.permute` is `transpose` reading `dims` as
//! `perm`. This module declares the ones whose operands or results differ:
//! the table comes first in `aten.embedding`, `aten.native_layer_norm`'s
//! statistics keep the normalized dims as `1`s, `aten.addmm` adds its
//! first operand, `aten.mean.dim` averages.
//!
//! A binary pointwise op whose `other` is a Python number is exported as
//! the ATen overload for that, `aten.add.Scalar` (one tensor operand), so
//! each ATen name has one arity.

use spmd_core::notation::Pos;
use spmd_core::{Call, SpmdError, spmd_rule};

/// `aten.embedding(weight, indices, padding_idx, scale_grad_by_freq,
/// sparse)`: `out[..., k] = weight[indices[...], k]`, the one-hot einsum
/// with the table first. A table sharded by rows leaves the output partial
/// (each device contributes the rows it holds, zeros elsewhere).
#[spmd_rule(
    name = "aten.embedding",
    einsum = "jk,...->...k",
    merge(conflicts = "strict"),
    inputs(weight, indices),
    outputs(out),
    // The ids have no gradient; the table's scatters the output grad by the
    // ids and never reads the table.
    grad(none(indices), ignores(weight))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtenEmbedding {
    #[spmd(default = -1)]
    pub padding_idx: i64,
    #[spmd(default)]
    pub scale_grad_by_freq: bool,
    #[spmd(default)]
    pub sparse: bool,
}

/// `aten.mean.dim(self, dim, keepdim, dtype)`: the average over `dim`
/// (every dim when it is empty or absent); a sharded averaged dim leaves the
/// output partial `Avg`.
#[spmd_rule(
    name = "aten.mean.dim",
    einsum = "@->@{reduced():-}",
    case(when = self.keepdim, einsum = "@->@{reduced():1}"),
    partial(reduce = "avg"),
    inputs(input),
    outputs(out),
    // The grad spreads the output grad evenly and never reads the input.
    grad(ignores(input))
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenMeanDim {
    #[spmd(default)]
    pub dim: Vec<i64>,
    #[spmd(default)]
    pub keepdim: bool,
}

/// ATen's reduced dims: `dim`, or every dim when it is empty (or absent).
fn reduced_dims(dim: &[i64]) -> Pos<'_> {
    if dim.is_empty() {
        Pos::All
    } else {
        Pos::List(dim)
    }
}

impl AtenMeanDim {
    fn reduced(&self) -> Pos<'_> {
        reduced_dims(&self.dim)
    }
}

/// `aten.select.int(self, dim, index)`: the slice at `index` along `dim`,
/// which the output drops. The selected dim is never sharded (one device's
/// block holds the index, the others none of it): it is gathered first.
/// Selecting is linear, so a `Sum` partial input stays partial.
#[spmd_rule(
    name = "aten.select.int",
    einsum = "@{dim:a}->@{dim:-}",
    merge(never_sharded = "a"),
    partial(backward = "reset", inputs = "linear"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtenSelect {
    pub dim: i64,
    pub index: i64,
}

/// `aten.native_layer_norm(input, normalized_shape, weight, bias, eps)` →
/// `(out, mean, rstd)`: normalizes over the last `len(normalized_shape)`
/// dims, which are never sharded; the statistics keep them as `1`s.
#[spmd_rule(
    name = "aten.native_layer_norm",
    einsum = "@{normalized()..:1},*,*->@{normalized()..:1},@{normalized()..:1},@{normalized()..:1}",
    inputs(input, weight, bias),
    outputs(out, mean, rstd),
    optional(weight, bias),
    grad(inputs(input, weight, bias, mean, rstd), of(out))
)]
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AtenNativeLayerNorm {
    pub normalized_shape: Vec<i64>,
}

impl AtenNativeLayerNorm {
    /// The first normalized dim, counted from the end.
    fn normalized(&self) -> Pos<'_> {
        Pos::Int(-(self.normalized_shape.len() as i64))
    }
}

/// `aten.addmm(self, mat1, mat2, beta, alpha)`: `beta·self + alpha·(mat1 @
/// mat2)`, `self` a bias added to the product (`[n]` or `[m, n]`): with the
/// contraction sharded the product is partial, and so must the bias be.
#[spmd_rule(
    name = "aten.addmm",
    einsum = "+n,mk,kn->mn",
    case(when = call.input_rank(0) == Some(2), einsum = "+mn,mk,kn->mn"),
    inputs(input, mat1, mat2),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtenAddmm {
    #[spmd(default)]
    pub beta: Option<f64>,
    #[spmd(default)]
    pub alpha: Option<f64>,
}

/// `aten.slice.Tensor(self, dim, start, end, step)`: the sliced dim counts
/// global positions, so it is never sharded; the others pass through.
#[spmd_rule(
    name = "aten.slice.Tensor",
    einsum = "@{dim:1}->@{dim:1}",
    partial(backward = "reset"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenSlice {
    #[spmd(default)]
    pub dim: i64,
    #[spmd(default)]
    pub start: Option<i64>,
    #[spmd(default)]
    pub end: Option<i64>,
    #[spmd(default)]
    pub step: Option<i64>,
}

/// `aten.expand(self, size, implicit)`: broadcasts `self` to `size`, new
/// dims in front. The new dims and the expanded size-1 dims are written `1`
/// (never sharded: every device holds the whole broadcast), the other dims
/// pass through.
#[spmd_rule(
    name = "aten.expand",
    einsum = "@{ones(call):1}->@{ones(call):1; leading(call):+1}",
    validate = Self::check,
    partial(backward = "reset"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenExpand {
    pub size: Vec<i64>,
    #[spmd(default)]
    pub implicit: bool,
}

impl AtenExpand {
    /// The input's size-1 dims (those `size` may expand).
    fn ones(&self, call: &Call<'_>) -> Pos<'_> {
        let shape = call.input_shape(0).unwrap_or(&[]);
        Pos::Mask(
            shape
                .iter()
                .enumerate()
                .filter(|&(d, &n)| n == 1 && d < 64)
                .fold(0, |m, (d, _)| m | 1 << d),
        )
    }

    /// The new leading dims, counted in the output.
    fn leading(&self, call: &Call<'_>) -> Pos<'_> {
        let rank = call.input_rank(0).unwrap_or(0);
        let new = self.size.len().saturating_sub(rank).min(63);
        Pos::Mask((1u64 << new) - 1)
    }

    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        let rank = call.input_rank(0).unwrap_or(0);
        if self.size.len() < rank {
            return Err(SpmdError::InvalidAttr {
                op: "aten.expand",
                attr: "size".into(),
                message: format!(
                    "expands a tensor of rank {rank} to {} dims: it cannot drop dims",
                    self.size.len()
                ),
            });
        }
        Ok(())
    }
}

/// `aten.scaled_dot_product_attention(query, key, value, attn_mask,
/// dropout_p, is_causal, scale, enable_gqa)`: `softmax(q·kᵀ·scale + mask)·v`
/// over `[batch, heads, seq, head_dim]` tensors. Batch and heads split work;
/// the sequences and head dims are never sharded (each row's softmax reads
/// all of `t`). With fewer key/value heads (`enable_gqa`), each serves a
/// group of query heads: the query heads are the compound `(hg)`, and only
/// the key/value head `h` may be sharded. The mask (`[b, h, s, t]`, or with
/// size-1 dims that broadcast) follows the others.
#[spmd_rule(
    name = "aten.scaled_dot_product_attention",
    einsum = "bhsd,bhtd,bhte,|bhst|*->bhse",
    case(
        when = grouped(&call),
        einsum = "b(hg)sd,bhtd,bhte,|b(hg)st|*->b(hg)se"
    ),
    inputs(query, key, value, attn_mask),
    outputs(out),
    optional(attn_mask),
    merge(never_sharded = "stde", unsharded_claims = "ignore", follows(attn_mask)),
    partial(backward = "reset")
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtenScaledDotProductAttention {
    #[spmd(default)]
    pub dropout_p: f64,
    #[spmd(default)]
    pub is_causal: bool,
    #[spmd(default)]
    pub scale: Option<f64>,
    #[spmd(default)]
    pub enable_gqa: bool,
}

/// Key/value heads fewer than the query's (dim 1 of `[b, h, s, d]`).
fn grouped(call: &Call<'_>) -> bool {
    let heads = |i: usize| call.input_shape(i).and_then(|s| s.get(1).copied());
    heads(1).is_some() && heads(1) != heads(0)
}

/// `aten.histc(self, bins, min, max)`: how many of the input's elements
/// fall in each of `bins` equal bins over `[min, max]`. Counting adds up
/// over blocks, so every input dim may be sharded and the counts are then
/// partial sums over those mesh dims (a device counts its block). With
/// `min == max` the range is the data's own minimum and maximum, which one
/// block does not know: the input is then never sharded. The bins dim is
/// never sharded. Counts have no gradient.
#[spmd_rule(
    name = "aten.histc",
    einsum = "@->1",
    case(when = self.min == self.max, einsum = "*->1"),
    inputs(input),
    outputs(out),
    grad(none(input))
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtenHistc {
    #[spmd(default = 100)]
    pub bins: i64,
    #[spmd(default)]
    pub min: f64,
    #[spmd(default)]
    pub max: f64,
}

/// `aten.bincount(self, weights, minlength)`: how many times each value
/// occurs in the 1-d input of non-negative integers (or, with `weights`,
/// the sum of their weights). Like `histc`, counting adds up over blocks:
/// the input (and its weights alike) may be sharded, and the counts are
/// then partial sums. The counts' dim is never sharded. No gradient.
#[spmd_rule(
    name = "aten.bincount",
    einsum = "i,i->1",
    inputs(input, weights),
    outputs(out),
    optional(weights),
    grad(none(input, weights))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenBincount {
    #[spmd(default)]
    pub minlength: i64,
}

/// `transformers.grouped_mm_fallback(input, weight, offs)`: the experts'
/// products of a mixture-of-experts layer, `out[t] = input[t] @ weight[e]`
/// for the rows `t` that `offs` (cumulative row counts, `[experts]`)
/// assigns to expert `e`. The rows and the experts are never sharded (a
/// block of rows or of experts would read `offs`, which holds global row
/// positions, wrongly); the contracted dim may be, leaving the output
/// partial, and the output dim too: tensor parallelism inside each expert.
/// `offs` has no gradient.
#[spmd_rule(
    name = "transformers.grouped_mm_fallback",
    einsum = "tk,ekn,e->tn",
    merge(never_sharded = "te"),
    partial(backward = "reset"),
    inputs(input, weight, offs),
    outputs(out),
    grad(none(offs))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GroupedMmFallback {}

/// `aten.max.dim(self, dim, keepdim)` → `(values, indices)`: the largest
/// element along `dim` and its position. The dim is never sharded (a
/// block's position is not the global one); the others keep their
/// sharding.
#[spmd_rule(
    name = "aten.max.dim",
    einsum = "@{dim:a}->@{dim:-},@{dim:-}",
    case(when = self.keepdim, einsum = "@{dim:a}->@{dim:1},@{dim:1}"),
    merge(never_sharded = "a"),
    partial(backward = "reset"),
    inputs(input),
    outputs(values, indices),
    grad(inputs(input, indices), of(values))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenMaxDim {
    pub dim: i64,
    #[spmd(default)]
    pub keepdim: bool,
}

/// `aten.var.correction(self, dim, correction, keepdim)`: the variance
/// over `dim` (every dim when it is absent), which is not a sum of the
/// blocks' variances: those dims are never sharded.
#[spmd_rule(
    name = "aten.var.correction",
    einsum = "@{reduced():1}->@{reduced():-}",
    case(when = self.keepdim, einsum = "@{reduced():1}->@{reduced():1}"),
    partial(backward = "reset"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtenVarCorrection {
    #[spmd(default)]
    pub dim: Vec<i64>,
    #[spmd(default)]
    pub correction: Option<f64>,
    #[spmd(default)]
    pub keepdim: bool,
}

impl AtenVarCorrection {
    fn reduced(&self) -> Pos<'_> {
        reduced_dims(&self.dim)
    }
}

/// `aten.constant_pad_nd(self, pad, value)`: `pad` holds a `(before,
/// after)` pair per dim from the last dim backwards (it may cover only the
/// last few; a negative side crops). A padded dim is never sharded (the
/// padding lands at the global edges, which only the first and last blocks
/// hold); the other dims keep their sharding. The grad slices the output
/// grad and never reads the input.
#[spmd_rule(
    name = "aten.constant_pad_nd",
    einsum = "@{padded(call):1}->@{padded(call):1}",
    validate = Self::check,
    partial(backward = "reset"),
    inputs(input),
    outputs(out),
    grad(ignores(input))
)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtenConstantPadNd {
    pub pad: Vec<i64>,
    #[spmd(default)]
    pub value: f64,
}

impl AtenConstantPadNd {
    /// The dims a nonzero pair pads, as bits.
    fn padded(&self, call: &Call<'_>) -> Pos<'_> {
        let rank = call.input_rank(0).unwrap_or(0);
        let mask = self
            .pad
            .chunks(2)
            .enumerate()
            .filter(|(i, pair)| *i < rank && pair.iter().any(|&p| p != 0))
            .map(|(i, _)| rank - 1 - i)
            .filter(|&d| d < 64)
            .fold(0u64, |m, d| m | 1 << d);
        Pos::Mask(mask)
    }

    /// Whole pairs, at most one per dim.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        let rank = call.input_rank(0).unwrap_or(0);
        if !self.pad.len().is_multiple_of(2) || self.pad.len() > 2 * rank {
            return Err(SpmdError::InvalidAttr {
                op: "aten.constant_pad_nd",
                attr: "pad".into(),
                message: format!(
                    "{} values for input 0 (input) of rank {rank}; it takes a (before, after) pair per dim, at most {rank} pairs",
                    self.pad.len()
                ),
            });
        }
        Ok(())
    }
}

/// `aten.convolution(input, weight, bias, stride, padding, dilation,
/// transposed, output_padding, groups)` over `[n, c, spatial...]`: the
/// batch may be sharded, the spatial dims never (a window reads its
/// neighbours' positions). With one group the output channels may be
/// split, and without a bias the contracted input channels too (leaving
/// the output partial); a depthwise convolution (a group per channel, one filter
/// each) keeps each channel to itself, so channels split like a batch.
/// Other groupings and transposed convolutions keep the channels whole.
#[spmd_rule(
    name = "aten.convolution",
    einsum = "@{chan():1; spatial(call):1},*,|*->@{chan():1; spatial(call):1}",
    // Without a bias the input channels may be split (the output partial);
    // with one they stay whole, or every device would add the bias.
    case(
        when = self.plain() && call.input_shape(2).is_none(),
        einsum = "@{chan():c; spatial(call):1},oc*,|*->@{chan():o; spatial(call):1}"
    ),
    case(
        when = self.plain(),
        einsum = "@{chan():1; spatial(call):1},o*,|o->@{chan():o; spatial(call):1}"
    ),
    case(
        when = self.depthwise(&call),
        einsum = "@{chan():c; spatial(call):1},c*,|c->@{chan():c; spatial(call):1}"
    ),
    optional(bias),
    partial(backward = "reset"),
    inputs(input, weight, bias),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenConvolution {
    #[spmd(default)]
    pub stride: Vec<i64>,
    #[spmd(default)]
    pub padding: Vec<i64>,
    #[spmd(default)]
    pub dilation: Vec<i64>,
    #[spmd(default)]
    pub transposed: bool,
    #[spmd(default)]
    pub output_padding: Vec<i64>,
    #[spmd(default = 1)]
    pub groups: i64,
}

impl AtenConvolution {
    /// The channel dim of `[n, c, spatial...]`.
    fn chan(&self) -> Pos<'_> {
        Pos::Int(1)
    }

    /// The spatial dims, as bits.
    fn spatial(&self, call: &Call<'_>) -> Pos<'_> {
        let rank = call.input_rank(0).unwrap_or(0).min(64);
        Pos::Mask(if rank <= 2 {
            0
        } else {
            (u64::MAX >> (64 - rank)) & !3
        })
    }

    fn plain(&self) -> bool {
        self.groups == 1 && !self.transposed
    }

    /// One group per input channel, one filter per group.
    fn depthwise(&self, call: &Call<'_>) -> bool {
        let channels = call.input_shape(0).and_then(|s| s.get(1).copied());
        let weight = call.input_shape(1);
        !self.transposed
            && self.groups > 1
            && channels == Some(self.groups as usize)
            && weight.is_some_and(|w| w.len() >= 2 && w[0] == self.groups as usize && w[1] == 1)
    }
}

/// `aten.slice_scatter(self, src, dim, start, end, step)`: `self` with its
/// slice `start..end` (every `step`-th) along `dim` replaced by `src`. The
/// dim is never sharded (the slice is at global positions); the others are
/// shared by `self`, `src` and the output.
#[spmd_rule(
    name = "aten.slice_scatter",
    einsum = "@{dim:1},@{dim:1}->@{dim:1}",
    partial(backward = "reset"),
    inputs(input, src),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenSliceScatter {
    #[spmd(default)]
    pub dim: i64,
    #[spmd(default)]
    pub start: Option<i64>,
    #[spmd(default)]
    pub end: Option<i64>,
    #[spmd(default = 1)]
    pub step: i64,
}

/// `aten.scatter.value(self, dim, index, value)` and
/// `aten.scatter.src(self, dim, index, src)`: `self` with the number
/// `value` (or `src`'s elements) written at the positions `index` gives
/// along `dim`. Those positions are global, so `dim` is never sharded; the
/// other dims are shared by `self`, `index` (and `src`) and the output.
#[spmd_rule(
    name = "aten.scatter.value",
    einsum = "@{dim:1},@{dim:1}->@{dim:1}",
    partial(backward = "reset"),
    inputs(input, index),
    outputs(out),
    grad(none(index))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenScatterValue {
    pub dim: i64,
}

/// See [`AtenScatterValue`].
#[spmd_rule(
    name = "aten.scatter.src",
    einsum = "@{dim:1},@{dim:1},@{dim:1}->@{dim:1}",
    partial(backward = "reset"),
    inputs(input, index, src),
    outputs(out),
    grad(none(index))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenScatterSrc {
    pub dim: i64,
}

/// `aten.amax(self, dim, keepdim)`: the largest element over `dim` (every
/// dim when empty). The largest of the blocks' largest is the largest, so
/// a split reduced dim leaves the output partial `Max`.
#[spmd_rule(
    name = "aten.amax",
    einsum = "@->@{reduced():-}",
    case(when = self.keepdim, einsum = "@->@{reduced():1}"),
    partial(reduce = "max", backward = "reset"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenAmax {
    #[spmd(default)]
    pub dim: Vec<i64>,
    #[spmd(default)]
    pub keepdim: bool,
}

impl AtenAmax {
    fn reduced(&self) -> Pos<'_> {
        reduced_dims(&self.dim)
    }
}

/// `aten.clamp.Tensor(self, min, max)`: `self` held between the tensors
/// `min` and `max` (either may be absent), elementwise with numpy
/// broadcasting, as `where` is.
#[spmd_rule(
    name = "aten.clamp.Tensor",
    einsum = "...,...,...->...",
    partial(backward = "reset"),
    inputs(input, min, max),
    outputs(out),
    optional(min, max)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenClampTensor {}

/// `aten.view_as_complex(self)`: a real tensor whose last dim (of 2) holds
/// the real and imaginary parts, read as complex numbers; that dim goes.
/// A block of it would hold half a number, so it is never sharded. Reading
/// pairs as numbers is linear: a `Sum` partial input stays partial.
#[spmd_rule(
    name = "aten.view_as_complex",
    einsum = "@{last():c}->@{last():-}",
    merge(never_sharded = "c"),
    partial(backward = "reset", inputs = "linear"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenViewAsComplex {}

impl AtenViewAsComplex {
    fn last(&self) -> Pos<'static> {
        Pos::Int(-1)
    }
}

/// `aten.view_as_real(self)`: a complex tensor read as real numbers, a new
/// last dim (of 2) holding each number's real and imaginary parts, whole on
/// every device. Linear, as [`AtenViewAsComplex`] is.
#[spmd_rule(
    name = "aten.view_as_real",
    einsum = "@->@{last():+1}",
    partial(backward = "reset", inputs = "linear"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtenViewAsReal {}

impl AtenViewAsReal {
    fn last(&self) -> Pos<'static> {
        Pos::Int(-1)
    }
}
