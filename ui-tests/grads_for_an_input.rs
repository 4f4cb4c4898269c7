use spmd_core::spmd_rule;

// `grads_for` names outputs: an input has no grad that a grad op takes.
#[spmd_rule(
    einsum = "bac->b1c,b1c",
    inputs(x),
    outputs(out, indices),
    grad(inputs(x, indices), of(x))
)]
struct TopK {}

fn main() {}
