//! `flash_attention`: fused scaled-dot-product attention over
//! `[batch, seq, heads, head_dim]` tensors.

use spmd_core::{Call, Einsum, Partial, RuleResult, SpmdError, spmd_rule};

use crate::notation::input_rank;

/// Paddle's `flash_attention` (`q`, `k`, `v`, `fixed_seed_offset`,
/// `attn_mask` → `out`, `softmax`, `softmax_lse`, `seed_offset`): `out[b, s,
/// h, e] = softmax(q[b, s, h, :] · k[b, t, h, :]) · v[b, t, h, e]`. Batch `b`
/// and heads `h` may be sharded; the sequences `s`, `t` and the head dims
/// `d`, `e` never are (the kernel needs whole rows). `softmax` is `[b, h, s,
/// t]`, `softmax_lse` `[b, h, s]`, the seed tensors replicated; a
/// placeholder (rank 0) tensor takes no dims. Paddle 3.3.1's
/// `FlashAttInferSpmd`, except that v's requirement follows the merged axes
/// (Paddle derives it from k's attr, a bug DESIGN §4 names). With fewer kv
/// heads than query heads (grouped-query attention) the kv heads are a
/// separate axis, left unsharded. `fixed_seed_offset` and `attn_mask` are
/// optional: an absent one takes no part and is answered `[]` (Paddle's
/// empty dist attr).
#[spmd_rule(
    name = "flash_attention",
    build = Self::notation,
    never_sharded = "stde",
    unsharded_claims = "ignore",
    adjust = Self::seed_not_partial,
    inputs(q, k, v, fixed_seed_offset, attn_mask),
    outputs(out, softmax, softmax_lse, seed_offset),
    optional(fixed_seed_offset, attn_mask),
    grad_inputs(q, k, v, out, softmax_lse, seed_offset, attn_mask),
    grads_for(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlashAttention {}

impl FlashAttention {
    /// `bshd,bthd,bthe,1,bhst->bshe,bhst,bhs,1`, with `''` for placeholders.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "flash_attention";
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
        let heads = |i: usize| call.input_shape(i).and_then(|s| s.get(2).copied());
        let kv = if heads(1) == heads(0) { 'h' } else { 'g' };
        let ones = |n: usize| "1".repeat(n);
        let seed = ones(input_rank(call, 3).unwrap_or(0));
        let mask = match input_rank(call, 4).unwrap_or(0) {
            0 => String::new(),
            4 => "bhst".to_string(),
            r => ones(r),
        };
        // Placeholder outputs (backward gives their shapes, the grad op
        // some of them).
        let out_rank =
            |o: usize, default: usize| call.output_shape(o).map_or(default, <[usize]>::len);
        let softmax = if out_rank(1, 4) == 0 { "" } else { "bhst" };
        let seed_out = ones(out_rank(3, 1));
        Einsum::new(&format!(
            "bshd,bt{kv}d,bt{kv}e,{seed},{mask}->bshe,{softmax},bhs,{seed_out}"
        ))
    }

    /// The seed and offset the kernel returns are not a sum over the batch
    /// and heads the notation leaves out of them: never partial (in
    /// backward, as given).
    fn seed_not_partial(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        let given = match *call {
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
