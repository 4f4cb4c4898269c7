//! `flash_attention` and `flash_mask`: fused scaled-dot-product attention
//! over `[batch, seq, heads, head_dim]` tensors.

use spmd_core::{
    Call, DimsMapping, DistAttr, Einsum, Partial, RuleResult, Sharding, Spec, SpmdError, SpmdRule,
    spmd_rule,
};

use crate::notation::{input_rank, keep_first_grads};

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
/// `FlashAttGradInferSpmd`, whose merges differ from docs/semantics.md §4's in what
/// takes part:
/// - the never-sharded dims are replicated *before* the merge, so their
///   mesh dims stay free for `b` and `h` (q's sharded sequence does not
///   keep the heads from that mesh dim); the rule frees them itself rather
///   than declaring `never_sharded`, so a call with one sharded never
///   reaches the plain notation (see [`FlashAttention::notation`]);
/// - backward merges `out` and `softmax_lse` only: the given `softmax`
///   (a debugging output) constrains nothing, and is answered as the
///   inputs produce it; the outputs come back non-partial;
/// - the grad op merges q, k, v, out, out_grad and softmax_lse, not the
///   mask or the seed.
///
/// Deliberate differences (DEVIATIONS.md): v's requirement follows v (Paddle
/// derives it from k's attr, a bug docs/semantics.md §4 names), backward reads `out`
/// from the given out (Paddle's reverse reads v's attr there), and with
/// grouped-query attention (fewer kv heads `G` than query heads) the heads
/// stay sharded only when the merged heads mesh dim divides `G` (Paddle
/// checks k's given mapping, and otherwise splits the kv heads unevenly, so
/// a device's kv heads would not be the ones its query heads use). A mask
/// whose heads dim is 1 (broadcast) takes no part in the heads' merge; Paddle
/// merges that size-1 dim's sharding into the heads, then replicates it on
/// the mask (docs/semantics.md §3: a size-1 dim holds no part of its axis).
#[spmd_rule(
    name = "flash_attention",
    // No `cache`: the notation depends on whether a fixed dim is sharded,
    // which a shape key cannot see.
    build = Self::notation,
    adjust = Self::paddle_merge,
    inputs(q, k, v, fixed_seed_offset, attn_mask),
    outputs(out, softmax, softmax_lse, seed_offset),
    optional(fixed_seed_offset, attn_mask),
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

/// What a tensor of a call is, for the dims Paddle replicates before its
/// merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Role {
    /// q, k, v, out and out_grad: `[b, seq, h, head_dim]`.
    Qkv,
    /// `[b, h, s, t]` in forward and backward (the grad op takes no part
    /// of it: Paddle's grad rule does not merge the mask, so there it is
    /// [`Role::Whole`]).
    Mask,
    /// `[b, h, s]`.
    Lse,
    /// The seeds, and backward's given softmax: every dim.
    Whole,
}

/// The roles of the tensors a call gives, in order: forward inputs,
/// backward outputs, or the grad op's inputs then its grads (the declared
/// signature, or the derived one).
fn roles(call: &Call<'_>) -> (&'static [Role], &'static [Role]) {
    use Role::*;
    match *call {
        Call::Forward { .. } => (&[Qkv, Qkv, Qkv, Whole, Mask], &[]),
        Call::Backward { .. } => (&[], &[Qkv, Whole, Lse, Whole]),
        Call::Grad { inputs, .. } if inputs.len() == 7 => {
            (&[Qkv, Qkv, Qkv, Qkv, Lse, Whole, Whole], &[Qkv])
        }
        Call::Grad { .. } => (&[Qkv, Qkv, Qkv, Whole, Whole], &[Qkv, Whole, Lse, Whole]),
        _ => (&[], &[]),
    }
}

/// The dims (bit `i` = dim `i`) of a tensor of `role` and `shape` that take
/// no part in the merge; with `heads`, its heads dim too.
fn fixed_dims(role: Role, shape: &[usize], heads: bool) -> u64 {
    let h = |bit: u64| if heads { bit } else { 0 };
    match role {
        Role::Qkv if shape.len() == 4 => 0b1010 | h(0b0100),
        Role::Lse if shape.len() == 3 => 0b100 | h(0b010),
        Role::Mask if shape.len() == 4 => {
            let broadcast = if shape[1] == 1 { 0b0010 } else { 0 };
            0b1100 | broadcast | h(0b0010)
        }
        _ => u64::MAX,
    }
}

/// Whether `attr` shards one of the dims `mask` names.
fn shards_any(attr: &DistAttr, mask: u64) -> bool {
    let m = attr.dims_mapping.as_slice();
    m.iter()
        .enumerate()
        .any(|(i, s)| i < 64 && mask & (1 << i) != 0 && !s.is_replicated())
}

