use spmd_core::spmd_rule;

#[spmd_rule(einsum = "bhd)->bhd")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
