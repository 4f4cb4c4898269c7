//! `spmd check`: a graph's plan run on the simulated mesh against a dense
//! run (`spmd_check::plan`), forward and optionally backward.

use serde_json::{Value, json};
use spmd_check::plan::{
    BackwardPlan, Divergence, Finding, Inputs, Moment, Summary, check_plan, footprint,
};
use spmd_graph::{DType, backward_graph, plan, propagate};

use crate::Output;
use crate::call::display_path;
use crate::cli::CheckArgs;
use crate::error::{CliError, Result};
use crate::graph_input::{in_graph, load, overrides};

/// The most values (`f64`s: every tensor densely and every device's block)
/// a check may hold: 2 GiB. The simulator is for small configs of a model.
pub const MAX_VALUES: u64 = 1 << 28;

pub fn check(args: &CheckArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let fail = |e: spmd_graph::GraphError| in_graph(&args.graph, e);
    let (file, loaded) = load(
        &args.graph,
        args.plan.as_deref(),
        overrides(args.override_annotations),
        &registry,
    )?;
    let graph = &loaded.graph;
    let prop = propagate(graph).map_err(fail)?;
    let mut forward = plan(graph, &prop, DType::F32).map_err(fail)?;
    let mut bw = if args.backward {
        let bw = backward_graph(graph, &prop, &registry, &loaded.outputs).map_err(fail)?;
        let bprop = propagate(&bw.graph).map_err(fail)?;
        let bplan = plan(&bw.graph, &bprop, DType::F32).map_err(fail)?;
        Some((bw, bprop, bplan))
    } else {
        None
    };
    for name in &args.skip_reshard {
        let mut skipped = skip(graph, &mut forward, name);
        if let Some((b, _, bplan)) = &mut bw {
            skipped += skip(&b.graph, bplan, name);
        }
        if skipped == 0 {
            let mut names: Vec<&str> = forward
                .reshards
                .iter()
                .map(|r| graph.tensor(r.tensor).name.as_str())
                .collect();
            if let Some((b, _, bplan)) = &bw {
                names.extend(
                    bplan
                        .reshards
                        .iter()
                        .map(|r| b.graph.tensor(r.tensor).name.as_str()),
                );
            }
            names.dedup();
            let listed = if names.is_empty() {
                "it has none".to_string()
            } else {
                format!(
                    "it reshards {}",
                    names
                        .iter()
                        .take(8)
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ) + if names.len() > 8 { ", ..." } else { "" }
            };
            return Err(CliError::usage(format!(
                "--skip-reshard {name}: the plan has no reshard of a tensor of that name ({listed})"
            )));
        }
    }
    let backward = bw.as_ref().map(|(backward, prop, plan)| BackwardPlan {
        backward,
        prop,
        plan,
    });
    let values = footprint(graph, &prop, backward);
    if values > MAX_VALUES {
        return Err(CliError::usage(format!(
            "{}: the simulation would hold {values} values ({} GiB as f64: every tensor densely and on every device), over its limit of {MAX_VALUES}; check a small config of the model (tools/torch_export exports any config with --layers, --batch, --seq)",
            display_path(&args.graph),
            (values * 8) >> 30
        )));
    }
    let what = match &args.plan {
        Some(p) => format!("{} under {}", display_path(&args.graph), display_path(p)),
        None => display_path(&args.graph).to_string(),
    };
    let halves = if args.backward {
        "forward and backward"
    } else {
        "forward"
    };
    let result = check_plan(
        graph,
        &prop,
        &forward,
        backward,
        &Inputs::of_file(&file),
        &registry,
    );
    // A rule that refuses its call, or an op the simulator has no kernel
    // for: nothing was found wrong with the plan, it could not be checked.
    if let Err(d) = &result
        && matches!(d.finding, Finding::NoKernel | Finding::Rule(_))
    {
        return Err(CliError::usage(format!(
            "{what}: cannot check the plan: {d}"
        )));
    }
    if args.json {
        let v = match &result {
            Ok(s) => json!({"schema_version": 1, "holds": true, "summary": summary_json(s)}),
            Err(d) => {
                json!({"schema_version": 1, "holds": false, "divergence": divergence_json(d)})
            }
        };
        let text = format!("{}\n", crate::report::to_json(&v));
        return Ok(match result {
            Ok(_) => Output::ok(text),
            Err(_) => Output {
                text,
                fail: Some(CliError::failed()),
            },
        });
    }
    match result {
        Ok(s) => Ok(Output::ok(format!(
            "{what}: the plan holds, {halves}: {s}\n"
        ))),
        Err(d) => {
            let text = format!("{what}: the plan diverges from the dense run\n  {d}\n");
            Ok(Output {
                text,
                fail: Some(CliError::failed()),
            })
        }
    }
}

/// Takes every reshard of the tensor named `name` out of `plan`; how many.
fn skip(graph: &spmd_graph::Graph, plan: &mut spmd_graph::ReshardPlan, name: &str) -> usize {
    let before = plan.reshards.len();
    plan.reshards
        .retain(|r| graph.tensor(r.tensor).name != name);
    before - plan.reshards.len()
}

fn summary_json(s: &Summary) -> Value {
    json!({
        "ops": s.ops,
        "devices": s.devices,
        "compared": s.compared,
        "steps": s.steps,
        "collectives": s.collectives,
        "gradients": s.gradients,
        "max_error": s.max_error,
    })
}

fn divergence_json(d: &Divergence) -> Value {
    let moment = d.moment.as_ref().map(|m| match m {
        Moment::Computed(k) => json!({"computed": k}),
        Moment::Read(k) => json!({"read": k}),
        Moment::Placed(k) => json!({"placed": k}),
        Moment::Result => json!("result"),
    });
    let wrong = |w: &spmd_check::plan::Wrong| {
        json!({
            "device": w.device.rank,
            "coords": w.device.coord,
            "index": w.index,
            "block": w.block.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
            "got": w.got,
            "want": w.want,
        })
    };
    let (kind, detail) = match &d.finding {
        Finding::WrongValue(w) => ("wrong_value", wrong(w)),
        Finding::Unplanned { held, wrong: w } => (
            "unplanned",
            json!({"held": held.to_string(), "wrong": wrong(w)}),
        ),
        Finding::Cannot { device, message } => (
            "cannot",
            json!({"device": device.as_ref().map(|d| d.rank), "message": message}),
        ),
        Finding::Step { message } => ("step", json!({"message": message})),
        Finding::NoKernel => ("no_kernel", Value::Null),
        Finding::Partial => ("partial", Value::Null),
        Finding::Rule(m) => ("rule", json!({"message": m})),
    };
    json!({
        "phase": d.phase.to_string(),
        "op": d.op,
        "rule": d.rule,
        "tensor": d.tensor,
        "moment": moment,
        "layout": d.layout.as_ref().map(|l| l.to_string()),
        "finding": kind,
        "detail": detail,
        "message": d.to_string(),
    })
}
