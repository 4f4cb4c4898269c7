use spmd_core::spmd_rule;

// A repeat count names an attribute of the op (or a method).
#[spmd_rule(einsum = "@{axis:1}->@{axis:1}^pieces")]
struct Split {
    axis: i64,
}

fn main() {}
