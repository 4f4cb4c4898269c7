use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji", build(cache))]
struct Transpose {}

fn main() {}
