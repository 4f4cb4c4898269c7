use spmd_core::SpmdRule;

#[derive(SpmdRule)]
#[spmd = "ij->ji"]
struct Transpose {}

fn main() {}
