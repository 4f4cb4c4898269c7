"""An exported program run on a PyTorch device mesh under spmd's plan,
forward and backward.

Every tensor is a DTensor with the layout spmd's propagation gives it. Each
op runs on the local blocks (`to_local()`), after its inputs are
redistributed to the layouts the op's rule requires, wherever spmd's reshard
plan says so and nowhere else; its outputs are wrapped back as DTensors with
spmd's layouts, partial values included. The backward pass runs spmd's
backward graph the same way: each grad op is its forward op's vector-Jacobian
product on the local blocks (autograd on one device, recomputing the op),
each gradient sum a local add, with the backward plan's redistributions
between them. So the collectives PyTorch runs are the ones spmd planned,
and where a rule were wrong the numbers would be too: the tests compare them
with a single-process run.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from torch.distributed.tensor import DTensor, Partial, Placement, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

import spmd

from ._export import SKIPPED, arguments, holds_tensor, op_name, reads_tensor, tensor_list

#: Ops whose `size` argument is the output's global shape: run on a block,
#: they take the block's shape.
SIZED = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.expand"}

#: spmd's step kinds as the functional collectives CommDebugMode counts.
COLLECTIVES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor",
    "all_to_all": "all_to_all_single",
}


def to_torch(placements: Sequence[str]) -> List[Placement]:
    """spmd's placement strings (`"Shard(0)"`, ...) as DTensor's objects."""
    out: List[Placement] = []
    for p in placements:
        name, arg = p[:-1].split("(")
        if name == "Shard":
            out.append(Shard(int(arg)))
        elif name == "Partial":
            out.append(Partial(arg))
        else:
            out.append(Replicate())
    return out


def placements_of(entry: Dict[str, Any], mesh_ndim: int) -> List[Placement]:
    """The DTensor placements of a layout as spmd's JSON reports give it."""
    reduce = entry.get("partial_reduce") or {}
    partial = {int(d): reduce.get(str(d), "SUM").lower() for d in entry.get("partial_dims", [])}
    layout = spmd.Layout([1] * mesh_ndim, entry["dims_mapping"], partial)
    return to_torch(layout.placements())


def collective_counts(doc: Dict[str, Any]) -> Dict[str, int]:
    """A reshard plan's communicating steps, by the functional collective
    PyTorch runs for each. DTensor runs a step over several mesh dims (an
    all-reduce over both dims of a 2-D mesh) as one collective per mesh
    dim, so such a step counts once per mesh dim."""
    counts: Dict[str, int] = {}
    for r in doc["reshards"]:
        for step in r["steps"]:
            kind = COLLECTIVES.get(step["kind"])
            if kind is not None:
                n = len(step.get("mesh_dims") or [0])
                counts[kind] = counts.get(kind, 0) + n
    return counts


class Plan:
    """One graph's plan on a device mesh: each tensor's layout and shape,
    the layout each op input is redistributed to before the op reads it, and
    the layout an op produces where the plan redistributes its output after
    it (the tensor's own layout is then the target)."""

    def __init__(self, doc: Dict[str, Any], mesh: Any) -> None:
        self.mesh = mesh
        n = mesh.ndim
        self.layouts = {t["name"]: placements_of(t, n) for t in doc["tensors"]}
        self.shapes = {t["name"]: tuple(t["shape"]) for t in doc["tensors"]}
        self.inputs: Dict[Tuple[str, int], List[Placement]] = {}
        self.produced: Dict[Tuple[str, int], List[Placement]] = {}
        for r in doc["reshards"]:
            edge = r["edge"]
            side = self.inputs if edge["side"] == "input" else self.produced
            side[(r["op"], edge["index"])] = placements_of(r["to"] if edge["side"] == "input" else r["from"], n)
        self.counts = collective_counts(doc)

    def read(self, op: str, k: int, value: Any) -> Any:
        """Input `k` of `op` as the op reads it (a DTensor redistributed
        where the plan says)."""
        wanted = self.inputs.get((op, k))
        if wanted is not None and isinstance(value, DTensor):
            value = value.redistribute(self.mesh, wanted)
        return value

    def local_shape(self, placements: List[Placement], shape: Sequence[int]) -> Tuple[int, ...]:
        local, _ = compute_local_shape_and_global_offset(tuple(shape), self.mesh, placements)
        return tuple(local)

    def produces(self, op: str, k: int, tensor: str) -> List[Placement]:
        """The layout op `op` computes its output `k` (tensor `tensor`) in."""
        return self.produced.get((op, k)) or self.layouts[tensor]

    def wrap(self, op: str, k: int, tensor: str, local: torch.Tensor, rule: str) -> DTensor:
        """The local result `k` of `op` as a DTensor: in the layout the op
        produces, then redistributed to the tensor's where the plan says."""
        shape = self.shapes[tensor]
        placements = self.produces(op, k, tensor)
        expected = self.local_shape(placements, shape)
        if tuple(local.shape) != expected:
            raise RuntimeError(
                f"op {op} ({rule}), output {tensor}: the local block is {tuple(local.shape)}, "
                f"the plan's layout {placements} of {shape} gives {expected}"
            )
        value = DTensor.from_local(
            local,
            self.mesh,
            placements,
            run_check=False,
            shape=torch.Size(shape),
            stride=torch.empty(shape, device="meta").stride(),
        )
        if (op, k) in self.produced:
            value = value.redistribute(self.mesh, self.layouts[tensor])
        return value


