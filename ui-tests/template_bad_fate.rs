use spmd_core::spmd_rule;

// A fate is one label, `1` or `-`.
#[spmd_rule(einsum = "@{axis:ab}->@{axis:ab}")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
