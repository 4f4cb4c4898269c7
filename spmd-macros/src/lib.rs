//! The `#[spmd_rule]` attribute macro. Use it through `spmd_core::spmd_rule`,
//! whose documentation has the options and examples (doctests here could not
//! see `spmd-core`).
//!
//! Layout (after thiserror and serde_derive): `args` parses and validates the
//! attribute and the struct into a typed `Rule`, collecting every error;
//! `expand` turns it into `const` plans and trait impls, or, on error, into the
//! struct, the errors and stub impls.

mod args;
mod expand;

/// Declares an op's sharding rule from an einsum notation. See
/// `spmd_core::spmd_rule` for the documentation.
#[proc_macro_attribute]
pub fn spmd_rule(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand::expand(args.into(), item.into()).into()
}
