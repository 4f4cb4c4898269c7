//! The schema's cases parsed, run and compared.

use spmd_core::SpmdRuleExt;
use spmd_core::json::{Expect, JsonError, Outcome};
use spmd_core::{DimsMapping, DistAttr, Einsum, Mesh, RuleResult, Sharding, Spec, SpmdError};

use crate::*;

fn co(d: &[u8]) -> Sharding {
    Sharding::co(d).unwrap()
}

const CASE: &str = r#"{
    "id": "x", "source": "s", "op": "einsum", "attrs": {"equation": "mk,kn->mn"},
    "mesh_shape": [2, 3], "direction": "forward",
    "inputs": [{"shape": [4, 6], "dims_mapping": [1, 0], "partial_dims": []},
               {"shape": [6, 8], "dims_mapping": null}],
    "outputs": [],
    "expected": {"inputs": [{"dims_mapping": [1, 0]}, null],
                 "outputs": [{"dims_mapping": [1, -1], "partial_dims": [0],
                              "partial_reduce": {"0": "SUM"}}]},
    "einsum": "...mk,...kn->...mn",
    "paddle_3_3_1": {"agrees": true}, "unknown": [1, 2]
}"#;

fn run(case: &Case) -> Result<RuleResult, SpmdError> {
    let parts = case.input_parts().unwrap();
    let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
    Einsum::new(case.attr_str("equation").unwrap())?.forward(&Mesh::new(&case.mesh_shape)?, &specs)
}

#[test]
fn deviations_table_rows_need_a_reason_and_one_listing() {
    let ok = "| case | kind | reason |\n|---|---|---|\n| `a_1` | k | because |\n";
    let t = crate::parse_deviations(ok).unwrap();
    assert_eq!(t.get("a_1").map(String::as_str), Some("because"));
    let no_reason = "| `a_1` | k | |\n";
    assert!(
        crate::parse_deviations(no_reason)
            .unwrap_err()
            .contains("line 1")
    );
    let twice = "| `a_1` | k | x |\n| `a_1` | k | y |\n";
    assert!(
        crate::parse_deviations(twice)
            .unwrap_err()
            .contains("listed twice")
    );
}

#[test]
fn a_case_parses_runs_and_matches() {
    let case: Case = serde_json::from_str(CASE).unwrap();
    assert_eq!(case.direction, Direction::Forward);
    assert_eq!(case.einsum.as_deref(), Some("...mk,...kn->...mn"));
    assert!(case.alternatives.is_empty());
    let parts = case.input_parts().unwrap();
    assert_eq!(parts[1].0, vec![6, 8]);
    assert_eq!(parts[1].1, DistAttr::replicated(2));
    let got = run(&case);
    assert_eq!(case.check(&got), Ok(Agreement::Expected));
}

#[test]
fn mismatches_are_described() {
    let mut case: Case = serde_json::from_str(CASE).unwrap();
    let Expected::Result(o) = &mut case.expected else {
        panic!()
    };
    let out = o.outputs[0].as_mut().unwrap();
    out.dims_mapping = Some(serde_json::from_str("[-1, 1]").unwrap());
    out.partial_dims = Some(vec![1]);
    out.partial_reduce = Some([("0".to_string(), "MAX".to_string())].into());
    out.is_partial = Some(false);
    let got = run(&case);
    let m = case.check(&got).unwrap_err();
    assert_eq!(m.details.len(), 4, "{m}");
    let text = m.to_string();
    assert!(
        text.contains("output 0: dims_mapping expected [-1, 1], got [1, -1]"),
        "{text}"
    );
    assert!(
        text.contains("partial_dims expected [1], got [0]"),
        "{text}"
    );
    assert!(text.contains("expected MAX, got SUM"), "{text}");
    assert!(
        text.contains("is_partial expected false, got true"),
        "{text}"
    );

    // An alternative that matches makes the case pass.
    let right: Expected = serde_json::from_str(
        r#"{"inputs": [], "outputs": [{"dims_mapping": [1, -1], "is_partial": true}]}"#,
    )
    .unwrap();
    case.alternatives.push(Alternative {
        reason: None,
        expected: right,
    });
    assert_eq!(case.check(&got), Ok(Agreement::Alternative(0)));
}

#[test]
fn error_cases() {
    let e: Expected =
        serde_json::from_str(r#"{"error": true, "error_type": "ValueError"}"#).unwrap();
    assert!(e.is_error());
    let err: Result<RuleResult, SpmdError> = Err(SpmdError::InvalidMesh { shape: vec![] });
    assert!(e.check(&err).is_ok());
    let ok = Ok(RuleResult::default());
    assert!(
        e.check(&ok)
            .unwrap_err()
            .to_string()
            .contains("expected an error")
    );
    let r: Expected = serde_json::from_str(r#"{"inputs": [], "outputs": []}"#).unwrap();
    assert!(r.check(&ok).is_ok());
    assert!(
        r.check(&err)
            .unwrap_err()
            .to_string()
            .contains("got the error")
    );
    // Neither form.
    assert!(serde_json::from_str::<Expected>("{}").is_err());
    assert!(serde_json::from_str::<Expected>(r#"{"error": false}"#).is_err());
    // Round trip of the error form.
    let text = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<Expected>(&text).unwrap(), e);
}

#[test]
fn missing_result_entries_and_nulls() {
    let o: Outcome = serde_json::from_str(r#"{"inputs": [null, {"dims_mapping": [0]}]}"#).unwrap();
    let got = RuleResult {
        inputs: [DistAttr::replicated(1)].into_iter().collect(),
        outputs: Default::default(),
    };
    let m = check_outcome(&o, &got).unwrap_err();
    assert_eq!(
        m.details,
        vec!["input 1: expected, but the result has only 1 input(s)".to_string()]
    );
}

#[test]
fn multi_dims_mapping_wins_over_the_lossy_one() {
    let e: Expect =
        serde_json::from_str(r#"{"dims_mapping": [1], "multi_dims_mapping": [[0, 1]]}"#).unwrap();
    let got = DistAttr::new(DimsMapping::from_shardings(&[co(&[0, 1])]));
    let mut out = Vec::new();
    compare(&e, "input 0", &got, &mut out);
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn malformed_files_are_errors() {
    for text in [
        "",
        "{",
        "{}",
        "[{}]",
        r#"[{"id": "x"}]"#,
        r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "sideways",
             "expected": {"error": true}}]"#,
        r#"[{"id": "x", "op": "a", "mesh_shape": [-2], "direction": "forward",
             "expected": {"error": true}}]"#,
        r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "forward",
             "inputs": [{"shape": [2], "dims_mapping": ["a"]}],
             "expected": {"error": true}}]"#,
    ] {
        assert!(
            matches!(
                parse_cases(text),
                Err(JsonError::Parse(_) | JsonError::ParseAt { .. })
            ),
            "{text}"
        );
    }
    // Where a case goes wrong, the error says which case and field.
    let err = parse_cases(
        r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "forward",
             "expected": {"error": true}},
            {"id": "y", "op": "a", "mesh_shape": [2], "direction": "forward",
             "inputs": [{"shape": [2], "dims_mapping": ["a"]}],
             "expected": {"error": true}}]"#,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("[1].inputs[0].dims_mapping"),
        "{err}"
    );
    let ok = parse_cases(
        r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "grad",
             "expected": {"error": true}, "extra": {"anything": null}}]"#,
    )
    .unwrap();
    assert_eq!(ok[0].direction, Direction::Grad);
    assert!(ok[0].inputs.is_empty());
}
