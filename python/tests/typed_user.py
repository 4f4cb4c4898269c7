"""A small user script, type-checked with `mypy --strict` against the
package's stubs (.ci/run); run as a test too."""

from typing import List, Optional

import spmd


def column_parallel_output(mesh_shape: List[int]) -> List[int]:
    mesh = spmd.Mesh(mesh_shape)
    result: spmd.InferResult = spmd.infer(
        "matmul",
        mesh,
        inputs=[([64, 32], [-1, -1]), spmd.Tensor([32, 48], [-1, 0])],
        attrs={"trans_x": False},
    )
    out: Optional[spmd.Layout] = result.outputs[0]
    assert out is not None
    mapping = out.dims_mapping
    return [d if isinstance(d, int) else d[0] for d in mapping]


def placements_of(mesh: spmd.Mesh) -> List[str]:
    layout = spmd.Layout(mesh, [0, -1], partial={1: "sum"}, shape=[8, 8])
    return layout.placements()


def main() -> None:
    assert column_parallel_output([2]) == [-1, 0]
    assert placements_of(spmd.Mesh([2, 2])) == ["Shard(0)", "Partial(sum)"]
    try:
        spmd.infer("matmull", [2], inputs=[[4, 4], [4, 4]])
    except spmd.UnknownOpError as e:
        message: str = str(e)
        assert "matmul" in message


def test_typed_user_script() -> None:
    main()


if __name__ == "__main__":
    main()
