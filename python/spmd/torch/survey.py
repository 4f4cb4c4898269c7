"""Every causal LM of the pinned transformers, exported and propagated: the
architecture table of docs/models.md.

    python tools/torch_export/survey.py --spmd target/release/spmd --write docs/models.md

For each model type registered for `AutoModelForCausalLM`, `spmd.torch.hf`
builds its config class small (as `--config-class` does: 2 layers, hidden
64, 8 heads, a vocabulary that holds the padding id, the class's own
attention where SDPA is missing) and exports it; `spmd propagate` then reads
the graph, refusing op kinds that have no rule, and, where the model has
Megatron-LM's projections (`q/k/v/gate/up_proj` column-parallel,
`o/down_proj` row-parallel), propagates it under that plan on a mesh of 4,
forward and backward, and counts the collectives. Every model that
propagates is also propagated under data parallelism (its input ids' batch
split over a mesh of 2, forward and backward). One model's failure is that
row's reason, never the survey's end. Progress goes to stderr.
"""

import argparse
import json
import os
import re
import multiprocessing
import subprocess
import sys
import tempfile
import time
from collections import Counter

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from spmd.torch import graph_json, hf, write

COLUMN = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]
ROW = ["o_proj", "down_proj"]
BEGIN, END = "<!-- survey:begin -->", "<!-- survey:end -->"


def export_one(config_class, path, memory, conn):
    """In a child process: export `config_class` to `path`; send back the
    op counts or the reason it failed. Its memory is capped, so one
    architecture whose defaults are huge fails alone."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    try:
        graph = graph_json(hf.build(config_class, 2, 2, 16), [4])
        write(graph, path)
        conn.send(("ok", len(graph["ops"]), len({o["op"] for o in graph["ops"]})))
    except BaseException as e:  # noqa: BLE001 - any failure is the row's reason
        conn.send(("error", "out of memory" if isinstance(e, MemoryError) else one_line(e)))


def one_line(e):
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    line = line.replace("|", "/")
    return (line[:140] + "...") if len(line) > 140 else line


def megatron_plan(graph):
    """The Megatron plan's entries whose projections the graph has."""
    params = [t["name"] for t in graph["tensors"] if t.get("param")]
    entries = []
    for names, mapping in ((COLUMN, [0, -1]), (ROW, [-1, 0])):
        for n in names:
            if any(p.endswith(f".{n}.weight") for p in params):
                entries.append({"tensors": f"*.{n}.weight", "dims_mapping": mapping})
    has_col = any(e["dims_mapping"] == [0, -1] for e in entries)
    has_row = any(e["dims_mapping"] == [-1, 0] for e in entries)
    return entries if has_col and has_row else None


# Data parallelism: the batch of the input ids (2 in the survey) split over
# a mesh of 2.
DATA_PARALLEL = {"mesh": [2], "annotations": [{"tensors": "input_ids", "dims_mapping": [0, -1]}]}


def under_plan(binary, path, plan_path, plan):
    """`spmd propagate --backward` of the graph under `plan`: (forward,
    backward) collectives, or the reason it failed."""
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    code, out, err = spmd(binary, "propagate", path, "--plan", plan_path, "--backward", "--json")
    if code != 0:
        return err.removeprefix("error: ").replace(path + ": ", "")
    v = json.loads(out)
    return (collectives(v["counts"]), collectives(v["backward"]["counts"]))


