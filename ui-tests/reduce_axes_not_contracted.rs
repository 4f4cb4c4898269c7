use spmd_core::spmd_rule;

// `m` is in the output: nothing is reduced over it.
#[spmd_rule(einsum = "mk,kn->mn", partial(axes(m = "max")))]
struct Matmul {}

fn main() {}
