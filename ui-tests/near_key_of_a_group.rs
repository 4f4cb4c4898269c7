use spmd_core::spmd_rule;

// A top-level key near a group's key: the hint names the group.
#[spmd_rule(einsum = "ij->ij", conflict = "strict")]
struct Identity {}

fn main() {}
