use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji")]
fn transpose() {}

fn main() {}
