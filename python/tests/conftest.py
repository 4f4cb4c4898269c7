from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GRAPHS = REPO / "spmd-graph" / "graphs" / "hf"


@pytest.fixture
def graphs() -> Path:
    return GRAPHS
