//! `flash_attention` and `flash_mask`: fused scaled-dot-product attention
//! over `[batch, seq, heads, head_dim]` tensors.

use spmd_core::{Call, Partial, RuleResult, SpmdError, spmd_rule};

use crate::notation::input_rank;

const OP: &str = "flash_attention";

/// Paddle's `flash_attention` (`q`, `k`, `v`, `fixed_seed_offset`,
/// `attn_mask` → `out`, `softmax`, `softmax_lse`, `seed_offset`): `out[b, s,
/// h, e] = softmax(q[b, s, h, :] · k[b, t, h, :]) · v[b, t, h, e]`. Only
/// batch `b` and heads `h` are ever sharded; the sequences `s`, `t` and the
/// head dims `d`, `e` never are (the kernel needs whole rows). `softmax` is
/// `[b, h, s, t]`, `softmax_lse` `[b, h, s]`, the mask `[b, h, s, t]` (a
/// size-1 heads dim broadcast), the seed tensors replicated and never
/// partial; an absent optional input is answered `[]`.
///
/// Paddle 3.3.1's `FlashAttInferSpmd` / `FlashAttInferSpmdReverse` /
/// `FlashAttGradInferSpmd`, whose merges differ from docs/semantics.md §4's
/// in what takes part, said here as merge participation:
/// - the never-sharded dims are replicated *before* the merge, so their
///   mesh dims stay free for `b` and `h` (q's sharded sequence does not
///   keep the heads from that mesh dim): `unsharded_claims = "ignore"`;
/// - forward never reads v's layout (Paddle reads k's in its place): v
///   follows q, k and the mask, and is asked for their layout;
/// - backward merges `out` and `softmax_lse` only: the given `softmax` (a
///   debugging output) follows, and is answered as the inputs produce it;
///   the outputs come back non-partial;
/// - the grad op merges q, k, v, out, out_grad and softmax_lse, not the
///   mask or the seed.
///
/// With grouped-query attention (fewer kv heads `G` than query heads `H`,
/// each kv head serving `H / G` consecutive query heads), q's heads dim is
/// the compound `(hg)` of k's and v's heads `h` and the group `g`: the heads
/// stay sharded only when their mesh dims divide `G` (the major factor of a
/// compound must), so a device's kv heads are the ones its query heads use.
/// Deliberate differences (DEVIATIONS.md): Paddle checks k's given mapping
/// there, and otherwise splits the kv heads unevenly; backward reads `out`
/// from the given out (Paddle's reverse reads v's attr there). A mask whose
/// heads dim is 1 (broadcast) takes no part in the heads' merge; Paddle
/// merges that size-1 dim's sharding into the heads, then replicates it on
/// the mask (docs/semantics.md §3: a size-1 dim holds no part of its axis).
///
/// Placeholders take the first form their rank fits (`|`; an absent
/// tensor, or an output whose shape forward is not given, the first): the
/// mask is absent (the empty form), `[b, h, s, t]`, or anything else (`*`,
/// never sharded); the `softmax` output `[b, h, s, t]` or, 0-d when
/// `return_softmax` is off, `*`; the seed tensors absent or `1`s.
#[spmd_rule(
    name = "flash_attention",
    einsum = "bshd,bthd,bthe,|*,|bhst|*->bshe,bhst|*,bhs,*",
    case(
        when = self.grouped(&call),
        einsum = "bs(hg)d,bthd,bthe,|*,|b(hg)st|*->bs(hg)e,b(hg)st|*,b(hg)s,*"
    ),
    validate = Self::check,
    inputs(q, k, v, fixed_seed_offset, attn_mask),
    outputs(out, softmax, softmax_lse, seed_offset),
    optional(fixed_seed_offset, attn_mask),
    merge(never_sharded = "stde", unsharded_claims = "ignore", follows(v, softmax)),
    // The seed and offset the kernel returns are not a sum over the batch
    // and heads they lack; nor is a softmax placeholder (0-d when
    // `return_softmax` is off) a sum.
    partial(backward = "reset", none(softmax, seed_offset)),
    // An integer seed has no gradient.
    grad(
        none(fixed_seed_offset),
        inputs(q, k, v, out, softmax_lse, seed_offset, attn_mask),
        of(out)
    )
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlashAttention {}

impl FlashAttention {
    /// The heads of q and of k or v, when the call gives them.
    fn heads(call: &Call<'_>, i: usize) -> Option<usize> {
        call.input_shape(i).and_then(|s| s.get(2).copied())
    }

