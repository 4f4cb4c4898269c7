//! The `#[spmd_rule]` attribute macro and its derive form,
//! `#[derive(SpmdRule)]`. Use them through `spmd_core`, whose
//! `spmd_rule` documentation has the options and examples (doctests here
//! could not see `spmd-core`). Both forms parse the same options and expand
//! to the same code.
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

/// Declares an op's sharding rule, the options in `#[spmd(...)]` on the
/// struct: `#[derive(SpmdRule)] #[spmd(einsum = "mk,kn->mn")] struct Matmul {}`
/// is `#[spmd_rule(einsum = "mk,kn->mn")] struct Matmul {}`. See
/// `spmd_core::spmd_rule` for the options.
#[proc_macro_derive(SpmdRule, attributes(spmd))]
pub fn derive_spmd_rule(item: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand::derive(item.into()).into()
}
