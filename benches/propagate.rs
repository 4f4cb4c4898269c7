//! Full propagation of generated graphs of about 1k, 10k and 100k ops:
//! stacked GPT layers (25 ops each, after one embedding) with Megatron-LM's
//! annotations on a 2x4 mesh (data parallel x tensor parallel). The graph
//! is built outside the timed closure; an iteration is one `propagate` call
//! (every rule call, the sweeps, the result's allocation and drop). The
//! target is <= 1 us per op. `plan` is measured the same way.
//!
//! Run with `cargo bench --bench propagate`.

use divan::{Bencher, black_box};
use spmd_graph::{DType, Gpt, GptConfig, gpt, plan, propagate};

fn main() {
    divan::main();
}

/// About `ops` ops of stacked GPT layers.
fn model(ops: usize) -> Gpt {
    let cfg = GptConfig {
        batch: 8,
        seq: 64,
        hidden: 64,
        heads: 4,
        ffn: 256,
        vocab: 512,
        layers: ops / 25,
        ..GptConfig::small_dp_tp()
    };
    gpt(&cfg, &spmd_ops::builtins()).expect("the generated model is valid")
}

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn propagate_gpt(bencher: Bencher, ops: usize) {
    let m = model(ops);
    bencher.bench_local(|| black_box(propagate(black_box(&m.graph)).expect("propagates")));
}

#[divan::bench(args = SIZES, sample_count = 10, sample_size = 1)]
fn plan_gpt(bencher: Bencher, ops: usize) {
    let m = model(ops);
    let p = propagate(&m.graph).expect("propagates");
    bencher.bench_local(|| black_box(plan(black_box(&m.graph), &p, DType::Bf16).expect("plans")));
}
