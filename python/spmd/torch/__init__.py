"""spmd on PyTorch models: export a model as an spmd graph, read a plan's
DTensor placements, and run the model on a device mesh under the plan.

    import spmd.torch
    graph = spmd.torch.export(model, kwargs={"input_ids": ids})
    print(graph.propagate(plan="llama_tp.json"))
    parallel = spmd.torch.parallelize(model, "llama_tp.json", mesh, kwargs={"input_ids": ids})
    logits = parallel(input_ids=ids)[0].full_tensor()

Needs torch (and, for `spmd.torch.hf`, transformers); `import spmd`
alone does not.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

import spmd

from ._export import export_program, graph_json, write


def export(
    model: Any,
    args: Sequence[Any] = (),
    kwargs: Optional[Mapping[str, Any]] = None,
    mesh: Optional[Sequence[int]] = None,
) -> "spmd.Graph":
    """The graph of `model` called on `args` and `kwargs`, from
    `torch.export` (core ATen IR, attention kept whole), as an `spmd.Graph`
    on `mesh` (default `[1]`; a plan file names its own)."""
    program = export_program(model, args, kwargs)
    return spmd.Graph.from_json(json.dumps(graph_json(program, list(mesh or [1]), quiet=True)))


def placements(graph: "spmd.Graph", plan: Any, device_mesh: Any) -> Dict[str, List[Any]]:
    """Each parameter's and each user input's DTensor placements under
    `plan` (a plan file's path or dict), as spmd propagates them."""
    from ._parallel import placements_of, propagated

    doc, _ = propagated(graph, plan)
    file = json.loads(graph.to_json())
    produced = {o for op in file["ops"] for o in op["outputs"]}
    leaves = {t["name"] for t in file["tensors"] if t["name"] not in produced and "init" not in t}
    return {t["name"]: placements_of(t, device_mesh.ndim) for t in doc["tensors"] if t["name"] in leaves}


def parallelize(
    model: Any,
    plan: Any,
    device_mesh: Any,
    args: Sequence[Any] = (),
    kwargs: Optional[Mapping[str, Any]] = None,
    backward: bool = False,
) -> Any:
    """`model` exported on `args`/`kwargs` and run on `device_mesh` under
    `plan` (a plan file's path or dict): a module whose parameters are
    DTensors with the plan's placements, and whose ops run on their local
    blocks with their inputs redistributed exactly where spmd's reshard
    plan says. Call it with the user inputs by name; it returns the
    program's outputs as DTensors. With `backward`, its
    `backward(seeds)` runs spmd's backward plan from the outputs'
    gradients and returns each parameter's gradient."""
    from ._parallel import SpmdModule, propagated

    if isinstance(plan, (str, bytes)) or hasattr(plan, "__fspath__"):
        with open(plan) as f:
            plan = json.load(f)
    named = plan.get("mesh")
    if named is not None and list(named) != list(device_mesh.shape):
        raise spmd.MeshError(
            f"the plan is for mesh {list(named)}, the device mesh is {list(device_mesh.shape)}: "
            "give the plan the device mesh's shape (plan['mesh'])"
        )
    program = export_program(model, args, kwargs)
    graph = spmd.Graph.from_json(json.dumps(graph_json(program, list(device_mesh.shape), quiet=True)))
    doc, backward_program = propagated(graph, plan, backward)
    return SpmdModule(program, doc, device_mesh, backward_program)


__all__ = ["export", "export_program", "graph_json", "parallelize", "placements", "write"]
