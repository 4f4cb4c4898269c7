use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji", cache)]
struct Transpose {}

fn main() {}
