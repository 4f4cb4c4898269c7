use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,k#->m")]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
