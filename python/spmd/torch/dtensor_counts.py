"""Count PyTorch DTensor's collectives for a tensor-parallel plan of the same
small models `spmd.torch.hf` builds, forward and backward, on a fake process
group (world size 4, CPU, no communication), with `CommDebugMode`.

    python tools/torch_export/dtensor_counts.py llama opt gpt-neox gpt2 -o spmd-graph/graphs/hf/dtensor_counts.json

The plan is Megatron-LM's, in PyTorch's own tensor-parallel API
(`parallelize_module`): `ColwiseParallel` on the projections that fan out
(q/k/v or the fused query_key_value, gate/up, fc1, dense_h_to_4h),
`RowwiseParallel` on the ones that fan back in (the attention output,
down, fc2, dense_4h_to_h). `PLANS` below lists each model's modules; the
same plan is `spmd_plan` in the output, as the mappings of those modules'
weights (`[out, in]`: colwise `[0, -1]`, rowwise `[-1, 0]`) for spmd.

The counts are per collective kind (`all_reduce`, `all_gather_into_tensor`,
`reduce_scatter_tensor`, ...), for one forward (the logits) and one backward
(of `logits.sum()`).
"""

import argparse
import json
import re
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

import transformers

from spmd.torch import hf

WORLD = 4

# Per model: module-name patterns (relative to a decoder layer) of the
# column- and row-parallel linears.
PLANS = {
    "llama": (
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"],
        ["self_attn.o_proj", "mlp.down_proj"],
    ),
    "opt": (
        ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1"],
        ["self_attn.out_proj", "fc2"],
    ),
    "gpt-neox": (
        ["attention.query_key_value", "mlp.dense_h_to_4h"],
        ["attention.dense", "mlp.dense_4h_to_h"],
    ),
    # The MLP only. GPT-2's attention splits its fused c_attn output into
    # q, k and v at multiples of the hidden size; a column split over 4
    # ranks cuts across those (each rank would hold part of q and part of
    # k), so neither DTensor (its local output splits wrongly) nor a sound
    # propagation can keep attention sharded without reordering the weight.
    "gpt2": (
        ["mlp.c_fc"],
        ["mlp.c_proj"],
    ),
}

# Models whose projections are `transformers`' Conv1D (weight `[in, out]`,
# `x @ W + b`), which PyTorch's tensor-parallel styles refuse: each planned
# one is replaced by the `nn.Linear` computing the same function (weight
# transposed), and spmd's mappings of the exported `[in, out]` weights are
# the transposes of the Linear ones.
CONV1D = {"gpt2"}

# Where each model keeps its decoder layers.
LAYERS = {
    "llama": "model.layers",
    "opt": "model.decoder.layers",
    "gpt-neox": "gpt_neox.layers",
    "gpt2": "transformer.h",
}


def counts(comm):
    return {str(k).split(".")[-1]: v for k, v in sorted(comm.get_comm_counts().items(), key=lambda kv: str(kv[0]))}


def as_linear(model, name):
    """Replaces the Conv1D module `name` by the equal `nn.Linear`."""
    parent, _, leaf = name.rpartition(".")
    conv = model.get_submodule(name)
    n_in, n_out = conv.weight.shape
    linear = torch.nn.Linear(n_in, n_out)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.t())
        linear.bias.copy_(conv.bias)
    setattr(model.get_submodule(parent), leaf, linear)


def run(short, layers, batch, seq):
    cls = hf.ALIASES[short]
    config = hf.config_of(cls, layers)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).train(False)
    mesh = init_device_mesh("cpu", (WORLD,))
    col, row = PLANS[short]
    prefix = LAYERS[short]
    plan = {}
    for i in range(layers):
        for m in col:
            plan[f"{prefix}.{i}.{m}"] = ColwiseParallel()
        for m in row:
            plan[f"{prefix}.{i}.{m}"] = RowwiseParallel()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    if short in CONV1D:
        with torch.no_grad():
            before = model(input_ids=ids, use_cache=False).logits
        for name in plan:
            as_linear(model, name)
        with torch.no_grad():
            after = model(input_ids=ids, use_cache=False).logits
        assert torch.allclose(before, after, atol=1e-5), "the Linear computes what the Conv1D did"
    parallelize_module(model, mesh, plan)
    with CommDebugMode() as forward:
        logits = model(input_ids=ids, use_cache=False).logits
    with CommDebugMode() as backward:
        logits.sum().backward()
    spmd_plan = {}
    colwise = [0, -1]  # of an [out, in] weight
    for name, style in plan.items():
        m = colwise if isinstance(style, ColwiseParallel) else colwise[::-1]
        spmd_plan[f"{name}.weight"] = m[::-1] if short in CONV1D else m
    return {
        "config": cls,
        "layers": layers,
        "world_size": WORLD,
        "plan": {k: type(v).__name__ for k, v in plan.items()},
        "spmd_plan": spmd_plan,
        "forward": counts(forward),
        "backward": counts(backward),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="short names: " + ", ".join(PLANS))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    out = {}
    for short in a.models:
        if short not in PLANS:
            sys.exit(f"no tensor-parallel plan for {short}; known: {', '.join(PLANS)}")
        out[short] = run(short, a.layers, a.batch, a.seq)
        print(f"{short}: forward {out[short]['forward']}, backward {out[short]['backward']}", file=sys.stderr)
    with open(a.output, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
