use spmd_core::spmd_rule;

// `follows` names inputs; `out` is an output.
#[spmd_rule(einsum = "bs,bs->bs", inputs(x, positions), outputs(out), merge(follows(out)))]
struct Scale {}

fn main() {}
