"""A tensor given to a rule call: its global shape and layout."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

#: One entry of a dims mapping: -1 (replicated), a mesh dim, or the mesh
#: dims a dim is co-sharded over (major first).
MappingEntry = Union[int, Sequence[int]]


@dataclass(frozen=True)
class Tensor:
    """A tensor of a call, richer than a ``(shape, dims_mapping)`` pair.

    ``dims_mapping`` is Paddle's: per dim -1 or the mesh dim splitting it
    (``None``: replicated). ``partial`` gives the mesh dims the values are
    partial over, as a list (summed) or a dict from mesh dim to reduce type
    (``{0: "max"}``).

    >>> spmd.Tensor([64, 32], [1, -1], partial={0: "sum"})
    """

    shape: Sequence[int]
    dims_mapping: Optional[Sequence[MappingEntry]] = None
    partial: Union[Sequence[int], Dict[int, str], None] = field(default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", list(self.shape))


__all__ = ["Tensor", "MappingEntry"]

