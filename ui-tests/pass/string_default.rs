use spmd_core::{Attrs, Op, spmd_rule};

/// A string attribute's default is written as the string (it used to be read
/// as an expression: "cannot find value `none`").
#[spmd_rule(einsum = "ab->ab")]
struct Act {
    #[spmd(default = "none")]
    activation: String,
    #[spmd(default = 2)]
    times: i64,
}

fn main() {
    let a = Act::from_attrs(&Attrs::new()).unwrap();
    assert_eq!((a.activation.as_str(), a.times), ("none", 2));
    let b = Act::from_attrs(&Attrs::new().with("activation", "gelu")).unwrap();
    assert_eq!(b.activation, "gelu");
}
