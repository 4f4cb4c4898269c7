use spmd_core::spmd_rule;

#[spmd_rule(einsun = "ij->ij")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
