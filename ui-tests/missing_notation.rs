use spmd_core::spmd_rule;

#[spmd_rule(name = "transpose")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
