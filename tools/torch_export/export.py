"""Export a Hugging Face causal LM, built from its config with small sizes and
random weights, with torch.export, and write its graph in spmd-graph's JSON.

    python export.py llama --layers 2 -o llama.json
    python export.py opt gpt-neox gpt2 --out-dir ../../spmd-graph/graphs/hf
    python export.py --config-class MistralConfig --layers 2 -o mistral.json

The graph is core ATen IR after the default decompositions
(`ExportedProgram.run_decompositions()`), but for
`aten.scaled_dot_product_attention`, kept as one op: a small, stable
operator set that every model lowers to, so one set of rules covers any
architecture. Nothing
is downloaded: the model is built from a config class with random weights.

What the JSON holds (see spmd-graph's `json` module for the format):
- tensors: every value the graph computes or reads, with its shape and
  dtype; parameters (`param: true`) keep their module path as name
  (`model.layers.0.self_attn.q_proj.weight`), so a plan can match them;
  buffers and user inputs keep theirs (`input_ids`).
- ops: each ATen call in graph order; `op` is the ATen name without a
  `.default` overload (`aten.mm`, `aten.add.Tensor`, `aten.transpose.int`),
  `inputs` its tensor arguments in schema order (a tensor list, as
  `aten.cat`'s, gives one input per element; an optional tensor passed as
  `None` is `null`), `attrs` its other arguments
  by schema name; an op with several results names them `<node>.0`, ...
  A `.Tensor` overload called with a number operand (`aten.add.Tensor(x,
  2.0)`) is written as ATen's `.Scalar` overload of the same arguments, so
  that every name has one arity.
- outputs: the user outputs (the logits).
Calls that compute nothing (`aten._assert_tensor_metadata`, ...) are left
out, and calls that read no tensor (`aten.arange`, `aten.full`, ...) are
written as constant tensors without a producer (a device can create its
block of a constant in any layout), with their values as `init` where one
number fills them (`{"full": 1.0}`) or they count up evenly
(`{"arange": {"start": 0, "step": 1}}`); both are counted on stderr.
"""

import argparse
import json
import sys

import torch
import transformers

# Small sizes every decoder-only config understands under one name or
# another; a config class ignores the names it does not use.
SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    # Heads a 4-way tensor-parallel plan divides (head dim 8).
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=64,
    # OPT
    ffn_dim=128,
    word_embed_proj_dim=64,
    # GPT-2, GPT-NeoX under other names
    n_embd=64,
    n_layer=2,
    n_head=8,
    n_positions=64,
    n_inner=128,
)

ALIASES = {
    "llama": "LlamaConfig",
    "opt": "OPTConfig",
    "gpt-neox": "GPTNeoXConfig",
    "gpt2": "GPT2Config",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "phi": "PhiConfig",
    "qwen3": "Qwen3Config",
}

# ATen calls that compute no value the program uses.
SKIPPED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
}


# Small mixture-of-experts sizes, under the names MoE configs use (dense
# configs ignore them).
SMALL_MOE = dict(
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
)


def config_of(config_class, layers):
    """The config class with the small sizes and `layers` layers, valid for
    its class: the vocabulary is raised above the padding token id the
    class's defaults name (Phi-3 pads with id 32000), which the embedding
    must hold. (Begin and end ids outside it only draw a warning: a forward
    pass never reads them.)"""
    cls = getattr(transformers, config_class, None)
    if cls is None:
        sys.exit(f"transformers has no config class {config_class}")
    sizes = dict(SMALL, **SMALL_MOE)
    for key in ("num_hidden_layers", "n_layer"):
        sizes[key] = layers
    config = cls(**sizes)
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and pad >= config.vocab_size:
        config = cls(**dict(sizes, vocab_size=pad + 1))
    return config


