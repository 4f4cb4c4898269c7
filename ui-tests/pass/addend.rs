use spmd_core::spmd_rule;

/// A linear layer with a bias (an addend), and addmm's order: the addend first.
#[spmd_rule(einsum = "bsk,kn,+n->bsn", inputs(x, w, bias), outputs(out))]
struct LinearWithBias {}

#[spmd_rule(einsum = "+mn,mk,kn->mn", partial(reduce = "max"))]
struct AddMaxPlus {}

fn main() {}
