use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn")]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
