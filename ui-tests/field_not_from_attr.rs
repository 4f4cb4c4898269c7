use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ji")]
struct Transpose {
    perm: Vec<i64>,
    mesh: std::time::Duration,
}

fn main() {}
