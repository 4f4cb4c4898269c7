"""Hugging Face causal LMs built from their config classes with small sizes
and random weights (nothing is downloaded), or at full size on the meta
device, ready to export."""

import sys

import torch
import transformers

from ._export import export_program

# Small sizes every decoder-only config understands under one name or
# another; a config class ignores the names it does not use.
SMALL = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    # Heads a 4-way tensor-parallel plan divides (head dim 8).
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=64,
    # OPT
    ffn_dim=128,
    word_embed_proj_dim=64,
    # GPT-2, GPT-NeoX under other names
    n_embd=64,
    n_layer=2,
    n_head=8,
    n_positions=64,
    n_inner=128,
)

ALIASES = {
    "llama": "LlamaConfig",
    "opt": "OPTConfig",
    "gpt-neox": "GPTNeoXConfig",
    "gpt2": "GPT2Config",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "phi": "PhiConfig",
    "qwen3": "Qwen3Config",
}


# Small mixture-of-experts sizes, under the names MoE configs use (dense
# configs ignore them).
SMALL_MOE = dict(
    num_experts=4,
    num_local_experts=4,
    n_routed_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    # Group-limited routing (DeepSeek): one group of all the experts.
    n_group=1,
    topk_group=1,
)

# Small multi-head latent attention sizes (DeepSeek-V2/V3 and their kin),
# for the classes that have it: every head has its own keys and values.
SMALL_MLA = dict(
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=8,
    kv_lora_rank=16,
    q_lora_rank=32,
    num_key_value_heads=SMALL["num_attention_heads"],
)


def config_of(config_class, layers):
    """The config class with the small sizes and `layers` layers, valid for
    its class (latent attention, where the class has it, small too): the
    vocabulary is raised above the padding token id the
    class's defaults name (Phi-3 pads with id 32000), which the embedding
    must hold. (Begin and end ids outside it only draw a warning: a forward
    pass never reads them.)"""
    cls = getattr(transformers, config_class, None)
    if cls is None:
        raise ValueError(f"transformers has no config class {config_class}")
    sizes = dict(SMALL, **SMALL_MOE)
    if "kv_lora_rank" in cls().to_dict():
        sizes.update(SMALL_MLA)
    for key in ("num_hidden_layers", "n_layer"):
        sizes[key] = layers
    config = cls(**sizes)
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and pad >= config.vocab_size:
        config = cls(**dict(sizes, vocab_size=pad + 1))
    return config


def model_of(config_class, layers, full_size=False):
    """The model of `config_class` (a `transformers` config class name) with
    `layers` layers, in eval mode, random weights from seed 0: with the small
    sizes, or with the class's own (`full_size`, on the meta device: no
    weight allocated; `layers` 0 keeps the class's layer count).

    Attention is SDPA, exported as one op whose layout is the heads' (a
    lowering to batched matmuls over merged batch and heads would lose it);
    a class without SDPA attention gets its own (eager) implementation."""
    if full_size:
        cls = getattr(transformers, config_class)
        config = cls(num_hidden_layers=layers) if layers else cls()
    else:
        config = config_of(config_class, layers)
    torch.manual_seed(0)
    with torch.device("meta" if full_size else "cpu"):
        try:
            config._attn_implementation = "sdpa"
            model = transformers.AutoModelForCausalLM.from_config(config).eval()
        except ValueError as e:
            if "sdpa" not in str(e).lower() and "scaled_dot_product" not in str(e).lower():
                raise
            print(f"{config_class}: no SDPA attention, exported eager", file=sys.stderr)
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return model


def example_inputs(model, batch, seq):
    """Token ids drawn after the model's weights (the exporter's inputs)."""
    device = next(model.parameters()).device
    with torch.device(device):
        ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return {"input_ids": ids, "use_cache": False}


def build(config_class, layers, batch, seq, full_size=False):
    """The exported program of `model_of(...)` on `example_inputs(...)`."""
    model = model_of(config_class, layers, full_size)
    return export_program(model, (), example_inputs(model, batch, seq))
