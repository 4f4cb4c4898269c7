"""Export a Hugging Face causal LM, built from its config with small sizes and
random weights, with torch.export, and write its graph in spmd-graph's JSON.

    python export.py llama --layers 2 -o llama.json
    python export.py opt gpt-neox gpt2 --out-dir ../../spmd-graph/graphs/hf
    python export.py --config-class MistralConfig --layers 2 -o mistral.json
    python export.py mixtral qwen3-moe deepseek-v3 --dispatch --batch 4 --out-dir ../../spmd-graph/graphs/hf
    python export.py deepseek-v3 --full-size --layers 0 --dispatch --capacity-factor 1.25 --batch 8 --seq 4096 -o deepseek-v3-671b.json

A command line over the `spmd` package (`pip install ./python`): the
models are `spmd.torch.hf`'s, the export `spmd.torch`'s (its docs say what
the graph holds). Nothing is downloaded.
"""

import argparse
import os
import sys

from spmd.torch import graph_json, hf, write


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="short names: " + ", ".join(hf.ALIASES))
    p.add_argument("--config-class", help="any transformers config class of a causal LM")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--mesh", type=int, nargs="+", default=[4])
    p.add_argument(
        "--full-size",
        action="store_true",
        help="the config class's default sizes on the meta device (LlamaConfig: Llama-2-7B); --layers 0 keeps its layer count",
    )
    p.add_argument(
        "--dispatch",
        action="store_true",
        help="mixture-of-experts layers in the form expert parallelism shards (spmd.torch.moe), a group per sequence",
    )
    p.add_argument(
        "--capacity-factor",
        type=float,
        help="with --dispatch: each expert's room, this factor times its even share of a group's tokens (default: every token)",
    )
    p.add_argument("-o", "--output", help="the JSON file (one model)")
    p.add_argument("--out-dir", help="one <model>.json per model")
    a = p.parse_args()
    wanted = [(m, hf.ALIASES.get(m) or sys.exit(f"unknown model {m}; known: {', '.join(hf.ALIASES)}")) for m in a.models]
    if a.config_class:
        wanted.append((a.config_class.removesuffix("Config").lower(), a.config_class))
    if not wanted:
        p.error("name a model or --config-class")
    if a.output and len(wanted) != 1:
        p.error("-o takes one model; use --out-dir for several")
    for short, cls in wanted:
        graph = graph_json(hf.build(cls, a.layers, a.batch, a.seq, a.full_size, a.dispatch, a.capacity_factor), a.mesh)
        path = a.output or os.path.join(a.out_dir or ".", f"{short}.json")
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write(graph, path)
        print(f"{cls}: {len(graph['ops'])} ops, {len(graph['tensors'])} tensors -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
