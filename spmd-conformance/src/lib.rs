//! Conformance vectors for spmd rules: cases in the shared schema
//! (`tests/conformance/README.md`), one runner for every direction, the
//! comparison of an answer with the expected one (and its accepted
//! alternatives), and the deviations list.
//!
//! The command line (`spmd conformance`, `spmd infer --json-input`) and the
//! project's tests run cases through this crate only, so a published figure
//! and a test's verdict come from the same code.
//!
//! ```
//! use spmd_conformance::{Agreement, parse_cases, run_case, Status};
//! use spmd_core::{Einsum, Mesh, Spec, SpmdRuleExt};
//!
//! let text = r#"[{"id": "dot", "op": "einsum", "attrs": {"equation": "ij,ij->i"},
//!   "mesh_shape": [2, 2], "direction": "forward",
//!   "inputs": [{"shape": [4, 2], "dims_mapping": [0, 1]},
//!              {"shape": [4, 2], "dims_mapping": [[0], []]}],
//!   "expected": {"inputs": [null, {"dims_mapping": [0, 1]}],
//!                "outputs": [{"dims_mapping": [0], "partial_dims": [1]}]}}]"#;
//! let case = &parse_cases(text)?[0];
//! // By hand...
//! let parts = case.input_parts()?;
//! let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
//! let rule = Einsum::new(case.attr_str("equation").unwrap())?;
//! let got = rule.forward(&Mesh::new(&case.mesh_shape)?, &specs);
//! assert_eq!(case.check(&got), Ok(Agreement::Expected));
//! // ...or through the runner, as the CLI and the tests do.
//! let (status, _) = run_case(case, &spmd_core::Registry::new());
//! assert_eq!(status, Status::Passed(Agreement::Expected));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod check;
mod deviations;
mod run;
mod schema;
#[cfg(test)]
mod tests;

pub use check::{Agreement, Mismatch, check_against, check_outcome, compare};
pub use deviations::parse_deviations;
pub use run::{
    Owned, Status, optional_specs, rule_for, run_case, run_optional, run_parts, run_traced,
};
pub use schema::{Alternative, Case, Direction, Expected, ExpectedError, Parts, parse_cases};
