"""An exported PyTorch program as an spmd graph.

The graph is core ATen IR after the default decompositions
(`ExportedProgram.run_decompositions()`), but for
`aten.scaled_dot_product_attention`, kept as one op: a small, stable
operator set that every model lowers to, so one set of rules covers any
architecture, and attention keeps its heads' layout.

What the graph holds (see spmd-graph's `json` module for the format):
- tensors: every value the graph computes or reads, with its shape and
  dtype; parameters (`param: true`) keep their module path as name
  (`model.layers.0.self_attn.q_proj.weight`), so a plan can match them;
  buffers and user inputs keep theirs (`input_ids`).
- ops: each ATen call in graph order; `op` is the ATen name without a
  `.default` overload (`aten.mm`, `aten.add.Tensor`, `aten.transpose.int`),
  `inputs` its tensor arguments in schema order (a tensor list, as
  `aten.cat`'s, gives one input per element; an optional tensor passed as
  `None` is `null`), `attrs` its other arguments by schema name; an op with
  several results names them `<node>.0`, ... A `.Tensor` overload called
  with a number operand (`aten.add.Tensor(x, 2.0)`) is written as ATen's
  `.Scalar` overload of the same arguments (`aten.div.Tensor_mode` as
  `.Scalar_mode`; a number first in a sum or product swapped, `2.0 - x` as
  `aten.rsub.Scalar`), so that every name has one arity.
- outputs: the user outputs.
Calls that compute nothing (`aten._assert_tensor_metadata`, ...) are left
out, and calls that read no tensor (`aten.arange`, `aten.full`, ...) are
written as constant tensors without a producer (a device can create its
block of a constant in any layout), with their values as `init` where one
number fills them (`{"full": 1.0}`) or they count up evenly
(`{"arange": {"start": 0, "step": 1}}`); both are counted on stderr.
"""

import json
import sys

import torch

# ATen calls that compute no value the program uses.
SKIPPED = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default",
}


def export_program(model, args=(), kwargs=None):
    """`torch.export` of `model` on `args`/`kwargs`, lowered to core ATen IR
    with attention kept whole (see the module docs)."""
    with torch.no_grad():
        program = torch.export.export(model, tuple(args), dict(kwargs or {}))
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.scaled_dot_product_attention.default, None)
    program = program.run_decompositions(table)
    simplify(program.graph_module.graph)
    program.graph_module.recompile()
    return program


def simplify(graph):
    """Calls rewritten as the same computation in a form with a better rule,
    in the program itself, so the exported graph and the program that
    `spmd.torch.parallelize` runs stay one:
    - `aten.cat` drops 1-d empty operands (an empty cache), as ATen's
      legacy rule does whatever the others' rank;
    - `aten.index.Tensor` with one 1-d index tensor, the other slots
      `None` (`x[:, :, i]`), is `aten.index_select` along that dim, whose
      rule passes the other dims through."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target == torch.ops.aten.cat.default:
            operands = list(node.args[0])
            kept = [x for x in operands if list(x.meta["val"].shape) != [0]]
            if kept and len(kept) < len(operands):
                node.args = (kept, *node.args[1:])
        elif node.target == torch.ops.aten.index.Tensor:
            indices = node.args[1]
            present = [k for k, x in enumerate(indices) if x is not None]
            if len(present) == 1 and indices[present[0]].meta["val"].dim() == 1:
                node.target = torch.ops.aten.index_select.default
                node.args = (node.args[0], present[0], indices[present[0]])


def op_name(target):
    name = str(target)
    return name[: -len(".default")] if name.endswith(".default") else name


def optional_tensor(arg):
    """Whether a schema argument is an optional tensor (`Tensor? weight`)."""
    t = arg.type
    return isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType)


def attr_value(v):
    """A non-tensor argument as JSON."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        # JSON has no infinities: written as the string Python prints
        # (`"inf"`), which a rule that reads the number refuses by name.
        return str(v)
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [attr_value(x) for x in v]
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v).removeprefix("torch.")
    return str(v)


