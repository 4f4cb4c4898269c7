use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->ij", build = Self::notation)]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
