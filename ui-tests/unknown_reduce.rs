use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->i", partial(reduce = "mean"))]
struct RowMax {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
