//! Elementwise ops: unary (`relu`, `exp`, ...) and binary with numpy
//! broadcasting (`add`, `multiply`, comparisons, logical ops). Every dim keeps
//! its sharding; a size-1 dim broadcast against a larger one is never sharded.

use spmd_core::spmd_rule;

/// Paddle's elementwise unary rule. Paddle 3.3.1 drops a sharding that does
/// not divide its dim, on both sides and in both directions
/// (`PADDLE-3.3.1.md` §A); its attributes do not affect sharding.
#[spmd_rule(
    name = "elementwise_unary",
    einsum = "...->...",
    merge(divisibility = "drop"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ElementwiseUnary {}

/// Paddle's elementwise binary rule: numpy broadcasting, shardings kept
/// even when uneven.
#[spmd_rule(
    name = "elementwise_binary",
    einsum = "...,...->...",
    partial(backward = "reset"),
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ElementwiseBinary {}

/// Paddle 3.3.1's `multiply`: the binary rule, plus a partial input passes
/// through (the product is linear in each operand; `PADDLE-3.3.1.md` §B).
#[spmd_rule(
    name = "multiply",
    einsum = "...,...->...",
    partial(backward = "reset", inputs = "linear"),
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Multiply {}

/// Paddle's `add_n`: the elementwise sum of any number of same-rank
/// inputs (no broadcasting: Paddle's `AddNInferSpmd` rejects other ranks).
/// Each dim merges across the inputs; one dim sharded two ways is an error,
/// as in Paddle 3.3.1. Partial inputs are reduced first, as Paddle does.
#[spmd_rule(
    name = "add_n",
    einsum = "@^->@",
    partial(backward = "reset"),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AddN {}

/// Paddle's `label_smooth` (`label`, `prior_dist` → `out`): `out = (1 -
/// epsilon) * label + epsilon * prior_dist`, elementwise with numpy
/// broadcasting (the prior is one distribution over the last, class dim).
/// Paddle 3.3.1's `LabelSmoothInferSpmd` answers so. The prior has no
/// gradient and is optional: absent, the prior is uniform, `epsilon / C`
/// with `C` the label's last dim as the kernel sees it, so that dim is
/// never sharded (Paddle keeps it sharded: each device would divide by its
/// own share of the classes).
#[spmd_rule(
    name = "label_smooth",
    einsum = "...,...->...",
    case(when = call.input_absent(1), einsum = "...1,->...1"),
    partial(backward = "reset"),
    inputs(label, prior_dist),
    outputs(out),
    grad(none(prior_dist)),
    optional(prior_dist)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LabelSmooth {
    #[spmd(default)]
    pub epsilon: f32,
}

/// Paddle's `fused_dropout_add` (`x`, `y` → `out`, `seed_offset`): `out =
/// dropout(x) + y`, elementwise with numpy broadcasting; the seed and
/// offset the kernel returns are a replicated pair. Paddle 3.3.1's
/// `FusedDropoutAddSpmd` merges `x` and `y` so. Its optional `seed_tensor`
/// input is not part of this rule.
#[spmd_rule(
    name = "fused_dropout_add",
    einsum = "...,...->...,1",
    // The seed pair is not a sum over the dims it lacks.
    partial(backward = "reset", none(seed_offset)),
    inputs(x, y),
    outputs(out, seed_offset)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FusedDropoutAdd {}

/// Paddle's names for ops that use the unary rule. Paddle 3.3.1 registers
/// `dropout`, `fill`, `bernoulli` and `poisson` with it too: under those
/// names the rule sees only `x` (dropout's optional seed tensor and its mask
/// output are not part of it), and its gradient is the unary one, taken as
/// (mask, out_grad) like Paddle's `DropoutBwdInferSpmd`. `full_like` and
/// `elementwise_unary_grad` are rules Paddle calls directly, not through its
/// registry; they answer as the unary rule does.
pub const UNARY: &[&str] = &[
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "assign",
    "atan",
    "atanh",
    "bernoulli",
    "bitwise_not",
    "cast",
    "ceil",
    "celu",
    "clip",
    "conj",
    "cos",
    "cosh",
    "digamma",
    "dropout",
    "elementwise_unary_grad",
    "elu",
    "erf",
    "erfinv",
    "exp",
    "expm1",
    "fill",
    "floor",
    "full_like",
    "gelu",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "logit",
    "logsigmoid",
    "mish",
    "poisson",
    "pow",
    "reciprocal",
    "relu",
    "relu6",
    "round",
    "rsqrt",
    "scale",
    "selu",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "sinh",
    "softplus",
    "softshrink",
    "softsign",
    "sqrt",
    "square",
    "stanh",
    "swish",
    "tan",
    "tanh",
    "tanh_shrink",
    "thresholded_relu",
    "trunc",
];

/// Paddle's names for ops that use the binary rule.
pub const BINARY: &[&str] = &[
    "add",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "divide",
    "elementwise_add",
    "elementwise_div",
    "elementwise_pow",
    "floor_divide",
    "fmax",
    "fmin",
    "greater_than",
    "heaviside",
    "less_than",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "not_equal",
    "remainder",
    "subtract",
    "trunc_divide",
];

/// The attributes Paddle's unary ops take (none changes an elementwise
/// op's sharding): accepted and ignored, so that a typo is still an error.
pub(crate) const UNARY_ATTRS: &[(&str, &[&str])] = &[
    ("cast", &["dtype"]),
    ("celu", &["alpha"]),
    ("clip", &["min", "max"]),
    ("dropout", &["p", "is_test", "mode", "seed", "fix_seed"]),
    ("elu", &["alpha"]),
    ("fill", &["value"]),
    ("full_like", &["value", "dtype", "place"]),
    ("gelu", &["approximate"]),
    ("hardshrink", &["threshold"]),
    ("hardsigmoid", &["slope", "offset"]),
    ("hardtanh", &["t_min", "t_max"]),
    ("leaky_relu", &["negative_slope"]),
    ("logit", &["eps"]),
    ("mish", &["lambda"]),
    ("pow", &["factor"]),
    ("relu6", &["threshold"]),
    ("round", &["decimals"]),
    ("scale", &["scale", "bias", "bias_after_scale"]),
    ("selu", &["scale", "alpha"]),
    ("softplus", &["beta", "threshold"]),
    ("softshrink", &["threshold"]),
    ("stanh", &["scale_a", "scale_b"]),
    ("swish", &["beta"]),
    ("thresholded_relu", &["threshold", "value"]),
];
