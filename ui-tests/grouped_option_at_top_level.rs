use spmd_core::spmd_rule;

// Options of one concept live in its group: `follows` is part of
// `merge(...)`, `not_partial` was renamed `partial(none(..))`.
#[spmd_rule(einsum = "bs,bs->bs", inputs(x, pos), outputs(out), follows(pos), not_partial(out))]
struct Scale {}

fn main() {}
