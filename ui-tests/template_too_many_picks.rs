use spmd_core::spmd_rule;

// At most four distinct selections.
#[spmd_rule(einsum = "@->@{axis:-},@{axis..:-},@{..axis:-},@{..:1},@{k:1}")]
struct Op {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
