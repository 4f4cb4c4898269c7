use spmd_core::spmd_rule;

#[spmd_rule(einsum = "...k...->k")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
