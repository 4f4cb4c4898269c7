use spmd_core::spmd_rule;

// A selection ends with `}`.
#[spmd_rule(einsum = "@{axis:a->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
