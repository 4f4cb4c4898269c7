//! Exported full-size models, end to end as `spmd propagate --backward
//! --plan` runs them (`tools/torch_export`):
//!
//! - `llama-2-7b`: `spmd-graph/graphs/hf/llama-2-7b.json.gz` (32 layers,
//!   2,355 ATen ops) under the tensor-parallel plan of
//!   `graphs/hf/llama_tp.json` on 4 devices;
//! - `deepseek-v3-671b`: `graphs/hf/deepseek-v3-671b.json.gz` (61 layers,
//!   58 of them MoE with 256 experts, 10,459 ATen ops) under the expert,
//!   tensor and data parallel plan of `graphs/hf/deepseek-v3_ep_tp_dp.json`
//!   on `[2, 2, 2]`.
//!
//! Each model is timed in three parts:
//! - `load`: parse the JSON, apply the plan file, build the graph (every
//!   op's rule from the registry, declared shapes checked);
//! - `propagate_and_plan`: forward propagation and its reshard plan, the
//!   backward graph, its propagation and plan;
//! - `end_to_end`: both.
//!
//! The decompression and the text are outside the timing.
//!
//! Run with `cargo bench --bench hf_model`.

use divan::{Bencher, black_box};
use spmd_graph::annotations::{AnnotationFile, apply};
use spmd_graph::json::{GraphFile, Loaded, from_file};
use spmd_graph::{DType, backward_graph, plan, propagate};

#[path = "common/full_size.rs"]
mod full_size;

fn main() {
    divan::main();
}

const MODELS: [&str; 2] = ["llama-2-7b", "deepseek-v3-671b"];

/// The model's text, its plan file, and the (forward, backward)
/// collective counts its plan must have.
fn model(name: &str) -> (String, &'static str, (usize, usize)) {
    match name {
        "llama-2-7b" => (
            full_size::llama_2_7b(),
            include_str!("../spmd-graph/graphs/hf/llama_tp.json"),
            // Megatron's 2 forward all-reduces per layer, DTensor's 5 backward.
            (64, 160),
        ),
        _ => (
            full_size::deepseek_v3_671b(),
            include_str!("../spmd-graph/graphs/hf/deepseek-v3_ep_tp_dp.json"),
            // `spmd propagate` prints them; moe_graphs.rs checks the all-to-alls.
            (354, 1446),
        ),
    }
}

fn load(text: &str, plan_file: &str, registry: &spmd_core::Registry) -> Loaded {
    let mut file: GraphFile = serde_json::from_str(text).expect("graph JSON");
    let plan_file = AnnotationFile::from_json(plan_file).expect("plan JSON");
    apply(&mut file, &plan_file).expect("the plan applies");
    from_file(&file, registry).expect("the graph loads")
}

/// Forward and backward, each propagated and planned: the collective
/// counts (checked once, so that no timing runs a wrong answer).
fn run(loaded: &Loaded, registry: &spmd_core::Registry) -> (usize, usize) {
    let p = propagate(&loaded.graph).expect("propagates");
    let forward = plan(&loaded.graph, &p, DType::Bf16).expect("plans");
    let bw = backward_graph(&loaded.graph, &p, registry, &loaded.outputs).expect("backward");
    let bp = propagate(&bw.graph).expect("backward propagates");
    let backward = plan(&bw.graph, &bp, DType::Bf16).expect("backward plans");
    (forward.collectives(), backward.collectives())
}

#[divan::bench(args = MODELS, sample_count = 20, sample_size = 1)]
fn load_graph(bencher: Bencher, name: &str) {
    let ((text, plan_file, _), registry) = (model(name), spmd_ops::builtins());
    bencher.bench_local(|| black_box(load(black_box(&text), plan_file, &registry)));
}

#[divan::bench(args = MODELS, sample_count = 20, sample_size = 1)]
fn propagate_and_plan(bencher: Bencher, name: &str) {
    let registry = spmd_ops::builtins();
    let (text, plan_file, counts) = model(name);
    let loaded = load(&text, plan_file, &registry);
    assert_eq!(run(&loaded, &registry), counts, "{name}");
    bencher.bench_local(|| black_box(run(black_box(&loaded), &registry)));
}

#[divan::bench(args = MODELS, sample_count = 20, sample_size = 1)]
fn end_to_end(bencher: Bencher, name: &str) {
    let ((text, plan_file, _), registry) = (model(name), spmd_ops::builtins());
    bencher.bench_local(|| {
        let loaded = load(black_box(&text), plan_file, &registry);
        black_box(run(&loaded, &registry))
    });
}
