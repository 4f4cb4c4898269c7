//! Sharding-propagation (SPMD) inference.
//!
//! A rule is an einsum notation plus policies ([`EinsumRule`]). Forward inference
//! takes the inputs' [`Spec`]s (global shape + [`DistAttr`]) and answers the
//! inputs' required attrs and the outputs' attrs, partial where an output lacks a
//! sharded axis; backward inference does the reverse from the outputs.
//!
//! ```
//! use spmd_core::{DistAttr, Einsum, Mesh, Spec, SpmdRuleExt};
//!
//! let mesh = Mesh::new(&[2, 3])?;
//! let matmul = Einsum::new("mk,kn->mn")?;
//! let x = DistAttr::from_paddle(&[1, 0]).unwrap();   // m on mesh dim 1, k on 0
//! let y = DistAttr::from_paddle(&[-1, -1]).unwrap();
//! let r = matmul.forward(&mesh, &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)])?;
//! assert_eq!(r.inputs[1].to_string(), "[0, -1]");          // y must be split on k too
//! assert_eq!(r.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
//! # Ok::<(), spmd_core::SpmdError>(())
//! ```
//!
//! Every call is compiled for its rule and shapes (every check, with every
//! error, and flat per-dim tables), then one interpreter answers it, in
//! every direction. A rule declared with `#[spmd_rule]`, or an [`Einsum`],
//! keeps what a call compiled, per thread: a call with the shapes of an
//! earlier one reads only its layouts. A caller asking about many layouts
//! of the same tensors (a strategy search, a graph) can also keep the
//! compiled call itself: [`SpmdRule::prepare`] for any rule ([`Prepared`]),
//! [`EinsumRule::prepare_forward`] for a compiled rule; each call then
//! answers what the unprepared call answers (into a [`RuleResult`], or the
//! fixed arrays of an [`InlineResult`]).
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;
// The macro's expansions name `::spmd_core`; this makes them work in this crate too.
extern crate self as spmd_core;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod binding;
#[cfg(feature = "std")]
mod cache;
mod dist_attr;
mod einsum;
mod engine;
mod error;
#[cfg(feature = "serde")]
pub mod json;
mod merge;
mod mesh;
mod mixed;
mod op;
mod op_attrs;
mod optional;
mod policy;
mod prepared;
mod registry;
mod rule;
mod signature;
mod template;
mod tensor_set;
mod trace;

#[cfg(feature = "std")]
pub use cache::{NotationCache, ShapeKey};
pub use dist_attr::{DimsMapping, DistAttr, OwnedSpec, Partial, ReduceType, Sharding, Spec};
pub use einsum::Einsum;
pub use error::{AxisName, RankNeed, Role, SpmdError, TensorRef};
pub use mesh::{MAX_MESH_RANK, Mesh, MeshDim, MeshSet};
pub use mixed::{
    MixedGrad, Promoted, Tensor, backward_mixed, forward_mixed, grad_mixed, outputs_needing_grad,
    promote,
};
pub use op::{Call, Op};
pub use op_attrs::{AttrValue, Attrs, FromAttr};
pub use optional::{Absent, fill_shapes, fill_specs};
pub use policy::{
    BackwardPartial, Compounds, Conflicts, Divisibility, MissingAxis, PartialInputs, Policy,
    UnshardedClaims,
};
pub use prepared::{InlineResult, Prepared, PreparedForward};
pub use registry::{Registry, RuleInfo};
#[cfg(feature = "std")]
pub use registry::{global, global_mut, register_global};
pub use rule::{EinsumRule, RuleOptions, RuleResult, SpmdRule, SpmdRuleExt};
pub use signature::{GradSignature, GradTensor};
pub use spmd_notation::{self as notation, AxisId, AxisSet, Plan};
pub use template::{IntoPos, Positions};
pub use tensor_set::TensorSet;
pub use trace::{NoTrace, Trace};

/// The derive form of [`spmd_rule`]: the same options, in `#[spmd(...)]`
/// on the struct, and the same code.
///
/// ```
/// use spmd_core::{DistAttr, Mesh, Spec, SpmdRule, SpmdRuleExt};
///
/// #[derive(SpmdRule)]
/// #[spmd(einsum = "mk,kn->mn", inputs(x, w), outputs(out))]
/// struct Matmul {}
///
/// let x = DistAttr::from_paddle(&[0, 1]).unwrap();
/// let w = DistAttr::replicated(2);
/// let r = Matmul {}.forward(&Mesh::new(&[2, 2])?, &[Spec::new(&[8, 4], &x), Spec::new(&[4, 6], &w)])?;
/// assert_eq!(r.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
pub use spmd_macros::SpmdRule;
#[doc = include_str!("macro_docs.md")]
pub use spmd_macros::spmd_rule;
