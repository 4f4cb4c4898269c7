//! `swiglu`: `out = silu(x) * y`, elementwise.

use spmd_core::spmd_rule;

/// Paddle's `swiglu` with both operands: elementwise, with numpy
/// broadcasting, every dim keeping its sharding (Paddle 3.3.1's
/// `SwiGLUInferSpmd`, which calls the elementwise binary rule).
///
/// `y` is optional. Without it the kernel splits `x`'s last dim in halves,
/// `out = silu(x[..., :n]) * x[..., n:]`, so that dim (`2n` in `x`, `n` in
/// `out`) is written `1` and never sharded: a device holding a block of
/// `x`'s last dim holds neither matching half. Paddle 3.3.1 keeps its
/// sharding (as if each device's block held both halves), which the
/// conformance deviations list.
#[spmd_rule(
    name = "swiglu",
    einsum = "...,...->...",
    case(when = call.input_absent(1), einsum = "...1,...->...1"),
    partial(backward = "reset"),
    inputs(x, y),
    outputs(out),
    optional(y)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Swiglu {}
