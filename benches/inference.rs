//! Per-call cost of sharding inference on the core's direct path (docs/semantics.md §8).
//!
//! Every benchmark builds its rule once from a parsed notation and prepares the
//! specs outside the timed closure, so an iteration is exactly one
//! `forward`/`backward` call plus the drop of its result (as a real caller
//! would). The result (a ~800-byte `RuleResult`) is dropped inside the closure
//! rather than returned: returned values are kept in a buffer of one slot per
//! iteration until the sample ends, and with 1000 iterations per sample that
//! buffer (~800 KB) would put cache misses into the measurement. Sample size and
//! count are fixed because divan's automatic sample size is sometimes 1 here,
//! which makes the timer's precision (~30 ns) dominate.
//!
//! `divan::AllocProfiler` counts heap allocations per call. Divan prints the
//! `alloc:`/`dealloc:` rows only for benchmarks that allocate, so a benchmark
//! without those rows made zero allocations per call, which is the docs/semantics.md §8
//! target (rank <= 8, mesh rank <= 4, <= 8 operands). The time target for matmul
//! forward is <= 50 ns.
//!
//! Run with `cargo bench --bench inference`.

use divan::{Bencher, black_box};
use spmd_core::SpmdRuleExt;
// `spmd_core::notation` is the `spmd_notation` crate, re-exported.
use spmd_core::notation::{Notation, parse};
use spmd_core::{DistAttr, Einsum, EinsumRule, Mesh, MeshSet, Partial, Policy, ReduceType, Spec};

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    println!(
        "allocations per call: divan prints `alloc:` rows only for benchmarks that \
         allocate; a benchmark without them made 0 allocations per call"
    );
    divan::main();
}

fn mesh_2x4() -> Mesh {
    Mesh::new(&[2, 4]).expect("valid mesh")
}

fn attr(dims: &[i64]) -> DistAttr {
    DistAttr::from_paddle(dims).expect("valid Paddle mapping")
}

fn notation(text: &str) -> Notation {
    parse(text).expect("valid notation")
}

/// Matmul forward, contraction axis `k` sharded on mesh dim 1: the output is
/// `[0, -1] partial{1: SUM}`.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn matmul_forward(bencher: Bencher) {
    let n = notation("mk,kn->mn");
    let rule = EinsumRule::new("matmul", n.plan());
    let mesh = mesh_2x4();
    let (xa, ya) = (attr(&[0, 1]), attr(&[1, -1]));
    let specs = [Spec::new(&[1024, 512], &xa), Spec::new(&[512, 256], &ya)];

    let r = rule.forward(&mesh, &specs).unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1] partial{1: SUM}");

    bencher.bench_local(|| drop(black_box(rule.forward(black_box(&mesh), black_box(&specs)))));
}

/// Runs `f` with `matmul_forward`'s call prepared once
/// (`EinsumRule::prepare_forward`), its mesh and its layouts.
fn with_prepared_matmul(f: impl FnOnce(&spmd_core::PreparedForward<'_>, &Mesh, &[&DistAttr])) {
    let n = notation("mk,kn->mn");
    let rule = EinsumRule::new("matmul", n.plan());
    let call = rule.prepare_forward(&[&[1024, 512], &[512, 256]], &[]);
    let (xa, ya) = (attr(&[0, 1]), attr(&[1, -1]));
    f(&call, &mesh_2x4(), &[&xa, &ya]);
}

/// The prepared call: each call reads only the layouts, into one reused
/// result, as a search asking about many layouts of the same tensors
/// calls it.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn prepared_matmul_forward(bencher: Bencher) {
    with_prepared_matmul(|call, mesh, attrs| {
        let mut out = spmd_core::RuleResult::default();
        call.forward_into(mesh, attrs, &mut out).unwrap();
        assert_eq!(out.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
        bencher.bench_local(|| {
            black_box(call.forward_into(black_box(mesh), black_box(attrs), &mut out)).unwrap()
        });
    });
}

/// The same prepared call answered into fixed arrays
/// (`PreparedForward::forward_inline`): no `SmallVec` to check or drop.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn inline_matmul_forward(bencher: Bencher) {
    with_prepared_matmul(|call, mesh, attrs| {
        let mut out = spmd_core::InlineResult::default();
        call.forward_inline(mesh, attrs, &mut out).unwrap();
        let answer = out.output(0).unwrap().to_string();
        assert_eq!(answer, "[0, -1] partial{1: SUM}");
        bencher.bench_local(|| {
            black_box(call.forward_inline(black_box(mesh), black_box(attrs), &mut out)).unwrap()
        });
    });
}

/// Matmul backward: the output's mapping gives both inputs' requirements
/// (`k` is in no output, so it is replicated on the inputs).
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn matmul_backward(bencher: Bencher) {
    let n = notation("mk,kn->mn");
    let rule = EinsumRule::new("matmul", n.plan());
    let mesh = mesh_2x4();
    let out = attr(&[0, 1]);
    let outputs = [Spec::new(&[1024, 256], &out)];
    let input_shapes: [&[usize]; 2] = [&[1024, 512], &[512, 256]];

    let r = rule.backward(&mesh, &input_shapes, &outputs).unwrap();
    assert_eq!(r.inputs[0].to_string(), "[0, -1]");
    assert_eq!(r.inputs[1].to_string(), "[-1, 1]");

    bencher.bench_local(|| {
        drop(black_box(rule.backward(
            black_box(&mesh),
            black_box(&input_shapes),
            black_box(&outputs),
        )))
    });
}

