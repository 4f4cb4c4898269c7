use spmd_core::spmd_rule;

// A selection says what the selected dims become.
#[spmd_rule(einsum = "@{axis}->@{axis}")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
