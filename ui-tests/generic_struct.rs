use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji")]
struct Transpose<T> {
    perm: Vec<T>,
}

fn main() {}
