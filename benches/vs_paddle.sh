#!/usr/bin/env bash
# Paddle 3.3.1's C++ rules and ours on the same seven calls, in one session,
# timed the same way (examples/vs_paddle.rs mirrors the Paddle bench's
# warm-up, interleaved batches and medians), printed as a Markdown table
# with the ratio Paddle / spmd. Wall times move between runs on a shared
# VM; the ratio of two runs taken together is the figure to quote.
#
#   PADDLE_BENCH=/tmp/paddle-cpp-bench/bench benches/vs_paddle.sh [calls] [batches] [warmup]
#
# Building the Paddle side (needs the paddlepaddle==3.3.1 CPU wheel):
#   python3 -m venv /tmp/venv-paddle && /tmp/venv-paddle/bin/pip install paddlepaddle==3.3.1
#   cp -r ../shared/tools/paddle-cpp-bench /tmp/ && PADDLE_VENV=/tmp/venv-paddle /tmp/paddle-cpp-bench/build.sh
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
