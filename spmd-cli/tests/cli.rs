//! Drives the built `spmd` binary: every command, the documented forms, the
//! error paths, and the color rules (piped output is plain; NO_COLOR wins).

use std::path::PathBuf;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn spmd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spmd"));
    // The tests' own environment must not turn colors on or off.
    c.env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .env_remove("CLICOLOR_FORCE");
    c
}

/// Runs `spmd` with `args`: (exit status, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = spmd().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json(args: &[&str]) -> Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}\n{out}"))
}

/// Bad input: exit status 2, exactly one line `error: ...` on stderr, nothing
/// that looks like a panic, and nothing on stdout.
fn bad(args: &[&str], needle: &str) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 2, "{args:?}: stdout {out}, stderr {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: expected {needle:?} in {err}"
    );
    assert!(out.is_empty(), "{args:?}: {out}");
    err
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spmd-cli-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn repo_vectors(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/conformance")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

const MATMUL: [&str; 8] = [
    "infer",
    "matmul",
    "--mesh",
    "2x4",
    "--in",
    "64x32:[1,0]",
    "--in",
    "32x48:[-1,-1]",
];

#[test]
fn the_documented_infer_form() {
    let (code, out, err) = run(&MATMUL);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "matmul forward on mesh 2x4 (8 devices)");
    let x = lines.iter().find(|l| l.starts_with("input 0")).unwrap();
    assert!(x.contains("[1, 0]") && x.ends_with("none"), "{x}");
    let y = lines.iter().find(|l| l.starts_with("input 1")).unwrap();
    assert!(
        y.contains("[-1, -1]")
            && y.contains("[0, -1]")
            && y.contains("local slice along dim 0 over mesh dim 0 (no communication)"),
        "{y}"
    );
    let o = lines.iter().find(|l| l.starts_with("output 0")).unwrap();
    assert!(
        o.contains("64x48")
            && o.contains("[1, -1] partial{0: SUM}")
            && o.contains("all-reduce SUM over mesh dim 0"),
        "{o}"
    );
}

#[test]
fn infer_json() {
    let mut args = MATMUL.to_vec();
    args.push("--json");
    let v = json(&args);
    assert_eq!(v["op"], "matmul");
    assert_eq!(v["direction"], "forward");
    assert_eq!(v["mesh_shape"], serde_json::json!([2, 4]));
    assert_eq!(
        v["result"]["inputs"][1]["dims_mapping"],
        serde_json::json!([0, -1])
    );
    assert_eq!(
        v["result"]["outputs"][0]["partial_dims"],
        serde_json::json!([0])
    );
    assert_eq!(
        v["result"]["outputs"][0]["partial_reduce"]["0"],
        serde_json::json!("SUM")
    );
    let reshard = &v["inputs"][1]["reshard"];
    assert_eq!(reshard[0]["kind"], "slice");
    assert_eq!(reshard[0]["tensor_dim"], 0);
    assert_eq!(v["inputs"][0]["reshard"], serde_json::json!([]));
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([64, 48]));
    assert_eq!(v["outputs"][0]["pending"][0]["kind"], "all_reduce");
    assert_eq!(v["inputs"][1]["local_shape"], serde_json::json!([16, 48]));
}

#[test]
fn infer_with_attributes_and_collectives() {
    // trans_x: x is [k, m]; y's n loses mesh dim 1 to m and y's k takes mesh dim 0.
    let v = json(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--in",
        "32x64:[0,1]",
        "--in",
        "32x48:[-1,1]",
        "--attr",
        "trans_x=true",
        "--json",
    ]);
    assert_eq!(v["attrs"]["trans_x"], "true");
    assert_eq!(
        v["result"]["inputs"][1]["dims_mapping"],
        serde_json::json!([0, -1])
    );
    let kinds: Vec<&str> = v["inputs"][1]["reshard"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["all_gather", "slice"], "{}", v["inputs"][1]);
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([64, 48]));

    // A partial input is reduced first (all-reduce), a moved mesh dim is an all-to-all.
    let (code, out, _) = run(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[-1,-1]:partial(0)",
        "--in",
        "32x48:[1,-1]",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("all-reduce SUM over mesh dim 0"), "{out}");

    let (code, out, _) = run(&[
        "infer",
        "softmax",
        "--mesh",
        "4",
        "--in",
        "8x16:[-1,0]",
        "--attr",
        "axis=1",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("all-gather along dim 1 over mesh dim 0"),
        "{out}"
    );
}

#[test]
fn reductions_keep_their_reduce_type() {
    let v = json(&[
        "infer",
        "max",
        "--mesh",
        "2",
        "--in",
        "8x6:[0,-1]",
        "--attr",
        "axis=[0]",
        "--json",
    ]);
    assert_eq!(
        v["result"]["outputs"][0]["partial_reduce"]["0"],
        serde_json::json!("MAX")
    );
    assert_eq!(v["outputs"][0]["pending"][0]["reduce"], "MAX");
}

#[test]
fn backward_inference() {
    let (code, out, err) = run(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--backward",
        "--in",
        "64x32",
        "--in",
        "32x48",
        "--out",
        "64x48:[0,1]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("matmul backward on mesh 2x4"), "{out}");
    let x = out.lines().find(|l| l.starts_with("input 0")).unwrap();
    assert!(x.contains("[0, -1]"), "{x}");
    let y = out.lines().find(|l| l.starts_with("input 1")).unwrap();
    assert!(y.contains("[-1, 1]"), "{y}");
    let v = json(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--backward",
        "--in",
        "64x32",
        "--in",
        "32x48",
        "--out",
        "64x48:[0,1]",
        "--json",
    ]);
    assert_eq!(v["direction"], "backward");
    assert_eq!(v["inputs"][0]["given"], Value::Null);
    assert_eq!(
        v["outputs"][0]["given"]["dims_mapping"],
        serde_json::json!([0, 1])
    );
}

#[test]
fn backward_outputs_are_kept_or_corrected() {
    let (_, out, _) = run(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--backward",
        "--in",
        "64x32",
        "--in",
        "32x48",
        "--out",
        "64x48:[0,1]",
    ]);
    let o = out.lines().find(|l| l.starts_with("output 0")).unwrap();
    assert!(o.ends_with("as given"), "{o}");
    // Softmax never keeps its axis sharded: the given output is corrected.
    let (_, out, _) = run(&[
        "infer",
        "softmax",
        "--mesh",
        "2x4",
        "--backward",
        "--in",
        "8x16",
        "--out",
        "8x16:[0,1]",
    ]);
    let o = out.lines().find(|l| l.starts_with("output 0")).unwrap();
    assert!(
        o.contains("[0, -1]") && o.ends_with("corrected: all-gather along dim 1 over mesh dim 1"),
        "{o}"
    );
}

#[test]
fn grad_inference() {
    let v = json(&[
        "infer",
        "matmul",
        "--mesh",
        "2x4",
        "--grad",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48",
        "--out",
        "64x48:[1,-1]",
        "--json",
    ]);
    assert_eq!(v["direction"], "grad");
    // Requirements of (x, y, out_grad), then the input grads.
    assert_eq!(v["inputs"].as_array().unwrap().len(), 3);
    assert_eq!(v["inputs"][2]["name"], "out_grad 0");
    assert_eq!(v["outputs"][1]["name"], "input 1 grad");
    assert_eq!(
        v["result"]["outputs"][1]["partial_dims"],
        serde_json::json!([1])
    );
    bad(
        &[
            "infer", "matmul", "--mesh", "2x4", "--grad", "--in", "4x4", "--in", "4x4",
        ],
        "--grad needs the output grads as --out",
    );
}

#[test]
fn einsum_command_and_notations_as_ops() {
    let (code, out, err) = run(&[
        "einsum",
        "mk,kn->mn",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48:[-1,-1]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("einsum \"mk,kn->mn\" forward on mesh 2x4"),
        "{out}"
    );
    assert!(out.contains("[1, -1] partial{0: SUM}"), "{out}");
    // A reshape through a compound dim; output shapes come from the notation.
    let v = json(&[
        "einsum",
        "bshd->bs(hd)",
        "--mesh",
        "2",
        "--in",
        "4x8x4x16:[-1,-1,0,-1]",
        "--json",
    ]);
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([4, 8, 64]));
    assert_eq!(
        v["result"]["outputs"][0]["dims_mapping"],
        serde_json::json!([-1, -1, 0])
    );
    // `infer` takes a notation, and the `einsum` op its equation attribute.
    let a = json(&[
        "infer",
        "ij,jk->ik",
        "--mesh",
        "2",
        "--in",
        "4x6:[0,-1]",
        "--in",
        "6x2",
        "--json",
    ]);
    let b = json(&[
        "infer",
        "einsum",
        "--attr",
        "equation=ij,jk->ik",
        "--mesh",
        "2",
        "--in",
        "4x6:[0,-1]",
        "--in",
        "6x2",
        "--json",
    ]);
    assert_eq!(a["result"], b["result"]);
    bad(
        &["infer", "einsum", "--mesh", "2", "--in", "4"],
        "needs its notation",
    );
    bad(
        &[
            "einsum",
            "mk,kn->mq",
            "--mesh",
            "2",
            "--in",
            "4x4",
            "--in",
            "4x4",
        ],
        "unknown output label `q` at column 9",
    );
}

