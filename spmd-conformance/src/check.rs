//! Whether an answer is the expected one: every asserted key compared, each
//! difference one line of a [`Mismatch`].

use std::fmt;

use spmd_core::json::{Expect, Outcome, partial_dim, partial_key, reduce_from_name};
use spmd_core::{DistAttr, MeshSet, RuleResult, SpmdError};

use crate::schema::{Alternative, Case, Expected};

/// Compares `got` with the keys `e` asserts; each difference is one line of
/// `out`, prefixed with `what` (e.g. `output 0`).
pub fn compare(e: &Expect, what: &str, got: &DistAttr, out: &mut Vec<String>) {
    let mapping = e.multi_dims_mapping.as_ref().or(e.dims_mapping.as_ref());
    if let Some(m) = mapping {
        match m.to_dims_mapping() {
            Ok(want) if want == got.dims_mapping => {}
            Ok(want) => out.push(format!(
                "{what}: dims_mapping expected {want}, got {}",
                got.dims_mapping
            )),
            Err(e) => out.push(format!("{what}: the expected dims_mapping is invalid: {e}")),
        }
    }
    if let Some(dims) = &e.partial_dims {
        match dims
            .iter()
            .map(|&d| partial_dim(d))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(list) => {
                let want = list.into_iter().fold(MeshSet::EMPTY, MeshSet::with);
                if want != got.partial.dims() {
                    out.push(format!(
                        "{what}: partial_dims expected {want}, got {} (attr {got})",
                        got.partial.dims()
                    ));
                }
            }
            Err(e) => out.push(format!(
                "{what}: the expected partial_dims are invalid: {e}"
            )),
        }
    }
    for (k, r) in e.partial_reduce.iter().flatten() {
        match (partial_key(k), reduce_from_name(r)) {
                (Ok(d), Ok(want)) => match got.partial.reduce_type(d) {
                    Some(have) if have == want => {}
                    Some(have) => out.push(format!(
                        "{what}: partial over mesh dim {d} expected {want}, got {have}"
                    )),
                    None => out.push(format!(
                        "{what}: expected partial over mesh dim {d} ({want}), got not partial there (attr {got})"
                    )),
                },
                (Err(e), _) | (_, Err(e)) => {
                    out.push(format!("{what}: the expected partial_reduce is invalid: {e}"))
                }
            }
    }
    if let Some(want) = e.is_partial
        && want != got.partial.is_partial()
    {
        out.push(format!(
            "{what}: is_partial expected {want}, got {} (attr {got})",
            got.partial.is_partial()
        ));
    }
}

/// Compares `got` with the entries present (a `null` entry, or one past the
/// end of the list, is not asserted).
pub fn check_outcome(o: &Outcome, got: &RuleResult) -> Result<(), Mismatch> {
    let mut out = Vec::new();
    for (role, want, have) in [
        ("input", &o.inputs, got.inputs.as_slice()),
        ("output", &o.outputs, got.outputs.as_slice()),
    ] {
        for (i, e) in want.iter().enumerate() {
            let Some(e) = e else { continue };
            match have.get(i) {
                Some(a) => compare(e, &format!("{role} {i}"), a, &mut out),
                None => out.push(format!(
                    "{role} {i}: expected, but the result has only {} {role}(s)",
                    have.len()
                )),
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Mismatch { details: out })
    }
}

impl Expected {
    pub fn is_error(&self) -> bool {
        matches!(self, Expected::Error(_))
    }

    /// Whether `got` satisfies this expectation: an error form is satisfied by
    /// any error, a result form by a result that matches every asserted key.
    pub fn check(&self, got: &Result<RuleResult, SpmdError>) -> Result<(), Mismatch> {
        match (self, got) {
            (Expected::Error(_), Err(_)) => Ok(()),
            (Expected::Error(e), Ok(r)) => Err(Mismatch {
                details: vec![format!(
                    "expected an error ({}), got a result {}",
                    e.message
                        .as_deref()
                        .or(e.error_type.as_deref())
                        .unwrap_or("any"),
                    Brief(r)
                )],
            }),
            (Expected::Result(_), Err(e)) => Err(Mismatch {
                details: vec![format!("expected a result, got the error: {e}")],
            }),
            (Expected::Result(o), Ok(r)) => check_outcome(o, r),
        }
    }
}

/// How a passing case matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// With `expected`.
    Expected,
    /// With `alternatives[i].expected`.
    Alternative(usize),
}

/// Why a result does not match: one line per difference.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mismatch {
    pub details: Vec<String>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.details.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(d)?;
        }
        Ok(())
    }
}

impl std::error::Error for Mismatch {}

/// `RuleResult` in one line, for messages: `in [..] [..] -> out [..]`.
struct Brief<'a>(&'a RuleResult);

impl fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("in")?;
        for a in &self.0.inputs {
            write!(f, " {a}")?;
        }
        f.write_str(" -> out")?;
        for a in &self.0.outputs {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

impl Case {
    /// Passes when `got` matches `expected` or the `expected` of any
    /// alternative; otherwise the mismatch against `expected` (with a note on
    /// how many alternatives were tried).
    pub fn check(&self, got: &Result<RuleResult, SpmdError>) -> Result<Agreement, Mismatch> {
        check_against(&self.expected, &self.alternatives, got)
    }
}

/// Passes when `got` matches `expected` or the `expected` of any alternative;
/// otherwise the mismatch against `expected` (with a note on how many
/// alternatives were tried).
pub fn check_against(
    expected: &Expected,
    alternatives: &[Alternative],
    got: &Result<RuleResult, SpmdError>,
) -> Result<Agreement, Mismatch> {
    let mut first = match expected.check(got) {
        Ok(()) => return Ok(Agreement::Expected),
        Err(m) => m,
    };
    for (i, alt) in alternatives.iter().enumerate() {
        if alt.expected.check(got).is_ok() {
            return Ok(Agreement::Alternative(i));
        }
    }
    if !alternatives.is_empty() {
        first.details.push(format!(
            "no alternative matches either ({} tried)",
            alternatives.len()
        ));
    }
    Err(first)
}
