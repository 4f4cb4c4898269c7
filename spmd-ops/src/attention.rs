//! `flash_attention` and `flash_mask`: fused scaled-dot-product attention
//! over `[batch, seq, heads, head_dim]` tensors.

use spmd_core::{
    Call, DistAttr, Einsum, Partial, RuleResult, Spec, SpmdError, SpmdRule, spmd_rule,
};

use crate::notation::{input_rank, keep_first_grads, replicate_dims};

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
#[spmd_rule(
    name = "flash_mask",
    build = Self::notation,
    never_sharded = "stde",
    adjust = Self::finish,
    inputs(q, k, v, startend_row_indices, fixed_seed_offset),
    outputs(out, softmax, softmax_lse, seed_offset)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FlashMask {
    #[spmd(default)]
    pub dropout: f32,
    #[spmd(default)]
    pub causal: bool,
}

impl FlashMask {
    /// `bshd,bthd,bthe,bh11,1->bshe,bhst,bhs,1`; in the grad
    /// `bshd,bthd,bthe,bh11,bshe,bhs,1->bshe`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "flash_mask";
        for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
            let rank = input_rank(call, i).unwrap_or(4);
            if rank != 4 {
                return Err(SpmdError::Rejected {
                    op: OP,
                    message: format!(
                        "input {i} ({name}) has rank {rank}; flash_mask takes [batch, seq, heads, head_dim]"
                    ),
                });
            }
        }
        let dim = |i: usize, d: usize| call.input_shape(i).and_then(|s| s.get(d).copied());
        let kv = if dim(1, 2) == dim(0, 2) { 'h' } else { 'g' };
        let ones = |n: usize| "1".repeat(n);
        let mask = match input_rank(call, 3).unwrap_or(0) {
            0 => String::new(),
            4 if kv == 'h' && dim(3, 1) == dim(0, 2) => "bh11".to_string(),
            4 => "b111".to_string(),
            r => ones(r),
        };
        let grad = matches!(call, Call::Grad { .. });
        let seed = ones(input_rank(call, if grad { 6 } else { 4 }).unwrap_or(0));
        let qkv = format!("bshd,bt{kv}d,bt{kv}e,{mask}");
        if grad {
            return Einsum::new(&format!("{qkv},bshe,bhs,{seed}->bshe"));
        }
        let out_rank = |o: usize, default: usize| match *call {
            Call::Backward { outputs, .. } => outputs.get(o).map_or(default, |s| s.shape.len()),
            _ => default,
        };
        let softmax = if out_rank(1, 4) == 0 { "" } else { "bhst" };
        let seed_out = ones(out_rank(3, 1));
        Einsum::new(&format!("{qkv},{seed}->bshe,{softmax},bhs,{seed_out}"))
    }

    fn finish(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        match *call {
            Call::Grad {
                mesh,
                inputs,
                output_grads,
                ..
            } => {
                // Sequence and head dims: dims 1 and 3 of q, k, v, out and
                // out_grad, dim 2 of softmax_lse.
                let fixed = |role_input: bool, i: usize| -> &'static [usize] {
                    match (role_input, i) {
                        (true, 0..=2 | 4) | (false, _) => &[1, 3],
                        (true, 5) => &[2],
                        _ => &[],
                    }
                };
                let freed: Vec<Option<DistAttr>> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| replicate_dims(s.attr, fixed(true, i)))
                    .chain(
                        output_grads
                            .iter()
                            .enumerate()
                            .map(|(i, s)| replicate_dims(s.attr, fixed(false, i))),
                    )
                    .collect();
                if freed.iter().any(Option::is_some) {
                    let mut specs = inputs
                        .iter()
                        .chain(output_grads)
                        .zip(&freed)
                        .map(|(s, f)| f.as_ref().map_or(*s, |a| Spec::new(s.shape, a)));
                    let ins: Vec<Spec<'_>> = specs.by_ref().take(inputs.len()).collect();
                    let grads: Vec<Spec<'_>> = specs.collect();
                    *result = self.grad(mesh, &ins, &grads)?;
                    return Ok(());
                }
                keep_first_grads(call, result, 3);
            }
            _ => {
                // The seed and offset are never partial (as given in backward).
                let given = match *call {
                    Call::Backward { outputs, .. } => {
                        outputs.get(3).map_or(Partial::NONE, |s| s.attr.partial)
                    }
                    _ => Partial::NONE,
                };
                if let Some(seed) = result.outputs.get_mut(3) {
                    seed.partial = given;
                }
            }
        }
        Ok(())
    }
}
