//! Per-call cost of the built-in library's hot ops, called the way a
//! framework calls them: a rule built once from the registry by Paddle name
//! and attributes, then `forward`/`backward` through `dyn SpmdRule`. The
//! cases are `benches/common/cases.rs`, which `benches/instructions.sh` also
//! counts instructions for.
//!
//! As in `inference.rs`, divan prints `alloc:` rows only for benchmarks that
//! allocate, and results are dropped inside the timed closure.
//!
//! Run with `cargo bench --bench library`.

#[path = "common/cases.rs"]
mod cases;

use divan::{Bencher, black_box};

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

const SAMPLES: u32 = 200;
/// Every case of `benches/common/cases.rs`, by name.
const CASES: &[&str] = &[
    "matmul_forward",
    "matmul_backward",
    "add_broadcast_forward",
    "add_broadcast_backward",
    "embedding_forward",
    "embedding_backward",
    "sum_forward",
    "sum_backward",
    "softmax_forward",
    "softmax_backward",
    "reshape_forward",
    "reshape_backward",
    "layer_norm_forward",
    "layer_norm_backward",
];
const SIZE: u32 = 500;

/// Times the case after checking its answer.
fn bench(bencher: Bencher, name: &str) {
    let case = cases::by_name(name).expect("a case of benches/common/cases.rs");
    case.check();
    let mesh = cases::mesh();
    case.with_specs(|specs, shapes| {
        bencher.bench_local(|| {
            drop(black_box(case.call(
                black_box(&mesh),
                black_box(specs),
                black_box(shapes),
            )))
        })
    });
}

#[divan::bench(
    sample_count = SAMPLES,
    sample_size = SIZE,
    args = CASES
)]
fn library(bencher: Bencher, name: &str) {
    bench(bencher, name);
}

/// The same calls answered into one reused result (`SpmdRule::infer_into`),
/// as a search asking many questions calls them: no result is built or
/// moved per call.
#[divan::bench(
    sample_count = SAMPLES,
    sample_size = SIZE,
    args = CASES
)]
fn library_into(bencher: Bencher, name: &str) {
    let case = cases::by_name(name).expect("a case of benches/common/cases.rs");
    case.check();
    let mesh = cases::mesh();
    let mut out = spmd_core::RuleResult::default();
    case.with_specs(|specs, shapes| {
        bencher.bench_local(|| {
            black_box(case.call_into(
                black_box(&mesh),
                black_box(specs),
                black_box(shapes),
                &mut out,
            ))
            .expect("the case answers");
        })
    });
}

/// The seven calls the Paddle C++ benchmark (see `benches/vs_paddle.sh`) times Paddle 3.3.1's
/// C++ rules on (`cases::paddle()`); `benches/vs_paddle.sh` runs both sides
/// in one session and prints the ratios.
const PADDLE_CASES: &[&str] = &[
    "paddle_matmul_forward",
    "paddle_matmul_reverse",
    "paddle_add_forward_broadcast",
    "paddle_embedding_forward",
    "paddle_sum_forward",
    "paddle_softmax_forward",
    "paddle_layer_norm_forward",
];

#[divan::bench(
    sample_count = SAMPLES,
    sample_size = SIZE,
    args = PADDLE_CASES
)]
fn paddle_cases(bencher: Bencher, name: &str) {
    bench(bencher, name);
}
