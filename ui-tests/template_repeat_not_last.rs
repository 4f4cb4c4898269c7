use spmd_core::spmd_rule;

// Only a side's last term may stand for several tensors (`^`): an earlier
// one would leave the later terms without a place.
#[spmd_rule(einsum = "@{axis:1}^,@->@{axis:1}")]
struct Concat {
    axis: i64,
}

fn main() {}
