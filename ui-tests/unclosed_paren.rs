use spmd_core::spmd_rule;

#[spmd_rule(einsum = "b(hd->bhd")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
