#!/usr/bin/env python3
"""Code size of the built-in rules, per file and per op (docs/rule-size.md).

    python3 tools/rule_size.py

Counts the working tree. A file counts up to its test module. An op's
declaration is the named items of its file: each item's doc comment,
attributes (`#[spmd_rule(...)]` included), body, and the `impl` blocks of
the same name. *code* = non-blank lines that do not start with `//`;
*with docs* = non-blank lines.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = ROOT / "spmd-ops" / "src"

# Paddle 3.x's hand-written rules, measured from paddle/phi/infermeta/spmd_rules/
# (.cc and .h of each op; code = lines minus the licence header, blank lines and
# whole-line comments).
PADDLE = {
    "matmul": 388, "elementwise": 588, "reduction": 238, "reshape": 273,
    "embedding": 284, "softmax": 158, "layer_norm": 411, "transpose": 168,
    "split": 189, "concat": 143, "flash_attention": 707,
    "cross_entropy_with_softmax": 417, "squeeze + unsqueeze": 419, "flatten": 160,
}

# op -> (file, items). A `name!` item is every invocation of that macro.
SPMD = {
    "matmul": ("matmul.rs", ["Matmul"]),
    "elementwise": ("elementwise.rs", ["ElementwiseUnary", "ElementwiseBinary", "Multiply"]),
    "reduction": ("reduce.rs", ["reduced", "reduction", "reduction!", "ReduceBase"]),
    "reshape": ("shape.rs", ["reshape_notation", "Reshape", "target_shape"]),
    "embedding": ("embedding.rs", ["Embedding"]),
    "softmax": ("softmax.rs", ["Softmax"]),
    "layer_norm": ("norm.rs", ["LayerNorm"]),
    "transpose": ("shape.rs", ["Transpose"]),
    "split": ("split.rs", ["Split", "SplitWithNum"]),
    "concat": ("split.rs", ["Concat"]),
    "flash_attention": ("attention.rs", ["FlashAttention"]),
    "cross_entropy_with_softmax": ("loss.rs", ["axis_info", "CrossEntropyWithSoftmax"]),
    "squeeze + unsqueeze": ("shape.rs", ["Squeeze", "Unsqueeze"]),
    "flatten": ("shape.rs", ["Flatten"]),
}
# What every rule runs on (tensor and mesh types, the registry, errors and
# the JSON forms are left out, as Paddle's DistMetaTensor and registry are).
SHARED = [
    ("inference engine", ["spmd-core/src/infer/*.rs", "spmd-core/src/merge.rs",
                          "spmd-core/src/policy.rs", "spmd-core/src/rule.rs",
                          "spmd-core/src/einsum.rs", "spmd-core/src/prepared.rs"]),
    ("notation", ["spmd-notation/src/*.rs"]),
    ("macro", ["spmd-macros/src/*.rs"]),
    ("spmd-ops helpers", ["spmd-ops/src/notation.rs"]),
]
CORE = ["matmul", "elementwise", "reduction", "reshape", "embedding", "softmax", "layer_norm"]


def source(path):
    text = path.read_text()
    cut = text.find("#[cfg(test)]\nmod tests")
    return (text if cut < 0 else text[:cut]).split("\n")


def count(lines):
    nb = [l for l in lines if l.strip()]
    return sum(not l.strip().startswith("//") for l in nb), len(nb)


def block_end(lines, start):
    """The last line of the item starting at `start`: its braces balanced,
    or its own line when it ends with `;` before any brace opens."""
    depth = 0
    opened = False
    for k in range(start, len(lines)):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[k].split("//")[0])
        for ch in code:
            if ch in "{(":
                depth += 1
                opened = True
            elif ch in "})":
                depth -= 1
        if opened and depth == 0:
            return k
        if not opened and code.rstrip().endswith(";"):
            return k
    return len(lines) - 1


def in_attributes(lines):
    """Per line: whether it is part of an outer attribute (`#[...]`, which
    may run over several lines, comments included)."""
    marked = [False] * len(lines)
    k = 0
    while k < len(lines):
        if lines[k].strip().startswith("#["):
            depth = 0
            j = k
            while j < len(lines):
                code = re.sub(r'"(\\.|[^"\\])*"', '""', lines[j].split("//")[0])
                depth += code.count("[") - code.count("]")
                marked[j] = True
                if depth <= 0:
                    break
                j += 1
            k = j + 1
        else:
            k += 1
    return marked


def item_start(lines, k, marked):
    """Back from item line `k` over its attributes and doc comment."""
    j = k
    while j > 0 and (lines[j - 1].strip().startswith("///") or marked[j - 1]):
        j -= 1
    return j


def spans(lines, name):
    marked = in_attributes(lines)
    found = []
    if name.endswith("!"):
        pat = re.compile(rf"^{re.escape(name[:-1])}!\s*[({{\[]")
    else:
        pat = re.compile(
            rf"^(pub(\(crate\))? )?(const )?(struct|enum|fn|macro_rules!|impl(<[^>]*>)?) {re.escape(name)}\b"
            rf"|^impl(<[^>]*>)? .* for {re.escape(name)}\b"
        )
    for k, line in enumerate(lines):
        if pat.match(line):
            found.append((item_start(lines, k, marked), block_end(lines, k)))
    return found


def main():
    out = sys.stdout
    out.write("| file | code (with docs) |\n|---|--:|\n")
    total = [0, 0]
    for path in sorted(OPS.glob("*.rs")):
        if path.name == "lib.rs":
            continue
        c, d = count(source(path))
        total[0] += c
        total[1] += d
        out.write(f"| {path.name} | {c} ({d}) |\n")
    out.write(f"| total | {total[0]} ({total[1]}) |\n\n")

    out.write("| op | spmd items | spmd code (with docs) | Paddle code | fewer |\n|---|---|--:|--:|--:|\n")
    sums = {"core": [0, 0, 0], "all": [0, 0, 0]}
    for op, (file, items) in SPMD.items():
        lines = source(OPS / file)
        taken = set()
        for name in items:
            got = spans(lines, name)
            if not got:
                sys.exit(f"{op}: no item `{name}` in {file}")
            for a, b in got:
                taken.update(range(a, b + 1))
        c, d = count([lines[k] for k in sorted(taken)])
        p = PADDLE[op]
        for key in ("all",) + (("core",) if op in CORE else ()):
            sums[key][0] += c
            sums[key][1] += d
            sums[key][2] += p
        names = ", ".join(f"`{n}`" for n in items)
        out.write(f"| {op} | {file}: {names} | {c} ({d}) | {p} | {p / c:.1f}× |\n")
    for key, label in (("core", "7 core ops"), ("all", "all 14 ops")):
        c, d, p = sums[key]
        out.write(f"| **{label}** | | **{c} ({d})** | **{p}** | **{p / c:.1f}×** |\n")

    out.write("\n| shared machinery | files | code (with docs) |\n|---|---|--:|\n")
    for label, files in SHARED:
        paths = sorted(p for pattern in files for p in ROOT.glob(pattern) if p.name != "tests.rs")
        c = d = 0
        for path in paths:
            cc, dd = count(source(path))
            c += cc
            d += dd
        out.write(f"| {label} | {', '.join(files)} | {c} ({d}) |\n")


if __name__ == "__main__":
    main()
