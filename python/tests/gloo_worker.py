"""One rank of a gloo run (started by test_torch_gloo.py): a small Hugging
Face model run under an spmd plan with spmd.torch.parallelize, compared
with the same model run whole in this process."""

import json
import os
from typing import Any, Dict

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode


def counts(comm: CommDebugMode) -> Dict[str, int]:
    return {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run(
    rank: int,
    world: int,
    mesh_shape,
    plan: Dict[str, Any],
    config_class: str,
    port: int,
    out: str,
    batch: int = 2,
    dispatch: bool = False,
) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import spmd.torch
        from spmd.torch import hf

        model = hf.model_of(config_class, 2)
        inputs = hf.example_inputs(model, batch, 16)
        # The single-process run: logits, and every parameter's gradient of
        # a loss whose gradient at the logits is `seed`.
        logits = model(**inputs).logits
        seed = torch.randn(logits.shape, generator=torch.Generator().manual_seed(1))
        (logits * seed).sum().backward()
        if dispatch:
            # The parallel run computes the experts in expert parallelism's
            # form; the reference above ran transformers' own.
            from spmd.torch import moe

            moe.use(model, groups=batch)

        mesh = init_device_mesh("cpu", tuple(mesh_shape))
        parallel = spmd.torch.parallelize(model, plan, mesh, kwargs=inputs, backward=True)
        with CommDebugMode() as comm:
            outputs = parallel(input_ids=inputs["input_ids"])
        forward = counts(comm)
        (output,) = [g["seed"] for g in parallel.backward_program["given"] if "seed" in g]
        with CommDebugMode() as comm:
            grads = parallel.backward({output: seed})
        backward = counts(comm)

        # A tied weight (OPT's embedding and lm_head) is one tensor under two
        # names; its gradient is the sum of theirs.
        by_tensor: Dict[int, Any] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            entry = by_tensor.setdefault(id(p), {"names": [], "ref": p.grad, "sum": None})
            entry["names"].append(name)
            if name in grads:
                g = grads[name].full_tensor()
                entry["sum"] = g if entry["sum"] is None else entry["sum"] + g
        # A gradient that is zero in exact arithmetic (a key projection's
        # bias: softmax ignores a shift shared by all keys) is rounding noise
        # in both runs; it is compared as zero, against the largest
        # gradient, not against itself.
        largest = max(e["ref"].norm().item() for e in by_tensor.values())
        errors = {}
        for e in by_tensor.values():
            name = "+".join(e["names"])
            if e["sum"] is None:
                errors[name] = None
            elif max(e["ref"].norm().item(), e["sum"].norm().item()) <= 1e-6 * largest:
                errors[name] = (e["sum"] - e["ref"]).norm().item() / largest
            else:
                errors[name] = relative(e["sum"], e["ref"])
        result = {
            "logits": relative(outputs[0].full_tensor(), logits.detach()),
            "grads": errors,
            "forward": forward,
            "backward": backward,
            "planned_forward": parallel.plan.counts,
            "planned_backward": parallel.backward_plan.counts,
        }
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
    finally:
        dist.destroy_process_group()
