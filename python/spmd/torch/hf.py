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
    # Encoder-decoder classes (PLBart, Whisper): their decoders' heads.
    encoder_attention_heads=8,
    decoder_attention_heads=8,
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
    "mixtral": "MixtralConfig",
    "qwen3-moe": "Qwen3MoeConfig",
    "deepseek-v3": "DeepseekV3Config",
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
    # DeepSeek's dense layers before the first MoE one: one of the two.
    first_k_dense_replace=1,
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


# A size a class refuses to be given (it computes it itself).
DROP = object()

# Classes whose defaults do not build a model at all, and what each needs.
FIXES = {
    # The model reads the per-layer kinds, which the class leaves unset.
    "Lfm2MoeConfig": dict(layer_types=["conv", "full_attention"]),
    # The model reads RoPE parameters per layer kind; the class keeps none.
    "CohereCompassTextConfig": dict(
        rope_parameters={
            kind: {"rope_type": "default", "rope_theta": 10000.0}
            for kind in ("full_attention", "sliding_attention")
        }
    ),
    # Its sizes go by other names, which its constructor does not alias; its
    # attention reads `rope_theta` from its own sub-config, and clamps q, k
    # and v to a bound the class leaves unset.
    "DbrxConfig": dict(
        d_model=SMALL["hidden_size"],
        n_heads=SMALL["num_attention_heads"],
        attn_config={"rope_theta": 10000.0, "clip_qkv": 8.0},
    ),
    # The output projection reads the hidden size, not heads x head size.
    "HeliumConfig": dict(head_dim=SMALL["hidden_size"] // SMALL["num_attention_heads"]),
    # The shared experts' width is a multiple of their count, left unset.
    "Dots1Config": dict(n_shared_experts=1),
    # Its rotary embedding spans `head_dim`, the rotary part of each head.
    "LongcatFlashConfig": dict(head_dim=SMALL_MLA["qk_rope_head_dim"]),
    # Layer kinds listed one per layer: two layers, one of each kind.
    "GPTNeoConfig": dict(attention_types=[[["global", "local"], 1]]),
    # Zamba's hybrid layers share one block: two of them, so it is shared.
    "ZambaConfig": dict(layer_types=["hybrid", "hybrid"]),
    "Zamba2Config": dict(layers_block_type=["hybrid", "hybrid"]),
    # Axial position embeddings: factors of the sequence (16) and of the
    # hidden size (64); attention chunks no longer than the sequence.
    # X-MOD is a decoder only when told so.
    "XmodConfig": dict(is_decoder=True),
    "ReformerConfig": dict(
        is_decoder=True,
        axial_pos_shape=[4, 4],
        axial_pos_embds_dim=[32, 32],
        lsh_attn_chunk_length=16,
        local_attn_chunk_length=16,
    ),
    # Mamba-2 heads must tile the expanded width (2 x 64).
    "Mamba2Config": dict(num_heads=8, head_dim=16),
    # Classes that take only some sizes (or count layers their own way).
    "Gemma4AssistantConfig": dict(text_config=dict(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0)),
    # Layers that reuse an earlier layer's cache: none of two.
    "Gemma3nTextConfig": dict(num_kv_shared_layers=0),
    "ZayaConfig": dict(num_experts_per_tok=1),
    "XLNetConfig": dict(max_position_embeddings=DROP, d_head=8),
    "ProphetNetConfig": dict(num_hidden_layers=DROP, num_encoder_layers=2, num_decoder_layers=2),
}


def config_class_of(model_type):
    """The config class `AutoModelForCausalLM` builds `model_type` from: the
    registered one, or its text (decoder) part where the causal LM is that
    part alone (Llama 4, Mllama, Qwen3.5, MusicGen)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    registered = CONFIG_MAPPING_NAMES[model_type]
    model = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type, ""), None)
    own = getattr(model, "config_class", None)
    parts = getattr(getattr(transformers, registered, None), "sub_configs", {}) or {}
    if own is not None and own.__name__ != registered and own in parts.values():
        return own.__name__
    return registered


def config_of(config_class, layers):
    """The config class with the small sizes and `layers` layers, valid for
    its class: latent attention, where the class has it, small too; a head size
    where the class leaves it unset; every sub-config (a
    vision tower, an audio encoder) small as well, so that a multimodal
    class builds in little memory; the vocabulary raised above the padding
    token id the class's defaults name (Phi-3 pads with id 32000), which
    the embedding must hold. (Begin and end ids outside it only draw a
    warning: a forward pass never reads them.)"""
    cls = config_class if isinstance(config_class, type) else getattr(transformers, config_class, None)
    if cls is None:
        raise ValueError(f"transformers has no config class {config_class}")
    try:
        defaults = cls().to_dict()
    except Exception:  # noqa: BLE001 - a class whose own defaults do not validate
        defaults = {}
    sizes = dict(SMALL, **SMALL_MOE)
    head = SMALL["hidden_size"] // SMALL["num_attention_heads"]
    # A head size the class leaves unset, and a rotary part of the head
    # no larger than the head.
    if "head_dim" in defaults and defaults["head_dim"] is None:
        sizes["head_dim"] = head
    if "rotary_dim" in defaults:
        sizes["rotary_dim"] = head
    if "kv_lora_rank" in defaults:
        sizes.update(SMALL_MLA)
    for key in ("num_hidden_layers", "n_layer", "n_layers"):
        sizes[key] = layers
    parts = []
    for key, part in (getattr(cls, "sub_configs", None) or {}).items():
        if isinstance(part, type) and issubclass(part, transformers.PretrainedConfig) and part is not cls:
            try:
                sizes[key] = config_of(part, layers).to_dict()
                parts.append(key)
            except Exception:  # noqa: BLE001 - a part that takes no small sizes keeps its own
                pass
    for key, fix in FIXES.get(cls.__name__, {}).items():
        # A fix of a sub-config amends its small sizes.
        sizes[key] = dict(sizes[key], **fix) if isinstance(sizes.get(key), dict) and isinstance(fix, dict) else fix
    sizes = {k: v for k, v in sizes.items() if v is not DROP}
    try:
        config = cls(**sizes)
    except Exception:
        if not parts:
            raise
        # Parts whose small sizes the whole does not accept (Moshi's depth
        # decoder reads the audio vocabulary from the whole): their own.
        sizes = {k: v for k, v in sizes.items() if k not in parts}
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
    build = causal_lm_of(type(config))
    torch.manual_seed(0)
    with torch.device("meta" if full_size else "cpu"):
        try:
            config._attn_implementation = "sdpa"
            model = build(config).eval()
        except ValueError as e:
            if "sdpa" not in str(e).lower() and "scaled_dot_product" not in str(e).lower():
                raise
            print(f"{config_class}: no SDPA attention, exported eager", file=sys.stderr)
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            model = build(config).eval()
    # X-MOD has an adapter per language and runs none until told which.
    if hasattr(model, "set_default_language") and getattr(config, "languages", None):
        model.set_default_language(config.languages[0])
    return model


def causal_lm_of(config_cls):
    """What builds the causal LM of a config class: `AutoModelForCausalLM`,
    or, for the text part of a composite config that the auto class does not
    register (MusicGen's decoder, Emu3's text model), the causal-LM class
    whose own config class it is."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    for name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        model = getattr(transformers, name, None)
        if getattr(model, "config_class", None) is config_cls:
            return model._from_config
    return transformers.AutoModelForCausalLM.from_config


def example_inputs(model, batch, seq):
    """Token ids drawn after the model's weights (the exporter's inputs): a
    row per sequence, or per sequence and codebook for a model that reads
    several codebooks (MusicGen's decoder)."""
    device = next(model.parameters()).device
    rows = batch * getattr(model.config, "num_codebooks", 1)
    vocab = model.config.get_text_config().vocab_size
    with torch.device(device):
        ids = torch.randint(0, vocab, (rows, seq))
    return {"input_ids": ids, "use_cache": False}


def build(config_class, layers, batch, seq, full_size=False, dispatch=False, capacity_factor=None):
    """The exported program of `model_of(...)` on `example_inputs(...)`;
    with `dispatch`, its experts in the form expert parallelism shards
    (`spmd.torch.moe`, a group per sequence, `capacity_factor` as there)."""
    model = model_of(config_class, layers, full_size)
    if dispatch:
        from . import moe

        moe.use(model, groups=batch, capacity_factor=capacity_factor)
    return export_program(model, (), example_inputs(model, batch, seq))
