use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ij", merge(unsharded_claims = "drop"))]
struct Copy {}

fn main() {}
