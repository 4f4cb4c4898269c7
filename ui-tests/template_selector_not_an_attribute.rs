use spmd_core::spmd_rule;

// A selector reads an attribute: `axs` is not a field (a method would be written `axs()`).
#[spmd_rule(einsum = "@{axs:a}->@{axs:a}")]
struct Softmax {
    #[spmd(default)]
    axis: i64,
}

fn main() {}
