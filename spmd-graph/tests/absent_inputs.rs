//! Absent optional inputs in graph files (`null` in an op's `inputs`), as
//! ATen passes them: Olmo's layer norm has no affine parameters, and its
//! exported `aten.native_layer_norm` reads `(input, None, None)`.

use spmd_core::DistAttr;
use spmd_graph::json::{self, GraphFile};
use spmd_graph::{DType, GraphError, backward_graph, plan, propagate};

/// `out = layer_norm(x) @ w` on a 2×2 mesh: the batch over mesh dim 0,
/// `w`'s columns over mesh dim 1; the norm has neither weight nor bias.
fn graph(norm_inputs: &str) -> String {
    format!(
        r#"{{
  "mesh": [2, 2],
  "tensors": [
    {{"name": "x", "shape": [8, 16], "dims_mapping": [0, -1]}},
    {{"name": "w", "shape": [16, 32], "dims_mapping": [-1, 1], "param": true}},
    {{"name": "b", "shape": [16]}},
    {{"name": "y", "shape": [8, 16]}},
    {{"name": "mean", "shape": [8, 1]}},
    {{"name": "rstd", "shape": [8, 1]}},
    {{"name": "out", "shape": [8, 32]}}
  ],
  "ops": [
    {{"name": "norm", "op": "aten.native_layer_norm", "attrs": {{"normalized_shape": [16]}},
      "inputs": {norm_inputs}, "outputs": ["y", "mean", "rstd"]}},
    {{"name": "proj", "op": "aten.mm", "inputs": ["y", "w"], "outputs": ["out"]}}
  ],
  "outputs": ["out"]
}}"#
    )
}

fn attr(paddle: &[i64]) -> DistAttr {
    DistAttr::from_paddle(paddle).unwrap()
}

#[test]
fn a_layer_norm_without_weight_and_bias_propagates() {
    let registry = spmd_ops::builtins();
    let loaded = json::from_str(&graph(r#"["x", null, null]"#), &registry).unwrap();
    let g = &loaded.graph;
    let norm = g.op_ids().next().unwrap();
    assert_eq!(g.inputs(norm).len(), 1, "only x is a tensor of the op");
    assert!(g.op(norm).absent.contains(1) && g.op(norm).absent.contains(2));
    let prop = propagate(g).unwrap();
    let t = |name: &str| g.find(name).unwrap();
    // The norm keeps the batch split and replicates its normalized dim.
    assert_eq!(prop.attr(t("y")), &attr(&[0, -1]));
    assert_eq!(prop.attr(t("mean")), &attr(&[0, -1]));
    assert_eq!(prop.attr(t("out")), &attr(&[0, 1]));
    // Nothing to reshard: x already has what the norm needs.
    let forward = plan(g, &prop, DType::F32).unwrap();
    assert_eq!(forward.reshards.len(), 0, "{forward:?}");
}

#[test]
fn the_backward_graph_has_no_grads_for_absent_inputs() {
    let registry = spmd_ops::builtins();
    let loaded = json::from_str(&graph(r#"["x", null, null]"#), &registry).unwrap();
    let g = &loaded.graph;
    let prop = propagate(g).unwrap();
    let bw = backward_graph(g, &prop, &registry, &loaded.outputs).unwrap();
    // x takes no gradient (no parameter precedes it), so the norm has no
    // grad op; with x a parameter it has one, with dx its only output.
    assert!(bw.graph.ops().iter().all(|op| op.name != "norm_grad"));

    let as_param = graph(r#"["x", null, null]"#).replace(
        r#""dims_mapping": [0, -1]}"#,
        r#""dims_mapping": [0, -1], "param": true}"#,
    );
    let loaded = json::from_str(&as_param, &registry).unwrap();
    let g = &loaded.graph;
    let prop = propagate(g).unwrap();
    let bw = backward_graph(g, &prop, &registry, &loaded.outputs).unwrap();
    let norm_grad = bw
        .graph
        .find_op("norm_grad")
        .expect("x is a parameter: the norm has a grad op");
    // It reads x (saved) and the grads of y, mean and rstd.
    assert_eq!(bw.graph.inputs(norm_grad).len(), 4);
    assert_eq!(
        bw.graph.op(norm_grad).absent,
        g.op(g.op_ids().next().unwrap()).absent
    );
    assert_eq!(
        bw.graph.outputs(norm_grad).len(),
        1,
        "only x has a gradient"
    );
    let bp = propagate(&bw.graph).unwrap();
    let dx = bw.graph.outputs(norm_grad)[0];
    assert_eq!(bp.attr(dx).dims_mapping, attr(&[0, -1]).dims_mapping);
    assert_eq!(bw.param_grads.len(), 2, "x and w");
    plan(&bw.graph, &bp, DType::F32).unwrap();

    // The backward graph's file keeps the absent slots, and reads back.
    let file = json::to_file(&bw.graph, &[], None);
    let entry = file.ops.iter().find(|op| op.name == "norm_grad").unwrap();
    assert_eq!(entry.inputs[1], None);
    assert_eq!(entry.inputs[2], None);
    assert_eq!(entry.forward_inputs, Some(3), "x and the two absent slots");
    let text = serde_json::to_string(&file).unwrap();
    let again = json::from_str(&text, &registry).unwrap();
    assert_eq!(json::to_file(&again.graph, &[], None), file);
}

#[test]
fn absent_slots_are_written_as_null_and_read_back() {
    let registry = spmd_ops::builtins();
    // Only the bias absent: the weight keeps its slot.
    let loaded = json::from_str(&graph(r#"["x", "b", null]"#), &registry).unwrap();
    let file = json::to_file(&loaded.graph, &loaded.outputs, None);
    assert_eq!(
        file.ops[0].inputs,
        [Some("x".to_string()), Some("b".to_string()), None]
    );
    let text = serde_json::to_string(&file).unwrap();
    assert!(text.contains(r#""inputs":["x","b",null]"#), "{text}");
    let again: GraphFile = serde_json::from_str(&text).unwrap();
    assert_eq!(again, file);
}

#[test]
fn a_required_input_cannot_be_absent() {
    let registry = spmd_ops::builtins();
    let err = json::from_str(&graph(r#"[null, "b", "b"]"#), &registry).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, GraphError::Rule { .. }), "{err:?}");
    assert!(message.contains("`norm`"), "{message}");
    assert!(message.contains("not declare it optional"), "{message}");
    // Leaving the slots out, rather than writing `null`, is an arity error.
    let err = json::from_str(&graph(r#"["x"]"#), &registry).unwrap_err();
    assert!(err.to_string().contains("1 input(s) given"), "{err}");
}
