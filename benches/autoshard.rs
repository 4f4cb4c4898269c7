//! `spmd autoshard`'s whole search, as the CLI runs it: parse the graph
//! JSON, build every rule, price every role combination, descend, and write
//! the plan. On the committed full-size Llama-2-7B graph (32 layers, 2,355
//! ATen ops) with a 24 GiB budget, on meshes `[8]`, `[2, 4]` and `[4, 8]`;
//! and on the 2-layer Llama, OPT and GPT-NeoX graphs on `[4]` and `[2, 2]`.
//! The decompression of the 7B file is outside the timing.
//!
//! Before timing, each case prints its plan's modelled step time beside the
//! lower bound, the best baseline that fits and the MIP solver's bound (the
//! gap the Quality target reads), so that a speed-up that costs quality
//! shows. The whole search includes the solver's time (at most
//! `Options::SOLVER_TIME`).
//!
//! Run with `cargo bench --bench autoshard`.

use divan::{Bencher, black_box};
use spmd_autoshard::{Options, Outcome, autoshard, report::time};
use spmd_graph::json::GraphFile;

#[path = "common/full_size.rs"]
mod full_size;

const SMALL: [(&str, &str); 3] = [
    ("llama", include_str!("../spmd-graph/graphs/hf/llama.json")),
    ("opt", include_str!("../spmd-graph/graphs/hf/opt.json")),
    (
        "gpt-neox",
        include_str!("../spmd-graph/graphs/hf/gpt-neox.json"),
    ),
];

fn search(text: &str, mesh: &[usize], memory: Option<u64>) -> Outcome {
    let file: GraphFile = serde_json::from_str(text).expect("graph JSON");
    let mut options = Options::new(mesh.to_vec());
    options.memory = memory;
    let outcome = autoshard(&file, &spmd_ops::builtins(), &options, &mut |_| {}).expect("a plan");
    black_box(spmd_autoshard::report::plan_json(&outcome.plan));
    outcome
}

fn quality(name: &str, o: &Outcome) {
    let best = o
        .baselines
        .iter()
        .filter_map(|b| b.figures.as_ref().ok().map(|f| (b.name, f)))
        .filter(|(_, f)| o.memory_budget.is_none_or(|m| f.memory.total <= m))
        .min_by(|a, b| a.1.step_time.total_cmp(&b.1.step_time));
    eprintln!(
        "{name:<18} step {:>11}  bound {:>11} ({:.2}x)  best baseline: {}  ({} plans priced)",
        time(o.figures.step_time),
        time(o.step_time_bound),
        1.0 + o.gap,
        best.map_or("none fits".to_string(), |(n, f)| format!(
            "{n} {}",
            time(f.step_time)
        )),
        o.search.evaluated
    );
    match &o.solver {
        Ok(b) => eprintln!(
            "{:<18} solver bound {:>11} ({}, {:.2} s): the plan is {:.1}% above it",
            "",
            time(b.bound),
            b.stop.describe(),
            b.build_seconds + b.solve_seconds,
            100.0 * (o.figures.step_time / b.bound - 1.0)
        ),
        Err(why) => eprintln!("{:<18} solver bound: none ({why})", ""),
    }
}

const GIB: u64 = 1 << 30;
const MESHES_7B: [&[usize]; 3] = [&[8], &[2, 4], &[4, 8]];
const MESHES_SMALL: [&[usize]; 2] = [&[4], &[2, 2]];

fn main() {
    let text = full_size::llama_2_7b();
    for mesh in MESHES_7B {
        quality(
            &format!("7b {mesh:?}"),
            &search(&text, mesh, Some(24 * GIB)),
        );
    }
    for (name, text) in SMALL {
        for mesh in MESHES_SMALL {
            quality(&format!("{name} {mesh:?}"), &search(text, mesh, None));
        }
    }
    divan::main();
}

#[divan::bench(args = MESHES_7B, sample_count = 3, sample_size = 1)]
fn llama_2_7b(bencher: Bencher, mesh: &[usize]) {
    let text = full_size::llama_2_7b();
    bencher.bench_local(|| search(black_box(&text), mesh, Some(24 * GIB)));
}

#[divan::bench(args = MESHES_SMALL, sample_count = 10, sample_size = 1)]
fn two_layer_llama(bencher: Bencher, mesh: &[usize]) {
    bencher.bench_local(|| search(black_box(SMALL[0].1), mesh, None));
}

#[divan::bench(args = MESHES_SMALL, sample_count = 10, sample_size = 1)]
fn two_layer_opt(bencher: Bencher, mesh: &[usize]) {
    bencher.bench_local(|| search(black_box(SMALL[1].1), mesh, None));
}

#[divan::bench(args = MESHES_SMALL, sample_count = 10, sample_size = 1)]
fn two_layer_gpt_neox(bencher: Bencher, mesh: &[usize]) {
    bencher.bench_local(|| search(black_box(SMALL[2].1), mesh, None));
}
