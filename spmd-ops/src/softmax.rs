//! `softmax`: normalizes along one axis, which therefore cannot stay sharded.

use spmd_core::spmd_rule;

/// Paddle's `softmax`: the `axis` dim is replicated (its values depend on the
/// whole axis); every other dim keeps its sharding. The template labels the
/// dim at `axis` `a` (for rank 3 and axis 1 it binds to `bad->bad`).
#[spmd_rule(
    name = "softmax",
    einsum = "@{axis:a}->@{axis:a}",
    merge(never_sharded = "a", conflicts = "strict"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Softmax {
    #[spmd(default = -1)]
    pub axis: i64,
}
