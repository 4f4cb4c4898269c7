//! Gathers: `gather` / `index_select` (slices of `x` along `axis` picked
//! by a 1-D or 0-D index), `gather_nd` (elements or slices picked by index
//! tuples) and `take_along_axis` (an index per element along `axis`).

use spmd_core::{Call, Einsum, SpmdError, spmd_rule};

use crate::notation::{BuiltDim, built, letters};

/// Paddle's `gather`: `out = x` with dim `axis` replaced by `index`'s dim
/// (or removed, for a 0-D index). The gathered axis of `x` is never sharded;
/// the index's dim and x's other dims keep their shardings. Paddle 3.3.1's
/// `GatherInferSpmd` / `GatherInferSpmdReverse`. Its grad
/// (`GatherGradInferSpmd`) scatters the output grad into zeros shaped like
/// `x`, reading neither `x` (`grad_ignores`) nor, for its layout, the index:
/// the index and the output grad's gathered dim are replicated there (the
/// grad notation writes them `1`), so `x_grad` is not partial.
///
/// Paddle replicates x's gathered dim *before* the merge, so the mesh dim it
/// was sharded on is free for the index's dim: `merge(unsharded_claims = "ignore")`.
#[spmd_rule(
    name = "gather",
    // `z` is the index's dim; a 0-D index removes the gathered dim; the grad
    // writes the index and the output grad's gathered dim `1`.
    einsum = "@{axis:1},z->@{axis:z}",
    case(when = call.input_rank(1) == Some(0), einsum = "@{axis:1},->@{axis:-}"),
    case(when = matches!(call, Call::Grad { .. }), einsum = "@{axis:1},1->@{axis:1}"),
    merge(unsharded_claims = "ignore"),
    inputs(x, index),
    outputs(out),
    grad(none(index), ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gather {
    #[spmd(default)]
    pub axis: i64,
}

/// Paddle's `gather_nd`: `index` is `[..., k]`, a batch of `k`-tuples of
/// coordinates into the first `k` dims of `x`; `out` is `index[..., :-1]`
/// followed by `x`'s dims after the first `k`. Those first `k` dims of `x`
/// and the tuples' dim are never sharded; the index's batch dims and `x`'s
/// trailing dims keep their shardings. Paddle 3.3.1's `GatherNdInferSpmd`;
/// its grad scatters the output grad and never reads `x`: `x_grad` is
/// partial (`Sum`) over the mesh dims of sharded index batch dims (each
/// device scatters its own tuples).
#[spmd_rule(
    name = "gather_nd",
    build(Self::notation, cache),
    merge(unsharded_claims = "ignore"),
    inputs(x, index),
    outputs(out),
    grad(none(index), ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GatherNd {}

impl GatherNd {
    /// For x of rank 3 and index `[i, j, 2]`: `11c,de1->dec`. The tuple
    /// length `k` is the index's last extent: a shape value, so the plan is
    /// built per call.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "gather_nd";
        let (rank, index, k) = crate::notation::nd_index(OP, call)?;
        let batch = index.len().saturating_sub(1);
        let names = letters(OP, rank + batch)?;
        let label = |c: &u8| BuiltDim::Label(*c);
        let rest = names[k..rank].iter().map(label);
        let tuples = names[rank..].iter().map(label);
        let x: Vec<BuiltDim> = std::iter::repeat_n(BuiltDim::One, k)
            .chain(rest.clone())
            .collect();
        let index: Vec<BuiltDim> = if index.is_empty() {
            Vec::new()
        } else {
            tuples.clone().chain([BuiltDim::One]).collect()
        };
        let out: Vec<BuiltDim> = tuples.chain(rest).collect();
        built(OP, &[&x, &index], &[&out])
    }
}

/// Paddle's `take_along_axis`: `out[.., i, ..] = x[.., index[.., i, ..],
/// ..]` along `axis`; `index` has `x`'s rank and `out` its shape. The axis
/// is never sharded (an index may point anywhere along it); the other dims
/// are shared by `x`, `index` and `out`. Paddle 3.3.1's
/// `TakeAlongAxisInferSpmd`. The index has no gradient, and the grad
/// (scattering the output grad back) never reads `x`.
#[spmd_rule(
    name = "take_along_axis",
    einsum = "@{axis:1},@{axis:1}->@{axis:1}",
    inputs(x, index),
    outputs(out),
    grad(none(index), ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TakeAlongAxis {
    #[spmd(default)]
    pub axis: i64,
}

/// Paddle's `moe_combine` (`x` `[S·K, H]`, `combine_weights` `[S, K]`,
/// `scatter_index` `[S, K]` → `y` `[S, H]`): `y[s] = Σ_k
/// combine_weights[s, k] · x[scatter_index[s, k]]`, each token's expert
/// outputs weighted and summed. `x`'s rows are in dispatch order, which
/// `scatter_index` maps to tokens, so they are never sharded (Paddle 3.3.1
/// labels them as the tokens `s`, which reads the wrong rows on every
/// device but one); the hidden dim keeps its sharding, tokens and the top-k
/// slot are shared by the weights, the index and `y`, and a sharded `k`
/// leaves `y` partial (`Sum`). The index has no gradient.
#[spmd_rule(
    name = "moe_combine",
    einsum = "1h,sk,sk->sh",
    merge(unsharded_claims = "ignore"),
    inputs(x, combine_weights, scatter_index),
    outputs(y),
    grad(none(scatter_index))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MoeCombine {}

/// Paddle's `moe_gate_dispatch` (`x` `[S, H]`, `gate_logits` `[S, E]`,
/// `corr_bias` `[E]` → `y`, `combine_weights` `[S, K]`, `scatter_index`,
/// `expert_offset` `[E]`, `expert_id` `[S, K]`): routes each token to its
/// top-`k` experts and packs them by expert (`y` is `[E, capacity, H]` with
/// `use_pad`, else `[S·K, H]`). Where a token lands depends on every
/// token's routing, so tokens and experts are never sharded; the hidden dim
/// keeps its sharding from `x` to `y`. `corr_bias` is optional. (Paddle 3.3.1's rule takes `int64`
/// attributes its Python binding cannot pass, so this rule was not compared
/// with it.)
#[spmd_rule(
    name = "moe_gate_dispatch",
    einsum = "1h,11,1->1h,11,11,1,11",
    case(when = self.use_pad, einsum = "1h,11,1->11h,11,11,1,11"),
    merge(unsharded_claims = "ignore"),
    inputs(x, gate_logits, corr_bias),
    outputs(y, combine_weights, scatter_index, expert_offset, expert_id),
    optional(corr_bias),
    // The routing outputs are not sums over the hidden dim they lack.
    partial(none(combine_weights, scatter_index, expert_offset, expert_id))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MoeGateDispatch {
    #[spmd(default)]
    pub k: i64,
    #[spmd(default)]
    pub capacity: i64,
    #[spmd(default)]
    pub use_pad: bool,
}
