"""Bad input from Python raises an SpmdError subclass with the core's
message, and never lets a Rust panic through."""

import random

import pytest

import spmd

MM = [([4, 4], [0, -1]), ([4, 4], [-1, -1])]

CASES = [
    # (what, call, exception class, a word of the message)
    ("misspelled op", lambda: spmd.infer("matmull", [2], MM), spmd.UnknownOpError, "did you mean `matmul`"),
    ("op of another type", lambda: spmd.infer(3, [2], MM), spmd.InputError, "op"),
    ("mesh of too many dims", lambda: spmd.Mesh([1] * 9), spmd.MeshError, "mesh"),
    ("mesh dim of size 0", lambda: spmd.Mesh([2, 0]), spmd.MeshError, "mesh"),
    ("negative mesh extent", lambda: spmd.Mesh([-2]), spmd.MeshError, "positive"),
    ("mesh given as a str", lambda: spmd.Mesh("2x4"), spmd.InputError, "str"),
    ("too few inputs", lambda: spmd.infer("matmul", [2], MM[:1]), spmd.ShapeError, "matmul"),
    ("wrong rank", lambda: spmd.infer("mk,kn->mn", [2], [([4], [0]), ([4, 4], [-1, -1])]), spmd.ShapeError, "rank"),
    ("contraction extents disagree", lambda: spmd.infer("matmul", [2], [([4, 4], [-1, -1]), ([5, 4], [-1, -1])]), spmd.ShapeError, "matmul"),
    ("mapping too long", lambda: spmd.infer("matmul", [2], [([4, 4], [0, -1, -1]), ([4, 4], [-1, -1])]), spmd.LayoutError, "input 0"),
    ("mesh dim out of range", lambda: spmd.infer("matmul", [2], [([4, 4], [3, -1]), ([4, 4], [-1, -1])]), spmd.LayoutError, "mesh dim"),
    ("mesh dim used twice", lambda: spmd.infer("matmul", [2], [([4, 4], [0, 0]), ([4, 4], [-1, -1])]), spmd.LayoutError, "mesh dim"),
    ("mesh dim below -1", lambda: spmd.infer("relu", [2], [([4], [-2])]), spmd.LayoutError, "input 0"),
    ("partial and sharded on one mesh dim", lambda: spmd.infer("relu", [2], [([4], [0], [0])]), spmd.LayoutError, "partial"),
    ("unknown reduce type", lambda: spmd.infer("relu", [2], [([4], [-1], {0: "mean-ish"})]), spmd.LayoutError, "mean-ish"),
    ("negative extent", lambda: spmd.infer("relu", [2], [([-4], [-1])]), spmd.LayoutError, "input 0"),
    ("shape given as a str", lambda: spmd.infer("relu", [2], [("4x4", [-1, -1])]), spmd.InputError, "str"),
    ("inputs not a list", lambda: spmd.infer("relu", [2], "x"), spmd.InputError, "inputs"),
    ("a tensor of four parts", lambda: spmd.infer("relu", [2], [([4], [-1], None, 1)]), spmd.InputError, "input 0"),
    ("unknown attribute", lambda: spmd.infer("matmul", [2], MM, attrs={"transpose_x": True}), spmd.AttrError, "trans_x"),
    ("attribute of the wrong type", lambda: spmd.infer("matmul", [2], MM, attrs={"trans_x": "yes"}), spmd.AttrError, "trans_x"),
    ("attribute value with no JSON form", lambda: spmd.infer("matmul", [2], MM, attrs={"trans_x": object()}), spmd.InputError, "attrs"),
    ("unknown direction", lambda: spmd.infer("matmul", [2], MM, direction="sideways"), spmd.InputError, "direction"),
    ("notation that does not parse", lambda: spmd.Rule(einsum="mk,kn->mz"), spmd.NotationError, "z"),
    ("einsum without its equation", lambda: spmd.infer("einsum", [2], MM), spmd.AttrError, "equation"),
    ("unknown reduce of a rule", lambda: spmd.Rule(einsum="mk,kn->mn", reduce="median"), spmd.AttrError, "median"),
    ("placements of the wrong count", lambda: spmd.Layout.from_placements([2, 2], ["Shard(0)"], 2), spmd.LayoutError, "placements"),
    ("placement that does not parse", lambda: spmd.Layout.from_placements([2], ["Split(0)"], 2), spmd.LayoutError, "Split"),
    ("placement past the rank", lambda: spmd.Layout.from_placements([2], ["Shard(3)"], 2), spmd.LayoutError, "no dim 3"),
    ("layout with a mesh dim out of range", lambda: spmd.Layout([2], [1]), spmd.LayoutError, "mesh dim"),
    ("signature of an unknown op", lambda: spmd.signature("softmaks"), spmd.UnknownOpError, "softmax"),
    ("graph that is not JSON", lambda: spmd.Graph.from_json("{not json"), spmd.GraphError, "graph JSON"),
    ("graph missing its fields", lambda: spmd.Graph.from_json("{}"), spmd.GraphError, "graph JSON"),
    ("graph file that does not exist", lambda: spmd.Graph.load("/nonexistent/graph.json"), spmd.GraphError, "cannot read"),
]


@pytest.mark.parametrize("what,call,cls,word", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_its_error_class(what, call, cls, word):
    with pytest.raises(cls) as info:
        call()
    assert isinstance(info.value, spmd.SpmdError)
    assert not isinstance(info.value, spmd.InternalError)
    assert word in str(info.value), str(info.value)


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20


def test_errors_are_also_builtin_exceptions_where_that_helps():
    with pytest.raises(KeyError):
        spmd.infer("matmull", [2], MM)
    with pytest.raises(ValueError):
        spmd.infer("matmul", [2], MM, direction="sideways")


def _garbage(rng: random.Random, depth: int = 0):
    choices = [
        lambda: rng.randint(-3, 5),
        lambda: None,
        lambda: "x",
        lambda: 2.5,
        lambda: 10**30,
        lambda: {rng.randint(-1, 3): rng.choice(["sum", "max", "?"])},
    ]
    if depth < 3:
        choices += [lambda: [_garbage(rng, depth + 1) for _ in range(rng.randint(0, 3))]] * 3
        choices += [lambda: tuple(_garbage(rng, depth + 1) for _ in range(rng.randint(0, 3)))] * 3
    return rng.choice(choices)()


def test_random_garbage_never_panics():
    rng = random.Random(7)
    ops = ["matmul", "add", "relu", "softmax", "reshape", "embedding", "layer_norm", "mk,kn->mn"]
    answered = raised = 0
    for _ in range(3000):
        op = rng.choice(ops)
        mesh = _garbage(rng) if rng.random() < 0.2 else [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
        inputs = _garbage(rng, 1) if rng.random() < 0.3 else [_garbage(rng, 1) for _ in range(rng.randint(0, 3))]
        try:
            spmd.infer(op, mesh, inputs)
            answered += 1
        except spmd.InternalError:
            raise
        except spmd.SpmdError:
            raised += 1
    assert raised > 0
