use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn->mn", reduce_axes(q = "max"))]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