def call(node: torch.fx.Node, tensors: Iterator[Any], size: Callable[[], Sequence[int]]) -> Any:
    """Runs `node`'s ATen op with its tensor arguments taken in order from
    `tensors` (the order of the graph's inputs: schema order, lists
    expanded, absent optional tensors skipped), and a `SIZED` op's size from
    `size()`."""
    name = op_name(node.target)
    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    for i, arg, v in arguments(node):
        if isinstance(v, torch.fx.Node):
            v = next(tensors)
        elif tensor_list(v):
            v = [None if x is None else next(tensors) for x in v]
        elif name in SIZED and arg.name == "size":
            v = list(size())
        if i < len(node.args):
            args.append(v)
        else:
            kwargs[arg.name] = v
    if name == "aten.convolution":
        # A block's groups, as spmd's rule splits them: its input channels
        # over each group's (a depthwise split keeps one group per channel).
        x, w = args[0], args[1]
        groups = max(x.shape[1] // max(w.shape[1], 1), 1)
        if len(args) > 8:
            args[8] = groups
        else:
            kwargs["groups"] = groups
    if name == "aten.copy":
        # `src`'s values in `self`'s shape and type: the same result, in ops
        # autograd differentiates (it has no derivative for aten.copy).
        return args[1].to(args[0].dtype).expand(args[0].shape).clone()
    return node.target(*args, **kwargs)


def outputs_of(node: torch.fx.Node) -> List[str]:
    """The graph's names of a call's tensor results."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return [node.name]
    return [f"{node.name}.{k}" for k, v in enumerate(val) if isinstance(v, torch.Tensor)]


class SpmdModule(torch.nn.Module):
    """`program` run on `device_mesh` under the plan `doc` describes (the
    JSON of `spmd.Graph.propagate`, with `backward` when `backward_program`
    is given). Its parameters are DTensors with the plan's layouts. Call it
    with the program's user inputs, as whole tensors, by name: it returns
    the outputs as DTensors. `backward(seeds)` then runs the backward plan."""

    def __init__(
        self,
        program: Any,
        doc: Dict[str, Any],
        device_mesh: Any,
        backward_program: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__()
        self.program = program
        self.mesh = device_mesh
        self.plan = Plan(doc, device_mesh)
        self.backward_plan = Plan(doc["backward"], device_mesh) if backward_program else None
        self.backward_program = backward_program
        self._names: Dict[str, str] = {}
        self._constants: Dict[str, Any] = {}
        state = dict(program.state_dict)
        state.update(getattr(program, "constants", {}) or {})
        self.dtensors: Dict[str, DTensor] = {}
        for spec in program.graph_signature.input_specs:
            node = spec.arg.name
            if spec.target is not None:
                self._names[node] = spec.target
                d = distribute_tensor(
                    state[spec.target].detach(), device_mesh, self.plan.layouts[spec.target], src_data_rank=None
                )
                self.dtensors[node] = d
            elif spec.kind.name == "USER_INPUT" and hasattr(spec.arg, "value"):
                # A constant the export specialised (`use_cache=False`).
                self._constants[node] = spec.arg.value
        self.nodes = {n.name: n for n in program.graph.nodes}
        # What each op read, as it read it: the backward pass's saved inputs.
        self.saved: Dict[Tuple[str, int], Any] = {}

    @property
    def parameters_by_name(self) -> Dict[str, DTensor]:
        return {self._names[n]: d for n, d in self.dtensors.items()}

    @torch.no_grad()
    def forward(self, **inputs: torch.Tensor) -> List[DTensor]:
        env: Dict[str, Any] = {}
        self.saved.clear()
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                if node.name in self.dtensors:
                    env[node.name] = self.dtensors[node.name]
                elif node.name in inputs:
                    env[node.name] = distribute_tensor(
                        inputs[node.name], self.mesh, self.plan.layouts[node.name], src_data_rank=None
                    )
                elif node.name in self._constants:
                    env[node.name] = self._constants[node.name]
                else:
                    raise KeyError(f"the program takes user input `{node.name}`; given {sorted(inputs)}")
            elif node.op == "output":
                return [env[a.name] for a in node.args[0] if isinstance(a, torch.fx.Node)]
            elif node.op != "call_function" or str(node.target) in SKIPPED:
                continue
            elif not holds_tensor(node.meta.get("val")):
                # A number, which the exported graph leaves out too.
                continue
            elif node.target.__name__ == "getitem" and node.target.__module__ == "_operator":
                src, k = node.args
                env[node.name] = env[src.name][k]
            elif not reads_tensor(node):
                # A constant: every device makes the whole value and keeps its block.
                full = node.target(*node.args, **node.kwargs)
                env[node.name] = (
                    distribute_tensor(full, self.mesh, self.plan.layouts[node.name], src_data_rank=None)
                    if isinstance(full, torch.Tensor)
                    else full
                )
            else:
                env[node.name] = self._forward_op(node, env)
        raise RuntimeError("the program has no output node")

    def _forward_op(self, node: torch.fx.Node, env: Dict[str, Any]) -> Any:
        read: List[Any] = []

        def tensors() -> Iterator[Any]:
            for x in _tensor_args(node):
                k = len(read)
                value = self.plan.read(node.name, k, env[x.name])
                self.saved[(node.name, k)] = value
                read.append(value)
                yield value.to_local() if isinstance(value, DTensor) else value

        outs = outputs_of(node)
        result = call(
            node,
            tensors(),
            lambda: self.plan.local_shape(self.plan.produces(node.name, 0, outs[0]), self.plan.shapes[outs[0]]),
        )
        rule = op_name(node.target)
        if isinstance(node.meta.get("val"), torch.Tensor):
            return self.plan.wrap(node.name, 0, outs[0], result, rule)
        wrapped = iter(
            [self.plan.wrap(node.name, k, out, r, rule) for k, (out, r) in enumerate(zip(outs, _tensor_results(result)))]
        )
        return tuple(next(wrapped) if isinstance(r, torch.Tensor) else r for r in result)

    def backward(self, seeds: Dict[str, torch.Tensor]) -> Dict[str, DTensor]:
        """Runs the backward plan after a forward call, from the gradients
        of the program's outputs (`seeds`, by output name, whole tensors):
        every parameter's gradient, by name, in the parameter's layout."""
        if self.backward_plan is None or self.backward_program is None:
            raise RuntimeError("parallelize(..., backward=True) builds the backward plan")
        plan, program = self.backward_plan, self.backward_program
        env: Dict[str, Any] = {}
        for g in program["given"]:
            t = g["tensor"]
            if "saved" in g:
                env[t] = self.saved[(g["saved"]["op"], g["saved"]["input"])]
            elif "seed" in g:
                env[t] = distribute_tensor(seeds[g["seed"]], self.mesh, plan.layouts[t], src_data_rank=None)
            else:
                zeros = torch.zeros(plan.shapes[t])
                env[t] = distribute_tensor(zeros, self.mesh, plan.layouts[t], src_data_rank=None)
        for op in program["ops"]:
            name = op["name"]
            local = [plan.read(name, k, env[x]) for k, x in enumerate(op["inputs"])]
            local = [x.to_local() if isinstance(x, DTensor) else x for x in local]
            if "grad_of" in op:
                results = self._vjp(op["grad_of"], local)
            elif op["rule"] == "add":
                results = [local[0] + local[1]]
            else:
                raise RuntimeError(f"backward op {name}: no way to run rule {op['rule']}")
            for k, (out, r) in enumerate(zip(op["outputs"], results)):
                env[out] = plan.wrap(name, k, out, r, op["rule"])
        return {p: env[g] for p, g in program["param_grads"].items()}

    def _vjp(self, grad_of: Dict[str, Any], local: List[torch.Tensor]) -> List[torch.Tensor]:
        """The grad op of forward op `grad_of["op"]` on local blocks: the
        op recomputed on its saved inputs, differentiated against the
        gradients of its outputs."""
        node = self.nodes[grad_of["op"]]
        n = len(list(_tensor_args(node)))
        saved, out_grads = local[:n], local[n:]
        leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in saved]
        with torch.enable_grad():
            result = call(node, iter(leaves), lambda: out_grads[0].shape)
            outs = [result] if isinstance(result, torch.Tensor) else list(_tensor_results(result))
            pairs = [(o, g) for o, g in zip(outs, out_grads) if o.requires_grad]
            wrt = [leaves[i] for i in grad_of["inputs"]]
            want = [w for w in wrt if w.requires_grad]
            grads = (
                torch.autograd.grad([o for o, _ in pairs], want, [g for _, g in pairs], allow_unused=True)
                if pairs and want
                else []
            )
        by_leaf = {id(w): g for w, g in zip(want, grads)}
        return [
            by_leaf.get(id(w)) if by_leaf.get(id(w)) is not None else torch.zeros(w.shape, dtype=torch.float32)
            for w in wrt
        ]


def _tensor_args(node: torch.fx.Node) -> Iterator[torch.fx.Node]:
    """A call's tensor arguments in the graph's input order."""
    for _, _, v in arguments(node):
        if isinstance(v, torch.fx.Node):
            yield v
        elif tensor_list(v):
            yield from (x for x in v if x is not None)


def _tensor_results(result: Any) -> List[torch.Tensor]:
    return [r for r in result if isinstance(r, torch.Tensor)]


def propagated(graph: "spmd.Graph", plan: Any, backward: bool = False) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """The propagation JSON of `graph` under `plan`, and its backward
    program when `backward`."""
    p = graph.propagate(plan=plan, backward=backward)
    program = p.backward_program()
    return json.loads(p.to_json()), (json.loads(program) if program else None)
