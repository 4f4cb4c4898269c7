use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn->mn", merge(never_sharded = "q"))]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
