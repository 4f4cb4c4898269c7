use spmd_core::spmd_rule;

// Input 0 keeps every position: dropping one there is what an output does.
#[spmd_rule(einsum = "@{axis:-}->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
