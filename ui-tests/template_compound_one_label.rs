use spmd_core::spmd_rule;

// A compound dim in a template has two or more literal labels.
#[spmd_rule(einsum = "@,(h)->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
