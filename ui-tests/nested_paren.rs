use spmd_core::spmd_rule;

#[spmd_rule(einsum = "b(h(dk))->bhdk")]
struct Transpose {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
