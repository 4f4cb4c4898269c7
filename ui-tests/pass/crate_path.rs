//! `crate = path` names spmd-core when it is reached through a re-export.

mod facade {
    pub use spmd_core as core_reexport;
}

use facade::core_reexport::{Op, spmd_rule};

#[spmd_rule(crate = facade::core_reexport, einsum = "mk,kn->mn")]
struct Mm {
    #[spmd(default, rename = "transpose_x")]
    trans_x: bool,
}

fn main() {
    assert_eq!(Mm::NAME, "mm");
    assert_eq!(Mm::ATTRS, &["transpose_x"]);
}
