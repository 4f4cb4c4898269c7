use spmd_core::spmd_rule;

// `+` stands once, before an operand: `k+n` is not a sum of dims.
#[spmd_rule(einsum = "bsk,k+n->bsn")]
struct Linear {}

fn main() {}
