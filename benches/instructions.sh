#!/usr/bin/env bash
# Instructions per call of each benchmark case (benches/common/cases.rs),
# counted by callgrind: the difference between 11,000 and 1,000 calls,
# divided by 10,000, so start-up and the one-time check cancel. Instruction
# counts do not move with the machine's load, unlike wall time.
#
#   benches/instructions.sh            every case, results returned by value
#   benches/instructions.sh sum_forward softmax_forward
#   benches/instructions.sh --into     answered into one reused result
#                                      (SpmdRule::infer_into), as a search does
#   benches/instructions.sh --prepared the forward cases, answered by the call
#                                      prepared for their shapes
#                                      (SpmdRule::prepare), as a graph does
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
cargo build --release --quiet --example calls
bin=target/release/examples/calls
mode=
if [ "${1:-}" = "--into" ]; then
    mode=into
    shift
elif [ "${1:-}" = "--prepared" ]; then
    mode=prepared
    shift
fi
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
    mapfile -t cases < <("$bin" --list)
fi
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" $mode 2>&1 \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
printf '%-26s %s\n' case instructions/call
for c in "${cases[@]}"; do
    # Backward cases have no prepared call.
    if [ "$mode" = prepared ] && ! "$bin" "$c" 1 prepared 2>/dev/null; then
        continue
    fi
    a=$(count "$c" 1000)
    b=$(count "$c" 11000)
    printf '%-26s %s\n' "$c" $(( (b - a) / 10000 ))
done
