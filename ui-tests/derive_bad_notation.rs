use spmd_core::SpmdRule;

// The derive form's errors point into its `#[spmd(...)]` attribute, as the
// attribute form's point into its arguments.
#[derive(SpmdRule)]
#[spmd(einsum = "mk,kn->mq", inputs(x, w))]
struct Matmul {
    #[spmd(default)]
    trans_x: bool,
}

fn main() {}
