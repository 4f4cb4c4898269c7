//! A GPT-style transformer layer annotated only on its weights with
//! Megatron-LM's tensor parallelism (QKV and first MLP weights split by
//! columns, attention output and second MLP weights by rows), propagated
//! through the whole graph, forward and backward, on a 2x4 mesh with data
//! parallelism on mesh dim 0 and tensor parallelism on mesh dim 1.
//!
//! Prints every tensor's sharding and the reshard plans, and checks the
//! known result, exiting with an error if a claim fails:
//! - the forward pass has exactly two all-reduces (after the attention
//!   output and second MLP projections), as the Megatron-LM paper says;
//! - the backward pass has exactly two over the tensor-parallel mesh dim;
//! - data parallelism adds one gradient all-reduce per parameter over its
//!   mesh dim, and nothing else.
//!
//! Run with `cargo run --release --example gpt_layer` (`-- --brief` for the
//! summary only). The same graph is `spmd-graph/graphs/gpt_layer.json`:
//! `spmd propagate spmd-graph/graphs/gpt_layer.json --backward`.

use std::process::ExitCode;

use spmd_graph::{DType, GraphError, backward_graph, plan, propagate, report};
use spmd_models::{GptConfig, gpt};

/// Forward and backward all-reduces of one configuration, by mesh dim.
struct Counts {
    forward: Vec<(u8, usize)>,
    backward: Vec<(u8, usize)>,
    params: usize,
    other_steps: usize,
}

fn by_mesh_dim(plan: &spmd_graph::ReshardPlan) -> (Vec<(u8, usize)>, usize) {
    let mut dims: Vec<(u8, usize)> = Vec::new();
    let mut other = 0;
    for step in plan.steps() {
        match step {
            spmd_graph::steps::Step::AllReduce { mesh_dims, .. } if mesh_dims.len() == 1 => {
                match dims.iter_mut().find(|(d, _)| *d == mesh_dims[0]) {
                    Some((_, n)) => *n += 1,
                    None => dims.push((mesh_dims[0], 1)),
                }
            }
            _ => other += 1,
        }
    }
    dims.sort();
    (dims, other)
}

/// Propagates one configuration; prints the reports unless `brief`.
fn run(cfg: &GptConfig, brief: bool) -> Result<Counts, GraphError> {
    let registry = spmd_ops::builtins();
    let model = gpt(cfg, &registry)?;
    let p = propagate(&model.graph)?;
    let forward = plan(&model.graph, &p, DType::Bf16)?;
    let bw = backward_graph(&model.graph, &p, &registry, &[model.output])?;
    let bp = propagate(&bw.graph)?;
    let backward = plan(&bw.graph, &bp, DType::Bf16)?;
    if !brief {
        println!("{}", report::text(&model.graph, &p, &forward));
        println!(
            "backward graph: {} ops, {} parameter gradients",
            bw.graph.ops().len(),
            bw.param_grads.len()
        );
        println!("{}", report::plan_text(&bw.graph, &backward));
    }
    let (fwd, f_other) = by_mesh_dim(&forward);
    let (bwd, b_other) = by_mesh_dim(&backward);
    Ok(Counts {
        forward: fwd,
        backward: bwd,
        params: model.params.len(),
        other_steps: f_other + b_other,
    })
}

/// Runs both configurations and checks the claims; the failed claims.
pub fn check(brief: bool) -> Result<Vec<String>, GraphError> {
    let mut failures = Vec::new();
    let mut claim = |ok: bool, text: String| {
        println!("  [{}] {text}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failures.push(text);
        }
    };
    let tp = GptConfig::small_tp();
    let dp_tp = GptConfig::small_dp_tp();
    let (tp_dim, dp_dim) = (dp_tp.tp, dp_tp.dp.unwrap_or(0));
    if !brief {
        println!("== tensor parallel only, mesh {:?} ==\n", tp.mesh);
    }
    let a = run(&tp, brief)?;
    if !brief {
        println!(
            "== data parallel x tensor parallel, mesh {:?} ==\n",
            dp_tp.mesh
        );
    }
    let b = run(&dp_tp, brief)?;
    println!("GPT layer, Megatron-LM annotations on the weights only:");
    claim(
        a.forward == [(0, 2)] && a.backward == [(0, 2)] && a.other_steps == 0,
        format!(
            "tensor parallel (mesh {:?}): 2 all-reduces forward, 2 backward, nothing else (got {:?} / {:?})",
            tp.mesh, a.forward, a.backward
        ),
    );
    claim(
        b.forward == [(tp_dim, 2)] && b.other_steps == 0,
        format!(
            "with data parallelism (mesh {:?}): still 2 forward all-reduces over mesh dim {tp_dim} (got {:?})",
            dp_tp.mesh, b.forward
        ),
    );
    let mut expected = vec![(dp_dim, b.params), (tp_dim, 2)];
    expected.sort();
    claim(
        b.backward == expected,
        format!(
            "backward: 2 all-reduces over mesh dim {tp_dim} plus one gradient all-reduce per parameter ({}) over mesh dim {dp_dim} (got {:?})",
            b.params, b.backward
        ),
    );
    Ok(failures)
}

#[allow(dead_code)]
fn main() -> ExitCode {
    let brief = std::env::args().any(|a| a == "--brief");
    match check(brief) {
        Ok(f) if f.is_empty() => ExitCode::SUCCESS,
        Ok(f) => {
            eprintln!("{} claim(s) failed: {f:?}", f.len());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
