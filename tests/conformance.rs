//! Runs the conformance vectors of `tests/conformance/` (copies of the shared
//! PaddlePaddle vectors; this test reads nothing outside the repository).
//!
//! Every case whose op is `einsum` or registered in `spmd_ops::builtins()` runs
//! in its direction. An asserted case (see [`asserted`]) must pass or be listed
//! in `tests/conformance/DEVIATIONS.md` with a reason; a listed case that
//! passes (a stale entry) or a listed id that no file has fails the test. The
//! per-op table prints with `cargo test --test conformance -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use spmd_core::json::{self, Case, Direction};
use spmd_core::{Attrs, Einsum, Mesh, Registry, RuleResult, Spec, SpmdError, SpmdRule};

const FILES: [&str; 2] = ["paddle-suite.json", "paddle-3.3.1-random.json"];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

fn load(file: &str) -> Vec<Case> {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    json::parse_cases(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rule a case runs through: `einsum` from its `equation`, any other op
/// from the built-in registry with the case's attributes. `None` when the op
/// is not (yet) covered.
fn rule_for(case: &Case, registry: &Registry) -> Option<Result<Box<dyn SpmdRule>, SpmdError>> {
    if case.op == "einsum" {
        let equation = case.attr_str("equation")?;
        return Some(Einsum::new(equation).map(|e| Box::new(e) as Box<dyn SpmdRule>));
    }
    if !registry.contains(&case.op) {
        return None;
    }
    let attrs = serde_json::Value::Object(case.attrs.clone());
    Some(Attrs::from_json("conformance", &attrs).and_then(|a| registry.build(&case.op, &a)))
}

/// Runs a case in its direction. `Err(String)` when the case cannot be run at
/// all (a bad value in the vector, or a direction not covered yet).
fn run(case: &Case, rule: &dyn SpmdRule) -> Result<Result<RuleResult, SpmdError>, String> {
    let mesh = match Mesh::new(&case.mesh_shape) {
        Ok(m) => m,
        Err(e) => return Ok(Err(e)),
    };
    if case.has_absent() {
        return run_optional(case, rule, &mesh);
    }
    match case.direction {
        Direction::Forward => {
            let parts = case.input_parts().map_err(|e| e.to_string())?;
            let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
            // The outputs a forward case lists lend their shapes (variadic
            // rules such as `replicated` need them; the others ignore them).
            let outs = case.output_parts().map_err(|e| e.to_string())?;
            let shapes: Vec<&[usize]> = outs.iter().map(|(s, _)| s.as_slice()).collect();
            Ok(rule.forward_with_output_shapes(&mesh, &specs, &shapes))
        }
        Direction::Backward => {
            let ins = case.input_parts().map_err(|e| e.to_string())?;
            let shapes: Vec<&[usize]> = ins.iter().map(|(s, _)| s.as_slice()).collect();
            let outs = case.output_parts().map_err(|e| e.to_string())?;
            let specs: Vec<Spec<'_>> = outs.iter().map(|(s, a)| Spec::new(s, a)).collect();
            Ok(rule.backward(&mesh, &shapes, &specs))
        }
        Direction::Grad => {
            let ins = case.input_parts().map_err(|e| e.to_string())?;
            let outs = case.output_parts().map_err(|e| e.to_string())?;
            let grads: Vec<Spec<'_>> = outs.iter().map(|(s, a)| Spec::new(s, a)).collect();
            let inputs: Vec<Spec<'_>> = ins.iter().map(|(s, a)| Spec::new(s, a)).collect();
            match rule.grad(&mesh, &inputs, &grads) {
                // A rule that declares no `grad_inputs` while Paddle's grad
                // op also takes the forward outputs (listed after the
                // inputs: elu's `(x, out, out_grad)` through the shared
                // unary rule): run without them, and answer for each the
                // requirement of its grad (same layout, not partial).
                Err(SpmdError::Arity { .. }) if ins.len() > outs.len() => {
                    let n = ins.len() - outs.len();
                    let mut r = match rule.grad(&mesh, &inputs[..n], &grads) {
                        Ok(r) => r,
                        Err(e) => return Ok(Err(e)),
                    };
                    let dy: Vec<_> = r.inputs[n..].to_vec();
                    r.inputs.truncate(n);
                    r.inputs.extend(dy.iter().cloned());
                    r.inputs.extend(dy);
                    Ok(Ok(r))
                }
                other => Ok(other),
            }
        }
    }
}

/// Runs a case with absent optional tensors through the `*_optional` entry
/// points.
fn run_optional(
    case: &Case,
    rule: &dyn SpmdRule,
    mesh: &Mesh,
) -> Result<Result<RuleResult, SpmdError>, String> {
    let ins = case.input_slots().map_err(|e| e.to_string())?;
    let outs = case.output_slots().map_err(|e| e.to_string())?;
    let (inputs, outputs) = (optional_specs(&ins), optional_specs(&outs));
    Ok(match case.direction {
        Direction::Forward => rule.forward_optional(mesh, &inputs),
        Direction::Backward => {
            let shapes: Vec<Option<&[usize]>> = ins
                .iter()
                .map(|p| p.as_ref().map(|(s, _)| s.as_slice()))
                .collect();
            rule.backward_optional(mesh, &shapes, &outputs)
        }
        Direction::Grad => rule.grad_optional(mesh, &inputs, &outputs),
    })
}

/// `None` when the case passes, else why not.
fn verdict(case: &Case, rule: &dyn SpmdRule) -> Option<String> {
    match run(case, rule) {
        Err(e) => Some(format!("cannot run: {e}")),
        Ok(got) => case.check(&got).err().map(|m| m.to_string()),
    }
}

/// The machine-readable table of DEVIATIONS.md (case id -> reason).
fn deviations() -> BTreeMap<String, String> {
    let path = dir().join("DEVIATIONS.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    json::parse_deviations(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether a failing case fails the test: every covered case of both files.
/// (Kept as a function so a newly covered op can be reported before it is
/// asserted, while its policies are being built.)
fn asserted(_file: &str, _case: &Case) -> bool {
    true
}

/// Per op and direction: cases, passed, failed-and-listed, failed-unasserted.
#[derive(Default)]
struct Tally {
    cases: usize,
    passed: usize,
    deviations: usize,
    reported: usize,
}

#[test]
fn conformance() {
    let registry = spmd_ops::builtins();
    let listed = deviations();
    let mut all_ids = BTreeSet::new();
    let mut problems = String::new();
    let mut uncovered: BTreeMap<String, usize> = BTreeMap::new();
    let mut table: BTreeMap<(String, String), Tally> = BTreeMap::new();
    for file in FILES {
        let cases = load(file);
        all_ids.extend(cases.iter().map(|c| c.id.clone()));
        for case in &cases {
            let rule = match rule_for(case, &registry) {
                None => {
                    *uncovered.entry(case.op.clone()).or_default() += 1;
                    continue;
                }
                Some(Ok(rule)) => Ok(rule),
                Some(Err(e)) => Err(e),
            };
            let why = match &rule {
                Ok(rule) => verdict(case, rule.as_ref()),
                // Building the rule failed: that is the answer when an error is expected.
                Err(e) => case.check(&Err(e.clone())).err().map(|m| m.to_string()),
            };
            let direction = format!("{:?}", case.direction).to_lowercase();
            let t = table.entry((case.op.clone(), direction)).or_default();
            t.cases += 1;
            match (why, listed.get(&case.id)) {
                (None, None) => t.passed += 1,
                (None, Some(reason)) => {
                    t.passed += 1;
                    writeln!(
                        problems,
                        "{file}: {} passes but is listed in DEVIATIONS.md (stale entry: {reason})",
                        case.id
                    )
                    .unwrap();
                }
                (Some(why), Some(_)) => {
                    t.deviations += 1;
                    eprintln!("  deviation {}: {why}", case.id);
                }
                (Some(why), None) if asserted(file, case) => writeln!(
                    problems,
                    "{file}: {} fails and is not in DEVIATIONS.md: {why}",
                    case.id
                )
                .unwrap(),
                (Some(why), None) => {
                    t.reported += 1;
                    eprintln!("  [not asserted yet] {file}: {}: {why}", case.id);
                }
            }
        }
    }
    for id in listed.keys().filter(|id| !all_ids.contains(*id)) {
        writeln!(
            problems,
            "DEVIATIONS.md lists {id}, which no vector file has"
        )
        .unwrap();
    }
    eprintln!("\n| op | direction | cases | passed | deviations | not asserted yet |");
    eprintln!("|---|---|---|---|---|---|");
    let (mut passed, mut failed) = (0, 0);
    for ((op, dir), t) in &table {
        eprintln!(
            "| {op} | {dir} | {} | {} | {} | {} |",
            t.cases, t.passed, t.deviations, t.reported
        );
        passed += t.passed;
        failed += t.cases - t.passed;
    }
    let list: Vec<String> = uncovered
        .iter()
        .map(|(op, n)| format!("{op} {n}"))
        .collect();
    eprintln!("not covered yet: {}", list.join(", "));
    eprintln!("conformance: {passed} passed, {failed} failed");
    assert!(problems.is_empty(), "conformance problems:\n{problems}");
}

/// Specs borrowing `parts`, `None` where a tensor is absent.
fn optional_specs(parts: &[Option<(Vec<usize>, spmd_core::DistAttr)>]) -> Vec<Option<Spec<'_>>> {
    parts
        .iter()
        .map(|p| p.as_ref().map(|(s, a)| Spec::new(s, a)))
        .collect()
}
