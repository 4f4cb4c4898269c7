use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ij", merge(conflicts = "last_wins"))]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
