use spmd_core::spmd_rule;

// One term per side may stand for several tensors (`^`): with two, which
// tensors are whose would be ambiguous.
#[spmd_rule(einsum = "@{axis:1}^,@^->@{axis:1}")]
struct Concat {
    axis: i64,
}

fn main() {}
