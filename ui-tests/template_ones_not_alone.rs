use spmd_core::spmd_rule;

// `*` fills the dims its term's labels leave: beside `@`, which also fills
// them, it is ambiguous.
#[spmd_rule(einsum = "@,@*->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
