//! One runner for every direction: the CLI (`spmd conformance`, `spmd infer
//! --json-input`) and the project's tests (conformance, soundness, fixed
//! points) all call a rule through it, so they cannot disagree on how a case
//! is run.

use serde_json::Value;
use spmd_core::SpmdRuleExt;
use spmd_core::{
    Attrs, DistAttr, Einsum, Mesh, NoTrace, Registry, RuleResult, Spec, SpmdError, SpmdRule, Trace,
};

use crate::check::Agreement;
use crate::schema::{Case, Direction};

/// A tensor's global shape and dist attr.
pub type Owned = (Vec<usize>, DistAttr);

/// The rule a case runs through: `einsum` from its `equation` when the
/// registry has no `einsum`, any other op from the registry with the case's
/// attributes. `None`: the registry has no such op.
pub fn rule_for(case: &Case, registry: &Registry) -> Option<Result<Box<dyn SpmdRule>, SpmdError>> {
    if case.op == "einsum" && !registry.contains("einsum") {
        let equation = case.attr_str("equation")?;
        return Some(Einsum::new(equation).map(|e| Box::new(e) as Box<dyn SpmdRule>));
    }
    if !registry.contains(&case.op) {
        return None;
    }
    let attrs = Value::Object(case.attrs.clone());
    Some(Attrs::from_json("conformance", &attrs).and_then(|a| registry.build(&case.op, &a)))
}

/// Runs a rule in a direction over owned tensors: forward from the inputs
/// (the outputs, when given, lend their shapes to rules that need them),
/// backward from the outputs, grad from the inputs and output grads.
///
/// For grad, when the rule takes fewer inputs than given and more inputs
/// than output grads were given, the extra inputs are read as Paddle's
/// forward outputs (some Paddle grad ops take them, elu's `(x, out,
/// out_grad)` through the shared unary rule): the rule runs without them,
/// and each gets its grad's requirement.
pub fn run_parts(
    rule: &dyn SpmdRule,
    mesh: &Mesh,
    direction: Direction,
    ins: &[Owned],
    outs: &[Owned],
) -> Result<RuleResult, SpmdError> {
    run_traced(rule, mesh, direction, ins, outs, &mut NoTrace)
}

/// As [`run_parts`], where `None` tensors are absent optional ones (run
/// through the rule's `*_optional` entry points, untraced).
pub fn run_optional(
    rule: &dyn SpmdRule,
    mesh: &Mesh,
    direction: Direction,
    ins: &[Option<Owned>],
    outs: &[Option<Owned>],
) -> Result<RuleResult, SpmdError> {
    let (inputs, outputs) = (optional_specs(ins), optional_specs(outs));
    match direction {
        Direction::Forward => rule.forward_optional(mesh, &inputs),
        Direction::Backward => {
            let shapes: Vec<Option<&[usize]>> = ins
                .iter()
                .map(|p| p.as_ref().map(|(s, _)| s.as_slice()))
                .collect();
            rule.backward_optional(mesh, &shapes, &outputs)
        }
        Direction::Grad => rule.grad_optional(mesh, &inputs, &outputs),
    }
}

/// [`run_parts`], reporting each step of the inference to `trace`.
pub fn run_traced(
    rule: &dyn SpmdRule,
    mesh: &Mesh,
    direction: Direction,
    ins: &[Owned],
    outs: &[Owned],
    trace: &mut dyn Trace,
) -> Result<RuleResult, SpmdError> {
    let inputs: Vec<Spec<'_>> = ins.iter().map(|(s, a)| Spec::new(s, a)).collect();
    let outputs: Vec<Spec<'_>> = outs.iter().map(|(s, a)| Spec::new(s, a)).collect();
    match direction {
        // A rule that reads the outputs' shapes (a variadic fallback) runs
        // untraced with them.
        Direction::Forward => match rule.forward_traced(mesh, &inputs, trace) {
            Err(SpmdError::OutputShapesNeeded { .. }) if !outs.is_empty() => {
                let shapes: Vec<&[usize]> = outs.iter().map(|(s, _)| s.as_slice()).collect();
                rule.forward_with_output_shapes(mesh, &inputs, &shapes)
            }
            other => other,
        },
        Direction::Backward => {
            let shapes: Vec<&[usize]> = ins.iter().map(|(s, _)| s.as_slice()).collect();
            rule.backward_traced(mesh, &shapes, &outputs, trace)
        }
        // An arity error comes before any step, so the retry's trace is the only one.
        Direction::Grad => match rule.grad_traced(mesh, &inputs, &outputs, trace) {
            Err(SpmdError::Arity { .. }) if ins.len() > outs.len() => {
                let n = ins.len() - outs.len();
                let mut r = rule.grad_traced(mesh, &inputs[..n], &outputs, trace)?;
                let dy: Vec<_> = r.inputs[n..].to_vec();
                r.inputs.truncate(n);
                r.inputs.extend(dy.iter().cloned());
                r.inputs.extend(dy);
                Ok(r)
            }
            other => other,
        },
    }
}

