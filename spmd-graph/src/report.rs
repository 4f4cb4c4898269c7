//! Readable and JSON reports of a propagation and its reshard plan (what
//! `spmd propagate` prints).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::graph::Graph;
use crate::propagate::{Origin, Propagation};
use crate::reshard::{Edge, Reshard, ReshardPlan};
use crate::steps::Step;

/// Graphs with more tensors than this are summarised by default: listing
/// every tensor of a 7B model is thousands of lines nobody reads.
pub const LISTING_LIMIT: usize = 100;

/// Step counts by kind (`all-reduce`, ...), communicating kinds only.
pub fn counts(plan: &ReshardPlan) -> BTreeMap<&'static str, usize> {
    totals_by_kind(plan)
        .into_iter()
        .map(|(k, (n, _))| (k, n))
        .collect()
}

/// Per communicating kind, its steps and the bytes they send per device,
/// keyed by [`Step::kind`] (text).
pub fn totals_by_kind(plan: &ReshardPlan) -> BTreeMap<&'static str, (usize, u64)> {
    totals_by(plan, Step::kind)
}

fn totals_by(
    plan: &ReshardPlan,
    key: fn(&Step) -> &'static str,
) -> BTreeMap<&'static str, (usize, u64)> {
    let mut m = BTreeMap::new();
    for r in &plan.reshards {
        for (s, bytes) in r.steps.iter().filter(|(s, _)| s.communicates()) {
            let e = m.entry(key(s)).or_insert((0, 0));
            e.0 += 1;
            e.1 += bytes;
        }
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
        let t = &graph.tensor(r.tensor).name;
        let _ = writeln!(s, "  {t}: {} -> {} ({})", r.from, r.to, edge_text(graph, r));
        for (step, bytes) in &r.steps {
            let _ = writeln!(s, "      {step}: {} bytes", bytes_text(*bytes));
        }
    }
    total_line(&mut s, plan);
    s
}

/// Where a reshard happens: `before wo reads input 0`.
fn edge_text(graph: &Graph, r: &Reshard) -> String {
    let op = &graph.op(r.op).name;
    match r.edge {
        Edge::Input(i) => format!("before {op} reads input {i}"),
        Edge::Output(i) => format!("after {op} writes output {i}"),
        Edge::Result(i) => format!("{op}'s output {i} is a result of the graph"),
    }
}

fn total_line(s: &mut String, plan: &ReshardPlan) {
    let _ = writeln!(
        s,
        "  total: {}; {} bytes per device",
        counts_text(plan),
        bytes_text(plan.bytes())
    );
}

/// How many of the largest reshards a summary names.
const LARGEST: usize = 10;

/// The plan in a few lines: each collective kind with its count and bytes,
/// the ten largest reshards, then the totals (the same `total:` line as
/// [`plan_text`]).
pub fn plan_summary_text(graph: &Graph, plan: &ReshardPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "reshard plan ({}, bytes sent per device, ring algorithms): {} reshards",
        plan.dtype,
        plan.reshards.len()
    );
    for (kind, (n, bytes)) in totals_by_kind(plan) {
        let _ = writeln!(s, "  {kind:<14} {n:>5} x  {:>15} bytes", bytes_text(bytes));
    }
    let mut largest: Vec<&Reshard> = plan.reshards.iter().filter(|r| r.bytes() > 0).collect();
    // Stable: equal volumes keep plan order, so the listing is deterministic.
    largest.sort_by_key(|r| std::cmp::Reverse(r.bytes()));
    if !largest.is_empty() {
        let shown = largest.len().min(LARGEST);
        let _ = writeln!(s, "  largest reshards ({shown} of {})", largest.len());
        for r in &largest[..shown] {
            let _ = writeln!(
                s,
                "    {}: {} -> {} ({}): {} bytes",
                graph.tensor(r.tensor).name,
                r.from,
                r.to,
                edge_text(graph, r),
                bytes_text(r.bytes())
            );
        }
    }
    total_line(&mut s, plan);
    s
}

