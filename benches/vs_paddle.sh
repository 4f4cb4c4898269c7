#!/usr/bin/env bash
# Paddle 3.3.1's C++ rules and ours on the same seven calls, in one session,
# timed the same way (examples/vs_paddle.rs mirrors the Paddle bench's
# warm-up, interleaved batches and medians), printed as a Markdown table
# with the ratio Paddle / spmd. Wall times move between runs on a shared
# VM; the ratio of two runs taken together is the figure to quote.
#
#   PADDLE_BENCH=/tmp/paddle-cpp-bench/bench benches/vs_paddle.sh [calls] [batches] [warmup]
#
# The Paddle side is a small C++ program, not part of this repository, that
# links PaddlePaddle 3.3.1's `libphi_core.so` (from the paddlepaddle==3.3.1 CPU
# wheel) and calls its SPMD rules (`paddle/phi/infermeta/spmd_rules/*.h`) on
# the seven calls of `cases::paddle()`: 20,000 warm-up calls per rule, then 30
# batches of 20,000 calls interleaved across the rules, printing JSON of the
# form {"rules": {"matmul_forward": {"median_ns": ...}, ...}}. Point
# PADDLE_BENCH at its binary; its arguments are ours ([calls] [batches] [warmup]).
set -euo pipefail
cd "$(dirname "$0")/.."
bench="${PADDLE_BENCH:-/tmp/paddle-cpp-bench/bench}"
[ -x "$bench" ] || { echo "no Paddle bench at $bench (see the comment at the top of $0)" >&2; exit 2; }
cargo build --release --quiet --example vs_paddle
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Paddle first, then ours right after: the same minutes of the same machine.
"$bench" "$@" > "$out"
target/release/examples/vs_paddle "$@" --paddle "$out"
