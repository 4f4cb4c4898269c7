use spmd_core::SpmdRule;

// The derive form goes on structs, as the attribute does.
#[derive(SpmdRule)]
#[spmd(einsum = "ij->ji")]
enum Transpose {
    Rows,
}

fn main() {}
