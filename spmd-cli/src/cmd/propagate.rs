//! `spmd propagate`: whole-graph propagation of a graph file, with the
//! reshard plan (and optionally the backward graph's).

use serde_json::Value;
use spmd_graph::{DType, backward_graph, plan, propagate as run, report};

use crate::Output;
use crate::call::display_path;
use crate::cli::PropagateArgs;
use crate::error::{CliError, Result};
use crate::graph_input::{in_graph, load, overrides};

pub fn propagate(args: &PropagateArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let fail = |e: spmd_graph::GraphError| in_graph(&args.graph, e);
    let (_, loaded) = load(
        &args.graph,
        args.plan.as_deref(),
        overrides(args.override_annotations),
        &registry,
    )?;
    let dtype = match &args.dtype {
        Some(d) => d.parse::<DType>().map_err(CliError::usage)?,
        None => loaded.dtype,
    };
    let graph = &loaded.graph;
    let p = run(graph).map_err(fail)?;
    let forward = plan(graph, &p, dtype).map_err(fail)?;
    let backward = if args.backward {
        let bw = backward_graph(graph, &p, &registry, &loaded.outputs).map_err(fail)?;
        let bp = run(&bw.graph).map_err(fail)?;
        let bplan = plan(&bw.graph, &bp, dtype).map_err(fail)?;
        Some((bw, bp, bplan))
    } else {
        None
    };

    let mut wrote = String::new();
    if let Some(path) = &args.html {
        let page = crate::html::page(
            display_path(&args.graph),
            crate::html::section(graph, &p, &forward),
            backward
                .as_ref()
                .map(|(bw, bp, bplan)| crate::html::section(&bw.graph, bp, bplan)),
        );
        std::fs::write(path, page)
            .map_err(|e| CliError::usage(format!("cannot write {path}: {e}")))?;
        wrote = format!("\nplan page written to {path}\n");
    }
    if args.json {
        let mut v = report::json(graph, &p, &forward);
        if let (Some((bw, bp, bplan)), Value::Object(m)) = (&backward, &mut v) {
            let mut b = report::json(&bw.graph, bp, bplan);
            if let Value::Object(bm) = &mut b {
                bm.remove("schema_version");
                let grads: serde_json::Map<String, Value> = bw
                    .param_grads
                    .iter()
                    .map(|&(w, g)| {
                        (
                            graph.tensor(w).name.clone(),
                            Value::from(bw.graph.tensor(g).name.clone()),
                        )
                    })
                    .collect();
                bm.insert("param_grads".into(), Value::Object(grads));
            }
            m.insert("backward".into(), b);
        }
        return Ok(Output::ok(format!("{}\n", crate::report::to_json(&v))));
    }
    let mut out = if args.tensors || graph.tensors().len() <= report::LISTING_LIMIT {
        report::text(graph, &p, &forward)
    } else {
        report::summary_text(graph, &p, &forward)
    };
    if let Some((bw, bp, bplan)) = &backward {
        out.push_str(&format!(
            "\nbackward graph: {} grad and accumulation ops, {} parameter gradients; propagation: {} sweeps\n",
            bw.graph.ops().len(),
            bw.param_grads.len(),
            bp.stats.sweeps
        ));
        out.push_str(
            &if args.tensors || bw.graph.tensors().len() <= report::LISTING_LIMIT {
                report::plan_text(&bw.graph, bplan)
            } else {
                report::plan_summary_text(&bw.graph, bplan)
            },
        );
    }
    out.push_str(&wrote);
    Ok(Output::ok(out))
}
