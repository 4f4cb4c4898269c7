//! Scatters: `scatter` (rows of `x` replaced or accumulated from `updates`
//! by a 1-D index), `scatter_nd_add` (elements or slices added at index
//! tuples), `put_along_axis` (values put at an index per element along an
//! axis) and `index_put` (values put at index tuples given as one tensor per
//! dim).
//!
//! Every index is replicated here. Paddle 3.3.1 lets `scatter`'s and
//! `scatter_nd_add`'s index (and the matching dims of `updates`) stay
//! sharded and marks the output partial (`Sum`), but each device then
//! returns its own copy of `x` with only its updates applied, and the sum of
//! those copies counts `x` once per device: the answer is wrong. A
//! replicated index, and the trailing dims sharded alike on `x`, `updates`
//! and `out`, need no communication after the op.

use spmd_core::notation::Pos;
use spmd_core::{Call, Einsum, RuleResult, SpmdError, spmd_rule};

use crate::notation::{BuiltDim, built, input_rank, keep_first_grads, letters, replicate_dims};

/// Paddle's `scatter` (`x`, `index`, `updates` → `out`): row `index[i]` of
/// `x` becomes (or, without `overwrite`, accumulates) row `i` of `updates`.
/// The scattered dim 0 and the index are never sharded; the other dims are
/// shared by `x`, `updates` and `out`. As Paddle 3.3.1's `ScatterInferSpmd`,
/// dim 0's given shardings are dropped before the merge, so the mesh dims
/// they held are free for the other dims (`merge(unsharded_claims = "ignore")`). The grad takes Paddle's
/// `ScatterGradInferSpmd` arguments, `(index, updates; out_grad)`, and
/// returns `x_grad` (laid out as `out_grad`) and `updates_grad`.
#[spmd_rule(
    name = "scatter",
    einsum = "1@,*,1@->1@",
    merge(unsharded_claims = "ignore"),
    inputs(x, index, updates),
    outputs(out),
    // The grad gathers the output grad and never reads `updates`: x's grad
    // is the output grad with the scattered rows zeroed.
    grad(inputs(index, updates), of(out), none(index), ignores(updates)),
    adjust = Self::updates_as_given
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scatter {
    #[spmd(default = true)]
    pub overwrite: bool,
}

impl Default for Scatter {
    fn default() -> Self {
        Scatter { overwrite: true }
    }
}

impl Scatter {
    /// The grad op never reads `updates`: Paddle leaves it as given, its
    /// scattered dim 0 replicated, rather than asking for a reshard.
    fn updates_as_given(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        let Call::Grad { inputs, .. } = *call else {
            return Ok(());
        };
        if let (Some(req), Some(given)) = (result.inputs.get_mut(1), inputs.get(1)) {
            *req = replicate_dims(given.attr, &[0]).unwrap_or_else(|| given.attr.clone());
        }
        Ok(())
    }
}

/// Paddle's `scatter_nd_add` (`x`, `index`, `updates` → `out`): `index` is
/// `[..., k]`, tuples of coordinates into the first `k` dims of `x`;
/// `updates` is `index[..., :-1]` followed by `x`'s dims after the first
/// `k`, added at those coordinates. The first `k` dims, the index and the
/// matching dims of `updates` are never sharded (see the module docs); the
/// trailing dims are shared by `x`, `updates` and `out`. The index has no
/// gradient; `x_grad` is the output grad and `updates_grad` gathers it.
#[spmd_rule(
    name = "scatter_nd_add",
    build(Self::notation, cache),
    inputs(x, index, updates),
    outputs(out),
    grad(none(index), ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScatterNdAdd {}

impl ScatterNdAdd {
    /// For x of rank 3 and index `[i, j, 2]`: `11c,111,11c->11c`. The tuple
    /// length `k` is the index's last extent: a shape value, so the plan is
    /// built per call.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "scatter_nd_add";
        let (rank, index, k) = crate::notation::nd_index(OP, call)?;
        let rest: Vec<BuiltDim> = letters(OP, rank)?[k..]
            .iter()
            .map(|&c| BuiltDim::Label(c))
            .collect();
        let ones = |n: usize| std::iter::repeat_n(BuiltDim::One, n);
        let x: Vec<BuiltDim> = ones(k).chain(rest.iter().cloned()).collect();
        let batch = index.len().saturating_sub(1);
        let updates: Vec<BuiltDim> = ones(batch).chain(rest.iter().cloned()).collect();
        let index: Vec<BuiltDim> = ones(index.len()).collect();
        built(OP, &[&x, &index, &updates], &[&x])
    }
}

