//! Contractions: `matmul` / `matmul_v2` (batched matrix product with
//! optional transposes), `bmm`, `einsum`, `linear_v2` and
//! `fused_gemm_epilogue`.

use spmd_core::{Call, Einsum, RuleResult, SpmdError, spmd_rule};

/// Paddle's `matmul`: `x @ y` over the last two dims, batch dims broadcast.
/// `trans_x` / `trans_y` swap the last two dims of an operand; a 1-D operand
/// is a vector (its transpose flag does nothing), as in numpy.
///
/// Paddle 3.3.1's policy: axes settle by role (batch, then m and n, then k,
/// which co-shards both operands' k shardings) and non-divisible batch and k
/// shardings are dropped in forward (`PADDLE-3.3.1.md` §C). Backward and grad
/// keep uneven shards (the classic answer, which Paddle's own test suite
/// asserts); Paddle 3.3.1's reverse rule drops them on the inferred inputs
/// only and returns an output that forward from those inputs would not
/// produce (a listed deviation).
#[spmd_rule(
    name = "matmul",
    einsum = "...mk,...kn->...mn",
    case(when = call.input_rank(0) == Some(1) && call.input_rank(1) == Some(1), einsum = "k,k->"),
    case(when = call.input_rank(0) == Some(1) && self.trans_y, einsum = "k,...nk->...n"),
    case(when = call.input_rank(0) == Some(1), einsum = "k,...kn->...n"),
    case(when = call.input_rank(1) == Some(1) && self.trans_x, einsum = "...km,k->...m"),
    case(when = call.input_rank(1) == Some(1), einsum = "...mk,k->...m"),
    case(when = self.trans_x && !self.trans_y, einsum = "...km,...kn->...mn"),
    case(when = !self.trans_x && self.trans_y, einsum = "...mk,...nk->...mn"),
    case(when = self.trans_x && self.trans_y, einsum = "...km,...nk->...mn"),
    merge(conflicts = "role_priority"),
    validate = Self::check_transposes,
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Matmul {
    #[spmd(default)]
    pub trans_x: bool,
    #[spmd(default)]
    pub trans_y: bool,
}

