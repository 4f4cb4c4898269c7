"""PyTorch runs spmd's plans: 4 CPU processes on gloo run small Hugging
Face models under spmd's tensor-parallel plan (mesh [4]) and its TP + data
parallel plan (mesh [2, 2]) with spmd.torch.parallelize, forward and
backward, and the mixture-of-experts models under expert parallelism (EP on
[4], EP + TP on [2, 2]; their experts in spmd.torch.moe's dispatch form).
The logits and every parameter's gradient equal a single-process run (of
transformers' own experts), and the collectives PyTorch runs
(CommDebugMode) are spmd's plan's."""

import json
import socket
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
import torch.multiprocessing as mp  # noqa: E402

import gloo_worker  # noqa: E402

MODELS = {"llama": "LlamaConfig", "opt": "OPTConfig", "gpt-neox": "GPTNeoXConfig", "qwen3": "Qwen3Config"}
PLANS = {"tp": [4], "tp_dp": [2, 2]}
CASES = [(m, p) for m in MODELS for p in PLANS]
MOE = {"mixtral": "MixtralConfig", "qwen3-moe": "Qwen3MoeConfig", "deepseek-v3": "DeepseekV3Config"}
MOE_PLANS = {"ep": [4], "ep_tp": [2, 2]}
MOE_CASES = [(m, p) for m in MOE for p in MOE_PLANS]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(model, config_class, plan, mesh, graphs, tmp_path, batch=2, dispatch=False):
    """The worker on 4 processes; its result."""
    out = tmp_path / "result.json"
    # The committed plan, on this test's mesh (the TP + DP plans name [2, 4]).
    annotations = json.loads((graphs / f"{model}_{plan}.json").read_text())
    annotations["mesh"] = mesh
    try:
        args = (4, mesh, annotations, config_class, free_port(), str(out), batch, dispatch)
        mp.start_processes(gloo_worker.run, args=args, nprocs=4, start_method="spawn")
    except mp.ProcessExitedException as e:
        # A rank killed by a signal (gloo has crashed so on a loaded machine)
        # is run once more, and said; a failure that repeats fails the test.
        if not e.signal_name:
            raise
        warnings.warn(f"{model} {plan}: a rank died ({e}); running it once more")
        args = (4, mesh, annotations, config_class, free_port(), str(out), batch, dispatch)
        mp.start_processes(gloo_worker.run, args=args, nprocs=4, start_method="spawn")
    return json.loads(out.read_text())


def assert_equal_numbers(r):
    assert r["logits"] <= 1e-5, r
    bad = {name: e for name, e in r["grads"].items() if e is None or e > 1e-5}
    assert r["grads"] and not bad, bad


@pytest.mark.parametrize("model,plan", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_pytorch_runs_the_plan(model, plan, graphs, tmp_path):
    r = run(model, MODELS[model], plan, PLANS[plan], graphs, tmp_path)
    assert_equal_numbers(r)
    assert r["forward"] == r["planned_forward"], r
    assert r["backward"] == r["planned_backward"], r
    # Every plan communicates in both passes: the comparison is not of nothing.
    assert r["forward"] and r["backward"]


def on_gloo(planned):
    """The collectives PyTorch runs for a plan on gloo, which has no CPU
    all-to-all: DTensor runs each as an all-gather and keeps its own chunk
    (and warns that it does)."""
    counts = dict(planned)
    moved = counts.pop("all_to_all_single", 0)
    if moved:
        counts["all_gather_into_tensor"] = counts.get("all_gather_into_tensor", 0) + moved
    return counts


@pytest.mark.parametrize("model,plan", MOE_CASES, ids=[f"{m}-{p}" for m, p in MOE_CASES])
def test_pytorch_runs_expert_parallelism(model, plan, graphs, tmp_path):
    # The batch of the committed MoE graphs: 4 groups of tokens, one a rank.
    r = run(model, MOE[model], plan, MOE_PLANS[plan], graphs, tmp_path, batch=4, dispatch=True)
    assert_equal_numbers(r)
    # The plan moves the tokens by all-to-all, in both passes.
    assert r["planned_forward"]["all_to_all_single"] > 0, r
    assert r["planned_backward"]["all_to_all_single"] > 0, r
    assert r["forward"] == on_gloo(r["planned_forward"]), r
    assert r["backward"] == on_gloo(r["planned_backward"]), r
