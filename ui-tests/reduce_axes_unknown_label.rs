use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn->mn", partial(axes(q = "max")))]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
