//! Expert parallelism on the mixture-of-experts models committed under
//! `graphs/hf/` (Mixtral, Qwen3-MoE, DeepSeek-V3; 2 layers, small sizes,
//! batch 4), exported with their experts in GShard's dispatch form
//! (`export.py mixtral qwen3-moe deepseek-v3 --dispatch --batch 4`, see
//! `spmd.torch.moe`), under the plans beside them:
//!
//! - `<model>_ep.json` (mesh `[4]`): the batch and the experts' stacked
//!   weights split over mesh dim 0. Forward, the plan is the token dispatch
//!   and combine, two all-to-alls per MoE layer over mesh dim 0, and
//!   nothing else. Backward, the same two all-to-alls, plus one gradient
//!   all-reduce per weight the experts do not own (the data parallelism
//!   the batch split brings, the same as the batch-split plan without
//!   experts sharded has; each reduced tensor is traced back to its
//!   weight); no expert weight's gradient is reduced, and no gradient
//!   flows through the router's integers.
//! - `<model>_ep_tp.json` (`[2, 2]`) and `<model>_ep_tp_dp.json`
//!   (`[2, 2, 2]`): the same all-to-alls on the expert mesh dim, whatever
//!   the tensor parallelism on another mesh dim adds.

use spmd_graph::annotations::{AnnotationFile, apply};
use spmd_graph::json::GraphFile;
use spmd_graph::steps::Step;
use spmd_graph::{DType, Graph, ReshardPlan, backward_graph, plan, propagate};

const MODELS: &[(&str, &str)] = &[
    ("mixtral", include_str!("../graphs/hf/mixtral.json")),
    ("qwen3-moe", include_str!("../graphs/hf/qwen3-moe.json")),
    ("deepseek-v3", include_str!("../graphs/hf/deepseek-v3.json")),
];

