"""spmd.torch.moe: the dispatch form computes transformers' own experts,
and a capacity factor bounds each expert's room as GShard's does."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spmd.torch import hf, moe  # noqa: E402


def logits(model, inputs):
    with torch.no_grad():
        return model(**inputs).logits


@pytest.mark.parametrize("config_class", ["MixtralConfig", "Qwen3MoeConfig", "DeepseekV3Config"])
def test_dispatch_computes_the_models_experts(config_class):
    model = hf.model_of(config_class, 2)
    inputs = hf.example_inputs(model, 4, 16)
    own = logits(model, inputs)
    moe.use(model, groups=4)
    ours = logits(model, inputs)
    assert ((ours - own).norm() / own.norm()).item() <= 1e-5
    # A capacity that holds every routed token changes nothing.
    moe.use(model, groups=4, capacity_factor=100.0)
    assert torch.equal(logits(model, inputs), ours)
    # A capacity of one token per expert and group drops tokens: the
    # function changes, and it is no longer the model's.
    moe.use(model, groups=4, capacity_factor=1e-9)
    dropped = logits(model, inputs)
    assert ((dropped - own).norm() / own.norm()).item() > 1e-3


def test_capacity_is_the_factor_times_the_even_share():
    # 16 tokens, each to 2 of 8 experts: an even share is 4 per expert.
    assert moe.capacity_of(16, 2, 8) == 16
    assert moe.capacity_of(16, 2, 8, 1.25) == 5
    assert moe.capacity_of(16, 2, 8, 1e-9) == 1
    assert moe.capacity_of(16, 2, 8, 100.0) == 16
