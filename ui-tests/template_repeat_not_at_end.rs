use spmd_core::spmd_rule;

// `^` (or `^count`) ends its term: the dims come before it.
#[spmd_rule(einsum = "@{axis:1}^ 1->@{axis:1}")]
struct Concat {
    axis: i64,
}

fn main() {}
