use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ij", merge(divisibility = "even"))]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
