use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->\x6aI")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
