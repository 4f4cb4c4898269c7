use spmd_core::spmd_rule;

#[spmd_rule(einsum = 3)]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
