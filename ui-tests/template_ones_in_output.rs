use spmd_core::spmd_rule;

// `*` takes its rank from the tensor, which an output does not give in forward.
#[spmd_rule(einsum = "@->*")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
