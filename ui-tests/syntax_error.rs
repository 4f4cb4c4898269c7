use spmd_core::spmd_rule;

#[spmd_rule(einsum "ij->ji")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
