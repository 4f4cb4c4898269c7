//! Runs the conformance vectors of `tests/conformance/` (copies of the shared
//! PaddlePaddle vectors; this test reads nothing outside the repository).
//!
//! `einsum_forward_conformance` asserts: every `einsum` forward case passes, or
//! is listed in `tests/conformance/DEVIATIONS.md` with a reason; a listed case
//! that passes (a stale entry) or a listed id that no file has fails the test.
//!
//! `einsum_notation_of_other_ops` only reports: it runs the forward cases of
//! matmul, the binary elementwise ops and embedding through their einsum
//! notation alone (no per-op policies yet) and prints pass counts. Run with
//! `cargo test --test conformance -- --nocapture` to see the output.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use spmd_core::json::{self, Case, Direction};
use spmd_core::{Einsum, Mesh, Policy, RuleResult, Spec, SpmdError};

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

/// Runs one case forward through an einsum rule. `Err(String)` when the case
/// cannot be run at all (a bad value in the vector).
fn run_forward(
    case: &Case,
    notation: &str,
    policy: Policy,
) -> Result<Result<RuleResult, SpmdError>, String> {
    let parts = case.input_parts().map_err(|e| e.to_string())?;
    let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
    Ok(Einsum::new(notation).and_then(|rule| {
        let mesh = Mesh::new(&case.mesh_shape)?;
        rule.with_policy(policy).forward(&mesh, &specs)
    }))
}

/// `None` when the case passes, else why not.
fn verdict(case: &Case, notation: &str, policy: Policy) -> Option<String> {
    match run_forward(case, notation, policy) {
        Err(e) => Some(format!("cannot run: {e}")),
        Ok(got) => case.check(&got).err().map(|m| m.to_string()),
    }
}

/// The machine-readable table of DEVIATIONS.md: every table row whose first
/// cell is a case id (backticks allowed), with the reason from the last cell.
fn deviations() -> BTreeMap<String, String> {
    let path = dir().join("DEVIATIONS.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').trim())
            .collect();
        let id = cells[0];
        if id.is_empty() || id == "case" || id.starts_with('-') || id.starts_with(':') {
            continue;
        }
        let reason = cells.last().copied().unwrap_or_default();
        assert!(
            cells.len() >= 2 && !reason.is_empty(),
            "DEVIATIONS.md line {}: a deviation needs a reason: {line}",
            n + 1
        );
        let dup = out.insert(id.to_string(), reason.to_string());
        assert!(
            dup.is_none(),
            "DEVIATIONS.md line {}: {id} listed twice",
            n + 1
        );
    }
    out
}

#[test]
fn einsum_forward_conformance() {
    let listed = deviations();
    let mut all_ids = BTreeSet::new();
    let mut problems = String::new();
    let (mut passed, mut failed, mut failed_listed) = (0, 0, 0);
    for file in FILES {
        let cases = load(file);
        all_ids.extend(cases.iter().map(|c| c.id.clone()));
        let (mut p, mut f) = (0, 0);
        for case in cases
            .iter()
            .filter(|c| c.op == "einsum" && c.direction == Direction::Forward)
        {
            let Some(equation) = case.attr_str("equation") else {
                panic!("{file}: {}: einsum case without an `equation`", case.id);
            };
            match (
                verdict(case, equation, Policy::CLASSIC),
                listed.get(&case.id),
            ) {
                (None, None) => p += 1,
                (None, Some(reason)) => {
                    p += 1;
                    writeln!(
                        problems,
                        "{file}: {} passes but is listed in DEVIATIONS.md (stale entry: {reason})",
                        case.id
                    )
                    .unwrap();
                }
                (Some(why), Some(_)) => {
                    f += 1;
                    failed_listed += 1;
                    eprintln!("  deviation {}: {why}", case.id);
                }
                (Some(why), None) => {
                    f += 1;
                    writeln!(
                        problems,
                        "{file}: {} fails and is not in DEVIATIONS.md: {why}",
                        case.id
                    )
                    .unwrap();
                }
            }
        }
        eprintln!("{file}: einsum forward: {p} passed, {f} failed");
        passed += p;
        failed += f;
    }
    for id in listed.keys().filter(|id| !all_ids.contains(*id)) {
        writeln!(
            problems,
            "DEVIATIONS.md lists {id}, which no vector file has"
        )
        .unwrap();
    }
    eprintln!(
        "einsum forward: {passed} passed, {failed} failed ({failed_listed} of them listed deviations)"
    );
    assert!(problems.is_empty(), "conformance problems:\n{problems}");
}

/// The notation of a matmul case with its transposes applied (the vectors'
/// `einsum` field is the untransposed one).
fn matmul_notation(case: &Case) -> String {
    let flag = |k: &str| case.attrs.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    let x = if flag("trans_x") { "...km" } else { "...mk" };
    let y = if flag("trans_y") { "...nk" } else { "...kn" };
    format!("{x},{y}->...mn")
}

#[test]
fn einsum_notation_of_other_ops() {
    const ELEMENTWISE: [&str; 6] = [
        "add", "subtract", "multiply", "divide", "maximum", "minimum",
    ];
    /// One informational run: which ops, and the notation and policy per case
    /// (`None`: the case has no notation).
    struct Run {
        label: &'static str,
        wanted: fn(&str) -> bool,
        notation: fn(&Case) -> Option<(String, Policy)>,
    }
    let runs = [
        Run {
            label: "matmul (einsum field as is)",
            wanted: |op| op == "matmul",
            notation: |c| c.einsum.clone().map(|n| (n, Policy::CLASSIC)),
        },
        Run {
            label: "matmul (transposes applied)",
            wanted: |op| op == "matmul",
            notation: |c| Some((matmul_notation(c), Policy::CLASSIC)),
        },
        Run {
            label: "elementwise binary",
            wanted: |op| ELEMENTWISE.contains(&op),
            notation: |c| c.einsum.clone().map(|n| (n, Policy::CLASSIC)),
        },
        Run {
            // The vectors have no einsum field for embedding; this is its
            // notation, with the strict conflict policy DESIGN §4 gives it.
            label: "embedding (`...,vh->...h`, strict)",
            wanted: |op| op == "embedding",
            notation: |_| Some(("...,vh->...h".to_string(), Policy::STRICT)),
        },
    ];
    for file in FILES {
        let cases = load(file);
        for Run {
            label,
            wanted,
            notation,
        } in &runs
        {
            let (mut p, mut f, mut skipped) = (0, 0, 0);
            let mut failing = Vec::new();
            for case in cases
                .iter()
                .filter(|c| wanted(&c.op) && c.direction == Direction::Forward)
            {
                let Some((n, policy)) = notation(case) else {
                    skipped += 1;
                    continue;
                };
                match verdict(case, &n, policy) {
                    None => p += 1,
                    Some(_) => {
                        f += 1;
                        failing.push(case.id.as_str());
                    }
                }
            }
            eprintln!(
                "[info] {file}: {label} forward: {p} passed, {f} failed, {skipped} without notation"
            );
            if !failing.is_empty() {
                eprintln!("[info]   failing: {}", failing.join(" "));
            }
        }
    }
}
