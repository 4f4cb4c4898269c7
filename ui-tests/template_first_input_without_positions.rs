use spmd_core::spmd_rule;

// Input 0 defines the positions `@` stands for.
#[spmd_rule(einsum = "a,@->@")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
