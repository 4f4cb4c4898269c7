//! Per-call cost of the built-in library's hot ops (issue 4), called the way a
//! framework calls them: a rule built once from the registry by Paddle name and
//! attributes, then `forward`/`backward` through `dyn SpmdRule`.
//!
//! Two kinds of op are measured side by side:
//! - ops whose notations are literals (matmul, add, embedding): the notation was
//!   parsed at compile time; a call is pure inference;
//! - ops whose notation depends on attributes and ranks (sum, softmax, reshape,
//!   layer_norm, `build = ...` in their `#[spmd_rule]`): the notation is derived
//!   at run time, and what that costs per call is what these benchmarks show.
//!
//! As in `inference.rs`, divan prints `alloc:` rows only for benchmarks that
//! allocate, and results are dropped inside the timed closure.
//!
//! Run with `cargo bench --bench library`.

use divan::{Bencher, black_box};
use spmd_core::{Attrs, DistAttr, Mesh, Spec, SpmdRule};

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

fn rule(op: &str, attrs: Attrs) -> Box<dyn SpmdRule> {
    spmd_ops::builtins()
        .build(op, &attrs)
        .unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn attr(dims: &[i64]) -> DistAttr {
    DistAttr::from_paddle(dims).expect("valid Paddle mapping")
}

fn mesh() -> Mesh {
    Mesh::new(&[2, 4]).expect("valid mesh")
}

/// Times `forward` on `specs` after checking the rule answers `expect` for
/// its first output, so a benchmark cannot silently measure an error path.
fn bench_forward(bencher: Bencher, op: &dyn SpmdRule, specs: &[Spec<'_>], expect: &str) {
    let mesh = mesh();
    let r = op.forward(&mesh, specs).unwrap();
    assert_eq!(r.outputs[0].to_string(), expect);
    bencher.bench_local(|| drop(black_box(op.forward(black_box(&mesh), black_box(specs)))));
}

/// Times `backward` after checking the first input's requirement.
fn bench_backward(
    bencher: Bencher,
    op: &dyn SpmdRule,
    input_shapes: &[&[usize]],
    outputs: &[Spec<'_>],
    expect: &str,
) {
    let mesh = mesh();
    let r = op.backward(&mesh, input_shapes, outputs).unwrap();
    assert_eq!(r.inputs[0].to_string(), expect);
    bencher.bench_local(|| {
        drop(black_box(op.backward(
            black_box(&mesh),
            black_box(input_shapes),
            black_box(outputs),
        )))
    });
}

const SAMPLES: u32 = 200;
const SIZE: u32 = 500;

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn matmul_forward(bencher: Bencher) {
    let op = rule("matmul", Attrs::new());
    let (x, y) = (attr(&[0, -1, 1]), attr(&[1, -1]));
    let specs = [Spec::new(&[8, 1024, 512], &x), Spec::new(&[512, 256], &y)];
    bench_forward(bencher, &*op, &specs, "[0, -1, -1] partial{1: SUM}");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn matmul_backward(bencher: Bencher) {
    let op = rule("matmul", Attrs::new());
    let out = attr(&[0, -1, 1]);
    let outputs = [Spec::new(&[8, 1024, 256], &out)];
    let shapes: [&[usize]; 2] = [&[8, 1024, 512], &[512, 256]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1, -1]");
}

/// `[8, 1024, 512] + [512]`: the bias broadcasts over the two leading dims.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn add_broadcast_forward(bencher: Bencher) {
    let op = rule("add", Attrs::new());
    let (x, b) = (attr(&[0, -1, 1]), attr(&[-1]));
    let specs = [Spec::new(&[8, 1024, 512], &x), Spec::new(&[512], &b)];
    bench_forward(bencher, &*op, &specs, "[0, -1, 1]");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn add_broadcast_backward(bencher: Bencher) {
    let op = rule("add", Attrs::new());
    let out = attr(&[0, -1, 1]);
    let outputs = [Spec::new(&[8, 1024, 512], &out)];
    let shapes: [&[usize]; 2] = [&[8, 1024, 512], &[512]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1, 1]");
}

/// Ids `[8, 1024]` data parallel, table `[32000, 512]` split by rows on mesh
/// dim 1: the output is partial over the rows' mesh dim.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn embedding_forward(bencher: Bencher) {
    let op = rule("embedding", Attrs::new());
    let (ids, w) = (attr(&[0, -1]), attr(&[1, -1]));
    let specs = [Spec::new(&[8, 1024], &ids), Spec::new(&[32000, 512], &w)];
    bench_forward(bencher, &*op, &specs, "[0, -1, -1] partial{1: SUM}");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn embedding_backward(bencher: Bencher) {
    let op = rule("embedding", Attrs::new());
    let out = attr(&[0, -1, 1]);
    let outputs = [Spec::new(&[8, 1024, 512], &out)];
    let shapes: [&[usize]; 2] = [&[8, 1024], &[32000, 512]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1]");
}

/// `sum` over the last axis, which is sharded: the output is partial.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn sum_forward(bencher: Bencher) {
    let op = rule(
        "sum",
        Attrs::new()
            .with("axis", vec![-1_i64])
            .with("keep_dim", false),
    );
    let x = attr(&[0, -1, 1]);
    let specs = [Spec::new(&[8, 1024, 512], &x)];
    bench_forward(bencher, &*op, &specs, "[0, -1] partial{1: SUM}");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn sum_backward(bencher: Bencher) {
    let op = rule(
        "sum",
        Attrs::new()
            .with("axis", vec![-1_i64])
            .with("keep_dim", false),
    );
    let out = attr(&[0, 1]);
    let outputs = [Spec::new(&[8, 1024], &out)];
    let shapes: [&[usize]; 1] = [&[8, 1024, 512]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, 1, -1]");
}

/// `softmax` on the last axis, which must be replicated.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn softmax_forward(bencher: Bencher) {
    let op = rule("softmax", Attrs::new().with("axis", -1_i64));
    let x = attr(&[0, 1, -1]);
    let specs = [Spec::new(&[8, 1024, 512], &x)];
    bench_forward(bencher, &*op, &specs, "[0, 1, -1]");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn softmax_backward(bencher: Bencher) {
    let op = rule("softmax", Attrs::new().with("axis", -1_i64));
    let out = attr(&[0, -1, 1]);
    let outputs = [Spec::new(&[8, 1024, 512], &out)];
    let shapes: [&[usize]; 1] = [&[8, 1024, 512]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1, -1]");
}

/// Head merge `[8, 1024, 16, 32] -> [8, 1024, 512]`: the heads' sharding
/// carries to the merged dim.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn reshape_forward(bencher: Bencher) {
    let op = rule(
        "reshape",
        Attrs::new().with("shape", vec![8_i64, 1024, 512]),
    );
    let x = attr(&[0, -1, 1, -1]);
    let specs = [Spec::new(&[8, 1024, 16, 32], &x)];
    bench_forward(bencher, &*op, &specs, "[0, -1, 1]");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn reshape_backward(bencher: Bencher) {
    let op = rule(
        "reshape",
        Attrs::new().with("shape", vec![8_i64, 1024, 512]),
    );
    let out = attr(&[0, -1, 1]);
    let outputs = [Spec::new(&[8, 1024, 512], &out)];
    let shapes: [&[usize]; 1] = [&[8, 1024, 16, 32]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1, 1, -1]");
}

/// `layer_norm` over the last axis: the normalized axis is replicated.
#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn layer_norm_forward(bencher: Bencher) {
    let op = rule("layer_norm", Attrs::new().with("begin_norm_axis", 2_i64));
    let (x, s, b) = (attr(&[0, -1, 1]), attr(&[-1]), attr(&[-1]));
    let specs = [
        Spec::new(&[8, 1024, 512], &x),
        Spec::new(&[512], &s),
        Spec::new(&[512], &b),
    ];
    bench_forward(bencher, &*op, &specs, "[0, -1, -1]");
}

#[divan::bench(sample_count = SAMPLES, sample_size = SIZE)]
fn layer_norm_backward(bencher: Bencher) {
    let op = rule("layer_norm", Attrs::new().with("begin_norm_axis", 2_i64));
    let (y, m, v) = (attr(&[0, -1, -1]), attr(&[0, -1]), attr(&[0, -1]));
    let outputs = [
        Spec::new(&[8, 1024, 512], &y),
        Spec::new(&[8, 1024], &m),
        Spec::new(&[8, 1024], &v),
    ];
    let shapes: [&[usize]; 3] = [&[8, 1024, 512], &[512], &[512]];
    bench_backward(bencher, &*op, &shapes, &outputs, "[0, -1, -1]");
}