/// Specs borrowing `parts`, `None` where a tensor is absent.
pub fn optional_specs(parts: &[Option<Owned>]) -> Vec<Option<Spec<'_>>> {
    parts
        .iter()
        .map(|p| p.as_ref().map(|(s, a)| Spec::new(s, a)))
        .collect()
}

/// What happened to one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Passed(Agreement),
    Failed(String),
    /// Failed, and listed in the deviations file with this reason.
    Deviation {
        reason: String,
        why: String,
    },
    /// The op, or this direction of it, has no rule here.
    NotCovered(String),
}

impl Status {
    /// `passed`, `failed`, `deviation`, `not_covered`.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Passed(_) => "passed",
            Status::Failed(_) => "failed",
            Status::Deviation { .. } => "deviation",
            Status::NotCovered(_) => "not_covered",
        }
    }

    /// This status once the deviations list is read: a failure listed there
    /// is a deviation; `reason` is the list's entry for the case.
    pub fn listed(self, reason: Option<&String>) -> Status {
        match (self, reason) {
            (Status::Failed(why), Some(reason)) => Status::Deviation {
                reason: reason.clone(),
                why,
            },
            (s, _) => s,
        }
    }
}

/// Runs one case: its status and what the rule answered (when it ran).
///
/// ```
/// use spmd_conformance::{Status, parse_cases, run_case};
///
/// let cases = parse_cases(r#"[{"id": "dot", "op": "einsum", "attrs": {"equation": "ij,ij->i"},
///   "mesh_shape": [2, 2], "direction": "forward",
///   "inputs": [{"shape": [4, 2], "dims_mapping": [0, 1]}, {"shape": [4, 2], "dims_mapping": [[0], []]}],
///   "expected": {"outputs": [{"dims_mapping": [0], "partial_dims": [1]}]}}]"#)?;
/// let (status, got) = run_case(&cases[0], &spmd_core::Registry::new());
/// assert!(matches!(status, Status::Passed(_)), "{status:?}");
/// assert!(got.unwrap().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run_case(
    case: &Case,
    registry: &Registry,
) -> (Status, Option<Result<RuleResult, SpmdError>>) {
    let rule = match rule_for(case, registry) {
        None if case.op == "einsum" => {
            return (
                Status::NotCovered("an einsum case without an `equation` attribute".into()),
                None,
            );
        }
        None => {
            return (
                Status::NotCovered(format!("no rule named `{}`", case.op)),
                None,
            );
        }
        Some(Ok(rule)) => rule,
        Some(Err(e)) => {
            // Building the rule failed: that is the answer when an error is expected.
            let got = Err(e);
            return (verdict(case, &got), Some(got));
        }
    };
    let mesh = match Mesh::new(&case.mesh_shape) {
        Ok(m) => m,
        Err(e) => {
            let got = Err(e);
            return (verdict(case, &got), Some(got));
        }
    };
    if case.has_absent() {
        let got = match (case.input_slots(), case.output_slots()) {
            (Ok(ins), Ok(outs)) => run_optional(rule.as_ref(), &mesh, case.direction, &ins, &outs),
            (Err(e), _) | (_, Err(e)) => {
                return (Status::Failed(format!("cannot run: {e}")), None);
            }
        };
        return (verdict(case, &got), Some(got));
    }
    let ins = match case.input_parts() {
        Ok(p) => p,
        Err(e) => return (Status::Failed(format!("cannot run: inputs: {e}")), None),
    };
    // Forward cases may list outputs: their shapes, for rules that read them.
    let outs = match case.output_parts() {
        Ok(p) => p,
        Err(e) => return (Status::Failed(format!("cannot run: outputs: {e}")), None),
    };
    let got = run_parts(rule.as_ref(), &mesh, case.direction, &ins, &outs);
    if let Err(SpmdError::NoGradRule { .. }) = &got {
        return (
            Status::NotCovered(format!("`{}` has no grad rule", case.op)),
            Some(got),
        );
    }
    (verdict(case, &got), Some(got))
}

fn verdict(case: &Case, got: &Result<RuleResult, SpmdError>) -> Status {
    match case.check(got) {
        Ok(a) => Status::Passed(a),
        Err(m) => Status::Failed(m.to_string()),
    }
}
