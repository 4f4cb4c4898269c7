use spmd_core::spmd_rule;

// Input 0's rank sets the positions: it has one form.
#[spmd_rule(einsum = "@{axis:1}|*->@{axis:1}")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
