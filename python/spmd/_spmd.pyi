"""Type stubs of the native module (the Rust core, through PyO3)."""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .tensor import Tensor

__version__: str

#: A tensor of a call: a shape (replicated), ``(shape, dims_mapping)``,
#: ``(shape, dims_mapping, partial)``, an :class:`spmd.Tensor`, or ``None``
#: for an absent optional input.
TensorLike = Union[
    Sequence[int],
    "tuple[Sequence[int], Optional[Sequence[Union[int, Sequence[int]]]]]",
    "tuple[Sequence[int], Optional[Sequence[Union[int, Sequence[int]]]], Union[Sequence[int], Dict[int, str], None]]",
    Tensor,
    None,
]
MeshLike = Union["Mesh", Sequence[int]]

class Mesh:
    """An N-d grid of devices, ids row-major."""

    def __init__(self, shape: Sequence[int]) -> None: ...
    @property
    def shape(self) -> List[int]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def size(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Layout:
    """A tensor's layout: dims mapping and partial status."""

    def __init__(
        self,
        mesh: MeshLike,
        dims_mapping: Sequence[Union[int, Sequence[int]]],
        partial: Union[Sequence[int], Dict[int, str], None] = None,
        shape: Optional[Sequence[int]] = None,
    ) -> None: ...
    @property
    def dims_mapping(self) -> List[Union[int, List[int]]]: ...
    @property
    def partial(self) -> Dict[int, str]: ...
    @property
    def is_partial(self) -> bool: ...
    @property
    def shape(self) -> Optional[List[int]]: ...
    @property
    def mesh(self) -> Mesh: ...
    def placements(self) -> List[str]: ...
    @staticmethod
    def from_placements(mesh: MeshLike, placements: Sequence[str], ndim: int) -> "Layout": ...
    def __eq__(self, other: object) -> bool: ...
    def show(self) -> str: ...
    def _repr_svg_(self) -> Optional[str]: ...

class Rule:
    """A rule declared at run time from an einsum notation."""

    def __init__(self, einsum: str, *, reduce: Optional[str] = None) -> None: ...
    @property
    def einsum(self) -> str: ...

class InferResult:
    """The answer of one rule call."""

    @property
    def op(self) -> str: ...
    @property
    def direction(self) -> str: ...
    @property
    def mesh(self) -> Mesh: ...
    @property
    def inputs(self) -> List[Optional[Layout]]: ...
    @property
    def outputs(self) -> List[Optional[Layout]]: ...
    @property
    def reshards(self) -> List[List[str]]: ...
    @property
    def pending(self) -> List[List[str]]: ...
    def to_json(self) -> str: ...
    def _repr_html_(self) -> str: ...

class Propagation:
    """A graph propagated under a plan, with its reshard plans."""

    @property
    def collectives(self) -> Dict[str, int]: ...
    @property
    def backward_collectives(self) -> Dict[str, int]: ...
    def to_json(self) -> str: ...
    def backward_program(self) -> Optional[str]: ...

class Autoshard:
    """The plan the search chose, and its report."""

    @property
    def plan_json(self) -> str: ...
    @property
    def step_time(self) -> float: ...
    def to_json(self) -> str: ...

class Graph:
    """A tensor program in spmd's graph format."""

    @staticmethod
    def load(path: str) -> "Graph": ...
    @staticmethod
    def from_json(text: str) -> "Graph": ...
    def to_json(self) -> str: ...
    def __len__(self) -> int: ...
    def propagate(
        self,
        plan: Union[str, Mapping[str, Any], None] = None,
        *,
        backward: bool = False,
        override: bool = False,
    ) -> Propagation: ...
    def autoshard(
        self,
        mesh: MeshLike,
        *,
        memory: Union[int, str, None] = None,
        device: str = "h100",
        starts: int = 1,
        solver_nodes: int = 500,
        solver_time: float = 60.0,
    ) -> Autoshard: ...

def infer(
    op: Union[str, Rule],
    mesh: MeshLike,
    inputs: Sequence[TensorLike],
    attrs: Optional[Mapping[str, Any]] = None,
    *,
    outputs: Optional[Sequence[TensorLike]] = None,
    direction: str = "forward",
) -> InferResult: ...
def explain(
    op: Union[str, Rule],
    mesh: MeshLike,
    inputs: Sequence[TensorLike],
    attrs: Optional[Mapping[str, Any]] = None,
    *,
    outputs: Optional[Sequence[TensorLike]] = None,
    direction: str = "forward",
) -> str: ...
def ops() -> List[str]: ...
def signature(name: str) -> str: ...
