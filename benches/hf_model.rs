//! An exported full-size model, end to end as `spmd propagate --backward
//! --plan` runs it: `spmd-graph/graphs/hf/llama-2-7b.json.gz` (Llama-2-7B's
//! sizes, 32 layers, 2,355 ATen ops; `tools/torch_export`) under the
//! tensor-parallel plan of `graphs/hf/llama_tp.json` on 4 devices.
//!
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

#[path = "common/llama_7b.rs"]
mod llama_7b;
use llama_7b::text;

fn main() {
    divan::main();
}

fn load(text: &str, registry: &spmd_core::Registry) -> Loaded {
    let mut file: GraphFile = serde_json::from_str(text).expect("graph JSON");
    let tp: AnnotationFile =
        serde_json::from_str(include_str!("../spmd-graph/graphs/hf/llama_tp.json"))
            .expect("plan JSON");
    apply(&mut file, &tp).expect("the plan applies");
    from_file(&file, registry).expect("the graph loads")
}

/// Forward and backward, each propagated and planned: the all-reduce
/// counts (checked once, so that no timing runs a wrong answer).
fn run(loaded: &Loaded, registry: &spmd_core::Registry) -> (usize, usize) {
    let p = propagate(&loaded.graph).expect("propagates");
    let forward = plan(&loaded.graph, &p, DType::Bf16).expect("plans");
    let bw = backward_graph(&loaded.graph, &p, registry, &loaded.outputs).expect("backward");
    let bp = propagate(&bw.graph).expect("backward propagates");
    let backward = plan(&bw.graph, &bp, DType::Bf16).expect("backward plans");
    (forward.count("all-reduce"), backward.count("all-reduce"))
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn load_graph(bencher: Bencher) {
    let (text, registry) = (text(), spmd_ops::builtins());
    bencher.bench_local(|| black_box(load(black_box(&text), &registry)));
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn propagate_and_plan(bencher: Bencher) {
    let registry = spmd_ops::builtins();
    let loaded = load(&text(), &registry);
    assert_eq!(run(&loaded, &registry), (64, 160));
    bencher.bench_local(|| black_box(run(black_box(&loaded), &registry)));
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn end_to_end(bencher: Bencher) {
    let (text, registry) = (text(), spmd_ops::builtins());
    bencher.bench_local(|| {
        let loaded = load(black_box(&text), &registry);
        black_box(run(&loaded, &registry))
    });
}