def build(config_class, layers, batch, seq, full_size=False):
    if full_size:
        # The config class's own sizes (LlamaConfig(): Llama-2-7B), built on
        # the meta device: no weight is allocated.
        config = getattr(transformers, config_class)(num_hidden_layers=layers) if layers else getattr(transformers, config_class)()
    else:
        config = config_of(config_class, layers)
    # Attention as one op, `aten.scaled_dot_product_attention`, kept whole
    # by the decompositions (below): its layout is the heads', which a
    # lowering to batched matmuls over merged batch and heads would lose.
    # A class without SDPA attention gets its own (eager) implementation.
    torch.manual_seed(0)
    device = "meta" if full_size else "cpu"
    with torch.device(device):
        try:
            config._attn_implementation = "sdpa"
            model = transformers.AutoModelForCausalLM.from_config(config).eval()
        except ValueError as e:
            if "sdpa" not in str(e).lower() and "scaled_dot_product" not in str(e).lower():
                raise
            print(f"{config_class}: no SDPA attention, exported eager", file=sys.stderr)
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config).eval()
        ids = torch.randint(0, config.vocab_size, (batch, seq))
    with torch.no_grad():
        program = torch.export.export(model, (), {"input_ids": ids, "use_cache": False})
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    return program.run_decompositions(table)


def op_name(target):
    name = str(target)
    return name[: -len(".default")] if name.endswith(".default") else name


def optional_tensor(arg):
    """Whether a schema argument is an optional tensor (`Tensor? weight`)."""
    t = arg.type
    return isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType)


