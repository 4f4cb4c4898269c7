use spmd_core::spmd_rule;

// `merge` groups options: a bare `merge` or `merge = ".."` says nothing.
#[spmd_rule(einsum = "ab->a", merge, partial = "max")]
struct Sum {}

fn main() {}
