use spmd_core::spmd_rule;

#[spmd_rule(einsum = "bs(h)->bsh")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
