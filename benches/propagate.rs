//! Full propagation of generated graphs of about 1k, 10k and 100k ops, on a
//! 2x4 mesh (data parallel x tensor parallel):
//! - `gpt`: stacked GPT layers (24 ops each, after one embedding) with
//!   Megatron-LM's annotations. The layers repeat, so after the first one
//!   every rule answer comes from the memo (see `spmd_graph`'s `memo`).
//! - `chain`: matmul + gelu pairs whose widths all differ, weights split
//!   alternately by columns and rows: no two ops share a signature, so every
//!   rule runs (the memo never hits).
//!
//! The graph is built outside the timed closure; an iteration is one
//! `propagate` call (every rule call, the sweeps, the result's allocation and
//! drop). The target is <= 1 us per op. `plan` is measured the same way.
//!
//! Run with `cargo bench --bench propagate`.

use divan::{Bencher, black_box};
use spmd_core::{Attrs, DistAttr, Mesh};
use spmd_graph::{DType, Graph, GraphBuilder, plan, propagate};
use spmd_models::{GptConfig, gpt};

fn main() {
    divan::main();
}

/// About `ops` ops of stacked GPT layers.
fn model(ops: usize) -> Graph {
    let cfg = GptConfig {
        batch: 8,
        seq: 64,
        hidden: 64,
        heads: 4,
        ffn: 256,
        vocab: 512,
        layers: ops / 24,
        ..GptConfig::small_dp_tp()
    };
    gpt(&cfg, &spmd_ops::builtins())
        .expect("the generated model is valid")
        .graph
}

/// `ops` ops of matmul + gelu pairs, every width different.
fn chain(ops: usize) -> Graph {
    let mut b = GraphBuilder::new(Mesh::new(&[2, 4]).expect("valid mesh"));
    let batch = 64;
    let mut width = 64;
    let mut x = b.tensor("x", &[batch, width]).expect("fresh name");
    b.annotate(x, DistAttr::from_paddle(&[0, -1]).expect("valid"))
        .expect("valid annotation");
    for i in 0..ops / 2 {
        let next = 64 + 8 * (i + 1);
        let split: &[i64] = if i % 2 == 0 { &[-1, 1] } else { &[1, -1] };
        let w = b
            .param(
                &format!("w{i}"),
                &[width, next],
                DistAttr::from_paddle(split),
            )
            .expect("fresh name");
        let h = b
            .apply(
                "",
                "matmul",
                Attrs::new(),
                &[x, w],
                (&format!("h{i}"), &[batch, next]),
            )
            .expect("fresh name");
        x = b
            .apply(
                "",
                "gelu",
                Attrs::new(),
                &[h],
                (&format!("a{i}"), &[batch, next]),
            )
            .expect("fresh name");
        width = next;
    }
    b.build(&spmd_ops::builtins()).expect("the chain is valid")
}

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

fn bench_propagate(bencher: Bencher, g: &Graph) {
    bencher.bench_local(|| black_box(propagate(black_box(g)).expect("propagates")));
}

fn bench_plan(bencher: Bencher, g: &Graph) {
    let p = propagate(g).expect("propagates");
    bencher.bench_local(|| black_box(plan(black_box(g), &p, DType::Bf16).expect("plans")));
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn propagate_gpt(bencher: Bencher, ops: usize) {
    bench_propagate(bencher, &model(ops));
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn plan_gpt(bencher: Bencher, ops: usize) {
    bench_plan(bencher, &model(ops));
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn propagate_chain(bencher: Bencher, ops: usize) {
    bench_propagate(bencher, &chain(ops));
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn plan_chain(bencher: Bencher, ops: usize) {
    bench_plan(bencher, &chain(ops));
}
