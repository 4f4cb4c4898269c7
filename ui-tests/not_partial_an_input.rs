use spmd_core::spmd_rule;

// `not_partial` names outputs: an input is never partial by the rule's doing.
#[spmd_rule(
    einsum = "bv,b->bv,b",
    inputs(logits, label),
    outputs(softmax, loss),
    partial(none(label))
)]
struct ParallelLoss {}

fn main() {}
