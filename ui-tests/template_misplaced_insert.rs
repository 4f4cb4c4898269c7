use spmd_core::spmd_rule;

// `+1` inserts new dims into an output; an operand's dims are given.
#[spmd_rule(einsum = "@,@{axis:+1}->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
