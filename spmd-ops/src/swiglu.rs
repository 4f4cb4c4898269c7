//! `swiglu`: `out = silu(x) * y`, elementwise.

use spmd_core::spmd_rule;

/// Paddle's `swiglu` with both operands: elementwise, with numpy
/// broadcasting, every dim keeping its sharding (Paddle 3.3.1's
/// `SwiGLUInferSpmd`, which calls the elementwise binary rule). Without `y`
/// Paddle splits `x`'s last dim in halves; that form takes an absent
/// optional input, which the rule does not cover yet.
#[spmd_rule(
    name = "swiglu",
    einsum = "...,...->...",
    backward_partial = "reset",
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swiglu {}