/// Paddle's `put_along_axis` (`x`, `index`, `value` → `out`): `value`'s
/// elements are put (assigned, added, multiplied, per `reduce`) into `x` at
/// `index` along `axis`. The axis is never sharded; the other dims are
/// shared by the four tensors. Paddle 3.3.1's `PutAlongAxisInferSpmd`. The
/// index has no gradient.
#[spmd_rule(
    name = "put_along_axis",
    einsum = "@{axis:1},@{axis:1},@{axis:1}->@{axis:1}",
    inputs(x, index, value),
    outputs(out),
    grad(none(index))
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PutAlongAxis {
    #[spmd(default)]
    pub axis: i64,
    #[spmd(default = "assign".to_string())]
    pub reduce: String,
}

/// Paddle's `index_put` (`x`, `indices...`, `value` → `out`): one 1-D index
/// tensor per leading dim of `x`; `value` (broadcast to the picked slices)
/// is put, or with `accumulate` added, at those coordinates. The indexed
/// dims and the indices are never sharded; `x`'s other dims are shared with
/// the output and with `value`'s trailing dims. The grad takes `(x,
/// indices..., value; out_grad)` and returns `x_grad` and `value_grad`.
///
/// As a template: `x`'s first `n` dims are `1`, one `*` term per index,
/// and `value` shares `x`'s last dims that it has, with a leading `1` when
/// it is `[K, rest...]`.
#[spmd_rule(
    name = "index_put",
    einsum = "@{..indexed(call):1},*^indexed(call),1@{unshared(call):-}|@{unshared(call):-}->@{..indexed(call):1}",
    validate = Self::check,
    adjust = Self::grads,
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexPut {
    #[spmd(default)]
    pub accumulate: bool,
}

impl IndexPut {
    /// How many index tensors the call gives: the inputs between `x` and
    /// `value`.
    fn indexed(&self, call: &Call<'_>) -> i64 {
        let given = (0..).take_while(|&i| call.input_shape(i).is_some()).count();
        i64::try_from(given.saturating_sub(2)).unwrap_or(i64::MAX)
    }

    /// `x`'s dims that `value` does not share, as bits: `value` broadcasts
    /// against `[K, rest...]` from the right, so it shares the last of
    /// `x`'s unindexed dims, as many as it has.
    fn unshared(&self, call: &Call<'_>) -> Pos<'_> {
        let rank = input_rank(call, 0).unwrap_or(0).min(64);
        let n = usize::try_from(self.indexed(call)).unwrap_or(0);
        let v = input_rank(call, n + 1).unwrap_or(0);
        let shared = v.min(rank.saturating_sub(n));
        let cut = rank - shared;
        Pos::Mask(if cut >= 64 {
            u64::MAX
        } else {
            (1u64 << cut) - 1
        })
    }

    /// At least one index, and no more than `x` has dims.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        const OP: &str = "index_put";
        let given = (0..).take_while(|&i| call.input_shape(i).is_some()).count();
        if given < 3 {
            return Err(SpmdError::Rejected {
                op: OP,
                message: format!(
                    "{given} inputs given; index_put takes x, at least one index and value"
                ),
            });
        }
        let (n, rank) = (given - 2, input_rank(call, 0).unwrap_or(0));
        if n > rank {
            return Err(SpmdError::Rejected {
                op: OP,
                message: format!("{n} index tensors for input 0 (x) of rank {rank}"),
            });
        }
        Ok(())
    }

    /// Only `x` and `value` have gradients, not the indices between them.
    fn grads(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        if let Call::Grad { .. } = call {
            let value_grad = result.outputs.pop();
            keep_first_grads(call, result, 1);
            result.outputs.extend(value_grad);
        }
        Ok(())
    }
}
