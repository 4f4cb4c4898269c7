//! `spmd conformance`: runs vector files of the shared schema and summarizes
//! them per op and direction, the way `tests/conformance.rs` runs them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};
use spmd_conformance::{Agreement, Case, Status, parse_cases, run_case};
use spmd_core::{RuleResult, SpmdError};

use crate::Output;
use crate::call::{display_path, read_input};
use crate::cli::ConformanceArgs;
use crate::error::{CliError, Result};
use crate::style::{BAD, COMM, DIM, HEADER, OK, Table, paint};

/// The deviations table (see [`spmd_conformance::parse_deviations`]).
pub fn parse_deviations(text: &str, path: &str) -> Result<BTreeMap<String, String>> {
    spmd_conformance::parse_deviations(text).map_err(|e| CliError::usage(format!("{path} {e}")))
}

#[derive(Default)]
struct Tally {
    cases: usize,
    passed: usize,
    failed: usize,
    deviations: usize,
    not_covered: usize,
}

impl Tally {
    fn count(&mut self, status: &Status) {
        self.cases += 1;
        match status {
            Status::Passed(_) => self.passed += 1,
            Status::Failed(_) => self.failed += 1,
            Status::Deviation { .. } => self.deviations += 1,
            Status::NotCovered(_) => self.not_covered += 1,
        }
    }

    fn add(&mut self, other: &Tally) {
        self.cases += other.cases;
        self.passed += other.passed;
        self.failed += other.failed;
        self.deviations += other.deviations;
        self.not_covered += other.not_covered;
    }
}

fn direction_rank(d: &str) -> usize {
    match d {
        "forward" => 0,
        "backward" => 1,
        _ => 2,
    }
}

pub fn conformance(args: &ConformanceArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let deviations = match &args.deviations {
        Some(path) => parse_deviations(&read_input(path)?, display_path(path))?,
        None => BTreeMap::new(),
    };
    let mut files = Vec::new();
    for path in &args.files {
        let text = read_input(path)?;
        let cases = parse_cases(&text)
            .map_err(|e| CliError::usage(format!("{}: {e}", display_path(path))))?;
        files.push((display_path(path).to_string(), cases));
    }

    let mut table: BTreeMap<(String, usize, String), Tally> = BTreeMap::new();
    let mut per_file: Vec<BTreeMap<(String, usize, String), Tally>> = Vec::new();
    let mut results = Vec::new();
    let mut failures = Vec::new();
    let mut stale = Vec::new();
    for (file, cases) in &files {
        let mut file_table: BTreeMap<_, Tally> = BTreeMap::new();
        for case in cases {
            if !args.ops.is_empty() && !args.ops.contains(&case.op) {
                continue;
            }
            let (mut status, got) = run_case(case, &registry);
            if let Some(reason) = deviations.get(&case.id) {
                match &status {
                    Status::Failed(why) => {
                        status = Status::Deviation {
                            reason: reason.clone(),
                            why: why.clone(),
                        }
                    }
                    Status::Passed(_) => stale.push(case.id.clone()),
                    _ => {}
                }
            }
            let dir = case.direction.to_string();
            let key = (case.op.clone(), direction_rank(&dir), dir.clone());
            table.entry(key.clone()).or_default().count(&status);
            file_table.entry(key).or_default().count(&status);
            if let Status::Failed(why) = &status {
                failures.push(format!("{} ({} {dir}): {why}", case.id, case.op));
            }
            if args.json {
                results.push(case_json(file, case, &status, got.as_ref()));
            }
        }
        per_file.push(file_table);
    }

    let sum = |f: fn(&Tally) -> usize| table.values().map(f).sum::<usize>();
    let (passed, failed, devs, uncovered, total) = (
        sum(|t| t.passed),
        sum(|t| t.failed),
        sum(|t| t.deviations),
        sum(|t| t.not_covered),
        sum(|t| t.cases),
    );
    let fail = (failed > 0).then(CliError::failed);

    if args.markdown {
        let names = args.files.iter().map(|f| file_name(f));
        return Ok(Output {
            text: markdown(args, names.zip(&per_file), &stale),
            fail,
        });
    }

    if args.json {
        let by_op: Vec<Value> = table
            .iter()
            .map(|((op, _, dir), t)| {
                json!({"op": op, "direction": dir, "cases": t.cases, "passed": t.passed,
                       "failed": t.failed, "deviations": t.deviations, "not_covered": t.not_covered})
            })
            .collect();
        let v = json!({
            "cases": results,
            "by_op": by_op,
            "summary": {"cases": total, "passed": passed, "failed": failed,
                        "deviations": devs, "not_covered": uncovered, "stale_deviations": stale},
        });
        return Ok(Output {
            text: format!("{}\n", crate::report::to_json(&v)),
            fail,
        });
    }

    let mut s = String::new();
    let mut t = Table::new();
    let with_dev = args.deviations.is_some();
    let mut head = vec!["op", "direction", "cases", "passed", "failed"];
    if with_dev {
        head.push("deviations");
    }
    head.push("not covered");
    t.row(head.into_iter().map(|h| paint(HEADER, h)).collect());
    let count = |n: usize, style| {
        if n == 0 {
            "0".to_string()
        } else {
            paint(style, n)
        }
    };
    for ((op, _, dir), x) in &table {
        let mut row = vec![
            op.clone(),
            dir.clone(),
            x.cases.to_string(),
            count(x.passed, OK),
            count(x.failed, BAD),
        ];
        if with_dev {
            row.push(count(x.deviations, COMM));
        }
        row.push(count(x.not_covered, DIM));
        t.row(row);
    }
    s.push_str(&t.render(""));
    if !failures.is_empty() {
        let shown = if args.verbose {
            failures.len()
        } else {
            failures.len().min(10)
        };
        let _ = writeln!(s, "\n{}", paint(HEADER, "failures"));
        for f in &failures[..shown] {
            let _ = writeln!(s, "  {}", paint(BAD, f));
        }
        if shown < failures.len() {
            let _ = writeln!(
                s,
                "  ... and {} more (-v lists them all, --json gives every case)",
                failures.len() - shown
            );
        }
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "{total} cases in {} file(s): {passed} passed, {failed} failed{}, {uncovered} not covered (op or direction without a rule here: not counted as failed)",
        files.len(),
        if with_dev {
            format!(", {devs} deviations (listed failures: not counted as failed)")
        } else {
            String::new()
        }
    );
    if !stale.is_empty() {
        let _ = writeln!(
            s,
            "{}",
            paint(
                COMM,
                format!(
                    "stale deviations (listed, but they pass): {}",
                    stale.join(", ")
                )
            )
        );
    }
    let _ = writeln!(s, "{passed} passed, {failed} failed");
    Ok(Output { text: s, fail })
}

