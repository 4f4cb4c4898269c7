use spmd_core::spmd_rule;

// prod(p_i + b) is not prod(p_i) + b: an addend needs a sum, avg, max or min.
#[spmd_rule(einsum = "ab,+a->a", partial(reduce = "prod"))]
struct ProdPlusBias {}

fn main() {}
