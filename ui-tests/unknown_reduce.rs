use spmd_core::spmd_rule;

#[spmd_rule(einsum = "ij->i", reduce = "mean")]
struct RowMax {
    #[spmd(default)]
    flag: bool,
}

fn main() {}
