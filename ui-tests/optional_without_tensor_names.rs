use spmd_core::spmd_rule;

// Without `inputs(..)` / `outputs(..)` there is nothing to name.
#[spmd_rule(einsum = "ab,b->ab", optional(bias))]
struct AddBias {}

fn main() {}