def spmd(binary, *args):
    r = subprocess.run([binary, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr.strip()


def collectives(counts):
    return ", ".join(f"{n} {k.replace('_', '-')}" for k, n in sorted(counts.items())) or "none"


def survey(binary, timeout, memory, only):
    rows = []
    types = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if only:
        types = [t for t in types if t in only]
    tmp = tempfile.mkdtemp(prefix="spmd-survey-")
    for i, model_type in enumerate(types, 1):
        config_class = hf.config_class_of(model_type)
        row = {"type": model_type, "config": config_class}
        started = time.time()
        path = os.path.join(tmp, f"{model_type}.json")
        parent, child = multiprocessing.get_context("fork").Pipe()
        worker = multiprocessing.get_context("fork").Process(
            target=export_one, args=(config_class, path, memory, child)
        )
        worker.start()
        if parent.poll(timeout):
            answer = parent.recv()
        else:
            answer = ("error", f"export took over {timeout} s")
        worker.join(5)
        if worker.is_alive():
            worker.kill()
        if worker.exitcode not in (0, None) and answer[0] == "ok":
            answer = ("error", f"the exporter exited with {worker.exitcode}")
        if answer[0] == "ok":
            row["ops"], row["kinds"] = answer[1], answer[2]
            with open(path) as f:
                graph = json.load(f)
        else:
            row["export_error"] = answer[1]
        if "ops" in row:
            code, out, err = spmd(binary, "propagate", path, "--json")
            if code == 0:
                row["propagates"] = True
                row["dp"] = under_plan(binary, path, os.path.join(tmp, f"{model_type}_dp.json"), DATA_PARALLEL)
                plan = megatron_plan(graph)
                if plan:
                    plan_path = os.path.join(tmp, f"{model_type}_tp.json")
                    with open(plan_path, "w") as f:
                        json.dump({"annotations": plan}, f)
                    code, out, err = spmd(binary, "propagate", path, "--plan", plan_path, "--backward", "--json")
                    if code == 0:
                        v = json.loads(out)
                        row["tp"] = (collectives(v["counts"]), collectives(v["backward"]["counts"]))
                    else:
                        row["tp_error"] = err.removeprefix("error: ").replace(path + ": ", "")
            else:
                row["refused"] = err.removeprefix("error: ").replace(path + ": ", "")
        rows.append(row)
        state = "refused" if "refused" in row else ("exported" if "ops" in row else "not exported")
        print(f"[{i}/{len(types)}] {model_type}: {state} ({time.time() - started:.1f} s)", file=sys.stderr)
    return rows


def refused_kinds(message):
    """`aten.topk`, ... out of the loader's "no rule for N op kind(s)" line."""
    if "no rule for" not in message:
        return one_line(message)
    kinds = re.findall(r"`([^`]+)` \(\d+ op\(s\)", message)
    return "no rule: " + ", ".join(f"`{k}`" for k in kinds)


def table(rows):
    exported = [r for r in rows if "ops" in r]
    propagated = [r for r in exported if r.get("propagates")]
    planned = [r for r in propagated if "tp" in r]
    data_parallel = [r for r in propagated if isinstance(r.get("dp"), tuple)]
    lines = [
        BEGIN,
        "",
        f"transformers {transformers.__version__}: {len(rows)} architectures registered for "
        f"`AutoModelForCausalLM`; {len(exported)} export, {len(propagated)} propagate, "
        f"{len(data_parallel)} propagate under data parallelism (the batch split over a mesh of 2), "
        f"{len(planned)} have Megatron's projections and propagate under that plan (mesh of 4); "
        "forward / backward collectives. Regenerate: `python tools/torch_export/survey.py "
        "--spmd target/release/spmd --write docs/models.md` (in the exporter's venv, after "
        "`cargo build --release -p spmd-cli`).",
        "",
        "| architecture | config class | export | ops (kinds) | propagate | DP: forward / backward | Megatron TP: forward / backward |",
        "|---|---|---|--:|---|---|---|",
    ]
    for r in rows:
        if "ops" not in r:
            lines.append(f"| `{r['type']}` | `{r['config']}` | no: {r['export_error']} | | | | |")
            continue
        dp = r.get("dp", "")
        dp = f"{dp[0]} / {dp[1]}" if isinstance(dp, tuple) else ("plan refused: " + one_line(dp) if dp else "")
        prop = "yes" if r.get("propagates") else refused_kinds(r.get("refused", ""))
        if "tp" in r:
            tp = f"{r['tp'][0]} / {r['tp'][1]}"
        elif "tp_error" in r:
            tp = "plan refused: " + one_line(r["tp_error"])
        elif r.get("propagates"):
            tp = "no q/o projections"
        else:
            tp = ""
        lines.append(f"| `{r['type']}` | `{r['config']}` | yes | {r['ops']} ({r['kinds']}) | {prop} | {dp} | {tp} |")
    counts = Counter()
    for r in exported:
        if not r.get("propagates") and "no rule" in r.get("refused", ""):
            for k in refused_kinds(r["refused"]).removeprefix("no rule: ").split(", "):
                counts[k] += 1
    if counts:
        lines += ["", "Op kinds with no rule, by how many architectures need them: " + ", ".join(f"{k} ({n})" for k, n in counts.most_common()) + "."]
    lines += ["", END]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spmd", required=True, help="the spmd binary (cargo build --release -p spmd-cli)")
    p.add_argument("--write", help="the markdown file whose survey section is replaced (else stdout)")
    p.add_argument("--timeout", type=int, default=120, help="seconds one export may take")
    p.add_argument("--memory-gib", type=float, default=14, help="memory (address space) one export may use, GiB")
    p.add_argument("--only", nargs="*", help="model types to survey (default: all)")
    a = p.parse_args()
    rows = survey(a.spmd, a.timeout, int(a.memory_gib * 2**30), set(a.only or []))
    text = table(rows)
    if not a.write:
        print(text)
        return
    with open(a.write) as f:
        doc = f.read()
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + text + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Every causal LM\n\n" + text + "\n"
    with open(a.write, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
