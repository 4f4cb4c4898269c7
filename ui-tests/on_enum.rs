use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji")]
enum Transpose {
    Plain,
    Conjugate,
}

fn main() {}
