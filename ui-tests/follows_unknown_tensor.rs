use spmd_core::spmd_rule;

// `follows` names declared tensors (inputs follow in forward and grad,
// outputs in backward); `pos` is neither.
#[spmd_rule(einsum = "bs,bs->bs", inputs(x, positions), outputs(out), merge(follows(pos)))]
struct Scale {}

fn main() {}
