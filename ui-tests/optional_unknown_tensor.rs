use spmd_core::spmd_rule;

// `optional` names tensors declared in `inputs(..)` / `outputs(..)`.
#[spmd_rule(einsum = "ab,b->ab", inputs(x, bias), outputs(out), optional(scale))]
struct AddBias {}

fn main() {}
