use spmd_core::spmd_rule;

// A typo inside a group is named with the group's keys; a key of another
// group says where it lives.
#[spmd_rule(einsum = "ab->a", merge(folows(x)), partial(ignores(x)), inputs(x))]
struct Sum {}

fn main() {}
