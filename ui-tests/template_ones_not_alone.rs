use spmd_core::spmd_rule;

// `*` is a whole term.
#[spmd_rule(einsum = "@,*1->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
