//! A unit struct is an op without attributes.

use spmd_core::{Attrs, Op, spmd_rule};

#[spmd_rule(einsum = "ij->ji")]
struct Transpose2d;

fn main() {
    assert_eq!(Transpose2d::NAME, "transpose2d");
    assert_eq!(Transpose2d::ATTRS, &[] as &[&str]);
    let _op: Transpose2d = Transpose2d::from_attrs(&Attrs::new()).unwrap();
}
