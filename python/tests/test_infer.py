"""spmd.infer, spmd.explain, layouts and the registry, from Python."""

import json

import pytest

import spmd


def test_the_readme_call():
    r = spmd.infer("matmul", spmd.Mesh([2, 4]), inputs=[([64, 32], [1, 0]), ([32, 48], [-1, -1])])
    # m keeps mesh dim 1, k keeps mesh dim 0: y is sliced to match, and the
    # output is partial over the contracted mesh dim 0.
    assert r.outputs[0].dims_mapping == [1, -1]
    assert r.outputs[0].partial == {0: "sum"}
    assert r.outputs[0].is_partial
    assert r.inputs[1].dims_mapping == [0, -1]
    assert r.reshards[0] == []
    assert len(r.reshards[1]) == 1 and "slice" in r.reshards[1][0]
    assert "all-reduce" in r.pending[0][0]
    text = repr(r)
    assert "matmul forward on mesh 2x4" in text and "\x1b[" not in text
    assert json.loads(r.to_json())["op"] == "matmul"
    html = r._repr_html_()
    assert html.startswith("<pre>matmul forward") and html.count("<svg") == 1


def test_a_replicated_contraction_is_not_partial():
    r = spmd.infer("matmul", [4], inputs=[([8, 16], [0, -1]), ([16, 4], [-1, -1])])
    assert r.outputs[0].dims_mapping == [0, -1]
    assert r.outputs[0].partial == {}
    assert r.pending == [[]]


def test_attributes_change_the_answer():
    ins = [([16, 8], [0, -1]), ([16, 4], [-1, -1])]
    r = spmd.infer("matmul", [2], inputs=ins, attrs={"trans_x": True})
    # x transposed: its dim 0 is the contracted k, so the output is partial.
    assert r.outputs[0].partial == {0: "sum"}
    assert r.outputs[0].dims_mapping == [-1, -1]


def test_tensor_objects_bare_shapes_and_partial_inputs():
    a = spmd.Tensor([8, 8], [0, -1], partial={1: "sum"})
    r = spmd.infer("add", [2, 2], inputs=[a, [8, 8]])
    assert r.inputs[0].dims_mapping == [0, -1]
    assert r.inputs[1].dims_mapping == [0, -1]
    r2 = spmd.infer("add", [2, 2], inputs=[([8, 8], [0, -1], [1]), [8, 8]])
    assert r2.inputs[0] == r.inputs[0]


def test_co_sharded_mappings_round_trip():
    r = spmd.infer("relu", [2, 2], inputs=[([8, 4], [[0, 1], -1])])
    assert r.outputs[0].dims_mapping == [[0, 1], -1]
    assert r.outputs[0].placements() == ["Shard(0)", "Shard(0)"]


def test_backward_and_grad_directions():
    mesh = spmd.Mesh([2, 4])
    b = spmd.infer(
        "matmul", mesh, inputs=[[64, 32], [32, 48]], outputs=[([64, 48], [0, 1])], direction="backward"
    )
    assert b.direction == "backward"
    assert b.inputs[0].dims_mapping[0] == 0
    assert b.inputs[1].dims_mapping[1] == 1
    g = spmd.infer(
        "matmul",
        mesh,
        inputs=[([64, 32], [0, -1]), ([32, 48], [-1, 1])],
        outputs=[([64, 48], [0, 1])],
        direction="grad",
    )
    assert g.direction == "grad"
    # The weight's grad contracts the sharded batch dim: partial over mesh dim 0.
    assert g.outputs[1].partial == {0: "sum"}


def test_einsum_notations_and_run_time_rules():
    r = spmd.infer("mk,kn->mn", [2], inputs=[([4, 6], [-1, 0]), ([6, 2], [0, -1])])
    assert r.outputs[0].partial == {0: "sum"}
    rule = spmd.Rule(einsum="bsk,kn,+n->bsn")
    assert rule.einsum == "bsk,kn,+n->bsn"
    r = spmd.infer(rule, [2], inputs=[([4, 8, 16], [0, -1, -1]), ([16, 32], [-1, 0]), ([32], [-1])])
    assert r.outputs[0].dims_mapping == [0, -1, -1] or r.outputs[0].dims_mapping == [-1, -1, 0]
    maxed = spmd.Rule(einsum="mk,kn->mn", reduce="max")
    r = spmd.infer(maxed, [2], inputs=[([4, 6], [-1, 0]), ([6, 2], [0, -1])])
    assert r.outputs[0].partial == {0: "max"}


def test_placements_both_ways():
    mesh = spmd.Mesh([2, 4])
    l = spmd.Layout.from_placements(mesh, ["Shard(1)", "Partial(avg)"], 2)
    assert l.dims_mapping == [-1, 0]
    assert l.partial == {1: "avg"}
    assert l.placements() == ["Shard(1)", "Partial(avg)"]
    assert spmd.Layout(mesh, [1, 0]).placements() == ["Shard(1)", "Shard(0)"]
    assert spmd.Layout(mesh, [-1, -1]).placements() == ["Replicate()", "Replicate()"]
    co = spmd.Layout.from_placements(mesh, ["Shard(0)", "Shard(0)"], 1)
    assert co.dims_mapping == [[0, 1]]
    with pytest.raises(spmd.LayoutError, match="mesh-dim order"):
        spmd.Layout(mesh, [[1, 0]]).placements()


def test_layouts_draw_themselves():
    l = spmd.Layout([2, 2], [0, -1], shape=[4, 4])
    svg = l._repr_svg_()
    assert svg is not None and svg.startswith("<svg") and "[0, -1]" in svg
    assert spmd.Layout([2, 2], [0, -1])._repr_svg_() is None
    assert repr(l) == "Layout([0, -1], shape=[4, 4])"


def test_explain_lists_the_steps():
    text = spmd.explain("matmul", [2, 4], inputs=[([64, 32], [1, 0]), ([32, 48], [-1, -1])])
    assert "merge" in text and "axis `k`" in text and "\x1b[" not in text


def test_the_registry():
    names = spmd.ops()
    assert "matmul" in names and "aten.mm" in names and names == sorted(names)
    sig = spmd.signature("matmul")
    assert "trans_x" in sig and "inputs: x, y" in sig


def test_meshes():
    m = spmd.Mesh([2, 4])
    assert (m.shape, m.ndim, m.size) == ([2, 4], 2, 8)
    assert m == spmd.Mesh([2, 4]) and hash(m) == hash(spmd.Mesh([2, 4]))
    assert repr(m) == "Mesh([2, 4])"
