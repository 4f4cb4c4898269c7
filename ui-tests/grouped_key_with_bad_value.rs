use spmd_core::spmd_rule;

// A grouped key written at the top level with a value it does not take: the
// hint shows a value it does take, not the bad one.
#[spmd_rule(einsum = "ij->i", reduce = 3)]
struct RowSum {}

fn main() {}