/// Forward: the batch and heads dims of v (bits 0 and 2) whose sharding
/// clashes with q's, k's or the mask's sharding of the same axis. Paddle 3.3.1 reads k's
/// mapping in v's place, so it never sees the clash; we let v yield to q
/// and k there (v is resharded to their layout) rather than fail: both
/// answers are sound, and an error where Paddle answers soundly helps no one.
fn v_clashes(call: &Call<'_>) -> u64 {
    let Call::Forward { inputs, .. } = *call else {
        return 0;
    };
    let (Some(q), Some(k), Some(v)) = (inputs.first(), inputs.get(1), inputs.get(2)) else {
        return 0;
    };
    if v.shape.len() != 4 || q.shape.len() != 4 || k.shape.len() != 4 {
        return 0;
    }
    let dim = |t: &Spec<'_>, d: usize| t.attr.dims_mapping.get(d).copied().unwrap_or_default();
    // The mask's batch and heads dims (0 and 1) merge with v's (0 and 2).
    let mask = inputs.get(4).filter(|m| m.shape.len() == 4);
    [(0usize, 0usize), (2, 1)]
        .into_iter()
        .filter(|&(d, md)| {
            let vs = dim(v, d);
            let others = [Some(dim(q, d)), Some(dim(k, d)), mask.map(|m| dim(m, md))];
            !vs.is_replicated()
                && others
                    .iter()
                    .flatten()
                    .any(|s| !s.is_replicated() && *s != vs)
        })
        .fold(0, |m, (d, _)| m | 1 << d)
}

/// `attr` with the dims `mask` names replicated.
fn freed(attr: &DistAttr, mask: u64) -> DistAttr {
    let mut dims = DimsMapping::replicated(0);
    for (i, s) in attr.dims_mapping.as_slice().iter().enumerate() {
        let fixed = i < 64 && mask & (1 << i) != 0;
        dims.push(if fixed { Sharding::REPLICATED } else { *s });
    }
    DistAttr::new(dims).with_partial(attr.partial)
}

/// `specs` with the absent ones (by `is_absent` of their index) as `None`.
fn present<'a>(specs: Vec<Spec<'a>>, is_absent: impl Fn(usize) -> bool) -> Vec<Option<Spec<'a>>> {
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| (!is_absent(i)).then_some(s))
        .collect()
}

/// The given tensors of a call (forward inputs, backward outputs, grad
/// inputs then grads), absent ones as placeholders.
fn given<'c>(call: &Call<'c>) -> (&'c [Spec<'c>], &'c [Spec<'c>]) {
    match *call {
        Call::Forward { inputs, .. } => (inputs, &[]),
        Call::Backward { outputs, .. } => (&[], outputs),
        Call::Grad {
            inputs,
            output_grads,
            ..
        } => (inputs, output_grads),
        _ => (&[], &[]),
    }
}

