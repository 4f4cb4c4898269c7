use spmd_core::spmd_rule;

// Templates write dims with `@`: no `...`, compounds or addends.
#[spmd_rule(einsum = "...@->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