impl Matmul {
    /// A transpose flag on a 1-D operand is a caller error (Paddle rejects it
    /// rather than ignoring the flag).
    fn check_transposes(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        // Nothing to check in the common call (this runs on every call).
        if !self.trans_x && !self.trans_y {
            return Ok(());
        }
        for (i, (flag, attr)) in [(self.trans_x, "trans_x"), (self.trans_y, "trans_y")]
            .into_iter()
            .enumerate()
        {
            if flag && call.input_rank(i).is_some_and(|r| r < 2) {
                return Err(SpmdError::InvalidAttr {
                    op: "matmul",
                    attr: attr.into(),
                    message: format!(
                        "input {i} has rank {}, and only an operand of rank 2 or more can be transposed",
                        call.input_rank(i).unwrap_or(0)
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Paddle's `bmm`: batched matrix product of two 3-D tensors, `[b, m, k] @
/// [b, k, n]`. Paddle 3.3.1 answers it as its matmul (axes settle by role,
/// a batch sharded two ways is co-sharded, non-divisible batch and `k`
/// shardings dropped), which this rule declares with the same policy.
#[spmd_rule(
    name = "bmm",
    einsum = "bmk,bkn->bmn",
    merge(conflicts = "role_priority"),
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bmm {}

/// Paddle's `einsum` op: the rule is the `equation` attribute, parsed when
/// the op is called (Paddle writes `...` as explicit letters; ours is the
/// docs/semantics.md §3 notation, `...` included). The classic policy, as Paddle's
/// `EinsumInferSpmd`.
#[spmd_rule(name = "einsum", build = Self::notation)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EinsumOp {
    pub equation: String,
}

impl EinsumOp {
    /// The notation is the op's `equation` attribute itself: the one rule
    /// whose text is data given at run time, so it is parsed on each call
    /// (declare a rule with a literal `einsum = ".."` where the notation is
    /// known ahead: it is compiled once, at macro time).
    fn notation(&self, _call: &Call<'_>) -> Result<Einsum, SpmdError> {
        Einsum::new(&self.equation)
    }
}

/// Paddle's `linear_v2` (`input`, `weight`, `bias` → `out`): `out = input
/// @ weight + bias`, `weight` `[k, n]`, the bias an addend (`+n`). The
/// contracted `k` is never sharded and the bias follows the weight's `n`
/// (its own given sharding takes no part in the merge): Paddle 3.3.1's
/// `LinearV2InferSpmd` answers so. (Sharding `k` would be sound too, the
/// addend then required partial: `fused_gemm_epilogue` does that.)
/// `transpose_weight` is rejected, as Paddle does under SPMD.
#[spmd_rule(
    name = "linear_v2",
    einsum = "...m1,1n,+n->...mn",
    validate = Self::check,
    merge(follows(bias)),
    inputs(input, weight, bias),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LinearV2 {
    #[spmd(default)]
    pub transpose_weight: bool,
}

impl LinearV2 {
    fn check(&self, _call: &Call<'_>) -> Result<(), SpmdError> {
        if self.transpose_weight {
            return Err(SpmdError::InvalidAttr {
                op: "linear_v2",
                attr: "transpose_weight".into(),
                message: "a transposed weight is not supported by the SPMD rule (Paddle 3.3.1 rejects it too)".into(),
            });
        }
        Ok(())
    }
}

/// Paddle's `fused_gemm_epilogue` (`x`, `y`, `bias` → `out`): `out =
/// activation(x @ y + bias)`, with `trans_x` / `trans_y` as in matmul and
/// the bias an addend over `n`. A sharded `k` leaves the product partial
/// (`Sum`), so the addend is required partial over the same mesh dims (held
/// by one device, zeros on the others, so it is added once), as Paddle
/// 3.3.1's `FusedGemmEpilogueInferSpmd` answers. An activation other than
/// `none` is not linear, so with one `k` is never sharded (Paddle applies it
/// to the partial sums, which is wrong).
#[spmd_rule(
    name = "fused_gemm_epilogue",
    einsum = "...mk,kn,+n->...mn",
    case(when = self.nonlinear() && self.trans_x && self.trans_y, einsum = "...1m,n1,+n->...mn"),
    case(when = self.nonlinear() && self.trans_x, einsum = "...1m,1n,+n->...mn"),
    case(when = self.nonlinear() && self.trans_y, einsum = "...m1,n1,+n->...mn"),
    case(when = self.nonlinear(), einsum = "...m1,1n,+n->...mn"),
    case(when = self.trans_x && self.trans_y, einsum = "...km,nk,+n->...mn"),
    case(when = self.trans_x, einsum = "...km,kn,+n->...mn"),
    case(when = self.trans_y, einsum = "...mk,nk,+n->...mn"),
    inputs(x, y, bias),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FusedGemmEpilogue {
    #[spmd(default)]
    pub trans_x: bool,
    #[spmd(default)]
    pub trans_y: bool,
    #[spmd(default = "none")]
    pub activation: String,
}

impl FusedGemmEpilogue {
    fn nonlinear(&self) -> bool {
        !matches!(self.activation.as_str(), "none" | "")
    }
}

/// Paddle's `fused_linear_param_grad_add` (`x`, `dout`, `dweight`, `dbias`
/// → `dweight_out`, `dbias_out`): a linear layer's parameter gradients
/// accumulated into `dweight` and `dbias`: `dweight_out = dweight + xᵀ ·
/// dout` (contracting every batch dim) and `dbias_out = dbias + sum(dout)`
/// over the batch dims. Sharded batch dims leave both outputs partial
/// (`Sum`); the accumulators are required with the outputs' layout,
/// partial status included (an accumulator partial like the sum added to
/// it stays a correct partial). `dbias_out` sums `dout` only, so it is
/// never partial over `x`'s `k`. Paddle 3.3.1's
/// `FusedLinearParamGradAddInferSpmd` answers so, and rejects accumulators
/// laid out otherwise where this rule asks for a reshard. Without a bias
/// (`has_bias = false`) Paddle passes `dbias` and `dbias_out` as absent
/// optional tensors; so may the first step of an accumulation, with no
/// `dweight` yet.
#[spmd_rule(
    name = "fused_linear_param_grad_add",
    einsum = "...k,...n,kn,n->kn,n",
    adjust = Self::accumulate,
    inputs(x, dout, dweight, dbias),
    outputs(dweight_out, dbias_out),
    optional(dweight, dbias, dbias_out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FusedLinearParamGradAdd {
    #[spmd(default)]
    pub multi_precision: bool,
    #[spmd(default = true)]
    pub has_bias: bool,
}

impl FusedLinearParamGradAdd {
    fn accumulate(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        if !call.is_forward() {
            return Ok(());
        }
        // dweight_out's partial dims are exactly the batch's mesh dims.
        let batch = result.outputs.first().map(|w| w.partial);
        let absent = call.absent();
        if let (Some(batch), Some(bias)) = (batch, result.outputs.get_mut(1))
            && !absent.output(1)
        {
            let mut p = batch;
            p.remove(bias.dims_mapping.mesh_set());
            bias.partial = p;
        }
        let RuleResult { inputs, outputs } = result;
        for (o, out) in outputs.iter().enumerate() {
            // An absent accumulator keeps its placeholder answer.
            if let Some(acc) = inputs.get_mut(2 + o)
                && !absent.input(2 + o)
            {
                acc.partial = out.partial;
            }
        }
        Ok(())
    }
}