impl FlashAttention {
    /// `bshd,bthd,bthe,1,bhst->bshe,bhst,bhs,1`, with `''` for placeholders
    /// and `1` for a broadcast heads dim of the mask. A call Paddle would
    /// first free (a fixed dim sharded, or fewer kv heads than query heads)
    /// gets the same notation with every dim `1`, which merges nothing: the
    /// `adjust` hook answers it by inference on the freed tensors.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
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
        // Grouped-query attention: each kv head serves a whole group of
        // query heads (Paddle rejects other counts too).
        let heads = |i: usize| call.input_shape(i).and_then(|s| s.get(2).copied());
        if let Some(h) = heads(0) {
            for (i, name) in [(1, "k"), (2, "v")] {
                if let Some(g) = heads(i)
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
        let ones = |n: usize| "1".repeat(n);
        let seed = ones(input_rank(call, 3).unwrap_or(0));
        let mask = match call.input_shape(4) {
            None | Some([]) => String::new(),
            Some([_, 1, _, _]) => "b1st".to_string(),
            Some([_, _, _, _]) => "bhst".to_string(),
            Some(s) => ones(s.len()),
        };
        // Placeholder outputs (backward gives their shapes, the grad op
        // some of them).
        let out_rank =
            |o: usize, default: usize| call.output_shape(o).map_or(default, <[usize]>::len);
        let softmax = if out_rank(1, 4) == 0 { "" } else { "bhst" };
        let seed_out = ones(out_rank(3, 1));
        let notation = format!("bshd,bthd,bthe,{seed},{mask}->bshe,{softmax},bhs,{seed_out}");
        if Self::needs_freeing(call) {
            let merges_nothing: String = notation
                .chars()
                .map(|c| if c.is_ascii_lowercase() { '1' } else { c })
                .collect();
            return Einsum::new(&merges_nothing);
        }
        Einsum::new(&notation)
    }

    /// The query heads and the kv heads, when both are known.
    fn heads(call: &Call<'_>) -> Option<(usize, usize)> {
        let h = |i: usize| call.input_shape(i).and_then(|s| s.get(2).copied());
        Some((h(0)?, h(1)?))
    }

    /// Whether Paddle would replicate a sharded dim before merging, or the
    /// kv heads differ from the query heads (answered with the kv heads
    /// counted as query heads, see [`FlashAttention::paddle_merge`]).
    fn needs_freeing(call: &Call<'_>) -> bool {
        if Self::heads(call).is_some_and(|(h, g)| h != g) {
            return true;
        }
        let (in_roles, grad_roles) = roles(call);
        let (first, second) = given(call);
        let check = |specs: &[Spec<'_>], roles: &[Role]| {
            specs
                .iter()
                .zip(roles)
                .any(|(s, &r)| shards_any(s.attr, fixed_dims(r, s.shape, false)))
        };
        v_clashes(call) != 0 || check(first, in_roles) || check(second, grad_roles)
    }

    /// Answers a call [`FlashAttention::notation`] left unmerged: inference
    /// again on the given tensors with the fixed dims replicated (and, with
    /// grouped-query attention, k's and v's heads counted as q's, so one
    /// heads axis ties them). When the merged heads mesh dim does not divide
    /// the kv heads, once more with the heads replicated too.
    fn paddle_merge(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        if Self::needs_freeing(call) {
            *result = self.rerun(call, false)?;
            let mesh = call.mesh();
            if let Some((h, g)) = Self::heads(call)
                && h != g
                && let Some(q) = result.inputs.first()
                && let Some(heads) = q.dims_mapping.get(2)
            {
                let split: usize = heads
                    .as_slice()
                    .iter()
                    .map(|&d| mesh.shape().get(usize::from(d)).copied().unwrap_or(1))
                    .product();
                if g % split != 0 {
                    *result = self.rerun(call, true)?;
                }
            }
        }
        Ok(())
    }

    /// Inference on the call's tensors with their fixed dims (and with
    /// `heads`, their heads dims) replicated and k's and v's heads extent
    /// set to q's. The call this makes needs no freeing, so it is answered
    /// by the plain notation.
    fn rerun(&self, call: &Call<'_>, heads: bool) -> Result<RuleResult, SpmdError> {
        let (in_roles, grad_roles) = roles(call);
        let absent = call.absent();
        let (first, second) = given(call);
        let v_clash = v_clashes(call);
        let free = |specs: &[Spec<'_>], roles: &[Role], v_extra: u64| -> Vec<DistAttr> {
            specs
                .iter()
                .zip(roles.iter().chain(core::iter::repeat(&Role::Whole)))
                .enumerate()
                .map(|(i, (s, &r))| {
                    let extra = if i == 2 { v_extra } else { 0 };
                    freed(s.attr, fixed_dims(r, s.shape, heads) | extra)
                })
                .collect()
        };
        let (attrs1, attrs2) = (free(first, in_roles, v_clash), free(second, grad_roles, 0));
        // k's and v's shapes with q's heads extent (inputs 1 and 2 in every
        // direction that gives them).
        let q_heads = Self::heads(call).map(|(h, _)| h);
        let shapes = |shapes: &mut dyn Iterator<Item = &[usize]>| -> Vec<Vec<usize>> {
            shapes
                .enumerate()
                .map(|(i, s)| {
                    let mut s = s.to_vec();
                    if let (1 | 2, Some(h), 4) = (i, q_heads, s.len()) {
                        s[2] = h;
                    }
                    s
                })
                .collect()
        };
        let mesh = call.mesh();
        match *call {
            Call::Forward { inputs, .. } => {
                let sh = shapes(&mut inputs.iter().map(|s| s.shape));
                let specs = sh
                    .iter()
                    .zip(&attrs1)
                    .map(|(s, a)| Spec::new(s, a))
                    .collect();
                self.forward_optional(mesh, &present(specs, |i| absent.input(i)))
            }
            Call::Backward {
                input_shapes,
                outputs,
                ..
            } => {
                let sh = shapes(&mut input_shapes.iter().copied());
                let ins: Vec<Option<&[usize]>> = sh
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (!absent.input(i)).then_some(s.as_slice()))
                    .collect();
                let specs = outputs
                    .iter()
                    .zip(&attrs2)
                    .map(|(s, a)| Spec::new(s.shape, a))
                    .collect();
                self.backward_optional(mesh, &ins, &present(specs, |o| absent.output(o)))
            }
            Call::Grad {
                inputs,
                output_grads,
                ..
            } => {
                let sh = shapes(&mut inputs.iter().map(|s| s.shape));
                let ins = sh
                    .iter()
                    .zip(&attrs1)
                    .map(|(s, a)| Spec::new(s, a))
                    .collect();
                let grads = output_grads
                    .iter()
                    .zip(&attrs2)
                    .map(|(s, a)| Spec::new(s.shape, a))
                    .collect();
                self.grad_optional(
                    mesh,
                    &present(ins, |i| absent.input(i)),
                    &present(grads, |o| absent.output(o)),
                )
            }
            _ => Err(SpmdError::Rejected {
                op: OP,
                message: "a call direction this rule does not know".to_string(),
            }),
        }
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
    merge(never_sharded = "stde", unsharded_claims = "ignore"),
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
            Call::Grad { .. } => {
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
