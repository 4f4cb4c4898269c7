"""The Python call overhead of spmd.infer: the median time of one
`spmd.infer` call from Python, beside the median time of the same call's
Rust side (building the rule through the registry and running it, on
arguments converted once), measured in one run.

    python python/bench/overhead.py
"""

import statistics
import timeit

import spmd
from spmd import _spmd

CALLS = {
    "matmul": ("matmul", [([64, 32], [1, 0]), ([32, 48], [-1, -1])]),
    "add": ("add", [([16, 8], [0, -1]), ([8], [-1])]),
    "softmax": ("softmax", [([8, 16, 32], [0, 1, -1])]),
}


def main() -> None:
    mesh = spmd.Mesh([2, 4])
    n, rounds = 20000, 15
    print(f"{'call':<8} {'spmd.infer':>11} {'Rust side':>10} {'overhead':>9}   (medians of {rounds} rounds of {n})")
    for name, (op, inputs) in CALLS.items():
        py, rust = [], []
        for _ in range(rounds):
            py.append(timeit.timeit(lambda: spmd.infer(op, mesh, inputs), number=n) / n)
            rust.append(_spmd._rust_infer_seconds(op, mesh, inputs, n) / n)
        p, r = statistics.median(py) * 1e6, statistics.median(rust) * 1e6
        print(f"{name:<8} {p:>9.2f}us {r:>8.2f}us {p - r:>7.2f}us")


if __name__ == "__main__":
    main()
