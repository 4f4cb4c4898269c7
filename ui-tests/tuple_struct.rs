use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji")]
struct Transpose(Vec<i64>);

fn main() {}