#[test]
fn json_input_files_and_stdin() {
    let case = r#"{"id": "mm", "op": "matmul", "attrs": {"trans_x": false}, "mesh_shape": [2, 4],
        "direction": "forward",
        "inputs": [{"shape": [64, 32], "dims_mapping": [1, 0]}, {"shape": [32, 48], "dims_mapping": [-1, -1]}],
        "expected": {"inputs": [null, {"dims_mapping": [0, -1]}],
                     "outputs": [{"dims_mapping": [1, -1], "partial_dims": [0]}]}}"#;
    let path = temp_file("call.json", case);
    let (code, out, err) = run(&["infer", "--json-input", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("mm: matmul forward on mesh 2x4"), "{out}");
    assert!(out.contains("expected: matches"), "{out}");

    // The same call from stdin, without `expected`.
    let bare = r#"[{"op": "einsum", "attrs": {"equation": "mk,kn->mn"}, "mesh_shape": [2],
        "inputs": [{"shape": [4, 6], "dims_mapping": [-1, 0]}, {"shape": [6, 8]}]}]"#;
    let out = spmd()
        .args(["infer", "--json-input", "-", "--json"])
        .write_stdin(bare)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["result"]["outputs"][0]["partial_dims"],
        serde_json::json!([0])
    );

    // A wrong expectation: the report says so and the status is 1.
    let wrong = case.replace(r#""partial_dims": [0]"#, r#""partial_dims": []"#);
    let path = temp_file("wrong.json", &wrong);
    let (code, out, _) = run(&["infer", "--json-input", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.contains("expected: differs: output 0: partial_dims expected [], got [0]"),
        "{out}"
    );

    // An expected error is a pass.
    let err_case = r#"{"op": "matmul", "mesh_shape": [2], "inputs": [{"shape": [4, 6]}, {"shape": [7, 8]}],
        "expected": {"error": true}}"#;
    let path = temp_file("err.json", err_case);
    let (code, out, _) = run(&["infer", "--json-input", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("the rule rejects the call") && out.contains("expected: matches"),
        "{out}"
    );

    let path = temp_file("bad.json", "{\"op\": \"matmul\", ");
    bad(
        &["infer", "--json-input", path.to_str().unwrap()],
        "malformed JSON",
    );
    let path = temp_file("schema.json", r#"{"op": "matmul"}"#);
    bad(
        &["infer", "--json-input", path.to_str().unwrap()],
        "not a call of the conformance schema: missing field `mesh_shape`",
    );
    let path = temp_file(
        "map.json",
        r#"{"op": "matmul", "mesh_shape": [2], "inputs": [{"shape": [4], "dims_mapping": [-3]}]}"#,
    );
    bad(
        &["infer", "--json-input", path.to_str().unwrap()],
        "input 0: dims mapping entry 0: -3",
    );
    bad(
        &["infer", "matmul", "--json-input", "x.json"],
        "cannot be used with",
    );
}

#[test]
fn explain_traces_merges_conflicts_and_partials() {
    // matmul settles its axes by role. No batch axes; the free axes keep
    // their mesh dims (m: 1, n: 0, no clash); the contracted k takes the
    // union of its shardings ({0}) minus every mesh dim taken ({0, 1}):
    // nothing, which the trace reports as k losing mesh dim 0 to n. So x's k
    // dim is gathered, y is kept, and out is [1, 0] and not partial.
    let (code, out, err) = run(&[
        "explain",
        "matmul",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48:[-1,0]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("`matmul` picks one of its 9 notations"),
        "{out}"
    );
    assert!(
        out.contains("input 0 (x) dim 0: axis `m` takes mesh dim 1"),
        "{out}"
    );
    assert!(
        out.contains("input 1 (y) dim 1: axis `n` takes mesh dim 0"),
        "{out}"
    );
    assert!(
        out.contains(
            "mesh dim 0 is claimed by axis `n` and axis `k`: axis `n` keeps it, axis `k` loses it"
        ),
        "{out}"
    );
    assert!(
        out.contains("[1, 0] -> [1, -1]   all-gather along dim 1 over mesh dim 0"),
        "{out}"
    );
    assert!(out.contains("input 1 (y)"), "{out}");
    assert!(out.contains("[-1, 0] -> [-1, 0]  as given"), "{out}");
    assert!(
        out.contains("4. partial outputs\n   none: every sharded axis appears in the outputs"),
        "{out}"
    );
    let v = json(&[
        "explain",
        "matmul",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48:[-1,0]",
        "--json",
    ]);
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(
        v["report"]["result"]["outputs"][0]["dims_mapping"],
        serde_json::json!([1, 0])
    );

    // Two free axes want mesh dim 0: the larger extent (m: 64 > n: 48) keeps it.
    let (_, out, _) = run(&[
        "explain",
        "matmul",
        "--mesh",
        "2",
        "--in",
        "64x32:[0,-1]",
        "--in",
        "32x48:[-1,0]",
    ]);
    assert!(
        out.contains(
            "mesh dim 0 is claimed by axis `m` and axis `n`: axis `m` keeps it, axis `n` loses it"
        ),
        "{out}"
    );
    // A batch axis must divide: extent 3 drops mesh dim 0.
    let (_, out, _) = run(&[
        "explain",
        "matmul",
        "--mesh",
        "2",
        "--in",
        "3x4x6:[0,-1,-1]",
        "--in",
        "3x6x8",
    ]);
    assert!(
        out.contains("axis `...` dim 0 (extent 3) drops mesh dim 0: its shards would be uneven"),
        "{out}"
    );

    // The classic (first-wins) einsum merges dim by dim: k keeps mesh dim 0.
    let (_, out, _) = run(&[
        "explain",
        "mk,kn->mn",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48:[-1,0]",
    ]);
    assert!(out.contains("notation: \"mk,kn->mn\""), "{out}");
    assert!(
        out.contains("input 0 dim 0: axis `m` takes mesh dim 1"),
        "{out}"
    );
    assert!(
        out.contains("input 1 dim 1: axis `n` takes mesh dim 0"),
        "{out}"
    );
    assert!(
        out.contains("mesh dim 0 is claimed by axis `k` and axis `n`: axis `k` keeps it"),
        "{out}"
    );
    assert!(
        out.contains("all-to-all over mesh dim 0: dim 1 -> dim 0"),
        "{out}"
    );
    assert!(
        out.contains("output 0 has no axis `k`, which is sharded over mesh dim 0"),
        "{out}"
    );

    // A dim that never carries a sharding is reported.
    let (_, out, _) = run(&["explain", "ii->i", "--mesh", "2x2", "--in", "4x4:[0,1]"]);
    assert!(
        out.contains("input 0 dim 0: mesh dim 0 is dropped"),
        "{out}"
    );
    assert!(
        out.contains("input 0 dim 1: mesh dim 1 is dropped"),
        "{out}"
    );
    let (_, out, _) = run(&["explain", "ij->i", "--mesh", "2x2", "--in", "4x6:[0,1]"]);
    assert!(out.contains("output 0 has no axis `j`"), "{out}");
    assert!(out.contains("partial SUM over mesh dim 1"), "{out}");

    // A template is traced with the notation it binds to for this call.
    let (code, out, _) = run(&[
        "explain",
        "softmax",
        "--mesh",
        "2x4",
        "--in",
        "8x16:[0,1]",
        "--attr",
        "axis=-1",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains(
            r#"notation: "ba->ba" (the template "@{axis:a}->@{axis:a}" bound for this call)"#
        ),
        "{out}"
    );
    assert!(
        out.contains("input 0 (x) dim 0: axis `b` takes mesh dim 0"),
        "{out}"
    );
    assert!(
        out.contains("input 0 (x) dim 1: mesh dim 1 is dropped"),
        "{out}"
    );

    let v = json(&[
        "explain",
        "mk,kn->mn",
        "--mesh",
        "2x4",
        "--in",
        "64x32:[1,0]",
        "--in",
        "32x48",
        "--json",
    ]);
    assert_eq!(v["notation"], "mk,kn->mn");
    assert_eq!(v["steps"][0]["step"], "merge");
    assert_eq!(v["steps"][0]["axis"], "m");
    assert_eq!(
        v["report"]["result"]["outputs"][0]["partial_dims"],
        serde_json::json!([0])
    );
}

#[test]
fn explain_backward_traces_merges_and_missing_axes() {
    let (code, out, err) = run(&[
        "explain",
        "matmul",
        "--mesh",
        "2",
        "--backward",
        "--in",
        "4x6",
        "--in",
        "6x8",
        "--out",
        "4x8:[0,-1]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("matmul backward on mesh 2"), "{out}");
    assert!(
        out.contains("output 0 (out) dim 0: axis `m` takes mesh dim 0"),
        "{out}"
    );
    assert!(
        out.contains("input 0 (x) dim 1: axis `k` is in no output, so no output says how to shard it: it is replicated"),
        "{out}"
    );
    assert!(
        out.contains("input 1 (y) dim 0: axis `k` is in no output"),
        "{out}"
    );
    let v = json(&[
        "explain",
        "matmul",
        "--mesh",
        "2",
        "--backward",
        "--in",
        "4x6",
        "--in",
        "6x8",
        "--out",
        "4x8:[0,-1]",
        "--json",
    ]);
    let steps: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["merge", "missing_axis", "missing_axis"]);
    assert_eq!(v["steps"][1]["tensor"], "input 0 (x)");
    assert_eq!(v["steps"][1]["axis"], "k");
}

#[test]
fn explain_grad_traces_merges_and_partial_grads() {
    let (code, out, err) = run(&[
        "explain",
        "matmul",
        "--mesh",
        "2x2",
        "--grad",
        "--in",
        "4x6:[0,1]",
        "--in",
        "6x8:[1,-1]",
        "--out",
        "4x8:[0,-1]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("matmul grad on mesh 2x2"), "{out}");
    assert!(
        out.contains("input 0 (x) dim 1: axis `k` takes mesh dim 1"),
        "{out}"
    );
    assert!(
        out.contains("out_grad 0 (out) dim 0: mesh dim 0 agrees with axis `m` (already 0)"),
        "{out}"
    );
    assert!(
        out.contains("input 1 grad (y): the gradient's operands carry axis `m`, sharded over mesh dim 0, and input 1 has none"),
        "{out}"
    );
    assert!(
        out.contains("input 1 grad (y): all-reduce SUM over mesh dim 0 gives the full value"),
        "{out}"
    );
    let v = json(&[
        "explain",
        "matmul",
        "--mesh",
        "2x2",
        "--grad",
        "--in",
        "4x6:[0,1]",
        "--in",
        "6x8:[1,-1]",
        "--out",
        "4x8:[0,-1]",
        "--json",
    ]);
    let last = v["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["step"], "partial");
    assert_eq!(last["output"], 1);
    assert_eq!(last["axis"], "m");
}

#[test]
fn explain_of_a_rejected_call() {
    // Embedding is strict: one mesh dim on two axes is an error, after the merge steps.
    let (code, out, err) = run(&[
        "explain",
        "embedding",
        "--mesh",
        "2",
        "--in",
        "4x8:[0,-1]",
        "--in",
        "100x16:[-1,0]",
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the rule rejects the call"), "{out}");
    assert_eq!(err.lines().count(), 1);
    assert!(
        err.starts_with("error: embedding: mesh dim 0 shards both"),
        "{err}"
    );
}

#[test]
fn show_draws_blocks() {
    let (code, out, err) = run(&["show", "--mesh", "2x4", "64x48:[1,0]"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("tensor 64x48 [1, 0] on mesh 2x4 (8 devices)"),
        "{out}"
    );
    assert!(out.contains("dim 0 (64): split over mesh dim 1 (size 4) into 4 blocks of 16"));
    assert!(out.contains("local block: 16x24 per device"));
    // Row 16:32 holds devices 1 and 5.
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("16:32"))
        .unwrap();
    assert!(row.contains("│    1    │    5    │"), "{row}");

    let (_, out, _) = run(&["show", "--mesh", "2x4", "64x48:[-1,1]:partial(0)"]);
    assert!(out.contains("0+4") && out.contains("3+7"), "{out}");
    assert!(out.contains("partial SUM over mesh dim 0"), "{out}");

    let (_, out, _) = run(&["show", "--mesh", "2x2x2", "8x16x32:[0,[1,2],-1]"]);
    assert!(
        out.contains("dim 0 [0:4]") && out.contains("dim 0 [4:8]"),
        "{out}"
    );
    assert!(out.contains("the grids show dims 1 and 2"), "{out}");

    let (_, out, _) = run(&["show", "--mesh", "4", "10:[0]"]);
    assert!(
        out.contains("4 uneven blocks (at most 3)") && out.contains("6:8") && out.contains("8:10"),
        "{out}"
    );
    let (_, out, _) = run(&["show", "--mesh", "2", "scalar:partial(0:max)"]);
    assert!(out.contains("max(0,1)"), "{out}");

    let svg = std::env::temp_dir().join(format!("spmd-show-{}.svg", std::process::id()));
    let (code, out, _) = run(&[
        "show",
        "--mesh",
        "2x4",
        "64x48:[-1,1]:partial(0)",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("wrote "));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("</svg>"));
    assert_eq!(
        text.matches("<rect").count(),
        1 + 4 * 2,
        "background + 4 cells with hatching"
    );
    assert!(text.contains(">0+4</text>"));
    let _ = std::fs::remove_file(svg);

    let v = json(&["show", "--mesh", "2x4", "64x48:[1,0]", "--json"]);
    assert_eq!(v["devices"].as_array().unwrap().len(), 8);
    assert_eq!(v["devices"][5]["coords"], serde_json::json!([1, 1]));
    assert_eq!(
        v["devices"][5]["block"],
        serde_json::json!([[16, 32], [24, 48]])
    );
    assert_eq!(v["devices"][5]["local_shape"], serde_json::json!([16, 24]));

    bad(
        &["show", "--mesh", "2x4", "64x48:[1,0,0]"],
        "has 3 entries but the shape 64x48 has rank 2",
    );
    bad(
        &["show", "--mesh", "2x4", "64x48:[4,0]"],
        "mesh dim 4, but mesh 2x4 has 2 dims",
    );
}

const VECTORS: &str = r#"[
 {"id": "ok_1", "op": "einsum", "attrs": {"equation": "mk,kn->mn"}, "mesh_shape": [2, 2],
  "direction": "forward",
  "inputs": [{"shape": [4, 6], "dims_mapping": [0, 1]}, {"shape": [6, 8], "dims_mapping": [-1, -1]}],
  "expected": {"inputs": [null, {"dims_mapping": [1, -1]}],
               "outputs": [{"dims_mapping": [0, -1], "partial_dims": [1]}]}},
 {"id": "bad_1", "op": "matmul", "attrs": {}, "mesh_shape": [2, 2], "direction": "forward",
  "inputs": [{"shape": [4, 6], "dims_mapping": [0, 1]}, {"shape": [6, 8], "dims_mapping": [-1, -1]}],
  "expected": {"outputs": [{"dims_mapping": [0, 1]}]}},
 {"id": "dev_1", "op": "matmul", "attrs": {}, "mesh_shape": [2], "direction": "forward",
  "inputs": [{"shape": [4, 6], "dims_mapping": [0, -1]}, {"shape": [6, 8], "dims_mapping": [-1, -1]}],
  "expected": {"outputs": [{"dims_mapping": [-1, -1]}]}},
 {"id": "err_1", "op": "matmul", "attrs": {}, "mesh_shape": [2], "direction": "forward",
  "inputs": [{"shape": [4, 6]}, {"shape": [7, 8]}], "expected": {"error": true}},
 {"id": "back_1", "op": "matmul", "attrs": {}, "mesh_shape": [2], "direction": "backward",
  "inputs": [{"shape": [4, 6]}, {"shape": [6, 8]}],
  "outputs": [{"shape": [4, 8], "dims_mapping": [0, -1]}],
  "expected": {"inputs": [{"dims_mapping": [0, -1]}, {"dims_mapping": [-1, -1]}]}},
 {"id": "grad_1", "op": "einsum", "attrs": {"equation": "mk,kn->mn"}, "mesh_shape": [2],
  "direction": "grad",
  "inputs": [{"shape": [4, 6], "dims_mapping": [-1, 0]}, {"shape": [6, 8], "dims_mapping": [-1, -1]}],
  "outputs": [{"shape": [4, 8], "dims_mapping": [-1, -1]}],
  "expected": {"outputs": [null, {"dims_mapping": [0, -1]}]}},
 {"id": "nope_1", "op": "no_such_op", "attrs": {}, "mesh_shape": [2], "direction": "forward",
  "inputs": [], "expected": {"error": true}}
]"#;

const DEVIATIONS: &str = "# Deviations\n\n| case | kind | reason |\n|---|---|---|\n| `dev_1` | test | we answer [0,-1] on purpose |\n| `ok_1` | test | stale: it passes |\n";

#[test]
fn conformance_summary_and_status() {
    let vectors = temp_file("vectors.json", VECTORS);
    let v = vectors.to_str().unwrap();
    let (code, out, err) = run(&["conformance", v]);
    assert_eq!(code, 1, "a covered case fails: {out}{err}");
    assert_eq!(out.lines().last().unwrap(), "4 passed, 2 failed");
    let row = |op: &str, dir: &str| -> Vec<String> {
        out.lines()
            .find(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 2 && c[0] == op && c[1] == dir
            })
            .unwrap_or_else(|| panic!("no row {op} {dir} in {out}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    assert_eq!(
        row("op", "direction")[2..],
        ["cases", "passed", "failed", "not", "covered"]
    );
    assert_eq!(row("matmul", "forward")[2..], ["3", "1", "2", "0"]);
    assert_eq!(row("matmul", "backward")[2..], ["1", "1", "0", "0"]);
    assert_eq!(row("einsum", "grad")[2..], ["1", "1", "0", "0"]);
    assert_eq!(row("no_such_op", "forward")[2..], ["1", "0", "0", "1"]);
    assert!(
        out.contains("bad_1 (matmul forward): output 0: dims_mapping expected [0, 1]"),
        "{out}"
    );
    assert!(
        out.contains("1 not covered (op or direction without a rule here: not counted as failed)"),
        "{out}"
    );

    let devs = temp_file("DEVIATIONS.md", DEVIATIONS);
    let (code, out, _) = run(&["conformance", v, "--deviations", devs.to_str().unwrap()]);
    assert_eq!(code, 1, "bad_1 still fails");
    assert_eq!(out.lines().last().unwrap(), "4 passed, 1 failed");
    assert!(out.contains("1 deviations"), "{out}");
    assert!(
        out.contains("stale deviations (listed, but they pass): ok_1"),
        "{out}"
    );

    let (code, out, _) = run(&["conformance", v, "--op", "einsum"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().last().unwrap(), "2 passed, 0 failed");

    let r = spmd()
        .args([
            "conformance",
            v,
            "--json",
            "--deviations",
            devs.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(1));
    let j: Value = serde_json::from_slice(&r.stdout).unwrap();
    let cases = j["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 7);
    let status = |id: &str| {
        cases.iter().find(|c| c["id"] == id).unwrap()["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(status("ok_1"), "passed");
    assert_eq!(status("bad_1"), "failed");
    assert_eq!(status("dev_1"), "deviation");
    assert_eq!(status("err_1"), "passed");
    assert_eq!(status("nope_1"), "not_covered");
    assert_eq!(j["summary"]["passed"], 4);
    assert_eq!(j["summary"]["failed"], 1);
    assert_eq!(j["summary"]["deviations"], 1);
    assert_eq!(j["summary"]["not_covered"], 1);
    let bad1 = cases.iter().find(|c| c["id"] == "bad_1").unwrap();
    assert_eq!(
        bad1["got"]["outputs"][0]["dims_mapping"],
        serde_json::json!([0, -1])
    );
}

#[test]
fn conformance_on_the_project_vectors() {
    let suite = repo_vectors("paddle-suite.json");
    let devs = repo_vectors("DEVIATIONS.md");
    let (code, out, err) = run(&["conformance", &suite, "--deviations", &devs]);
    assert!(code == 0 || code == 1, "{err}");
    let last = out.lines().last().unwrap();
    let words: Vec<&str> = last.split(' ').collect();
    assert_eq!(words.len(), 4, "{last}");
    assert!(
        words[0].parse::<usize>().is_ok() && words[2].parse::<usize>().is_ok(),
        "{last}"
    );
    assert_eq!((words[1], words[3]), ("passed,", "failed"));
    assert_eq!(
        code == 1,
        words[2] != "0",
        "exit status follows failures: {last}"
    );
}

/// The conformance run pasted in `spmd-cli/README.md` is what the command
/// prints: its summary lines and every per-op row it shows.
#[test]
fn the_readme_conformance_run_is_current() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("spmd-cli/README.md")).unwrap();
    let command = "spmd conformance tests/conformance/paddle-suite.json --deviations tests/conformance/DEVIATIONS.md";
    let pasted = readme
        .split(&format!("$ {command}\n"))
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README pastes the run");
    let out = spmd()
        .current_dir(&root)
        .args(command.split(' ').skip(1))
        .output()
        .unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    let mut shown = 0;
    for line in pasted
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("..."))
    {
        assert!(
            printed.lines().any(|p| p == line),
            "README line not printed: {line:?}"
        );
        shown += 1;
    }
    assert!(shown >= 4, "{pasted}");
    assert!(pasted.contains(" passed, 0 failed"), "{pasted}");
}

/// `docs/conformance-per-op.md` is the tool's own output: this test regenerates it
/// and fails when the committed file differs (numbers typed by hand, or a
/// change of the library that did not refresh the table). `SPMD_BLESS=1`
/// rewrites the file instead.
#[test]
fn conformance_docs_are_generated() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let args = [
        "conformance",
        "tests/conformance/paddle-suite.json",
        "tests/conformance/paddle-3.3.1-random.json",
        "--deviations",
        "tests/conformance/DEVIATIONS.md",
        "--markdown",
    ];
    let out = spmd().current_dir(&root).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let generated = String::from_utf8(out.stdout).unwrap();
    // The command the document names is the one that produced it.
    assert!(
        generated.contains(&format!("`spmd {}`", args.join(" "))),
        "{generated}"
    );
    assert!(generated.contains("| matmul | forward |"), "{generated}");
    let path = root.join("docs/conformance-per-op.md");
    if std::env::var_os("SPMD_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/conformance-per-op.md is out of date: run `SPMD_BLESS=1 cargo test -p spmd-cli \
         conformance_docs_are_generated` (or the command at the top of the file) and commit it"
    );
}

#[test]
fn markdown_report_counts_per_op() {
    let v = temp_file(
        "two-ops.json",
        r#"[{"id": "m1", "op": "matmul", "attrs": {}, "mesh_shape": [2], "direction": "forward",
             "inputs": [{"shape": [4, 6], "dims_mapping": [0, -1]},
                        {"shape": [6, 8], "dims_mapping": [-1, -1]}],
             "expected": {"inputs": [{"dims_mapping": [0, -1]}, {"dims_mapping": [-1, -1]}],
                          "outputs": [{"dims_mapping": [0, -1]}]}},
            {"id": "m2", "op": "matmul", "attrs": {}, "mesh_shape": [2], "direction": "forward",
             "inputs": [{"shape": [4, 6], "dims_mapping": [0, -1]},
                        {"shape": [6, 8], "dims_mapping": [-1, -1]}],
             "expected": {"inputs": [{"dims_mapping": [0, -1]}, {"dims_mapping": [-1, -1]}],
                          "outputs": [{"dims_mapping": [-1, -1]}]}},
            {"id": "n1", "op": "no_such_op", "attrs": {}, "mesh_shape": [2], "direction": "forward",
             "inputs": [{"shape": [4], "dims_mapping": [0]}],
             "expected": {"inputs": [{"dims_mapping": [0]}], "outputs": [{"dims_mapping": [0]}]}}]"#,
    );
    let (code, out, err) = run(&["conformance", v.to_str().unwrap(), "--markdown"]);
    assert_eq!(code, 1, "m2 fails: {err}");
    assert!(
        out.contains("3 cases: 1 passed (33.3%), 0 deviations, 1 not covered, 1 failed."),
        "{out}"
    );
    assert!(
        out.contains("| matmul | forward | 2 | 1 | 0 | 0 | 1 | 50.0% |"),
        "{out}"
    );
    assert!(
        out.contains("| no_such_op | forward | 1 | 0 | 0 | 1 | 0 | 0.0% |"),
        "{out}"
    );
}

#[test]
fn conformance_errors() {
    let path = temp_file("broken.json", "[{\"id\": ");
    bad(
        &["conformance", path.to_str().unwrap()],
        "malformed conformance JSON",
    );
    bad(
        &["conformance", "/no/such/file.json"],
        "cannot read /no/such/file.json",
    );
    let vectors = temp_file("v2.json", VECTORS);
    let devs = temp_file("D2.md", "| x |  |\n");
    bad(
        &[
            "conformance",
            vectors.to_str().unwrap(),
            "--deviations",
            devs.to_str().unwrap(),
        ],
        "needs a reason",
    );
}

#[test]
fn ops_lists_rules() {
    let (code, out, _) = run(&["ops"]);
    assert_eq!(code, 0);
    let matmul = out.lines().find(|l| l.starts_with("matmul ")).unwrap();
    assert!(
        matmul.contains("...mk,...kn->...mn") && matmul.contains("trans_x, trans_y"),
        "{matmul}"
    );
    let softmax = out.lines().find(|l| l.starts_with("softmax ")).unwrap();
    assert!(
        softmax.contains("@{axis:a}->@{axis:a}") && softmax.contains("axis"),
        "{softmax}"
    );
    // A rule still built at run time says so.
    let reshape = out.lines().find(|l| l.starts_with("reshape ")).unwrap();
    assert!(reshape.contains("built at run time"), "{reshape}");
    // Attributes the op takes but whose values no layout depends on.
    let (_, one, _) = run(&["ops", "layer_norm"]);
    assert!(one.contains("begin_norm_axis (ignored: epsilon)"), "{one}");
    let v = json(&["ops", "--json"]);
    let list = v.as_array().unwrap();
    assert!(list.iter().any(|o| o["name"] == "embedding"));
    let one = json(&["ops", "embedding", "--json"]);
    assert_eq!(one["name"], "embedding");
    assert_eq!(
        one["notations"],
        serde_json::json!(["...,jk->...k", "...,1k->...k"])
    );
    bad(&["ops", "matmal"], "did you mean `matmul`");
}

#[test]
fn bad_input_is_one_line_and_status_2() {
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut a = vec!["infer", "matmul", "--mesh", "2x4"];
        a.extend_from_slice(extra);
        a
    };
    bad(
        &[
            "infer",
            "matmull",
            "--mesh",
            "2x4",
            "--in",
            "64x32:[1,0]",
            "--in",
            "32x48",
        ],
        "no rule named `matmull` (did you mean `matmul`?)",
    );
    bad(
        &with(&["--in", "64x32:[1,", "--in", "32x48"]),
        "--in #0 `64x32:[1,`: expected a mesh dim, -1 or a co-shard list for dim 1",
    );
    bad(
        &with(&["--in", "64x32:1,0", "--in", "32x48"]),
        "expected `[`",
    );
    bad(
        &with(&["--in", "64xq:[1,0]", "--in", "32x48"]),
        "`q` in shape `64xq` is not an extent",
    );
    bad(
        &with(&["--in", "64x32:[1]", "--in", "32x48"]),
        "the mapping [1] has 1 entry but the shape 64x32 has rank 2",
    );
    bad(
        &with(&["--in", "64x32:[2,0]", "--in", "32x48"]),
        "dim 0 is sharded on mesh dim 2, but mesh 2x4 has 2 dims",
    );
    bad(
        &with(&["--in", "64x32:[0,0]", "--in", "32x48"]),
        "mesh dim 0 splits dim 0 and again dim 1",
    );
    bad(
        &with(&["--in", "64x32:[0,-1]:partial(0)", "--in", "32x48"]),
        "either partial or sharding",
    );
    bad(
        &with(&["--in", "64x32:partial(0:median)", "--in", "32x48"]),
        "unknown reduce type `median`",
    );
    bad(
        &with(&["--in", "64x32"]),
        "matmul: 1 input(s) given, the rule takes 2 (x, y)",
    );
    bad(
        &with(&["--in", "64x32", "--in", "33x48"]),
        "axis `k` has extent 32, but input 1 dim 0 has extent 33",
    );
    bad(
        &with(&["--in", "64x32", "--in", "32x48", "--attr", "trans_x"]),
        "expected NAME=VALUE",
    );
    bad(
        &with(&["--in", "64x32", "--in", "32x48", "--attr", "trans_x=3"]),
        "expected a bool, got 3",
    );
    bad(
        &with(&["--in", "64x32", "--in", "32x48", "--out", "64x48"]),
        "--out is for --backward",
    );
    bad(&["infer", "matmul", "--in", "64x32"], "--mesh is required");
    bad(
        &["infer", "matmul", "--mesh", "2x0", "--in", "4"],
        "mesh extent 0",
    );
    bad(
        &[
            "infer", "sum", "--mesh", "2", "--in", "4x4", "--attr", "axis=[5]",
        ],
        "axis 5 is out of range",
    );
    bad(
        &["infer"],
        "the following required arguments were not provided: <OP>",
    );
    bad(
        &["infer", "matmul", "--bogus"],
        "unexpected argument '--bogus'",
    );
    bad(
        &["infer", "matmul", "--backward", "--grad"],
        "cannot be used with",
    );
    bad(&["frobnicate"], "unrecognized subcommand 'frobnicate'");
}

#[test]
fn help_has_examples_and_syntax() {
    spmd()
        .args(["infer", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "spmd infer matmul --mesh 2x4 --in 64x32:[1,0] --in 32x48:[-1,-1]",
        ))
        .stdout(predicate::str::contains("partial(0:sum,1:max)"));
    for cmd in ["einsum", "explain", "show", "conformance", "ops"] {
        spmd()
            .args([cmd, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Examples:"));
    }
    spmd()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("spmd "));
}

/// Every command, piped (as assert_cmd runs them): no ANSI escapes.
#[test]
fn piped_output_is_plain() {
    let vectors = temp_file("v3.json", VECTORS);
    let all: Vec<Vec<&str>> = vec![
        MATMUL.to_vec(),
        vec![
            "einsum",
            "mk,kn->mn",
            "--mesh",
            "2",
            "--in",
            "4x6:[0,-1]",
            "--in",
            "6x8",
        ],
        vec![
            "explain",
            "matmul",
            "--mesh",
            "2x4",
            "--in",
            "64x32:[1,0]",
            "--in",
            "32x48:[-1,0]",
        ],
        vec!["show", "--mesh", "2x4", "64x48:[-1,1]:partial(0)"],
        vec!["conformance", vectors.to_str().unwrap()],
        vec!["ops"],
        vec!["infer", "matmull"],
        vec!["infer", "--help"],
    ];
    for args in &all {
        let (_, out, err) = run(args);
        assert!(!out.contains('\u{1b}'), "{args:?}: {out:?}");
        assert!(!err.contains('\u{1b}'), "{args:?}: {err:?}");
    }
}

#[test]
fn colors_follow_the_environment_and_the_flag() {
    let out = spmd()
        .args(MATMUL)
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\u{1b}["),
        "forced colors"
    );
    let out = spmd()
        .args(MATMUL)
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains('\u{1b}'),
        "NO_COLOR wins"
    );
    let out = spmd()
        .args(["show", "--mesh", "2", "4:[0]"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\u{1b}'));
    let out = spmd().args(MATMUL).arg("--color=always").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\u{1b}["));
    let out = spmd()
        .args(MATMUL)
        .arg("--color=never")
        .env("CLICOLOR_FORCE", "1")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\u{1b}'));
    // Errors too.
    let out = spmd()
        .args(["infer", "matmull", "--mesh", "2"])
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\u{1b}'));
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    use std::io::Read as _;
    use std::process::Stdio;
    // `spmd conformance ... --json | head -c 10`: megabytes of output, and the
    // reader goes away after a few bytes.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spmd"))
        .args([
            "conformance",
            &repo_vectors("paddle-3.3.1-random.json"),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "{err}");
    assert_ne!(out.status.code(), Some(101), "no panic");
}

/// The sample graph: the GPT layer of `spmd-graph` (dp x tp on a 2x4 mesh).
fn gpt_layer() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../spmd-graph/graphs/gpt_layer.json"
    )
    .to_string()
}

#[test]
fn propagate_reports_the_gpt_layers_megatron_all_reduces() {
    let (code, out, err) = run(&["propagate", &gpt_layer()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("l0.qkv.weight"), "{out}");
    assert!(out.contains("total: 2 all-reduce;"), "{out}");
    assert!(out.contains("all-reduce SUM over mesh dim 1"), "{out}");
    // No backward section unless asked.
    assert!(!out.contains("backward graph"), "{out}");
}

#[test]
fn propagate_json_has_tensors_reshards_and_counts() {
    let v = json(&["propagate", &gpt_layer(), "--json", "--dtype", "f32"]);
    assert_eq!(v["counts"]["all_reduce"], 2);
    assert_eq!(v["dtype"], "f32");
    let tensors = v["tensors"].as_array().unwrap();
    let qkv = tensors
        .iter()
        .find(|t| t["name"] == "l0.qkv.weight")
        .unwrap();
    assert_eq!(qkv["dims_mapping"], serde_json::json!([-1, 1]));
    assert_eq!(qkv["origin"], "annotated");
    // Attrs in the conformance schema's form (they used to be display
    // strings only), with the text beside them.
    let proj = tensors.iter().find(|t| t["name"] == "l0.proj.out").unwrap();
    assert_eq!(proj["dims_mapping"], serde_json::json!([0, -1, -1]));
    assert_eq!(proj["partial_dims"], serde_json::json!([1]));
    assert_eq!(proj["partial_reduce"], serde_json::json!({"1": "SUM"}));
    assert_eq!(proj["text"], "[0, -1, -1] partial{1: SUM}");
    let reshards = v["reshards"].as_array().unwrap();
    assert_eq!(reshards.len(), 2);
    assert_eq!(
        reshards[0]["from"]["partial_reduce"],
        serde_json::json!({"1": "SUM"})
    );
    assert_eq!(reshards[0]["to"]["partial_dims"], serde_json::json!([]));
    // f32 [8, 64, 256] split on batch over 2: 512 KiB local, all-reduced
    // over 4 devices: 2 * 3/4 of it.
    assert_eq!(reshards[0]["steps"][0]["kind"], "all_reduce");
    assert_eq!(reshards[0]["bytes"], 2 * 3 * (4 * 128 * 256 * 4) / 4);
    assert!(v.get("backward").is_none());

    let v = json(&["propagate", &gpt_layer(), "--json", "--backward"]);
    assert_eq!(v["backward"]["counts"]["all_reduce"], 15);
    assert_eq!(v["backward"]["param_grads"].as_object().unwrap().len(), 13);
}

/// The kinds `counts` and `bytes_by_kind` are keyed by are the steps' own
/// `kind`s, and their figures add up to the steps'.
#[test]
fn propagate_json_counts_use_the_steps_kinds() {
    let v = json(&[
        "propagate",
        &hf("llama.json"),
        "--plan",
        &hf("llama_tp_dp.json"),
        "--json",
        "--backward",
    ]);
    for report in [&v, &v["backward"]] {
        let mut counts: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for r in report["reshards"].as_array().unwrap() {
            for step in r["steps"].as_array().unwrap() {
                let kind = step["kind"].as_str().unwrap();
                if kind == "slice" || kind == "make_partial" {
                    continue;
                }
                let e = counts.entry(kind.to_string()).or_default();
                e.0 += 1;
                e.1 += step["bytes"].as_u64().unwrap();
            }
        }
        assert!(!counts.is_empty(), "{report}");
        for (kind, (n, bytes)) in &counts {
            assert_eq!(report["counts"][kind], *n, "{kind}: {}", report["counts"]);
            assert_eq!(report["bytes_by_kind"][kind], *bytes, "{kind}");
        }
        assert_eq!(report["counts"].as_object().unwrap().len(), counts.len());
    }
}

/// Every key `propagate --json` prints is in docs/json.md's tables, and
/// every key the propagate table lists is printed.
#[test]
fn propagate_json_follows_docs_json_md() {
    let doc =
        std::fs::read_to_string(format!("{}/../docs/json.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let section = doc.split("## `spmd propagate --json`").nth(1).unwrap();
    // The first cell of each row of the section's first table.
    let documented: std::collections::BTreeSet<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with("| key"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1))
        .collect();
    let v = json(&["propagate", &gpt_layer(), "--json", "--backward"]);
    let mut printed: std::collections::BTreeSet<&str> =
        v.as_object().unwrap().keys().map(String::as_str).collect();
    printed.extend(
        v["backward"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str),
    );
    assert_eq!(printed, documented);
    // The step kinds table lists each kind the report uses.
    for r in v["reshards"].as_array().unwrap() {
        for step in r["steps"].as_array().unwrap() {
            let kind = step["kind"].as_str().unwrap();
            assert!(section.contains(&format!("| `{kind}` |")), "{kind}");
        }
    }
}

/// Under `--json`, a failure is a JSON object on stdout (with the same one
/// line on stderr and the same exit status), for a file error, a rule
/// error and a command line that does not parse.
#[test]
fn errors_are_json_under_json() {
    for (args, needle) in [
        (
            vec!["propagate", "/nonexistent/g.json", "--json"],
            "cannot read",
        ),
        (
            vec![
                "infer", "matmull", "--mesh", "2", "--in", "4x4", "--in", "4x4", "--json",
            ],
            "did you mean",
        ),
        (
            vec!["propagate", &gpt_layer(), "--bogus", "--json"],
            "--bogus",
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
        let v: Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["error"]["exit_code"], 2);
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
        assert_eq!(format!("error: {message}\n"), err);
    }
    // Without --json, stdout stays empty.
    bad(&["propagate", "/nonexistent/g.json"], "cannot read");
}

/// A graph of more than 100 tensors gets a summary: layouts counted, each
/// collective's count and bytes, the ten largest reshards. `--tensors`
/// lists every tensor; small graphs are always listed.
#[test]
fn large_graphs_are_summarised() {
    let args = [
        "propagate",
        &hf("llama.json"),
        "--plan",
        &hf("llama_tp_dp.json"),
        "--backward",
    ];
    let (code, summary, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(summary.lines().count() < 50, "{summary}");
    assert!(summary.contains("239 tensors: "), "{summary}");
    assert!(summary.contains("every tensor: --tensors"), "{summary}");
    assert!(summary.contains("largest reshards (10 of 31)"), "{summary}");
    // The totals are the full report's.
    let totals = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains("total:"))
            .map(String::from)
            .collect()
    };
    let mut full_args = args.to_vec();
    full_args.push("--tensors");
    let (code, full, err) = run(&full_args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(totals(&summary), totals(&full));
    assert!(
        full.contains("model.layers.1.mlp.down_proj.weight"),
        "{full}"
    );
    assert!(
        !summary.contains("model.layers.1.mlp.down_proj.weight"),
        "{summary}"
    );
    assert!(full.lines().count() > 239, "{}", full.lines().count());
    // A small graph (45 tensors) is listed whole without asking.
    let (_, small, _) = run(&["propagate", &gpt_layer()]);
    assert!(small.contains("\ntensors\n"), "{small}");
}

#[test]
fn propagate_rejects_bad_graphs_with_one_error_line() {
    bad(&["propagate", "/nonexistent/graph.json"], "cannot read");
    let not_json = temp_file("not.json", "{ mesh: ");
    bad(&["propagate", not_json.to_str().unwrap()], "graph JSON");
    let unknown_op = temp_file(
        "unknown_op.json",
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4]}, {"name": "y", "shape": [4]}],
            "ops": [{"name": "f", "op": "matmull", "inputs": ["x"], "outputs": ["y"]}]}"#,
    );
    bad(&["propagate", unknown_op.to_str().unwrap()], "op `f`");
    let bad_mapping = temp_file(
        "bad_mapping.json",
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4, 4], "dims_mapping": [0, 0]}],
            "ops": []}"#,
    );
    bad(&["propagate", bad_mapping.to_str().unwrap()], "tensor `x`");
    bad(
        &["propagate", &gpt_layer(), "--dtype", "f8"],
        "unknown dtype",
    );
}

// Absent optional tensors: `absent` on the command line, `null` in JSON.

const LAYER_NORM: [&str; 8] = [
    "infer",
    "layer_norm",
    "--mesh",
    "2x2",
    "--attr",
    "begin_norm_axis=2",
    "--in",
    "8x16x32:[0,-1,1]",
];

/// `args` followed by `--in SLOT` for each slot.
fn with_ins<'a>(args: &[&'a str], slots: &[&'a str]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    for s in slots {
        v.extend(["--in", s]);
    }
    v
}

/// The report's row of `label` (its first column).
fn row_of<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find(|l| l.split("  ").next() == Some(label))
        .unwrap_or_else(|| panic!("no row {label:?} in\n{out}"))
}

#[test]
fn absent_layer_norm_scale_and_bias_answer_as_replicated_ones() {
    let mut absent = with_ins(&LAYER_NORM, &["absent", "absent"]);
    let (code, out, err) = run(&absent);
    assert_eq!(code, 0, "{err}");
    let x = row_of(&out, "input 0");
    assert!(
        x.contains("[0, -1, -1]") && x.contains("all-gather along dim 2 over mesh dim 1"),
        "{x}"
    );
    // The absent rows say so and show no attr, local block or reshard (the
    // rule's placeholder answer for them is `[-1]`).
    for label in ["input 1", "input 2"] {
        let r = row_of(&out, label);
        let cells: Vec<&str> = r.split_whitespace().skip(2).collect();
        assert_eq!(cells[0], "absent", "{r}");
        assert!(cells[1..].iter().all(|c| *c == "-"), "{r}");
    }

    absent.push("--json");
    let a = json(&absent);
    let mut present = with_ins(&LAYER_NORM, &["32:[-1]", "32:[-1]"]);
    present.push("--json");
    let p = json(&present);
    // The other slots get the answer present, replicated tensors get.
    assert_eq!(a["result"]["inputs"][0], p["result"]["inputs"][0]);
    assert_eq!(a["result"]["outputs"], p["result"]["outputs"]);
    assert_eq!(
        a["result"]["inputs"][0]["dims_mapping"],
        serde_json::json!([0, -1, -1])
    );
    // `null` in the absent slots, as in the conformance schema.
    assert_eq!(a["result"]["inputs"][1], Value::Null);
    assert_eq!(a["result"]["inputs"][2], Value::Null);
    assert_eq!(
        p["result"]["inputs"][1]["dims_mapping"],
        serde_json::json!([-1])
    );
    let row = &a["inputs"][1];
    assert_eq!(row["name"], "input 1");
    assert_eq!(row["absent"], true);
    assert_eq!(row["shape"], Value::Null);
    assert_eq!(row["result"], Value::Null);
    assert_eq!(row["local_shape"], Value::Null);
    assert_eq!(a["inputs"][0]["absent"], false);

    // Only the bias absent: the scale keeps its row.
    let (code, out, err) = run(&with_ins(&LAYER_NORM, &["32", "absent"]));
    assert_eq!(code, 0, "{err}");
    assert!(row_of(&out, "input 1").contains("32  "), "{out}");
    assert!(row_of(&out, "input 2").contains("absent"), "{out}");
}

#[test]
fn backward_with_absent_tensors() {
    let args = |scale: &'static str, bias: &'static str| {
        vec![
            "infer",
            "layer_norm",
            "--mesh",
            "2x2",
            "--backward",
            "--attr",
            "begin_norm_axis=2",
            "--in",
            "8x16x32",
            "--in",
            scale,
            "--in",
            bias,
            "--out",
            "8x16x32:[0,1,-1]",
            "--out",
            "8x16:[0,1]",
            "--out",
            "8x16:[0,1]",
            "--json",
        ]
    };
    let a = json(&args("absent", "absent"));
    let p = json(&args("32", "32"));
    assert_eq!(a["direction"], "backward");
    assert_eq!(a["result"]["inputs"][0], p["result"]["inputs"][0]);
    assert_eq!(
        a["result"]["inputs"][0]["dims_mapping"],
        serde_json::json!([0, 1, -1])
    );
    assert_eq!(a["result"]["outputs"], p["result"]["outputs"]);
    assert_eq!(a["result"]["inputs"][1], Value::Null);
    assert_eq!(a["inputs"][2]["absent"], true);

    // An absent output the rule declares optional (rotary embedding's
    // out_k and out_v exist only with k and v).
    let mut rope = vec![
        "infer",
        "fused_rotary_position_embedding",
        "--mesh",
        "2x2",
        "--backward",
        "--in",
        "4x8x2x16",
    ];
    rope.extend(["--in", "absent"].repeat(5));
    rope.extend([
        "--out",
        "4x8x2x16:[0,1,-1,-1]",
        "--out",
        "absent",
        "--out",
        "absent",
    ]);
    let (code, out, err) = run(&rope);
    assert_eq!(code, 0, "{err}");
    let q = row_of(&out, "output 0");
    assert!(
        q.contains("corrected: all-gather along dim 1 over mesh dim 1"),
        "{q}"
    );
    assert!(row_of(&out, "output 2").contains("absent"), "{out}");
    rope.push("--json");
    let v = json(&rope);
    assert_eq!(v["result"]["outputs"][1], Value::Null);
    assert_eq!(v["outputs"][1]["absent"], true);
    assert_eq!(
        v["result"]["inputs"][0]["dims_mapping"],
        serde_json::json!([0, -1, -1, -1])
    );
}

#[test]
fn grad_with_an_absent_input() {
    // swiglu without y: one grad per input, so the grad of the absent y is
    // known to be absent too.
    // Without y, out has half of x's last dim.
    let grad = |y: &'static str, out_grad: &'static str| {
        vec![
            "infer",
            "swiglu",
            "--mesh",
            "2x2",
            "--grad",
            "--in",
            "8x16:[0,1]",
            "--in",
            y,
            "--out",
            out_grad,
        ]
    };
    let (code, out, err) = run(&grad("absent", "8x8:[0,-1]"));
    assert_eq!(code, 0, "{err}");
    assert!(row_of(&out, "input 1").contains("absent"), "{out}");
    let g = row_of(&out, "input 1 grad");
    assert!(g.contains("absent") && !g.contains('['), "{g}");
    let x = row_of(&out, "input 0 grad");
    assert!(x.contains("8x16") && x.contains("[0, -1]"), "{x}");
    let mut args = grad("absent", "8x8:[0,-1]");
    args.push("--json");
    let v = json(&args);
    assert_eq!(v["direction"], "grad");
    assert_eq!(v["result"]["inputs"][1], Value::Null);
    assert_eq!(v["result"]["outputs"][1], Value::Null);
    assert_eq!(
        v["result"]["outputs"][0]["dims_mapping"],
        serde_json::json!([0, -1])
    );
    assert_eq!(v["outputs"][1]["name"], "input 1 grad");
    assert_eq!(v["outputs"][1]["absent"], true);
    // y present: its grad is a real row.
    let (code, out, err) = run(&grad("8x16", "8x16:[0,-1]"));
    assert_eq!(code, 0, "{err}");
    // With y the op is elementwise: x's last dim stays sharded.
    let y = row_of(&out, "input 1 grad");
    assert!(y.contains("8x16") && y.contains("[0, 1]"), "{y}");

    // layer_norm's grad op takes 5 tensors and returns 3 grads: the report
    // cannot tie them to inputs, and says an absent input's grad is among them.
    let (code, out, err) = run(&[
        "infer",
        "layer_norm",
        "--mesh",
        "2x2",
        "--grad",
        "--attr",
        "begin_norm_axis=2",
        "--in",
        "8x16x32:[0,-1,-1]",
        "--in",
        "absent",
        "--in",
        "32",
        "--in",
        "8x16:[0,-1]",
        "--in",
        "8x16:[0,-1]",
        "--out",
        "8x16x32:[0,1,-1]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(row_of(&out, "input 1").contains("absent"), "{out}");
    assert!(
        out.contains("an absent input has no grad: the rule answers a placeholder"),
        "{out}"
    );
}

#[test]
fn json_input_with_null_tensors() {
    let case = r#"{"id": "ln_no_bias", "op": "layer_norm", "attrs": {"begin_norm_axis": 2},
        "mesh_shape": [2, 2],
        "inputs": [{"shape": [8, 16, 32], "dims_mapping": [0, -1, 1]}, {"shape": [32]}, null],
        "expected": {"inputs": [{"dims_mapping": [0, -1, -1]}, {"dims_mapping": [-1]}, null],
                     "outputs": [{"dims_mapping": [0, -1, -1]}, {"dims_mapping": [0, -1]},
                                 {"dims_mapping": [0, -1]}]}}"#;
    let path = temp_file("null.json", case);
    let (code, out, err) = run(&["infer", "--json-input", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ln_no_bias: layer_norm forward"), "{out}");
    assert!(row_of(&out, "input 2").contains("absent"), "{out}");
    assert!(row_of(&out, "input 1").contains("none"), "{out}");
    assert!(out.contains("expected: matches"), "{out}");
    let v = json(&["infer", "--json-input", path.to_str().unwrap(), "--json"]);
    assert_eq!(v["result"]["inputs"][2], Value::Null);
    assert_eq!(v["check"]["passed"], true);

    // A `null` shape is absent too; a wrong expectation still fails the case.
    let wrong = case
        .replace(
            "{\"shape\": [32]}, null",
            "{\"shape\": [32]}, {\"shape\": null}",
        )
        .replace(
            "[0, -1, -1]}, {\"dims_mapping\": [-1]}",
            "[0, -1, 1]}, {\"dims_mapping\": [-1]}",
        );
    let path = temp_file("null-shape.json", &wrong);
    let (code, out, _) = run(&["infer", "--json-input", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(row_of(&out, "input 2").contains("absent"), "{out}");
    assert!(out.contains("expected: differs: input 0"), "{out}");

    // From stdin, an op that does not declare the tensor optional.
    let out = spmd()
        .args(["infer", "--json-input", "-"])
        .write_stdin(r#"{"op": "matmul", "mesh_shape": [2], "inputs": [{"shape": [4, 6]}, null]}"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err.trim_end(),
        "error: matmul: input 1 is absent, but the rule does not declare it optional"
    );
}

#[test]
fn absent_where_the_rule_takes_no_absent_tensor() {
    bad(
        &with_ins(
            &["infer", "matmul", "--mesh", "2x4"],
            &["64x32:[1,0]", "absent"],
        ),
        "matmul: input 1 is absent, but the rule does not declare it optional",
    );
    // layer_norm's mean is not optional.
    bad(
        &[
            "infer",
            "layer_norm",
            "--mesh",
            "2x2",
            "--backward",
            "--in",
            "8x16x32",
            "--in",
            "32",
            "--in",
            "32",
            "--out",
            "8x16x32:[0,1,-1]",
            "--out",
            "absent",
            "--out",
            "8x16:[0,1]",
            "--attr",
            "begin_norm_axis=2",
        ],
        "layer_norm: output 1 is absent, but the rule does not declare it optional",
    );
    // An einsum declares no optional tensor.
    bad(
        &[
            "einsum",
            "ab,b->ab",
            "--mesh",
            "2",
            "--in",
            "4x8:[0,-1]",
            "--in",
            "absent",
        ],
        "einsum: input 1 is absent",
    );
}

#[test]
fn near_misses_of_absent_are_rejected_with_a_hint() {
    for (slot, flag) in [
        ("Absent", "--in #1"),
        ("ABSENT", "--in #1"),
        ("absnet", "--in #1"),
        ("none", "--in #1"),
        ("null", "--in #1"),
        ("absent:[0]", "--in #1"),
    ] {
        let err = bad(&with_ins(&LAYER_NORM, &[slot, "absent"]), flag);
        assert!(
            err.contains(&format!("`{slot}` is not a tensor"))
                && err.contains("written `absent` exactly"),
            "{slot}: {err}"
        );
    }
    bad(
        &[
            "infer",
            "matmul",
            "--mesh",
            "2x4",
            "--backward",
            "--in",
            "64x32",
            "--in",
            "32x48",
            "--out",
            "Absent",
        ],
        "--out #0 `Absent`: `Absent` is not a tensor",
    );
    // A word far from the keyword gets the shape error.
    bad(
        &with_ins(&LAYER_NORM, &["bias", "absent"]),
        "`bias` in shape `bias` is not an extent",
    );
}

#[test]
fn explain_refuses_absent_tensors() {
    let mut args = with_ins(&LAYER_NORM, &["absent", "absent"]);
    args[0] = "explain";
    bad(
        &args,
        "`spmd explain` does not support absent tensors: the core traces only calls whose tensors are all present",
    );
    let case = r#"{"id": "c1", "op": "layer_norm", "mesh_shape": [2],
        "inputs": [{"shape": [8, 16]}, null, null]}"#;
    let path = temp_file("explain-null.json", case);
    bad(
        &["explain", "--json-input", path.to_str().unwrap()],
        "c1: `spmd explain` does not support absent tensors",
    );
    // The same call with present tensors is explained.
    let mut args = with_ins(&LAYER_NORM, &["32", "32"]);
    args[0] = "explain";
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("projection"), "{out}");
}

#[test]
fn help_documents_absent() {
    spmd()
        .args(["infer", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "spmd infer layer_norm --mesh 2x2 --in '8x16x32:[0,-1,1]' --in absent --in absent",
        ))
        .stdout(predicate::str::contains("`null` does the same"));
    spmd()
        .args(["explain", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "Absent optional tensors (`absent`, or `null` in --json-input) are not supported",
        ));
}

#[test]
fn forward_outputs_that_may_be_placeholders_are_flagged() {
    // Rotary embedding with q alone: out_k and out_v exist only with k and
    // v, and the rule answers `[]` for them.
    let mut args = vec![
        "infer",
        "fused_rotary_position_embedding",
        "--mesh",
        "2x2",
        "--in",
        "4x8x2x16:[0,1,-1,-1]",
    ];
    args.extend(["--in", "absent"].repeat(5));
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("note: output 1, output 2 answered `[]`, which is also what a rule answers for an output that exists only with an absent input"),
        "{out}"
    );
    // No such note when no output is answered `[]`.
    let (code, out, err) = run(&with_ins(&LAYER_NORM, &["absent", "absent"]));
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("note:"), "{out}");
}

/// A misspelled attribute is an error, never "the default" (it used to
/// answer softmax over axis -1): on the command line and in a graph.
#[test]
fn unknown_attributes_are_one_line_errors() {
    let (code, out, err) = run(&[
        "infer",
        "softmax",
        "--mesh",
        "2x4",
        "--in",
        "8x16:[0,1]",
        "--attr",
        "axsi=0",
    ]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        err.trim_end(),
        "error: softmax: unknown attribute `axsi` (did you mean `axis`?); softmax takes: axis"
    );
    let (code, _, err) = run(&[
        "infer",
        "matmul",
        "--mesh",
        "2",
        "--in",
        "4x8",
        "--in",
        "8x6",
        "--attr",
        "transpose_y=true",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("matmul: unknown attribute `transpose_y` (did you mean `trans_y`?); matmul takes: trans_x, trans_y"),
        "{err}"
    );
    // An attribute the op takes but its sharding ignores is accepted.
    let (code, _, err) = run(&[
        "infer",
        "layer_norm",
        "--mesh",
        "2",
        "--in",
        "4x8:[0,-1]",
        "--in",
        "8",
        "--in",
        "8",
        "--attr",
        "begin_norm_axis=1",
        "--attr",
        "epsilon=0.00001",
    ]);
    assert_eq!(code, 0, "{err}");
    let dir = std::env::temp_dir().join(format!("spmd-cli-attrs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("g.json");
    std::fs::write(
        &graph,
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4, 8], "dims_mapping": [0, -1]},
            {"name": "w", "shape": [8, 6]}, {"name": "y", "shape": [4, 6]}],
            "ops": [{"name": "fc", "op": "matmul", "attrs": {"transpose_y": true},
                     "inputs": ["x", "w"], "outputs": ["y"]}]}"#,
    )
    .unwrap();
    let (code, _, err) = run(&["propagate", graph.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("op `fc`: matmul: unknown attribute `transpose_y`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An arity error names the tensors the rule takes (it used to give only
/// their number).
#[test]
fn arity_errors_name_the_tensors() {
    let (code, _, err) = run(&[
        "infer",
        "flash_attention",
        "--mesh",
        "2x4",
        "--in",
        "8x16x4x8:[0,-1,1,-1]",
    ]);
    assert_eq!(code, 2);
    assert_eq!(
        err.trim_end(),
        "error: flash_attention: 1 input(s) given, the rule takes 5 (q, k, v, fixed_seed_offset, attn_mask)"
    );
}

/// An op registered with a shared rule is named as it was called, in
/// attribute and inference errors alike (it used to say
/// `elementwise_unary: 2 input(s) given`).
#[test]
fn shared_rules_err_under_the_called_name() {
    let (code, _, err) = run(&["infer", "relu", "--mesh", "2", "--in", "8x8", "--in", "8x8"]);
    assert_eq!(code, 2);
    assert!(err.starts_with("error: relu: 2 input(s) given"), "{err}");
    let (code, _, err) = run(&[
        "infer",
        "gelu",
        "--mesh",
        "2",
        "--in",
        "8x8",
        "--attr",
        "aproximate=true",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("gelu: unknown attribute `aproximate` (did you mean `approximate`?)"),
        "{err}"
    );
}

/// A tensor too large for its bytes to be counted is a typed error, not a
/// volume of 0 bytes (release) or an overflow panic (debug).
#[test]
fn impossible_tensor_sizes_are_errors() {
    let dir = std::env::temp_dir().join(format!("spmd-cli-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = dir.join("g.json");
    let huge = 1u64 << 62;
    std::fs::write(
        &graph,
        format!(
            r#"{{"mesh": [2], "tensors": [{{"name": "x", "shape": [{huge}, {huge}], "dims_mapping": [0, -1]}},
                {{"name": "y", "shape": [{huge}, {huge}]}}],
                "ops": [{{"name": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]}}]}}"#
        ),
    )
    .unwrap();
    let (code, _, err) = run(&["propagate", graph.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("tensor `x` of shape [4611686018427387904, 4611686018427387904] holds more bytes than 64 bits count"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One device is "1 device".
#[test]
fn one_device_is_singular() {
    let (_, out, _) = run(&["infer", "relu", "--mesh", "1", "--in", "8x8"]);
    assert!(
        out.starts_with("relu forward on mesh 1 (1 device)\n"),
        "{out}"
    );
    let (_, out, _) = run(&["show", "--mesh", "1", "8x8:[0,-1]"]);
    assert!(out.contains("(1 device)"), "{out}");
}

/// A rank the notation cannot name is reported as the input's rank (it
/// used to say "rank 301" for a rank-300 softmax).
#[test]
fn ranks_past_the_labels_name_the_input_rank() {
    let shape = vec!["1"; 300].join("x");
    let (code, _, err) = run(&["infer", "softmax", "--mesh", "2", "--in", &shape]);
    assert_eq!(code, 2);
    assert_eq!(
        err.trim_end(),
        "error: softmax: input 0 has rank 300, above the 52 axes a notation can name"
    );
}

/// Every registered op shows its whole signature: tensors by name (which
/// may be absent), attributes with what they take and their defaults, and
/// the grad op's tensors.
#[test]
fn every_op_shows_its_signature() {
    let names: Vec<String> = spmd_ops::builtins()
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert!(names.len() > 190, "{}", names.len());
    for name in &names {
        let (code, out, err) = run(&["ops", name]);
        assert_eq!(code, 0, "{name}: {err}");
        for part in [
            "\ninputs: ",
            "\noutputs: ",
            "\nattributes",
            "\ngrad op takes: ",
        ] {
            assert!(out.contains(part), "{name} lacks {part:?}:\n{out}");
        }
    }
    let (_, out, _) = run(&["ops", "layer_norm"]);
    assert!(
        out.contains("inputs: x, scale (optional), bias (optional)"),
        "{out}"
    );
    assert!(
        out.contains("begin_norm_axis: an integer (default: 1)"),
        "{out}"
    );
    assert!(
        out.contains("epsilon: accepted, and no layout depends on it"),
        "{out}"
    );
    assert!(
        out.contains("grad op takes: x, scale, bias, mean, variance; out's grad"),
        "{out}"
    );
    let (_, out, _) = run(&["ops", "reshape"]);
    // Required in forward only (Paddle's reshape grad takes none).
    assert!(
        out.contains("shape: a list of integers (default: none)"),
        "{out}"
    );
    let (code, _, err) = run(&["infer", "reshape", "--mesh", "2", "--in", "8x16"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "reshape: attribute `shape`: missing (a forward reshape needs its target shape)"
        ),
        "{err}"
    );
    let v = json(&["ops", "embedding", "--json"]);
    assert_eq!(v["inputs"], serde_json::json!(["x", "weight"]));
}

fn hf(file: &str) -> String {
    format!(
        "{}/../spmd-graph/graphs/hf/{file}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// An exported Llama with a plan file of name patterns: Megatron's tensor
/// parallelism on mesh dim 1 (DTensor's 4 forward and 10 backward
/// all-reduces, `graphs/hf/dtensor_counts.json`) and data parallelism on
/// mesh dim 0 (one gradient all-reduce per parameter: 21).
#[test]
fn propagate_takes_a_plan_of_name_patterns() {
    let (code, out, err) = run(&[
        "propagate",
        &hf("llama.json"),
        "--plan",
        &hf("llama_tp_dp.json"),
        "--backward",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("on mesh 2x4"), "{out}");
    let totals: Vec<&str> = out.lines().filter(|l| l.contains("total:")).collect();
    assert_eq!(totals.len(), 2, "{out}");
    assert!(totals[0].contains("4 all-reduce;"), "{}", totals[0]);
    assert!(totals[1].contains("31 all-reduce;"), "{}", totals[1]);
    // A pattern that annotates nothing is an error naming it.
    let plan = temp_file(
        "typo_plan.json",
        r#"{"annotations": [{"tensors": "model.layers.*.q_prj.weight", "dims_mapping": [0, -1]}]}"#,
    );
    bad(
        &[
            "propagate",
            &hf("llama.json"),
            "--plan",
            plan.to_str().unwrap(),
        ],
        "plan pattern `model.layers.*.q_prj.weight`: matches no tensor",
    );
}

/// An attribute spelled out in full gets its short name suggested, and an
/// attribute given twice is an error rather than the last one winning.
#[test]
fn attribute_mistakes_are_named() {
    let call = |attrs: &[&str]| {
        let mut args = vec![
            "infer", "matmul", "--mesh", "2", "--in", "4x4", "--in", "4x4",
        ];
        for a in attrs {
            args.extend(["--attr", a]);
        }
        args.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };
    let args = call(&["transpose_y=true"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    bad(&args, "did you mean `trans_y`");
    let args = call(&["trans_y=true", "trans_y=false"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    bad(&args, "`trans_y` is given twice (first as true)");
}

/// A dim split unevenly is listed with its padding, in text and JSON.
#[test]
fn uneven_shards_are_reported() {
    let graph = temp_file(
        "uneven_graph.json",
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [7, 4], "dims_mapping": [0, -1]}, {"name": "y", "shape": [7, 4]}],
            "ops": [{"name": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#,
    );
    let (code, out, err) = run(&["propagate", graph.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("uneven shards"), "{out}");
    assert!(
        out.contains("x dim 0: 7 over 2 devices, blocks of 4 (1 of padding)"),
        "{out}"
    );
    // (relu's output is not split unevenly: its rule drops what does not divide.)
    assert!(!out.contains("y dim 0"), "{out}");
    let v = json(&["propagate", graph.to_str().unwrap(), "--json"]);
    assert_eq!(v["uneven_shards"].as_array().map(Vec::len), Some(1), "{v}");
}

/// `explain` shows a template op's output shapes where its bound notation
/// says them (softmax, mean_all), and `?` only where it does not.
#[test]
fn explain_shows_known_output_shapes() {
    let (code, out, err) = run(&[
        "explain",
        "softmax",
        "--mesh",
        "2",
        "--in",
        "8x16:[0,-1]",
        "--attr",
        "axis=-1",
    ]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.contains("output 0 (out)"))
        .unwrap_or_default();
    assert!(row.contains("8x16") && !row.contains('?'), "{out}");
    let (code, out, err) = run(&["explain", "mean_all", "--mesh", "2", "--in", "8x16:[0,-1]"]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.contains("output 0 (out)"))
        .unwrap_or_default();
    assert!(row.contains("scalar"), "{out}");
}

/// A graph file that starts with a UTF-8 byte-order mark reads as the
/// same file without it.
#[test]
fn a_byte_order_mark_is_not_json() {
    let path = std::env::temp_dir().join(format!("spmd-bom-{}.json", std::process::id()));
    let mut bytes = b"\xef\xbb\xbf".to_vec();
    bytes.extend_from_slice(
        br#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4, 4], "dims_mapping": [0, -1]}, {"name": "y", "shape": [4, 4]}],
            "ops": [{"name": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#,
    );
    std::fs::write(&path, bytes).unwrap();
    let (code, out, err) = run(&["propagate", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("on mesh 2"), "{out}");
    std::fs::remove_file(path).ok();
}

/// A plan file's bad layouts are the plan file's errors: each names the
/// plan file, the pattern and the tensor, never the graph file (a mesh dim
/// off the mesh, a wrong rank, a `*` pattern reaching a tensor it does not
/// fit, partial and shard on one mesh dim).
#[test]
fn plan_errors_name_the_plan_file() {
    let graph = temp_file(
        "planned_graph.json",
        r#"{"mesh": [2, 2], "tensors": [
            {"name": "x", "shape": [8, 16]},
            {"name": "w.a", "shape": [16, 4]},
            {"name": "w.b", "shape": [16]},
            {"name": "y", "shape": [8, 4]}],
          "ops": [{"name": "fc", "op": "matmul", "inputs": ["x", "w.a"], "outputs": ["y"]}]}"#,
    );
    let cases = [
        (
            r#"[{"tensors": "w.a", "dims_mapping": [3, -1]}]"#,
            "tensor `w.a`: dim 0 uses mesh dim 3",
        ),
        (
            r#"[{"tensors": "w.a", "dims_mapping": [0]}]"#,
            "tensor `w.a`: a mapping of 1 entries for a tensor of rank 2",
        ),
        (
            r#"[{"tensors": "w.*", "dims_mapping": [0, -1]}]"#,
            "tensor `w.b`: a mapping of 2 entries",
        ),
        (
            r#"[{"tensors": "x", "dims_mapping": [0, -1], "partial_dims": [0]}]"#,
            "tensor `x`: mesh dim 0 is used twice",
        ),
    ];
    for (k, (annotations, needle)) in cases.iter().enumerate() {
        let plan = temp_file(
            &format!("bad_plan_{k}.json"),
            &format!(r#"{{"annotations": {annotations}}}"#),
        );
        let plan = plan.to_str().unwrap();
        let err = bad(
            &["propagate", graph.to_str().unwrap(), "--plan", plan],
            needle,
        );
        assert!(
            err.contains(&format!("error: {plan}: plan pattern")),
            "{err}"
        );
        assert!(!err.contains("planned_graph.json"), "{err}");
    }
}

/// A plan may add annotations but not change one the graph file has: the
/// same layout again is fine, another is an error naming both.
#[test]
fn a_plan_does_not_silently_override_the_graph() {
    let graph = temp_file(
        "annotated_graph.json",
        r#"{"mesh": [2], "tensors": [
            {"name": "x", "shape": [8, 16], "dims_mapping": [0, -1]},
            {"name": "w", "shape": [16, 4]},
            {"name": "y", "shape": [8, 4]}],
          "ops": [{"name": "fc", "op": "matmul", "inputs": ["x", "w"], "outputs": ["y"]}]}"#,
    );
    let same = temp_file(
        "same_plan.json",
        r#"{"annotations": [{"tensors": "x", "dims_mapping": [0, -1]}, {"tensors": "w", "dims_mapping": [-1, 0]}]}"#,
    );
    let (code, _, err) = run(&[
        "propagate",
        graph.to_str().unwrap(),
        "--plan",
        same.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let other = temp_file(
        "other_plan.json",
        r#"{"annotations": [{"tensors": "x", "dims_mapping": [-1, 0]}]}"#,
    );
    bad(
        &[
            "propagate",
            graph.to_str().unwrap(),
            "--plan",
            other.to_str().unwrap(),
        ],
        "plan pattern `x`: tensor `x` is annotated [0, -1] in the graph file",
    );
}

/// `autoshard` writes a plan file that `propagate --plan` reads, and its
/// report names the memory, the collectives and the baselines.
#[test]
fn autoshard_writes_a_plan_propagate_reads() {
    let plan = std::env::temp_dir().join(format!("spmd-autoshard-{}.json", std::process::id()));
    let plan = plan.to_str().unwrap();
    let (code, out, err) = run(&[
        "autoshard",
        &hf("llama.json"),
        "--mesh",
        "2x2",
        "--memory",
        "700KiB",
        "-o",
        plan,
    ]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        "memory per device:",
        "communication per step:",
        "step time:",
        "lower bound:",
        "Megatron TP",
        "fully sharded (FSDP)",
        "plan written to",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    let (code, out, err) = run(&["propagate", &hf("llama.json"), "--plan", plan, "--backward"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("on mesh 2x2"), "{out}");
    let v = json(&[
        "autoshard",
        &hf("llama.json"),
        "--mesh",
        "2x2",
        "--memory",
        "700KiB",
        "--json",
    ]);
    assert_eq!(v["schema_version"], 1);
    assert!(v["figures"]["memory"]["total"].as_u64().unwrap() <= 700 * 1024);
    assert_eq!(v["baselines"].as_array().unwrap().len(), 4);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(plan).unwrap()).unwrap();
    assert_eq!(written, v["plan"]);
    std::fs::remove_file(plan).ok();
}

/// The compressed 7B graph reads directly (gzip is recognised by its
/// magic bytes), and an impossible budget is one error line naming the
/// least memory found.
#[test]
fn autoshard_reads_gzip_and_refuses_impossible_budgets() {
    let (code, _, err) = run(&[
        "propagate",
        &hf("llama-2-7b.json.gz"),
        "--plan",
        &hf("llama_tp.json"),
    ]);
    assert_eq!(code, 0, "{err}");
    let e = bad(
        &[
            "autoshard",
            &hf("llama.json"),
            "--mesh",
            "4",
            "--memory",
            "1KiB",
        ],
        "no plan fits 1.00 KiB per device: the smallest plan found needs",
    );
    assert!(!e.contains("panicked"));
    bad(
        &[
            "autoshard",
            &hf("llama.json"),
            "--mesh",
            "4",
            "--memory",
            "24 gigs",
        ],
        "unknown unit",
    );
    bad(
        &[
            "autoshard",
            &hf("llama.json"),
            "--mesh",
            "4",
            "--device",
            "v100",
        ],
        "unknown device `v100`",
    );
    bad(
        &[
            "autoshard",
            &hf("llama.json"),
            "--mesh",
            "4",
            "--starts",
            "0",
        ],
        "--starts 0",
    );
    bad(
        &["autoshard", &hf("llama.json"), "--mesh", "0x4"],
        "mesh extent 0",
    );
}

#[test]
fn check_holds_on_committed_plans_and_on_autoshards() {
    let (code, out, err) = run(&[
        "check",
        &hf("llama.json"),
        "--plan",
        &hf("llama_tp_dp.json"),
        "--backward",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("the plan holds, forward and backward"),
        "{out}"
    );
    assert!(out.contains("on 8 devices"), "{out}");
    assert!(out.contains("21 parameter gradients"), "{out}");
    // A plan the search invents is judged the same way.
    let plan = std::env::temp_dir().join(format!("spmd-cli-check-{}.json", std::process::id()));
    let plan = plan.to_string_lossy().into_owned();
    let (code, _, err) = run(&["autoshard", &hf("llama.json"), "--mesh", "2x2", "-o", &plan]);
    assert_eq!(code, 0, "{err}");
    let v = json(&[
        "check",
        &hf("llama.json"),
        "--plan",
        &plan,
        "--backward",
        "--json",
    ]);
    assert_eq!(v["holds"], true, "{v}");
    assert_eq!(v["summary"]["devices"], 4, "{v}");
    let _ = std::fs::remove_file(&plan);
}

#[test]
fn check_names_the_first_divergence_of_a_broken_plan() {
    // The plan's first reshard, taken away: the op that reads the tensor
    // gets a partial sum where it needs the whole.
    let (llama, tp) = (hf("llama.json"), hf("llama_tp.json"));
    let annotated = ["--plan", tp.as_str()];
    let mut args = vec!["propagate", llama.as_str(), "--json"];
    args.extend(annotated);
    let p = json(&args);
    let first = &p["reshards"][0];
    let (op, tensor) = (
        first["op"].as_str().unwrap(),
        first["tensor"].as_str().unwrap(),
    );
    let mut args = vec!["check", llama.as_str()];
    args.extend(annotated);
    args.extend(["--skip-reshard", tensor]);
    let (code, out, err) = run(&args);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.is_empty(), "{err}");
    assert!(out.contains("diverges"), "{out}");
    assert!(out.contains(&format!("op `{op}`")), "{out}");
    assert!(out.contains(&format!("`{tensor}`")), "{out}");
    assert!(out.contains("device 0") && out.contains("block ["), "{out}");
    args.push("--json");
    let (code, out, _) = run(&args);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["holds"], false);
    let d = &v["divergence"];
    assert_eq!(
        (d["op"].as_str(), d["tensor"].as_str()),
        (Some(op), Some(tensor)),
        "{d}"
    );
    assert_eq!(d["finding"], "unplanned", "{d}");
    assert_eq!(d["phase"], "forward", "{d}");
    assert_eq!(d["detail"]["held"], first["from"]["text"], "{d}");
}

#[test]
fn check_refuses_what_it_cannot_run() {
    bad(
        &["check", &hf("llama.json"), "--skip-reshard", "nothing"],
        "--skip-reshard nothing: the plan has no reshard",
    );
    bad(&["check", &hf("llama-2-7b.json.gz")], "over its limit");
    bad(
        &["check", "no-such-graph.json"],
        "cannot read no-such-graph.json",
    );
}

/// The keys of the first table after `heading` in docs/json.md.
fn documented_keys(heading: &str, table: usize) -> std::collections::BTreeSet<String> {
    let doc =
        std::fs::read_to_string(format!("{}/../docs/json.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let section = doc.split(heading).nth(1).unwrap();
    let lines: Vec<&str> = section.lines().collect();
    let starts: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("| ") && (i == 0 || !lines[i - 1].starts_with('|')))
        .collect();
    lines[starts[table] + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1))
        .map(str::to_string)
        .collect()
}

/// `check --json` prints the keys docs/json.md lists, for a plan that
/// holds and one that diverges; every finding kind it names is documented.
#[test]
fn check_json_follows_docs_json_md() {
    let heading = "## `spmd check --json`";
    let (llama, tp) = (hf("llama.json"), hf("llama_tp_dp.json"));
    let base = ["check", llama.as_str(), "--plan", tp.as_str(), "--json"];
    let holds = json(&base);
    let mut args = base.to_vec();
    args.extend(["--skip-reshard", "view_14"]);
    let (code, out, _) = run(&args);
    assert_eq!(code, 1, "{out}");
    let diverges: Value = serde_json::from_str(&out).unwrap();
    let keys = |v: &Value| -> std::collections::BTreeSet<String> {
        v.as_object().unwrap().keys().cloned().collect()
    };
    let mut top = keys(&holds);
    top.extend(keys(&diverges));
    assert_eq!(top, documented_keys(heading, 0));
    assert_eq!(keys(&diverges["divergence"]), documented_keys(heading, 1));
    let findings = documented_keys(heading, 2);
    assert!(
        findings.contains(diverges["divergence"]["finding"].as_str().unwrap()),
        "{findings:?}"
    );
    let doc =
        std::fs::read_to_string(format!("{}/../docs/json.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    for key in keys(&holds["summary"]) {
        assert!(
            doc.contains(&format!("`{key}`")),
            "summary key {key} is not documented"
        );
    }
}

/// A JSON error names where in the document it is (`annotations[1].dims_mapping`),
/// for a plan file, a graph file and a vector file.
#[test]
fn json_errors_name_the_place_in_the_document() {
    let graph = temp_file(
        "path-graph.json",
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [8, 4], "dims_mapping": [0, "q"]}], "ops": []}"#,
    );
    bad(
        &["propagate", &graph.to_string_lossy()],
        "graph JSON: tensors[0].dims_mapping[1]: invalid type",
    );
    let plan = temp_file(
        "path-plan.json",
        r#"{"annotations": [{"tensors": "x", "dims_mapping": [0, -1]}, {"tensors": "w", "dims_mapping": "bad"}]}"#,
    );
    bad(
        &["propagate", &gpt_layer(), "--plan", &plan.to_string_lossy()],
        "plan JSON: annotations[1].dims_mapping: invalid type",
    );
    let mut cases: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_vectors("paddle-suite.json")).unwrap())
            .unwrap();
    cases[3]["inputs"][0]["shape"] = Value::from("x");
    let vectors = temp_file("path-vectors.json", &cases.to_string());
    let (code, _, err) = run(&["conformance", &vectors.to_string_lossy()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[3].inputs[0].shape: invalid type"), "{err}");
}

/// A plan entry that changes an annotation the graph file has is an error
/// naming the tensor, unless `--override` lets the plan win.
#[test]
fn a_plan_overrides_the_graphs_annotations_only_when_told() {
    let graph = temp_file(
        "override-graph.json",
        r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [8, 4], "dims_mapping": [0, -1]},
            {"name": "y", "shape": [8, 4]}],
          "ops": [{"name": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#,
    );
    let plan = temp_file(
        "override-plan.json",
        r#"{"annotations": [{"tensors": "x", "dims_mapping": [-1, 0]}]}"#,
    );
    let (graph, plan) = (graph.to_string_lossy(), plan.to_string_lossy());
    let err = bad(
        &["propagate", &graph, "--plan", &plan],
        "tensor `x` is annotated [0, -1]",
    );
    assert!(err.contains("--override"), "{err}");
    let v = json(&["propagate", &graph, "--plan", &plan, "--override", "--json"]);
    let x = &v["tensors"][0];
    assert_eq!(
        (x["name"].as_str(), x["text"].as_str()),
        (Some("x"), Some("[-1, 0]")),
        "{v}"
    );
    assert_eq!(v["tensors"][1]["text"], "[-1, 0]", "{v}");
    // Without a plan there is nothing to override with.
    let (code, _, err) = run(&["propagate", &graph, "--override"]);
    assert_eq!(code, 2, "{err}");
}
