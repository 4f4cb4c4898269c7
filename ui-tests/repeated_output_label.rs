use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk->mm")]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
