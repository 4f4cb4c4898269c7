use spmd_core::spmd_rule;

// An addend is added to the result, so the result has all of its labels:
// this "bias" over the contracted `k` is not an addend.
#[spmd_rule(einsum = "bsk,kn,+k->bsn")]
struct Linear {}

fn main() {}
