"""spmd: sharding propagation rules, whole-graph plans and automatic sharding.

The simplest call runs one op's rule::

    import spmd
    r = spmd.infer("matmul", spmd.Mesh([2, 4]), inputs=[([64, 32], [1, 0]), ([32, 48], [-1, -1])])
    print(r)                       # requirements, outputs, partial status, reshards
    r.outputs[0].dims_mapping      # [1, -1]

Graphs (exported from PyTorch, see ``tools/torch_export``) are loaded with
:meth:`Graph.load`, propagated under a plan with :meth:`Graph.propagate`,
and given a plan by :meth:`Graph.autoshard`. Every error is an
:class:`SpmdError` subclass (see :mod:`spmd.errors`).
"""

from __future__ import annotations

from ._spmd import (
    Autoshard,
    Graph,
    InferResult,
    Layout,
    Mesh,
    Propagation,
    Rule,
    __version__,
    explain,
    infer,
    ops,
    signature,
)
from .errors import (
    AttrError,
    ConflictError,
    GraphError,
    InputError,
    InternalError,
    LayoutError,
    MeshError,
    NoPlanFitsError,
    NotationError,
    PlanError,
    RuleError,
    ShapeError,
    SpmdError,
    UnknownOpError,
    UnsupportedOpsError,
)
from .tensor import Tensor

__all__ = [
    "Autoshard",
    "Graph",
    "InferResult",
    "Layout",
    "Mesh",
    "Propagation",
    "Rule",
    "Tensor",
    "__version__",
    "explain",
    "infer",
    "ops",
    "signature",
    "AttrError",
    "ConflictError",
    "GraphError",
    "InputError",
    "InternalError",
    "LayoutError",
    "MeshError",
    "NoPlanFitsError",
    "NotationError",
    "PlanError",
    "RuleError",
    "ShapeError",
    "SpmdError",
    "UnknownOpError",
    "UnsupportedOpsError",
]
