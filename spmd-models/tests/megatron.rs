//! The known result of Megatron-LM (Shoeybi et al., 2019, §3): a transformer
//! layer with its QKV and first MLP weights split by columns and its
//! attention output and second MLP weights split by rows needs exactly two
//! all-reduces in the forward pass (after each row-parallel matmul) and two
//! in the backward pass (the input gradients of the column-parallel
//! matmuls). Data parallelism on a second mesh dim adds one gradient
//! all-reduce per parameter over that mesh dim, and nothing else. Here the
//! "parameters" are every weight of the layer: the four matrices, their four
//! biases, the two layer norms' scales and biases, and the embedding table
//! (13 in all); each one's gradient is a sum over the batch, which data
//! parallelism splits.

use spmd_core::MeshDim;
use spmd_graph::steps::Step;
use spmd_graph::{Backward, DType, Graph, ReshardPlan, backward_graph, plan, propagate};
use spmd_models::{Gpt, GptConfig, gpt};

struct Run {
    model: Gpt,
    forward: ReshardPlan,
    backward: Backward,
    backward_plan: ReshardPlan,
}

fn run(cfg: &GptConfig) -> Run {
    let registry = spmd_ops::builtins();
    let model = gpt(cfg, &registry).unwrap();
    let p = propagate(&model.graph).unwrap();
    let forward = plan(&model.graph, &p, DType::F32).unwrap();
    let backward = backward_graph(&model.graph, &p, &registry, &[model.output]).unwrap();
    let bp = propagate(&backward.graph).unwrap();
    let backward_plan = plan(&backward.graph, &bp, DType::F32).unwrap();
    Run {
        model,
        forward,
        backward,
        backward_plan,
    }
}

/// Every step of the plan as (kind, mesh dims, the rule of the op that
/// produced the tensor being resharded, the tensor's name).
fn steps(graph: &Graph, plan: &ReshardPlan) -> Vec<(&'static str, Vec<MeshDim>, String, String)> {
    plan.reshards
        .iter()
        .flat_map(|r| {
            let t = graph.tensor(r.tensor);
            let producer = t
                .producer
                .map_or("<input>".to_string(), |o| graph.op(o).name.clone());
            r.steps.iter().map(move |(s, _)| {
                let dims = match s {
                    Step::AllReduce { mesh_dims, .. } => mesh_dims.clone(),
                    _ => Vec::new(),
                };
                (s.kind(), dims, producer.clone(), t.name.clone())
            })
        })
        .collect()
}

/// The all-reduces of the plan over `mesh_dim`, by producing op.
fn all_reduces(graph: &Graph, plan: &ReshardPlan, mesh_dim: MeshDim) -> Vec<String> {
    steps(graph, plan)
        .into_iter()
        .filter(|(k, dims, _, _)| *k == "all-reduce" && dims == &[mesh_dim])
        .map(|(_, _, producer, _)| producer)
        .collect()
}

fn layers(n: usize, cfg: GptConfig) -> GptConfig {
    GptConfig { layers: n, ..cfg }
}

#[test]
fn tensor_parallel_layer_has_two_all_reduces_forward_and_two_backward() {
    for n in [1, 2] {
        let cfg = layers(n, GptConfig::small_tp());
        let r = run(&cfg);
        // Forward: after each row-parallel matmul, nothing else.
        let mut expected: Vec<String> = (0..n)
            .flat_map(|l| [format!("l{l}.proj"), format!("l{l}.fc2")])
            .collect();
        let mut got = all_reduces(&r.model.graph, &r.forward, cfg.tp);
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{:?}", steps(&r.model.graph, &r.forward));
        assert_eq!(r.forward.collectives(), 2 * n);
        assert_eq!(r.forward.steps().count(), 2 * n, "no local steps either");
        // Backward: the input grads of the column-parallel matmuls.
        let mut expected: Vec<String> = (0..n)
            .flat_map(|l| [format!("l{l}.qkv_grad"), format!("l{l}.fc1_grad")])
            .collect();
        let bg = &r.backward.graph;
        let mut got = all_reduces(bg, &r.backward_plan, cfg.tp);
        got.sort();
        expected.sort();
        assert_eq!(got, expected, "{:?}", steps(bg, &r.backward_plan));
        assert_eq!(r.backward_plan.steps().count(), 2 * n);
    }
}

#[test]
fn data_parallelism_adds_one_gradient_all_reduce_per_parameter_and_nothing_else() {
    let tp_only = run(&GptConfig::small_tp());
    let cfg = GptConfig::small_dp_tp();
    let dp = cfg.dp.unwrap();
    let r = run(&cfg);
    assert_eq!(r.model.params.len(), 13);

    // Forward: the same two all-reduces, now over the tp mesh dim only.
    assert_eq!(r.forward.steps().count(), 2);
    assert_eq!(all_reduces(&r.model.graph, &r.forward, cfg.tp).len(), 2);

    // Backward: tensor parallelism's two, plus one over dp per parameter,
    // each on that parameter's final gradient.
    let bg = &r.backward.graph;
    let all = steps(bg, &r.backward_plan);
    assert_eq!(all.len(), 2 + r.model.params.len(), "{all:?}");
    assert_eq!(
        all_reduces(bg, &r.backward_plan, cfg.tp),
        all_reduces(&tp_only.backward.graph, &tp_only.backward_plan, 0)
    );
    let mut reduced: Vec<String> = all
        .iter()
        .filter(|(k, dims, _, _)| *k == "all-reduce" && dims == &[dp])
        .map(|(_, _, _, tensor)| tensor.clone())
        .collect();
    let mut grads: Vec<String> = r
        .backward
        .param_grads
        .iter()
        .map(|&(_, g)| bg.tensor(g).name.clone())
        .collect();
    reduced.sort();
    grads.sort();
    assert_eq!(reduced, grads);
    assert_eq!(grads.len(), r.model.params.len());
}

#[test]
fn the_all_reduce_volumes_follow_the_ring_formula() {
    let cfg = GptConfig::small_tp();
    let r = run(&cfg);
    // Each forward all-reduce moves a full [batch, seq, hidden] f32 tensor
    // over 4 devices: 2 * 3/4 of its bytes.
    let full = (cfg.batch * cfg.seq * cfg.hidden * 4) as u64;
    for rs in &r.forward.reshards {
        assert_eq!(rs.bytes(), 2 * 3 * full / 4);
    }
}

/// The sample graph file is the builder's GPT layer (dp x tp) as JSON: it
/// must stay in step with the builder. `SPMD_BLESS=1` rewrites it.
#[test]
fn the_sample_graph_file_is_the_gpt_layer() {
    let registry = spmd_ops::builtins();
    let model = gpt(&GptConfig::small_dp_tp(), &registry).unwrap();
    let file = spmd_graph::json::to_file(&model.graph, &[model.output], Some(DType::Bf16));
    let text = serde_json::to_string_pretty(&file).unwrap() + "\n";
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../spmd-graph/graphs/gpt_layer.json"
    );
    if std::env::var_os("SPMD_BLESS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(on_disk == text, "{path} is stale: rerun with SPMD_BLESS=1");
    let loaded = spmd_graph::json::from_str(&on_disk, &registry).unwrap();
    let p = propagate(&loaded.graph).unwrap();
    let forward = plan(&loaded.graph, &p, loaded.dtype).unwrap();
    assert_eq!(forward.count("all-reduce"), 2);
}