def attr_value(v):
    """A non-tensor argument as JSON."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [attr_value(x) for x in v]
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v).removeprefix("torch.")
    return str(v)


def tensor_entry(name, val, **extra):
    return dict(name=name, shape=list(val.shape), dtype=str(val.dtype).removeprefix("torch."), **extra)


def constant_init(node):
    """What a created constant holds, in spmd-graph's `init` form, read from
    the creating call's arguments (the exported values are fake): one
    number repeated (`full`, `ones`, `zeros`, `scalar_tensor`) or an even
    progression (`arange`); None for any other creation op."""
    name = op_name(node.target)
    args = list(node.args)
    number = lambda v: float(v) if isinstance(v, (int, float, bool)) else None
    if name in ("aten.full", "aten.full.default") and len(args) >= 2:
        v = number(args[1])
    elif name.startswith("aten.ones"):
        v = 1.0
    elif name.startswith("aten.zeros"):
        v = 0.0
    elif name.startswith("aten.scalar_tensor") and args:
        v = number(args[0])
    elif name.startswith("aten.arange"):
        # arange(end), arange.start(start, end), arange.start_step(start, end, step)
        nums = [number(a) for a in args[:3]]
        if None in nums or not nums:
            return None
        start = nums[0] if len(nums) >= 2 else 0.0
        step = nums[2] if len(nums) == 3 else 1.0
        return {"arange": {"start": start, "step": step}}
    else:
        return None
    return None if v is None else {"full": v}


def to_json(program, mesh):
    sig = program.graph_signature
    names = {}  # node name -> tensor name
    for spec in sig.input_specs:
        if spec.target is not None:
            names[spec.arg.name] = spec.target
    params = {s.arg.name for s in sig.input_specs if s.kind.name == "PARAMETER"}
    tensors, ops, skipped, created = [], [], {}, {}
    # Results of multi-output calls, read through operator.getitem.
    items = {}

    def tensor_name(node):
        return items.get(node.name) or names.get(node.name, node.name)

    for node in program.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder":
            if isinstance(val, torch.Tensor):
                tensors.append(tensor_entry(tensor_name(node), val, **({"param": True} if node.name in params else {})))
            continue
        if node.op != "call_function":
            continue
        if node.target.__name__ == "getitem" and node.target.__module__ == "_operator":
            src, k = node.args
            items[node.name] = f"{tensor_name(src)}.{k}"
            continue
        if str(node.target) in SKIPPED:
            skipped[str(node.target)] = skipped.get(str(node.target), 0) + 1
            continue
        schema = node.target._schema
        if not any(isinstance(a, torch.fx.Node) or (isinstance(a, (list, tuple)) and any(isinstance(x, torch.fx.Node) for x in a)) for a in list(node.args) + list(node.kwargs.values())):
            # A creation op (`aten.arange`, `aten.full`, ...) reads no
            # tensor: its result is a constant, which every device can make
            # in whatever layout its readers want. It is written as a tensor
            # without a producer, as the parameters are.
            if isinstance(val, torch.Tensor):
                init = constant_init(node)
                tensors.append(tensor_entry(node.name, val, **({"init": init} if init else {})))
                created[op_name(node.target)] = created.get(op_name(node.target), 0) + 1
                continue
        inputs, attrs = [], {}
        for i, arg in enumerate(schema.arguments):
            if i < len(node.args):
                v = node.args[i]
            elif arg.name in node.kwargs:
                v = node.kwargs[arg.name]
            else:
                continue
            if isinstance(v, torch.fx.Node):
                inputs.append(tensor_name(v))
            elif isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.fx.Node) for x in v):
                inputs.extend(tensor_name(x) for x in v)
            elif v is None and optional_tensor(arg):
                # An absent optional tensor (the weight and bias of a layer
                # norm without affine parameters) keeps its slot as `null`.
                inputs.append(None)
            elif v is not None or arg.name in node.kwargs:
                attrs[arg.name] = attr_value(v)
        if isinstance(val, torch.Tensor):
            outputs = [node.name]
            tensors.append(tensor_entry(node.name, val))
        elif isinstance(val, (list, tuple)):
            outputs = []
            for k, v in enumerate(val):
                if isinstance(v, torch.Tensor):
                    outputs.append(f"{node.name}.{k}")
                    tensors.append(tensor_entry(f"{node.name}.{k}", v))
        else:
            continue
        name = op_name(node.target)
        # `aten.add.Tensor(x, 2.0)`: a number operand is ATen's `.Scalar`
        # overload (same arguments), so each name has one arity.
        if name.endswith(".Tensor") and "other" in attrs:
            name = name.removesuffix(".Tensor") + ".Scalar"
        op = dict(name=node.name, op=name, inputs=inputs, outputs=outputs)
        if attrs:
            op["attrs"] = attrs
        ops.append(op)
    outputs = [tensor_name(a) for a in program.graph.output_node().args[0] if isinstance(a, torch.fx.Node)]
    for name, n in sorted(skipped.items()):
        print(f"left out {n} x {name} (computes nothing)", file=sys.stderr)
    for name, n in sorted(created.items()):
        print(f"wrote {n} x {name} as a constant tensor (reads no tensor)", file=sys.stderr)
    return dict(mesh=mesh, tensors=tensors, ops=ops, outputs=outputs)


def write(graph, path):
    """One tensor or op per line: readable, and diffs stay small."""
    with open(path, "w") as f:
        f.write('{\n  "mesh": ' + json.dumps(graph["mesh"]) + ",\n")
        for key in ("tensors", "ops"):
            f.write(f'  "{key}": [\n')
            rows = [json.dumps(x) for x in graph[key]]
            f.write(",\n".join("    " + r for r in rows) + "\n  ],\n")
        f.write('  "outputs": ' + json.dumps(graph["outputs"]) + "\n}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="short names: " + ", ".join(ALIASES))
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
    p.add_argument("-o", "--output", help="the JSON file (one model)")
    p.add_argument("--out-dir", help="one <model>.json per model")
    a = p.parse_args()
    wanted = [(m, ALIASES.get(m) or sys.exit(f"unknown model {m}; known: {', '.join(ALIASES)}")) for m in a.models]
    if a.config_class:
        wanted.append((a.config_class.removesuffix("Config").lower(), a.config_class))
    if not wanted:
        p.error("name a model or --config-class")
    if a.output and len(wanted) != 1:
        p.error("-o takes one model; use --out-dir for several")
    for short, cls in wanted:
        graph = to_json(build(cls, a.layers, a.batch, a.seq, a.full_size), a.mesh)
        path = a.output or f"{a.out_dir or '.'}/{short}.json"
        write(graph, path)
        print(f"{cls}: {len(graph['ops'])} ops, {len(graph['tensors'])} tensors -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