fn plan_file(model: &str, plan: &str) -> AnnotationFile {
    let path = format!(
        "{}/graphs/hf/{model}_{plan}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    AnnotationFile::from_json(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Whether a parameter is one of the experts' stacked weights.
fn expert_weight(name: &str) -> bool {
    name.contains(".experts.")
}

/// The forward and backward graphs with their reshard plans.
struct Planned {
    forward: (Graph, ReshardPlan),
    backward: (Graph, ReshardPlan),
}

fn planned(model: &str, text: &str, annotations: &AnnotationFile) -> Planned {
    let registry = spmd_ops::builtins();
    let mut file: GraphFile = serde_json::from_str(text).unwrap();
    apply(&mut file, annotations).unwrap_or_else(|e| panic!("{model}: {e}"));
    let loaded =
        spmd_graph::json::from_file(&file, &registry).unwrap_or_else(|e| panic!("{model}: {e}"));
    let p = propagate(&loaded.graph).unwrap_or_else(|e| panic!("{model}: {e}"));
    let forward = plan(&loaded.graph, &p, DType::F32).unwrap();
    let bw = backward_graph(&loaded.graph, &p, &registry, &loaded.outputs)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let bp = propagate(&bw.graph).unwrap_or_else(|e| panic!("{model}: {e}"));
    let backward = plan(&bw.graph, &bp, DType::F32).unwrap();
    Planned {
        forward: (loaded.graph, forward),
        backward: (bw.graph, backward),
    }
}

/// The weight a backward tensor is the gradient of: `d<tensor>` (or one
/// contribution of it, `d<tensor>@<op>`), where the forward tensor is the
/// weight or a view of it (`permute`, `view`, a cast).
fn weight_of_gradient(forward: &Graph, name: &str) -> Option<String> {
    let of = name.strip_prefix('d')?;
    let of = of.split('@').next()?;
    let mut t = forward.find(of)?;
    for _ in 0..4 {
        let info = forward.tensor(t);
        if info.param {
            return Some(info.name.clone());
        }
        let producer = info.producer?;
        let op = forward.op(producer);
        let views = ["aten.permute", "aten.view", "aten.t", "aten._to_copy"];
        if !views.contains(&op.rule.as_str()) {
            return None;
        }
        t = forward.inputs(producer)[0];
    }
    None
}

/// The MoE layers of the graph: one stacked `gate_up_proj` (or `up_proj`)
/// each.
fn moe_layers(text: &str) -> usize {
    let file: GraphFile = serde_json::from_str(text).unwrap();
    file.tensors
        .iter()
        .filter(|t| t.param && t.name.ends_with(".experts.gate_up_proj"))
        .count()
}

/// The all-to-alls of a plan, as the mesh dims they run over.
fn all_to_alls(plan: &ReshardPlan) -> Vec<u8> {
    plan.steps()
        .filter_map(|s| match s {
            Step::AllToAll { mesh_dim, .. } => Some(*mesh_dim),
            _ => None,
        })
        .collect()
}

/// The mesh dims a step runs over.
fn mesh_dims(step: &Step) -> Vec<u8> {
    match step {
        Step::AllToAll { mesh_dim, .. } => vec![*mesh_dim],
        Step::AllReduce { mesh_dims, .. }
        | Step::ReduceScatter { mesh_dims, .. }
        | Step::AllGather { mesh_dims, .. }
        | Step::Reorder { mesh_dims, .. }
        | Step::Slice { mesh_dims, .. }
        | Step::MakePartial { mesh_dims, .. } => mesh_dims.clone(),
    }
}

/// The collectives of a plan that run over `dim`, by kind.
fn over(plan: &ReshardPlan, dim: u8) -> std::collections::BTreeMap<&'static str, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for s in plan
        .steps()
        .filter(|s| s.communicates() && mesh_dims(s).contains(&dim))
    {
        *kinds.entry(s.id()).or_insert(0) += 1;
    }
    kinds
}

/// The weights of the graph file: (the experts' own, the others).
fn weights(text: &str) -> (usize, usize) {
    let file: GraphFile = serde_json::from_str(text).unwrap();
    let params = file.tensors.iter().filter(|t| t.param);
    let experts = params.clone().filter(|t| expert_weight(&t.name)).count();
    (experts, params.count() - experts)
}

#[test]
fn expert_parallelism_is_dispatch_and_combine_all_to_alls() {
    for (model, text) in MODELS {
        expert_parallelism(model, text, model);
    }
}

/// The full-size graphs (`graphs/hf/<name>.json.gz`, exported on the meta
/// device with the config class's own sizes, Qwen3-30B-A3B's 48 layers, a
/// capacity factor of 1.25, batch 8 and sequence 4096; `export.py
/// deepseek-v3 --full-size --layers 0 --dispatch --capacity-factor 1.25
/// --batch 8 --seq 4096`), under the small models' EP plans.
const FULL_SIZE: [(&str, &str); 3] = [
    ("mixtral-8x7b", "mixtral"),
    ("qwen3-30b-a3b", "qwen3-moe"),
    ("deepseek-v3-671b", "deepseek-v3"),
];

fn gunzip(name: &str) -> String {
    use std::io::Read;
    let path = format!("{}/graphs/hf/{name}.json.gz", env!("CARGO_MANIFEST_DIR"));
    let gz = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    text
}

#[test]
fn full_size_expert_parallelism_is_dispatch_and_combine_all_to_alls() {
    for (name, model) in FULL_SIZE {
        let text = gunzip(name);
        let layers = moe_layers(&text);
        // Every Mixtral and Qwen3-MoE layer; DeepSeek-V3's after its first 3.
        let expected = match model {
            "mixtral" => 32,
            "qwen3-moe" => 48,
            _ => 61 - 3,
        };
        assert_eq!(layers, expected, "{name}");
        expert_parallelism(name, &text, model);
    }
}

/// Under `<plan_model>_ep.json`, the forward is the dispatch and combine
/// all-to-alls of each MoE layer, and the backward adds one gradient
/// all-reduce per weight the experts do not own.
fn expert_parallelism(model: &str, text: &str, plan_model: &str) {
    let layers = moe_layers(text);
    assert!(layers >= 1, "{model}: no MoE layer");
    let ep = planned(model, text, &plan_file(plan_model, "ep"));
    for (direction, (graph, p)) in [("forward", &ep.forward), ("backward", &ep.backward)] {
        let text = || spmd_graph::report::plan_text(graph, p);
        assert_eq!(
            all_to_alls(p),
            vec![0; 2 * layers],
            "{model} {direction}: {}",
            text()
        );
    }
    // No gradient flows through the routing's integers: the chosen
    // experts' one-hot comparisons get no grad op.
    let (graph, _) = &ep.backward;
    assert!(
        !graph.op_ids().any(|o| graph.op(o).rule == "aten.eq.Tensor"),
        "{model}: a comparison's gradient"
    );
    // Forward: nothing but the dispatch and combine.
    assert_eq!(ep.forward.1.collectives(), 2 * layers, "{model}");

    // Backward: besides them, one all-reduce over mesh dim 0 per weight
    // the experts do not own (its gradient, of the batch split), and
    // nothing else.
    let (experts, shared) = weights(text);
    assert_eq!(experts, 2 * layers, "{model}");
    let (graph, p) = &ep.backward;
    assert_eq!(
        over(p, 0),
        [("all_reduce", shared), ("all_to_all", 2 * layers)].into(),
        "{model}: {}",
        spmd_graph::report::plan_text(graph, p)
    );
    assert_eq!(p.collectives(), 2 * layers + shared, "{model}");
    // And each of those all-reduces is a weight's gradient, of a weight
    // the experts do not own.
    for r in &p.reshards {
        if !r
            .steps
            .iter()
            .any(|(s, _)| matches!(s, Step::AllReduce { .. }))
        {
            continue;
        }
        let name = &graph.tensor(r.tensor).name;
        let weight = weight_of_gradient(&ep.forward.0, name)
            .unwrap_or_else(|| panic!("{model}: {name} is all-reduced, not a weight's gradient"));
        assert!(!expert_weight(&weight), "{model}: {name} ({weight})");
    }

    // The same graph with the batch split and the experts replicated
    // (data parallelism alone) reduces every weight's gradient, the
    // experts' too, and moves no token: expert parallelism trades the
    // experts' gradient reductions for the all-to-alls.
    let mut dp = plan_file(plan_model, "ep");
    dp.annotations.retain(|a| !expert_weight(&a.tensors));
    let dp = planned(model, text, &dp);
    assert!(over(&dp.forward.1, 0).is_empty(), "{model}");
    assert_eq!(
        over(&dp.backward.1, 0),
        [("all_reduce", shared + experts)].into(),
        "{model}"
    );
}

#[test]
fn tensor_and_data_parallelism_keep_the_expert_all_to_alls() {
    // The plan, and the mesh dim its experts are split over.
    for (plan_name, expert_dim) in [("ep_tp", 0u8), ("ep_tp_dp", 1)] {
        for (model, text) in MODELS {
            let layers = moe_layers(text);
            let planned = planned(model, text, &plan_file(model, plan_name));
            for (direction, (graph, p)) in [
                ("forward", &planned.forward),
                ("backward", &planned.backward),
            ] {
                assert_eq!(
                    all_to_alls(p),
                    vec![expert_dim; 2 * layers],
                    "{model} {plan_name} {direction}: {}",
                    spmd_graph::report::plan_text(graph, p)
                );
                // On the expert mesh dim, the forward moves tokens by
                // all-to-all and nothing else; the backward adds the
                // gradient all-reduces of the batch split, one per weight
                // the experts do not own (the others' gradients are split
                // like their weights).
                let mut expected = std::collections::BTreeMap::from([("all_to_all", 2 * layers)]);
                if direction == "backward" {
                    expected.insert("all_reduce", weights(text).1);
                }
                assert_eq!(
                    over(p, expert_dim),
                    expected,
                    "{model} {plan_name} {direction}"
                );
                // No expert weight moves.
                for r in &p.reshards {
                    let name = &graph.tensor(r.tensor).name;
                    assert!(
                        !(expert_weight(name) && r.steps.iter().any(|(s, _)| s.communicates())),
                        "{model} {plan_name} {direction}: {name} moves"
                    );
                }
            }
        }
    }
}
