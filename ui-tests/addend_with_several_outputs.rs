use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ab,+b->ab,b")]
struct TwoOutputs {}

fn main() {}
