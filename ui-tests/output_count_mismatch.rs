use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk->m", inputs(x), outputs(out, indices))]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
