use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk,kn->mq")]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
