//! The report: the chosen plan's figures beside the baselines', as text
//! (the CLI's default) or JSON (`--json`, schema in `docs/autoshard.md`).

use serde::Serializer;

use crate::{Outcome, bytes};

/// A baseline's figures, or `{"not_applicable": reason}`.
pub fn ok_or_reason<T: serde::Serialize, S: Serializer>(
    v: &Result<T, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    #[derive(Serialize)]
    struct NotApplicable<'a> {
        not_applicable: &'a str,
    }
    match v {
        Ok(f) => f.serialize(s),
        Err(reason) => NotApplicable {
            not_applicable: reason,
        }
        .serialize(s),
    }
}

/// Seconds in the unit that reads best: `1.234 s`, `12.345 ms`, `5.678 µs`.
pub fn time(seconds: f64) -> String {
    let s = seconds.abs();
    if s >= 1.0 {
        format!("{seconds:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{:.3} µs", seconds * 1e6)
    }
}

/// The report as text.
pub fn text(o: &Outcome) -> String {
    let mut s = String::new();
    let f = &o.figures;
    s.push_str(&format!(
        "autoshard: mesh {:?}, {}, {}, budget {}\n\n",
        o.mesh,
        o.device.name,
        o.dtype,
        o.memory_budget.map_or("none".into(), bytes)
    ));
    s.push_str("chosen plan:\n");
    for d in o.decisions.iter().filter(|d| d.layout != "free") {
        s.push_str(&format!("  {}: {}\n", d.tensors, d.layout));
    }
    if o.decisions.is_empty() {
        s.push_str("  (no decisions: every leaf is pinned)\n");
    }
    let free = o.decisions.iter().filter(|d| d.layout == "free").count();
    if free > 0 {
        s.push_str(&format!("  ({free} more leaves left to propagation)\n"));
    }
    if o.solver_pins > 0 {
        s.push_str(&format!(
            "  ({} more tensors pinned as the solver's solution lays them out: see the plan file)\n",
            o.solver_pins
        ));
    }
    s.push_str(&format!(
        "\nmemory per device: {} (parameters {}, gradients {}, optimizer {}, activations {})\n",
        bytes(f.memory.total),
        bytes(f.memory.parameters),
        bytes(f.memory.gradients),
        bytes(f.memory.optimizer),
        bytes(f.memory.activations)
    ));
    s.push_str("communication per step:\n");
    if f.collectives.is_empty() {
        s.push_str("  none\n");
    }
    for c in &f.collectives {
        s.push_str(&format!(
            "  {:<8} {:>4} x {:<14} over mesh dims {:?}: {}, {}\n",
            c.pass,
            c.count,
            c.kind.name(),
            c.mesh_dims,
            bytes(c.bytes),
            time(c.time)
        ));
    }
    s.push_str(&format!(
        "step time: {} (compute {}, communication {})\n",
        time(f.step_time),
        time(f.compute_time),
        time(f.communication_time)
    ));
    s.push_str(&format!(
        "lower bound: {} (perfect split, no communication): the plan takes {:.2}x the bound\n",
        time(o.step_time_bound),
        1.0 + o.gap
    ));
    match &o.solver {
        Ok(b) => s.push_str(&format!(
            "solver bound: {} ({}, HiGHS, {} columns, {} left out by the cutoff, {} rows, \
             {:.2} s): the plan is {:.2}% above it\n",
            time(b.bound),
            b.stop.describe(),
            b.columns,
            b.columns_left_out,
            b.rows,
            b.build_seconds + b.solve_seconds,
            100.0 * (f.step_time - b.bound) / b.bound.max(f64::MIN_POSITIVE)
        )),
        Err(why) => s.push_str(&format!("solver bound: none ({why})\n")),
    }
    if o.solver.as_ref().is_ok_and(|b| !b.stop.reproducible()) {
        s.push_str(
            "  (HiGHS met its time limit before its node limit: its solution was not used, \
             and on a faster machine the plan may differ)\n",
        );
    }
    s.push_str("\nbaselines (same cost model):\n");
    for b in &o.baselines {
        match &b.figures {
            Ok(bf) => {
                let fits = o.memory_budget.is_none_or(|m| bf.memory.total <= m);
                s.push_str(&format!(
                    "  {:<22} step {:>12}, memory {:>10}{}\n",
                    b.name,
                    time(bf.step_time),
                    bytes(bf.memory.total),
                    if fits { "" } else { "  (over budget)" }
                ));
            }
            Err(reason) => s.push_str(&format!("  {:<22} n/a: {reason}\n", b.name)),
        }
    }
    s.push_str(&format!(
        "\nsearch: {} plans priced ({} of them stopped after the forward pass, {} refused by the rules), {} passes, {:.3} s\n",
        o.search.evaluated, o.search.stopped_early, o.search.refused, o.search.passes, o.seconds
    ));
    s
}

/// A plan file as JSON, one annotation a line (so a diff shows which
/// decision changed).
pub fn plan_json(plan: &spmd_graph::annotations::AnnotationFile) -> String {
    let mut s = String::from("{\n");
    if let Some(mesh) = &plan.mesh {
        s.push_str(&format!("  \"mesh\": {},\n", serde_json::json!(mesh)));
    }
    s.push_str("  \"annotations\": [");
    for (i, a) in plan.annotations.iter().enumerate() {
        let line = serde_json::to_string(a).unwrap_or_default();
        s.push_str(if i == 0 { "\n    " } else { ",\n    " });
        s.push_str(&line);
    }
    s.push_str(if plan.annotations.is_empty() {
        "]\n}\n"
    } else {
        "\n  ]\n}\n"
    });
    s
}
