use spmd_core::spmd_rule;

// A selector is an attribute name or `method()`.
#[spmd_rule(einsum = "@{2axis:a}->@{2axis:a}")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
