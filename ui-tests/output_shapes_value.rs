use spmd_core::spmd_rule;

// `output_shapes` is a flag of `build(...)`: it takes no value.
#[spmd_rule(build(Self::notation, output_shapes = "yes"))]
struct Copy {}

fn main() {}
