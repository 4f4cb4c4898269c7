use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn->mn", never_sharded = "q")]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
