use spmd_core::spmd_rule;

// Only an operand can be added: `+` on the output side is an error.
#[spmd_rule(einsum = "bsk,kn->+bsn")]
struct Linear {}

fn main() {}