    /// Grouped-query attention: k or v has fewer heads than q.
    fn grouped(&self, call: &Call<'_>) -> bool {
        let q = Self::heads(call, 0);
        [1, 2]
            .into_iter()
            .any(|i| Self::heads(call, i).is_some_and(|g| Some(g) != q))
    }

    /// q, k and v are `[batch, seq, heads, head_dim]`, and each kv head
    /// serves a whole group of query heads (Paddle rejects other counts too).
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
            let rank = input_rank(call, i).unwrap_or(4);
            if rank != 4 {
                return Err(SpmdError::Rejected {
                    op: OP,
                    message: format!(
                        "input {i} ({name}) has rank {rank}; flash_attention takes [batch, seq, heads, head_dim]"
                    ),
                });
            }
        }
        if let Some(h) = Self::heads(call, 0) {
            for (i, name) in [(1, "k"), (2, "v")] {
                if let Some(g) = Self::heads(call, i)
                    && (g == 0 || h % g != 0)
                {
                    return Err(SpmdError::Rejected {
                        op: OP,
                        message: format!(
                            "q's {h} heads are not a multiple of {name}'s {g}: each kv head serves a group of query heads"
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Paddle's `flash_mask` (`q`, `k`, `v`, `startend_row_indices`,
/// `fixed_seed_offset` → `out`, `softmax`, `softmax_lse`, `seed_offset`):
/// flash attention whose mask is given as start/end rows per key column,
/// `[batch, heads or 1, seq_k, 1 | 2 | 4]`. It shards as
/// [`FlashAttention`]: batch and heads may stay sharded, sequences and head
/// dims never; the mask rows follow the batch (and the heads, when it has
/// one per head). Paddle calls `FlashMaskInferSpmd` directly (the name is
/// not in its registry). The grad takes Paddle's `FlashMaskGradInferSpmd`
/// arguments, `(q, k, v, startend_row_indices, out, softmax_lse,
/// seed_offset; out_grad)`, and returns the grads of `q`, `k` and `v`; as
/// Paddle does, the given shardings of never-sharded dims are dropped
/// before the merge there, so the heads can take their mesh dims.
///
/// The kv heads are `h` when k has q's heads, else `g` (grouped-query
/// attention); the mask's heads dim is `h` then (or 1, broadcast), else
/// never sharded. Placeholders take forms by rank as
/// [`FlashAttention`]'s do.
#[spmd_rule(
    name = "flash_mask",
    einsum = "bshd,bthd,bthe,|bh11|*,|*->bshe,bhst|*,bhs,*",
    case(
        when = self.grouped(&call),
        einsum = "bshd,btgd,btge,|b111|*,|*->bshe,bhst|*,bhs,*"
    ),
    validate = Self::check,
    merge(never_sharded = "stde", unsharded_claims = "ignore"),
    adjust = Self::finish,
    inputs(q, k, v, startend_row_indices, fixed_seed_offset),
    outputs(out, softmax, softmax_lse, seed_offset),
    grad(
        inputs(q, k, v, startend_row_indices, out, softmax_lse, seed_offset),
        of(out),
        none(startend_row_indices, fixed_seed_offset)
    )
)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlashMask {
    #[spmd(default)]
    pub dropout: f32,
    #[spmd(default)]
    pub causal: bool,
}

impl FlashMask {
    /// k has other heads than q.
    fn grouped(&self, call: &Call<'_>) -> bool {
        FlashAttention::heads(call, 1) != FlashAttention::heads(call, 0)
    }

    /// q, k and v are `[batch, seq, heads, head_dim]`.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
            let rank = input_rank(call, i).unwrap_or(4);
            if rank != 4 {
                return Err(SpmdError::Rejected {
                    op: "flash_mask",
                    message: format!(
                        "input {i} ({name}) has rank {rank}; flash_mask takes [batch, seq, heads, head_dim]"
                    ),
                });
            }
        }
        Ok(())
    }

    fn finish(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        // The seed and offset are never partial (as given in backward).
        let given = match *call {
            Call::Grad { .. } => return Ok(()),
            Call::Backward { outputs, .. } => {
                outputs.get(3).map_or(Partial::NONE, |s| s.attr.partial)
            }
            _ => Partial::NONE,
        };
        if let Some(seed) = result.outputs.get_mut(3) {
            seed.partial = given;
        }
        Ok(())
    }
}
