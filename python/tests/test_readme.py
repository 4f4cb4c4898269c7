"""The README's Python example runs, from the checkout's root, and prints
what its comments say."""

import contextlib
import io
import os
import re

import pytest

from conftest import REPO

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_readme_example_runs():
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    example = next(b for b in blocks if "spmd.torch.export" in b)
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(example, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    text = out.getvalue()
    # Megatron's plan on the exported Llama: 2 all-reduces a layer forward.
    assert "{'all_reduce': 4}" in text
    assert "[1, -1] ['Partial(sum)', 'Shard(0)']" in text
    assert "local block" in text and "backward graph" in text
