use spmd_core::spmd_rule;

// Every problem of one attribute is reported in one compile: both errors of the
// notation, each bad option, and the bad field attribute. (Labels named by
// options are checked only against a valid notation.)
#[spmd_rule(
    einsum = "mk,k(n)->mq",
    partial(reduce = "mean"),
    merge(conflicts = "last_wins"),
    colour = "red"
)]
struct Matmul {
    #[spmd(defualt)]
    trans_x: bool,
}

fn main() {}
