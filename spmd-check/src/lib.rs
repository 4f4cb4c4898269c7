//! Proves sharding rules right by running them on a simulated mesh.
//!
//! A rule claims: "lay the inputs out as these required attrs, run the op on
//! every device over the blocks it holds, and the outputs come out laid out
//! as these attrs (partial over these mesh dims with these reduce types)". The
//! checker takes the claim literally:
//!
//! 1. it computes the dense result (a reference function, or the rule's
//!    einsum with [`einsum`]) from probe inputs whose values are distinct and
//!    sign-varying ([`Tensor::probe`]), so a wrong rule cannot pass by luck;
//! 2. it cuts every input into per-device blocks by the rule's *required*
//!    attrs (meshes of any rank, co-sharding major to minor, uneven splits as
//!    `numpy.array_split`), handing each device a hashed contribution of a
//!    partial input;
//! 3. for einsum rules it checks that each device's blocks agree on every
//!    axis they share (else the device needs data it does not hold), then
//!    computes the op locally on every device;
//! 4. it reduces partial results over their partial mesh dims with their
//!    reduce types and compares every device's result with the block of the
//!    dense result its claimed attr says it holds — so a claimed-replicated
//!    output must be right on every device.
//!
//! Backward inference is checked by feeding its input requirements forward
//! (values on every device, and the rule's own forward answer must agree);
//! grad inference against the true gradient (for a `Sum` einsum, the einsum
//! of the other inputs and the output grads onto each input) or the op's grad
//! kernel. See [`EinsumCheck`], [`check_forward`], [`check_backward`] and
//! [`check_grad`].
//!
//! The generic checks run a reference function of the op on every device's
//! blocks (the SPMD premise: the local kernel is the op itself); a device
//! given mismatched blocks is caught through wrong values or a panic of the
//! reference ([`Finding::LocalFailed`]). [`EinsumCheck`] also checks, before
//! computing, that every device's blocks agree on each axis they share
//! ([`Finding::Inconsistent`], [`Finding::Unreadable`]).
//!
//! The crate's property tests run a bounded number of random cases (a few
//! seconds in debug); `SPMD_CHECK_CASES=5000 cargo test -p spmd-check
//! --release` runs more. `tests/known_unsound.rs` reproduces each unsound
//! answer found in the core and the built-in rules.
//!
//! ```
//! use spmd_check::{EinsumCheck, Finding};
//! use spmd_core::{DistAttr, Mesh, Spec, spmd_rule};
//!
//! /// A WRONG matmul rule: it says the partial results over a split `k`
//! /// are combined by a max, where a matmul sums them.
//! #[spmd_rule(einsum = "mk,kn->mn", partial(reduce = "max"))]
//! struct MaxMatmul {}
//!
//! /// The right one.
//! #[spmd_rule(einsum = "mk,kn->mn")]
//! struct Matmul {}
//!
//! let mesh = Mesh::new(&[2])?;
//! let x = DistAttr::from_paddle(&[-1, 0]).unwrap(); // k split in two
//! let y = DistAttr::from_paddle(&[-1, -1]).unwrap();
//! let inputs = [Spec::new(&[3, 4], &x), Spec::new(&[4, 2], &y)];
//! // What the op computes: the einsum with sums over k.
//! let matmul = EinsumCheck::new("mk,kn->mn")?;
//!
//! matmul.forward(&Matmul {}, &mesh, &inputs)?;
//! let report = matmul.forward(&MaxMatmul {}, &mesh, &inputs).unwrap_err();
//! assert!(report.is_unsound());
//! assert!(matches!(report.finding(), Finding::WrongValue { .. }));
//! assert!(report.to_string().contains("output 0 is claimed [-1, -1] partial{0: MAX}"), "{report}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
// Internal steps return a `Finding` on the cold, diagnostic error path; the
// public API returns the pointer-sized `Report`.
#![allow(clippy::result_large_err)]
#![warn(missing_debug_implementations)]

mod check;
mod eval;
pub mod kernels;
mod mesh_sim;
pub mod plan;
mod tensor;

pub use check::{
    Direction, EinsumCheck, Finding, Holding, Input, LocalCall, Report, RuleRef, check_answer,
    check_backward, check_forward, check_grad, check_grad_of_signature, values_for,
};
pub use eval::{EvalError, combine, einsum, einsum_sized};
pub use mesh_sim::{Device, block_of, devices, dim_range, split_range};
pub use tensor::{Tensor, Values};