/// The report of a large graph: the layouts counted rather than listed
/// (how many tensors are replicated, sharded or partial, and where their
/// layouts came from), uneven shards, then [`plan_summary_text`].
pub fn summary_text(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> String {
    let mut s = header(graph, prop);
    let (mut replicated, mut sharded, mut partial) = (0, 0, 0);
    let (mut annotated, mut derived, mut unreached) = (0, 0, 0);
    for t in graph.tensor_ids() {
        let a = prop.attr(t);
        if a.partial.is_partial() {
            partial += 1;
        } else if a.dims_mapping.as_slice().iter().any(|d| !d.is_empty()) {
            sharded += 1;
        } else {
            replicated += 1;
        }
        match prop.origin(t) {
            Origin::Annotated => annotated += 1,
            Origin::Unreached => unreached += 1,
            Origin::Op { .. } => derived += 1,
        }
    }
    let _ = writeln!(
        s,
        "
layouts (every tensor: --tensors)"
    );
    let _ = writeln!(
        s,
        "  {} tensors: {sharded} sharded, {partial} partial, {replicated} replicated",
        graph.tensors().len()
    );
    let _ = writeln!(
        s,
        "  from: {annotated} annotated, {derived} propagated, {unreached} unreached (replicated)"
    );
    let uneven = uneven_shards(graph, prop);
    if !uneven.is_empty() {
        let _ = writeln!(
            s,
            "  {} uneven shards (the last blocks are padded), first: {}",
            uneven.len(),
            uneven[0]
        );
    }
    s.push('\n');
    s.push_str(&plan_summary_text(graph, plan));
    s
}

fn header(graph: &Graph, prop: &Propagation) -> String {
    format!(
        "{} ops, {} tensors on mesh {}; propagation: {} sweeps, {} rule calls\n",
        graph.ops().len(),
        graph.tensors().len(),
        graph.mesh(),
        prop.stats.sweeps,
        prop.stats.rule_calls
    )
}

/// The full report: every tensor's attr and origin, then the plan.
pub fn text(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> String {
    let mut s = header(graph, prop);
    let _ = writeln!(s, "\ntensors");
    let rows: Vec<[String; 4]> = graph
        .tensor_ids()
        .map(|t| {
            let info = graph.tensor(t);
            [
                info.name.clone(),
                shape_text(graph.shape(t)),
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
        for (d, (&extent, sharding)) in graph
            .shape(t)
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

/// The version of [`json`](fn@json)'s schema (`docs/json.md`); it changes only when
/// a field changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// The report as JSON (schema in `docs/json.md`): `schema_version`, `mesh`,
/// `dtype`, `stats`, `tensors` (name, shape, the attr in the conformance
/// schema's form, origin), `reshards` (op, edge, tensor, from and to in
/// that form, steps with their bytes), `counts` and `bytes_by_kind` (keyed
/// by the steps' JSON `kind`), `total_bytes` and `uneven_shards` (see
/// [`uneven_shards`]).
pub fn json(graph: &Graph, prop: &Propagation, plan: &ReshardPlan) -> Value {
    let tensors: Vec<Value> = graph
        .tensor_ids()
        .map(|t| {
            let info = graph.tensor(t);
            let a = prop.attr(t);
            let mut v = attr_json(a);
            if let Value::Object(m) = &mut v {
                m.insert("name".into(), json!(info.name));
                m.insert("shape".into(), json!(graph.shape(t)));
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
    let by_kind = totals_by(plan, Step::id);
    let counts: BTreeMap<&str, usize> = by_kind.iter().map(|(k, (n, _))| (*k, *n)).collect();
    let bytes: BTreeMap<&str, u64> = by_kind.iter().map(|(k, (_, b))| (*k, *b)).collect();
    json!({
        "schema_version": SCHEMA_VERSION,
        "mesh": graph.mesh().shape(),
        "dtype": plan.dtype,
        "stats": { "sweeps": prop.stats.sweeps, "rule_calls": prop.stats.rule_calls },
        "tensors": tensors,
        "reshards": reshards,
        "counts": counts,
        "bytes_by_kind": bytes,
        "total_bytes": plan.bytes(),
        "uneven_shards": uneven_shards(graph, prop),
    })
}
