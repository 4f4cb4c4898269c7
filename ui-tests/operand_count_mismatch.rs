use spmd_core::spmd_rule;

#[spmd_rule(einsum = "mk->m", inputs(x, y), outputs(out))]
struct Matmul {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
