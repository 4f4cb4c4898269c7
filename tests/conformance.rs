//! Runs the conformance vectors of `tests/conformance/` (copies of the shared
//! PaddlePaddle vectors; this test reads nothing outside the repository).
//!
//! Every case whose op is registered in `spmd_ops::builtins()` runs in its
//! direction, through `spmd_conformance::run_case` (the runner `spmd
//! conformance` uses). An asserted case (see [`asserted`]) must pass or be listed
//! in `tests/conformance/DEVIATIONS.md` with a reason; a listed case that
//! passes (a stale entry) or a listed id that no file has fails the test. The
//! per-op table prints with `cargo test --test conformance -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use spmd_conformance::{Case, Status, parse_cases, parse_deviations, run_case};

const FILES: [&str; 2] = ["paddle-suite.json", "paddle-3.3.1-random.json"];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

fn load(file: &str) -> Vec<Case> {
    let path = dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_cases(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The machine-readable table of DEVIATIONS.md (case id -> reason).
fn deviations() -> BTreeMap<String, String> {
    let path = dir().join("DEVIATIONS.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    parse_deviations(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
            // The one runner the CLI uses too.
            let (status, _) = run_case(case, &registry);
            let why = match status {
                Status::NotCovered(_) => {
                    *uncovered.entry(case.op.clone()).or_default() += 1;
                    continue;
                }
                Status::Passed(_) => None,
                Status::Failed(why) | Status::Deviation { why, .. } => Some(why),
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

/// Every forward vector (without absent tensors) also runs as a prepared
/// call, the way a graph runs it: the rule prepared once for the call's
/// shapes with placeholder layouts (`SpmdRule::prepare`), then asked
/// with the vector's layouts (`Prepared::infer_into`), with and without
/// the outputs' shapes declared. What the prepared call answers must be
/// what `infer_into` answers, errors included. Most calls compile.
#[test]
fn prepared_forward_calls_answer_as_the_rule_does() {
    use spmd_conformance::{Direction, rule_for};
    use spmd_core::{Call, DistAttr, Mesh, RuleResult, Spec};

    let registry = spmd_ops::builtins();
    let (mut compiled, mut unprepared) = (0usize, 0usize);
    for file in FILES {
        for case in load(file) {
            if case.direction != Direction::Forward || case.has_absent() {
                continue;
            }
            let (Some(Ok(rule)), Ok(mesh), Ok(ins), Ok(outs)) = (
                rule_for(&case, &registry),
                Mesh::new(&case.mesh_shape),
                case.input_parts(),
                case.output_parts(),
            ) else {
                continue;
            };
            let specs: Vec<Spec<'_>> = ins.iter().map(|(s, a)| Spec::new(s, a)).collect();
            let placeholders: Vec<DistAttr> = ins
                .iter()
                .map(|(s, _)| DistAttr::replicated(s.len()))
                .collect();
            let blank: Vec<Spec<'_>> = ins
                .iter()
                .zip(&placeholders)
                .map(|((s, _), a)| Spec::new(s, a))
                .collect();
            let out_shapes: Vec<&[usize]> = outs.iter().map(|(s, _)| s.as_slice()).collect();
            for declared in [&[][..], &out_shapes[..]] {
                let call = |inputs| Call::forward_with_output_shapes(&mesh, inputs, declared);
                let prepared = match rule.prepare(&call(&blank)) {
                    Ok(p) if p.is_compiled() => p,
                    _ => {
                        unprepared += 1;
                        continue;
                    }
                };
                compiled += 1;
                let mut want = RuleResult::default();
                let says = rule.infer_into(&call(&specs), None, &mut want);
                let mut got = RuleResult::default();
                let answered = prepared.infer_into(&*rule, &call(&specs), &mut got);
                assert_eq!(answered, says, "{}", case.id);
                if says.is_ok() {
                    assert_eq!(got, want, "{}", case.id);
                }
            }
        }
    }
    eprintln!("prepared: {compiled} compiled, {unprepared} not compiled");
    assert!(
        compiled > unprepared && compiled > 1000,
        "{compiled} {unprepared}"
    );
}
