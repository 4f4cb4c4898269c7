//! The einsum notation of spmd sharding rules.
//!
//! ```text
//! rule    := operands "->" outputs
//! operands := ["+"] term ("," ["+"] term)*
//! outputs := term ("," term)*
//! term    := ["..."] dim*      (ellipsis at most once per term; a scalar is the empty term)
//! dim     := label | "1" | "(" label label+ ")"
//! label   := one ASCII letter a-z or A-Z
//! ```
//!
//! This crate has no dependencies so that the same parser runs inside the
//! `#[spmd_rule]` macro (compile time) and inside `spmd-core` (notations built at
//! run time): both report exactly the same errors.
//!
//! Operands multiply (an einsum is a sum of products); an operand written with
//! a leading `+` is an *addend*: it is added to the result instead, broadcast
//! over the output axes it lacks. `bsk,kn,+n->bsn` is a linear layer with a
//! bias: `out[b,s,n] = sum_k x[b,s,k] * w[k,n] + bias[n]`. An addend's labels
//! must all be in the output, and a notation with an addend has one output.
//!
//! [`parse`] returns a [`Notation`] (owned) or *every* problem of the text as
//! [`NotationError`]s with byte ranges. [`Notation::plan`] lends a [`Plan`], the
//! flat, borrowed form that inference runs on and that the macro emits as a
//! `const` (all its fields are public and const-constructible).
//!
//! ```
//! let n = spmd_notation::parse("...mk,kn->...mn").unwrap();
//! let plan = n.plan();
//! assert_eq!(plan.n_inputs(), 2);
//! assert_eq!(plan.contracted().len(), 1); // k
//! let errs = spmd_notation::parse("mk,kn->mq").unwrap_err();
//! assert_eq!(errs.to_string(),
//!     "unknown output label `q` at column 9 of einsum \"mk,kn->mq\" (no input has it)");
//! // An addend: the bias is added, not multiplied.
//! let linear = spmd_notation::parse("bsk,kn,+n->bsn").unwrap();
//! assert!(linear.plan().is_addend(2) && !linear.plan().is_addend(1));
//! assert_eq!(linear.plan().contracted().len(), 1); // still only k
//! ```
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod build;
mod error;
mod near;
mod parse;
mod plan;
mod template;
#[cfg(test)]
mod tests;

pub use build::PlanBuilder;
pub use error::{ErrorKind, NotationError, NotationErrors, Side};
pub use near::edit_distance;
pub use parse::{Notation, parse, parse_terms};
pub use plan::{AxisId, AxisSet, Dim, Plan, Term};
pub use template::{
    BindError, Fate, Item, MAX_BOUND_COMPOUND_AXES, MAX_BOUND_DIMS, MAX_BOUND_TERMS, MAX_PICKS,
    OwnedTemplate, PlanBuf, Pos, Repeat, Select, Template, bind, bind_into, is_template, label_bit,
    parse_template,
};

/// At most this many distinct labels (`a-z`, `A-Z`).
pub const MAX_LABELS: usize = 52;
