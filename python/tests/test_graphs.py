"""Graphs from Python: load, propagate under a plan, choose a plan."""

import json
import threading

import pytest

import spmd


def test_megatron_tp_on_llama(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    assert len(g) > 50
    p = g.propagate(plan=str(graphs / "llama_tp.json"), backward=True)
    # Megatron-LM: one all-reduce after each row-parallel projection
    # (attention out, MLP down), 2 layers.
    assert p.collectives == {"all_reduce": 4}
    assert p.backward_collectives.get("all_reduce", 0) >= 4
    assert "all-reduce" in str(p)
    doc = json.loads(p.to_json())
    assert doc["counts"] == {"all_reduce": 4} and "backward" in doc


def test_a_plan_given_as_a_dict(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    with open(graphs / "llama_tp.json") as f:
        plan = json.load(f)
    assert g.propagate(plan=plan).collectives == g.propagate(plan=str(graphs / "llama_tp.json")).collectives
    assert g.propagate().collectives == {}


def test_a_bad_plan_is_a_plan_error(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    with pytest.raises(spmd.PlanError):
        g.propagate(plan={"annotations": [{"tensors": "model.embed_tokens.weight", "dims_mapping": [0, 0, 0]}]})


def test_unsupported_ops_are_named():
    text = json.dumps(
        {
            "mesh": [2],
            "tensors": [
                {"name": "x", "shape": [4, 4]},
                {"name": "y", "shape": [4, 4]},
            ],
            "ops": [{"name": "f", "op": "aten.no_such_op", "inputs": ["x"], "outputs": ["y"]}],
            "outputs": ["y"],
        }
    )
    g = spmd.Graph.from_json(text)
    with pytest.raises(spmd.UnsupportedOpsError, match="aten.no_such_op"):
        g.propagate()


def test_autoshard_chooses_a_plan_that_propagates(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    whole = g.autoshard([2, 2], memory="1TiB")
    a = g.autoshard([2, 2], memory=int(whole.to_json() and json.loads(whole.to_json())["figures"]["memory"]["total"] // 2))
    plan = json.loads(a.plan_json)
    assert plan["mesh"] == [2, 2] and plan["annotations"]
    assert a.step_time > 0
    g.propagate(plan=plan, backward=True)
    with pytest.raises(spmd.NoPlanFitsError) as info:
        g.autoshard([2, 2], memory=1024)
    assert info.value.smallest > 1024


def test_autoshard_takes_the_solver_limits(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    bounded = json.loads(g.autoshard([4], memory="1TiB").to_json())
    assert bounded["solver"]["stop"] == "optimal"
    alone = json.loads(g.autoshard([4], memory="1TiB", solver_nodes=0).to_json())
    assert "not_applicable" in alone["solver"]
    with pytest.raises(spmd.InputError, match="solver_time"):
        g.autoshard([4], solver_time=-1.0)


def test_the_gil_is_released_during_the_search(graphs):
    g = spmd.Graph.load(str(graphs / "llama.json"))
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks
        g.autoshard([2, 2], memory="1TiB", starts=3)
        during = ticks - before
    finally:
        stop.set()
        t.join()
    # Holding the GIL for the whole search would leave the counter at a
    # handful of ticks at most.
    assert during > 1000, during
