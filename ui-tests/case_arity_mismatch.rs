use spmd_core::spmd_rule;

#[spmd_rule(
    einsum = "mk,kn->mn",
    case(when = self.trans_x, einsum = "km,kn->mn"),
    case(when = self.fused_bias, einsum = "mk,kn,n->mn")
)]
struct Matmul {
    #[spmd(default)]
    trans_x: bool,
    #[spmd(default)]
    fused_bias: bool,
}

fn main() {}