def arguments(node, omitted=False):
    """A call's arguments in schema order, as (position, schema argument,
    value) for those the call gives, by position or by name: the one walk
    the export and spmd.torch's runtime read a call by, so both number a
    call's tensor inputs alike. With `omitted`, the optional tensors the
    call leaves out come too, as `None`."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        # Python arithmetic in the graph: sizes computed from the data.
        trace = (node.meta.get("stack_trace") or "").strip().splitlines()
        where = f" ({trace[-2].strip().split('site-packages/')[-1]})" if len(trace) >= 2 else ""
        raise ValueError(
            f"`{node.name}` is Python's `{getattr(node.target, '__name__', node.target)}` on sizes the "
            f"data decides{where}: spmd needs every shape known before the run"
        )
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            yield i, arg, node.args[i]
        elif arg.name in node.kwargs:
            yield i, arg, node.kwargs[arg.name]
        elif omitted and optional_tensor(arg):
            yield i, arg, None


def tensor_list(v):
    """Whether an argument is a list of tensors (`aten.cat`'s), some of them
    perhaps absent (`aten.index.Tensor`'s `None` for a dim not indexed)."""
    return (
        isinstance(v, (list, tuple))
        and any(isinstance(x, torch.fx.Node) for x in v)
        and all(x is None or isinstance(x, torch.fx.Node) for x in v)
    )


def reads_tensor(node):
    """Whether a call reads a tensor (one that does not is a constant)."""
    return any(
        isinstance(a, torch.fx.Node) or (isinstance(a, (list, tuple)) and any(isinstance(x, torch.fx.Node) for x in a))
        for a in list(node.args) + list(node.kwargs.values())
    )


def holds_tensor(val):
    """Whether a call's result is a tensor or holds one."""
    return isinstance(val, torch.Tensor) or (
        isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val)
    )


def tensor_entry(name, val, **extra):
    shape = list(val.shape)
    if not all(isinstance(n, int) for n in shape):
        raise ValueError(
            f"`{name}` has a size the data decides ({', '.join(str(n) for n in shape)}): "
            "spmd needs every shape known before the run"
        )
    return dict(name=name, shape=shape, dtype=str(val.dtype).removeprefix("torch."), **extra)


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
    # JSON has no infinities (a mask filled with -inf): such a constant is
    # written without its value.
    return None if v is None or v != v or v in (float("inf"), float("-inf")) else {"full": v}


def graph_json(program, mesh, quiet=False):
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
        if not holds_tensor(val):
            # A number (a size, `x.item()`, a comparison the model only
            # asserts) has no layout. A tensor whose shape depends on one
            # is refused by name when it is written.
            what = f"{getattr(node.target, '__name__', op_name(node.target))} (a number, not a tensor)"
            skipped[what] = skipped.get(what, 0) + 1
            continue
        if not reads_tensor(node):
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
        given = {i for i, _, _ in arguments(node)}
        for i, arg, v in arguments(node, omitted=True):
            if i not in given:
                # An optional tensor the call leaves out is absent too
                # (`aten.clamp.Tensor(x, min)` has no `max`).
                inputs.append(None)
            elif isinstance(v, torch.fx.Node):
                inputs.append(tensor_name(v))
            elif tensor_list(v):
                inputs.extend(None if x is None else tensor_name(x) for x in v)
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
        elif name in ("aten.add.Tensor", "aten.mul.Tensor") and "self" in attrs:
            # A number first: the same sum or product, the operands swapped.
            name = name.removesuffix(".Tensor") + ".Scalar"
            attrs["other"] = attrs.pop("self")
        elif name == "aten.sub.Tensor" and "self" in attrs:
            # `2.0 - x` is ATen's `rsub.Scalar(x, 2.0)`.
            name = "aten.rsub.Scalar"
            attrs["other"] = attrs.pop("self")
        elif name.endswith(".Tensor_mode") and "other" in attrs:
            name = name.removesuffix(".Tensor_mode") + ".Scalar_mode"
        op = dict(name=node.name, op=name, inputs=inputs, outputs=outputs)
        if attrs:
            op["attrs"] = attrs
        ops.append(op)
    outputs = [tensor_name(a) for a in program.graph.output_node().args[0] if isinstance(a, torch.fx.Node)]
    if not quiet:
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