/// A path's last component: the Markdown report names files the same way
/// whatever directory the tool ran from.
fn file_name(path: &str) -> &str {
    std::path::Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}

fn percent(part: usize, whole: usize) -> String {
    if whole == 0 {
        "-".to_string()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// The per-op tables of every file as a Markdown document: the project's
/// `docs/conformance-per-op.md` is this text, so the published numbers are the
/// tool's, never typed by hand.
fn markdown<'a>(
    args: &ConformanceArgs,
    files: impl Iterator<Item = (&'a str, &'a BTreeMap<(String, usize, String), Tally>)>,
    stale: &[String],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Conformance per op\n");
    let mut command = String::from("spmd conformance");
    for f in &args.files {
        let _ = write!(command, " {f}");
    }
    if let Some(d) = &args.deviations {
        let _ = write!(command, " --deviations {d}");
    }
    for op in &args.ops {
        let _ = write!(command, " --op {op}");
    }
    let _ = writeln!(
        s,
        "Generated by `{command} --markdown`. Do not edit by hand: a test compares this file \
         with the tool's output.\n\n\
         - *passed*: the rule answers what Paddle answers (or an alternative the vector lists);\n\
         - *deviations*: failing cases listed with their reason in the deviations file;\n\
         - *not covered*: no rule of that name (or of that direction) here;\n\
         - *failed*: anything else (the test suite requires 0);\n\
         - *pass rate*: passed / cases, every case of the file counted.\n"
    );
    for (name, table) in files {
        let mut total = Tally::default();
        for t in table.values() {
            total.add(t);
        }
        let _ = writeln!(s, "## {name}\n");
        let _ = writeln!(
            s,
            "{} cases: {} passed ({}), {} deviations, {} not covered, {} failed.\n",
            total.cases,
            total.passed,
            percent(total.passed, total.cases),
            total.deviations,
            total.not_covered,
            total.failed
        );
        let _ = writeln!(
            s,
            "| op | direction | cases | passed | deviations | not covered | failed | pass rate |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
        for ((op, _, dir), t) in table {
            let _ = writeln!(
                s,
                "| {op} | {dir} | {} | {} | {} | {} | {} | {} |",
                t.cases,
                t.passed,
                t.deviations,
                t.not_covered,
                t.failed,
                percent(t.passed, t.cases)
            );
        }
        s.push('\n');
    }
    if !stale.is_empty() {
        let _ = writeln!(
            s,
            "Stale deviations (listed, but they pass): {}\n",
            stale.join(", ")
        );
    }
    s
}

fn case_json(
    file: &str,
    case: &Case,
    status: &Status,
    got: Option<&Result<RuleResult, SpmdError>>,
) -> Value {
    let mut v = json!({
        "file": file,
        "id": case.id,
        "op": case.op,
        "direction": case.direction,
        "status": status.name(),
    });
    match status {
        Status::Passed(Agreement::Expected) => v["matched"] = json!("expected"),
        Status::Passed(Agreement::Alternative(i)) => {
            v["matched"] = json!(format!("alternative {i}"))
        }
        Status::Failed(why) => v["details"] = json!(why),
        Status::Deviation { reason, why } => {
            v["details"] = json!(why);
            v["reason"] = json!(reason);
        }
        Status::NotCovered(why) => v["reason"] = json!(why),
    }
    match got {
        Some(Ok(r)) => v["got"] = serde_json::to_value(r).unwrap_or(Value::Null),
        Some(Err(e)) => v["got"] = json!({"error": e.to_string()}),
        None => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deviation_tables() {
        let text = "intro\n| case | kind | reason |\n|---|---|---|\n| `a_1` | k | because |\n| b_2 | why |\n";
        let d = parse_deviations(text, "D.md").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d["a_1"], "because");
        assert_eq!(d["b_2"], "why");
        let e = parse_deviations("| x |  |\n", "D.md").unwrap_err();
        assert!(e.message.contains("needs a reason"), "{}", e.message);
        let e = parse_deviations("| x | r |\n| x | r |\n", "D.md").unwrap_err();
        assert!(e.message.contains("listed twice"), "{}", e.message);
    }
}
