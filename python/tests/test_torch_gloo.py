"""PyTorch runs spmd's plans: 4 CPU processes on gloo run small Hugging
Face models under spmd's tensor-parallel plan (mesh [4]) and its TP + data
parallel plan (mesh [2, 2]) with spmd.torch.parallelize, forward and
backward. The logits and every parameter's gradient equal a single-process
run, and the collectives PyTorch runs (CommDebugMode) are spmd's plan's."""

import json
import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.multiprocessing as mp  # noqa: E402

import gloo_worker  # noqa: E402

MODELS = {"llama": "LlamaConfig", "opt": "OPTConfig", "gpt-neox": "GPTNeoXConfig", "qwen3": "Qwen3Config"}
PLANS = {"tp": [4], "tp_dp": [2, 2]}
CASES = [(m, p) for m in MODELS for p in PLANS]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("model,plan", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_pytorch_runs_the_plan(model, plan, graphs, tmp_path):
    mesh = PLANS[plan]
    out = tmp_path / "result.json"
    # The committed plans, on this test's mesh (the TP + DP plans name [2, 4]).
    annotations = json.loads((graphs / f"{model}_{plan}.json").read_text())
    annotations["mesh"] = mesh
    args = (4, mesh, annotations, MODELS[model], free_port(), str(out))
    mp.start_processes(gloo_worker.run, args=args, nprocs=4, start_method="spawn")
    r = json.loads(out.read_text())
    assert r["logits"] <= 1e-5, r
    bad = {name: e for name, e in r["grads"].items() if e is None or e > 1e-5}
    assert r["grads"] and not bad, bad
    assert r["forward"] == r["planned_forward"], r
    assert r["backward"] == r["planned_backward"], r
    # Every plan communicates in both passes: the comparison is not of nothing.
    assert r["forward"] and r["backward"]
