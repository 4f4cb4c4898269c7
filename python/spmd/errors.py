"""The exceptions spmd raises.

Every error the Rust core reports arrives as a subclass of :class:`SpmdError`
carrying the core's own message, which names the op, the tensor, the dim and
the mesh dim involved. Catch :class:`SpmdError` for all of them, or a
subclass for one kind::

    try:
        spmd.infer("matmull", spmd.Mesh([2]), inputs=[([4, 4], [0, -1]), ([4, 4], [-1, -1])])
    except spmd.UnknownOpError as e:
        print(e)  # names the op and suggests `matmul`
"""

from __future__ import annotations


class SpmdError(Exception):
    """Base class of every error spmd raises."""


class InputError(SpmdError, ValueError, TypeError):
    """A Python value is not what the call takes: a shape that is not a list
    of non-negative ints, a dims mapping of the wrong form, an unknown
    direction."""


class UnknownOpError(SpmdError, KeyError):
    """No rule is registered under that name; the message suggests near names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NotationError(SpmdError):
    """An einsum notation or template does not parse; every problem is listed."""


class MeshError(SpmdError):
    """A mesh with no dims or a dim of size 0, or tensors on different meshes."""


class LayoutError(SpmdError):
    """A layout that does not fit its tensor or mesh: a mapping of the wrong
    length, a mesh dim out of range or used twice, a dim both partial and
    sharded, placements that cannot be written as a dims mapping."""


class ShapeError(SpmdError):
    """Tensors that do not fit the op: the wrong number, a wrong rank, extents
    that disagree on one axis."""


class ConflictError(SpmdError):
    """Under a strict policy, two axes claim one mesh dim."""


class AttrError(SpmdError):
    """An attribute the op does not take (with near names), or a bad value."""


class RuleError(SpmdError):
    """The rule refuses the call for a reason of its own."""


class GraphError(SpmdError):
    """A graph that does not load or propagate."""


class UnsupportedOpsError(GraphError):
    """A graph has ops with no rule; the message lists each kind and count."""


class PlanError(GraphError):
    """A plan file or annotation that does not apply to the graph."""


class NoPlanFitsError(SpmdError):
    """No plan the search found fits the memory budget.

    ``smallest`` is the least memory per device, in bytes, of any plan it
    priced."""

    smallest: int

    def __init__(self, message: str, smallest: int = 0) -> None:
        super().__init__(message)
        self.smallest = smallest


class InternalError(SpmdError):
    """A bug in spmd (a Rust panic, caught before it reached Python).
    Please report it with the call that raised it."""


__all__ = [
    "SpmdError",
    "InputError",
    "UnknownOpError",
    "NotationError",
    "MeshError",
    "LayoutError",
    "ShapeError",
    "ConflictError",
    "AttrError",
    "RuleError",
    "GraphError",
    "UnsupportedOpsError",
    "PlanError",
    "NoPlanFitsError",
    "InternalError",
]
