//! Readable and JSON reports of a propagation and its reshard plan (what
//! `spmd propagate` prints).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::graph::Graph;
use crate::propagate::{Origin, Propagation};
use crate::reshard::{Edge, ReshardPlan};

/// Step counts by kind (`all-reduce`, ...), communicating kinds only.
pub fn counts(plan: &ReshardPlan) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for s in plan.steps().filter(|s| s.communicates()) {
        *m.entry(s.kind()).or_insert(0) += 1;
    }
    m
}

/// `2 all-reduce, 1 all-gather` (or `no communication`).
pub fn counts_text(plan: &ReshardPlan) -> String {
    let c = counts(plan);
    if c.is_empty() {
        return "no communication".into();
    }
    c.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn origin_text(graph: &Graph, o: Origin) -> String {
    match o {
        Origin::Annotated => "annotated".into(),
        Origin::Unreached => "unreached (replicated)".into(),
        Origin::Op { op, forward } => format!(
            "{} ({})",
            graph.op(op).name,
            if forward {
                "from inputs"
            } else {
                "from outputs"
            }
        ),
    }
}

fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// Thousands separated with `,`.
pub fn bytes_text(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The plan alone: one line per reshard, then the totals.
pub fn plan_text(graph: &Graph, plan: &ReshardPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "reshard plan ({}, bytes sent per device, ring algorithms)",
        plan.dtype
    );
    if plan.reshards.is_empty() {
        let _ = writeln!(s, "  none: every op reads its inputs as they are");
    }
    for r in &plan.reshards {
        let op = &graph.op(r.op).name;
        let t = &graph.tensor(r.tensor).name;
        let edge = match r.edge {
            Edge::Input(i) => format!("before {op} reads input {i}"),
            Edge::Output(i) => format!("after {op} writes output {i}"),
            Edge::Result(i) => format!("{op}'s output {i} is a result of the graph"),
        };
        let _ = writeln!(s, "  {t}: {} -> {} ({edge})", r.from, r.to);
        for (step, bytes) in &r.steps {
            let _ = writeln!(s, "      {step}: {} bytes", bytes_text(*bytes));
        }
    }
    let _ = writeln!(
        s,
        "  total: {}; {} bytes per device",
        counts_text(plan),
        bytes_text(plan.bytes())
    );
    s
}

/// The full report: every tensor's attr and origin, then the plan.
pub fn text(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ops, {} tensors on mesh {}; propagation: {} sweeps, {} rule calls",
        graph.ops().len(),
        graph.tensors().len(),
        graph.mesh(),
        prop.stats.sweeps,
        prop.stats.rule_calls
    );
    let _ = writeln!(s, "\ntensors");
    let rows: Vec<[String; 4]> = graph
        .tensor_ids()
        .map(|t| {
            let info = graph.tensor(t);
            [
                info.name.clone(),
                shape_text(&info.shape),
                prop.attr(t).to_string(),
                origin_text(graph, prop.origin(t)),
            ]
        })
        .collect();
    let width = |k: usize| rows.iter().map(|r| r[k].len()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for [name, shape, attr, origin] in &rows {
        let _ = writeln!(s, "  {name:<w0$}  {shape:<w1$}  {attr:<w2$}  {origin}");
    }
    let uneven = uneven_shards(graph, prop);
    if !uneven.is_empty() {
        let _ = writeln!(s, "\nuneven shards (the last blocks are padded)");
        for u in &uneven {
            let _ = writeln!(s, "  {u}");
        }
    }
    s.push('\n');
    s.push_str(&plan_text(graph, plan));
    s
}

/// Every dim a final layout splits unevenly: `name dim d: 7 over 2
/// devices, blocks of 4 (1 of padding)`. A framework pads the last blocks
/// (or gives them fewer rows); volumes count the largest block.
pub fn uneven_shards(graph: &Graph, prop: &Propagation) -> Vec<String> {
    let mesh = graph.mesh();
    let mut out = Vec::new();
    for t in graph.tensor_ids() {
        let info = graph.tensor(t);
        for (d, (&extent, sharding)) in info
            .shape
            .iter()
            .zip(prop.attr(t).dims_mapping.as_slice())
            .enumerate()
        {
            let parts: usize = sharding.iter().map(|m| mesh.dim(m)).product();
            if parts <= 1 || extent.is_multiple_of(parts) {
                continue;
            }
            let block = extent.div_ceil(parts);
            out.push(format!(
                "{} dim {d}: {extent} over {parts} devices, blocks of {block} ({} of padding)",
                info.name,
                block * parts - extent
            ));
        }
    }
    out
}

/// A dist attr in the conformance schema's form (`dims_mapping`,
/// `partial_dims`, `partial_reduce` when partial), with its text as `text`.
fn attr_json(a: &spmd_core::DistAttr) -> Value {
    let mut v = serde_json::to_value(spmd_core::json::Expect::from_attr(a)).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("text".into(), json!(a.to_string()));
    }
    v
}

/// The report as JSON: `mesh`, `stats`, `tensors` (name, shape, the attr in
/// the conformance schema's form, origin), `reshards` (op, edge, tensor,
/// from and to in that form, steps with their bytes), `counts`,
/// `total_bytes` and `uneven_shards` (see [`uneven_shards`]).
pub fn json(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> Value {
    let tensors: Vec<Value> = graph
        .tensor_ids()
        .map(|t| {
            let info = graph.tensor(t);
            let a = prop.attr(t);
            let mut v = attr_json(a);
            if let Value::Object(m) = &mut v {
                m.insert("name".into(), json!(info.name));
                m.insert("shape".into(), json!(info.shape));
                m.insert("origin".into(), json!(origin_text(graph, prop.origin(t))));
            }
            v
        })
        .collect();
    let reshards: Vec<Value> = plan
        .reshards
        .iter()
        .map(|r| {
            let steps: Vec<Value> = r
                .steps
                .iter()
                .map(|(step, bytes)| {
                    let mut v = serde_json::to_value(step).unwrap_or(Value::Null);
                    if let Value::Object(m) = &mut v {
                        m.insert("bytes".into(), json!(bytes));
                        m.insert("text".into(), json!(step.to_string()));
                    }
                    v
                })
                .collect();
            json!({
                "op": graph.op(r.op).name,
                "edge": r.edge,
                "tensor": graph.tensor(r.tensor).name,
                "from": attr_json(&r.from),
                "to": attr_json(&r.to),
                "steps": steps,
                "bytes": r.bytes(),
            })
        })
        .collect();
    json!({
        "mesh": graph.mesh().shape(),
        "dtype": plan.dtype,
        "stats": { "sweeps": prop.stats.sweeps, "rule_calls": prop.stats.rule_calls },
        "tensors": tensors,
        "reshards": reshards,
        "counts": counts(plan),
        "total_bytes": plan.bytes(),
        "uneven_shards": uneven_shards(graph, prop),
    })
}