/// Batched matmul with a batch ellipsis (width 1): batch on mesh dim 0,
/// contraction on mesh dim 1.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn batched_matmul_forward(bencher: Bencher) {
    let n = notation("...mk,...kn->...mn");
    let rule = EinsumRule::new("matmul", n.plan());
    let mesh = mesh_2x4();
    let (xa, ya) = (attr(&[0, -1, 1]), attr(&[-1, 1, -1]));
    let specs = [
        Spec::new(&[16, 1024, 512], &xa),
        Spec::new(&[16, 512, 256], &ya),
    ];

    let r = rule.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[1].to_string(), "[0, 1, -1]");
    assert_eq!(r.outputs[0].to_string(), "[0, -1, -1] partial{1: SUM}");

    bencher.bench_local(|| drop(black_box(rule.forward(black_box(&mesh), black_box(&specs)))));
}

/// Elementwise add with numpy broadcasting: x `[8, 1, 512]` against y `[512]`.
/// x shards the leading dim on mesh dim 0, y shards the shared last dim on
/// mesh dim 1; the merge combines both, so x must also be split on its last dim.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn elementwise_broadcast_forward(bencher: Bencher) {
    let n = notation("...,...->...");
    let rule = EinsumRule::new("add", n.plan());
    let mesh = mesh_2x4();
    let (xa, ya) = (attr(&[0, -1, -1]), attr(&[1]));
    let specs = [Spec::new(&[8, 1, 512], &xa), Spec::new(&[512], &ya)];

    let r = rule.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[0].to_string(), "[0, -1, 1]");
    assert_eq!(r.inputs[1].to_string(), "[1]");
    assert_eq!(r.outputs[0].to_string(), "[0, -1, 1]");

    bencher.bench_local(|| drop(black_box(rule.forward(black_box(&mesh), black_box(&specs)))));
}

/// Embedding with a row-sharded table (Paddle's strict conflict policy): the
/// table's row axis `j` is in no output, so the output is partial over mesh
/// dim 0.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn embedding_forward(bencher: Bencher) {
    let n = notation("ab,jk->abk");
    let rule = EinsumRule::new("embedding", n.plan()).with_policy(Policy::STRICT);
    let mesh = mesh_2x4();
    let (xa, wa) = (attr(&[1, -1]), attr(&[0, -1]));
    let specs = [Spec::new(&[4, 1024], &xa), Spec::new(&[512, 768], &wa)];

    let r = rule.forward(&mesh, &specs).unwrap();
    assert_eq!(r.outputs[0].to_string(), "[1, -1, -1] partial{0: SUM}");

    bencher.bench_local(|| drop(black_box(rule.forward(black_box(&mesh), black_box(&specs)))));
}

/// Embedding backward from a partial output: the table's rows come back
/// replicated (the unsharded-missing-axis fallback).
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn embedding_backward(bencher: Bencher) {
    let n = notation("ab,jk->abk");
    let rule = EinsumRule::new("embedding", n.plan()).with_policy(Policy::STRICT);
    let mesh = mesh_2x4();
    let out = attr(&[1, -1, -1]).with_partial(Partial::over(MeshSet::single(0), ReduceType::Sum));
    let outputs = [Spec::new(&[4, 1024, 768], &out)];
    let input_shapes: [&[usize]; 2] = [&[4, 1024], &[512, 768]];

    let r = rule.backward(&mesh, &input_shapes, &outputs).unwrap();
    assert_eq!(r.inputs[0].to_string(), "[1, -1]");
    assert_eq!(r.inputs[1].to_string(), "[-1, -1]");

    bencher.bench_local(|| {
        drop(black_box(rule.backward(
            black_box(&mesh),
            black_box(&input_shapes),
            black_box(&outputs),
        )))
    });
}

/// The run-time `Einsum` op (notation parsed once in `Einsum::new`): its
/// `forward` only borrows the plan into an `EinsumRule`, so it should cost the
/// same as `matmul_forward`.
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn einsum_runtime_matmul_forward(bencher: Bencher) {
    let op = Einsum::new("mk,kn->mn").unwrap();
    let mesh = mesh_2x4();
    let (xa, ya) = (attr(&[0, 1]), attr(&[1, -1]));
    let specs = [Spec::new(&[1024, 512], &xa), Spec::new(&[512, 256], &ya)];

    let r = op.forward(&mesh, &specs).unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1] partial{1: SUM}");

    bencher.bench_local(|| {
        drop(black_box(
            black_box(&op).forward(black_box(&mesh), black_box(&specs)),
        ))
    });
}

/// The same matmul forward as `matmul_forward`, through a `#[spmd_rule]` op:
/// the macro's const plan and generated impl must cost what the direct path
/// costs (issue 3).
#[divan::bench(sample_count = 300, sample_size = 1000)]
fn macro_matmul_forward(bencher: Bencher) {
    #[spmd_core::spmd_rule(name = "matmul", einsum = "mk,kn->mn")]
    struct Matmul {}

    let rule = Matmul {};
    let mesh = mesh_2x4();
    let (xa, ya) = (attr(&[0, 1]), attr(&[1, -1]));
    let specs = [Spec::new(&[1024, 512], &xa), Spec::new(&[512, 256], &ya)];

    let r = rule.forward(&mesh, &specs).unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
    bencher.bench_local(|| {
        drop(black_box(&rule).forward(black_box(&mesh), black_box(&specs)));
    });
}
