use spmd_core::spmd_rule;

#[spmd_rule(einsum = "->mn")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
