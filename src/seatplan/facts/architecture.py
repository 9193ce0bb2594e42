"""Per-architecture knowledge: a Hugging Face ``config.json`` turned into one descriptor per layer.

This is the only module that knows config key spellings (KV head keys, sliding-window declarations,
MLA ranks, Mamba/GDN state dimensions, multimodal ``text_config``). Everything downstream works on
:class:`ModelLayout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from seatplan.errors import SeatplanError

# transformers fills these in when a config omits them; vLLM sees the filled-in values.
TEXT_CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "gemma2": {"sliding_window_pattern": 2, "tie_word_embeddings": True},
    "gemma3": {"sliding_window_pattern": 6, "tie_word_embeddings": True},
}

LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
ATTENTION_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads")
HIDDEN_KEYS = ("hidden_size", "d_model", "n_embd")
MAX_LAYERS = 10_000  # no real model comes close; guards against building a list from a damaged count
# Any count in a config (heads, sizes, experts, vocabulary, positions) above this is damage: a tensor of that many
# elements of one byte would not fit in any machine's memory, and vLLM indexes with 32-bit integers.
MAX_CONFIG_COUNT = (1 << 31) - 1


@dataclass(frozen=True)
class AttentionLayer:
    """An attention layer with KV cache; ``kind`` is full_attention, sliding_window, chunked_local or mla."""

    kind: str
    num_kv_heads: int
    head_size: int
    head_size_v: int
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    latent_size: int | None = None


@dataclass(frozen=True)
class StateLayer:
    """A recurrent-state layer (Mamba1, Mamba2, gated DeltaNet) with its dimensions across all ranks."""

    mamba_type: str
    conv_kernel: int
    intermediate_size: int = 0
    state_size: int = 0
    n_groups: int = 0
    num_heads: int = 0
    head_dim: int = 0
    num_k_heads: int = 0
    num_v_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    ssm_fp32: bool = False

    def conv_elements(self, tp: int) -> int:
        """Elements of the convolution state on one rank (``conv_dim × (kernel − 1)``)."""
        if self.mamba_type == "gdn":
            conv_dim = 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
            return conv_dim // tp * (self.conv_kernel - 1)
        if self.mamba_type == "mamba2":
            # vLLM pads the groups up to TP when they cannot be split evenly.
            groups = self.n_groups + (tp - self.n_groups if self.n_groups % tp else 0)
            return (self.intermediate_size + 2 * groups * self.state_size) // tp * (self.conv_kernel - 1)
        return self.intermediate_size // tp * (self.conv_kernel - 1)

    def ssm_elements(self, tp: int) -> int:
        if self.mamba_type == "gdn":
            return self.num_v_heads // tp * self.v_head_dim * self.k_head_dim
        if self.mamba_type == "mamba2":
            return self.num_heads // tp * self.head_dim * self.state_size
        return self.intermediate_size // tp * self.state_size

    @property
    def checkpoint_blocks(self) -> int:
        return 1 if self.mamba_type == "mamba2" else 0


Layer = AttentionLayer | StateLayer


@dataclass(frozen=True)
class ModelLayout:
    source: str
    architecture: str
    model_type: str
    text_config: dict[str, Any]
    full_config: dict[str, Any]
    layers: list[Layer]
    config_dtype: str | None
    num_kv_heads: int
    head_size: int
    multimodal: bool
    notes: list[str] = field(default_factory=list)

    @property
    def is_mla(self) -> bool:
        return any(isinstance(layer, AttentionLayer) and layer.kind == "mla" for layer in self.layers)

    @property
    def has_state_layers(self) -> bool:
        return any(isinstance(layer, StateLayer) for layer in self.layers)


def first_key(config: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


def text_config_of(config: dict[str, Any]) -> dict[str, Any]:
    """The language-model part: ``text_config`` (or ``llm_config``) of multimodal configs, with defaults."""
    text = config
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            text = dict(config[key])
            break
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    defaults = TEXT_CONFIG_DEFAULTS.get(model_type, {})
    return {**defaults, **text}


def _require_int(config: dict[str, Any], keys: tuple[str, ...], source: str, what: str) -> int:
    value = first_key(config, keys)
    if value is None:
        raise SeatplanError(
            f"the config has no {what} (looked for {', '.join(keys)})",
            where=f"{source}: {keys[0]}",
            fix="point seatplan at the model's original config.json; unknown architectures need these keys",
        )
    key = next(key for key in keys if config.get(key) is not None)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SeatplanError(
            f"{what} must be a positive integer, got {value!r}",
            where=f"{source}: {key}",
            fix="check the config.json for a damaged value",
        )
    return plausible_count(value, key, source)


def plausible_count(value: int, key: str, source: str) -> int:
    """``value``, unless no hardware could hold a model with that many of anything (MAX_CONFIG_COUNT)."""
    if value > MAX_CONFIG_COUNT:
        raise SeatplanError(f"{key} = {value} is beyond any model (limit {MAX_CONFIG_COUNT:,})", where=f"{source}: {key}",
                            fix="check the config.json for a damaged value")
    return value


def count_field(config: dict[str, Any], keys: tuple[str, ...], source: str, default: int = 0) -> int:
    """An optional non-negative integer under the first present key; a value of another kind is named."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SeatplanError(f"{key} must be a non-negative integer, got {value!r}", where=f"{source}: {key}",
                                fix="check the config.json for a damaged value")
        return plausible_count(value, key, source)
    return default


def _optional_int(config: dict[str, Any], key: str, source: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SeatplanError(f"{key} must be a non-negative integer, got {value!r}", where=f"{source}: {key}",
                            fix="check the config.json for a damaged value")
    return plausible_count(value, key, source)


def total_kv_heads(text: dict[str, Any], source: str) -> int:
    """vLLM's ``get_total_num_kv_heads``: the first KV-head key present, else the attention heads."""
    if text.get("multi_query") and not text.get("new_decoder_architecture"):
        return 1
    attn_config = text.get("attn_config")
    if isinstance(attn_config, dict) and attn_config.get("kv_n_heads"):
        return plausible_count(int(attn_config["kv_n_heads"]), "attn_config.kv_n_heads", source)
    value = first_key(text, KV_HEAD_KEYS)
    if value is not None:
        return _require_int(text, KV_HEAD_KEYS, source, "number of KV heads")
    return _require_int(text, ATTENTION_HEAD_KEYS, source, "number of attention heads")


def head_size_of(text: dict[str, Any], source: str) -> int:
    """vLLM's ``get_head_size``: ``head_dim``, else ``hidden_size_per_head``, else hidden / heads."""
    for key in ("head_dim", "hidden_size_per_head"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    hidden = _require_int(text, HIDDEN_KEYS, source, "hidden size")
    heads = _require_int(text, ATTENTION_HEAD_KEYS, source, "number of attention heads")
    if hidden < heads:
        raise SeatplanError(f"hidden_size {hidden} is smaller than num_attention_heads {heads}, so no head_dim follows",
                            where=f"{source}: hidden_size", fix="check the config.json, or give head_dim")
    return hidden // heads


def _attention_kinds(text: dict[str, Any], num_layers: int, source: str) -> list[str]:
    """Which attention layers are full, sliding or chunked, in every way configs declare it."""
    window = _optional_int(text, "sliding_window", source)
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        if len(layer_types) < num_layers:
            raise SeatplanError(
                f"layer_types lists {len(layer_types)} layers but the model has {num_layers}",
                where=f"{source}: layer_types", fix="check the config.json",
            )
        mapping = {"sliding_attention": "sliding_window", "chunked_attention": "chunked_local"}
        kinds = [mapping.get(str(kind), "full_attention") for kind in layer_types[:num_layers]]
        if "sliding_window" in kinds and not window:
            raise SeatplanError("layer_types has sliding layers but sliding_window is not set",
                                where=f"{source}: sliding_window", fix="check the config.json")
        return kinds
    if text.get("attention_chunk_size") and ("no_rope_layers" in text or text.get("model_type") == "llama4_text"):
        return _llama4_kinds(text, num_layers, source)
    pattern = text.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 0 and window:
        return ["sliding_window" if (i + 1) % pattern else "full_attention" for i in range(num_layers)]
    if "use_sliding_window" in text:
        # Qwen2 family: the window applies only when switched on, and only from max_window_layers up.
        start = text.get("max_window_layers") or 0
        on = bool(text.get("use_sliding_window")) and bool(window)
        return ["sliding_window" if on and i >= start else "full_attention" for i in range(num_layers)]
    if window:
        return ["sliding_window"] * num_layers
    return ["full_attention"] * num_layers


def _llama4_kinds(text: dict[str, Any], num_layers: int, source: str) -> list[str]:
    if not text.get("attention_chunk_size"):
        return ["full_attention"] * num_layers
    uses_rope = text.get("no_rope_layers")
    if not uses_rope:
        interval = _require_int(text, ("no_rope_layer_interval",), source, "NoPE layer interval") if "no_rope_layer_interval" in text else 4
        uses_rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if not isinstance(uses_rope, list) or len(uses_rope) < num_layers:
        raise SeatplanError(f"no_rope_layers must list all {num_layers} layers", where=f"{source}: no_rope_layers",
                            fix="check the config.json")
    return ["chunked_local" if uses_rope[i] else "full_attention" for i in range(num_layers)]


def _hybrid_pattern(text: dict[str, Any], num_layers: int, source: str) -> list[bool | None] | None:
    """For Mamba/linear-attention hybrids: per layer True (state), False (attention) or None (no cache,
    e.g. Nemotron-H's MLP-only layers); None for pure-attention models."""
    model_type = str(text.get("model_type", ""))
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and any(t in ("linear_attention", "mamba") for t in layer_types):
        return [t in ("linear_attention", "mamba") for t in layer_types[:num_layers]]
    if "full_attention_interval" in text and "linear_num_value_heads" in text:
        interval = _require_int(text, ("full_attention_interval",), source, "full attention interval")
        return [(i + 1) % interval != 0 for i in range(num_layers)]
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        if len(pattern) != num_layers:
            raise SeatplanError(f"hybrid_override_pattern has {len(pattern)} layers, the model {num_layers}",
                                where=f"{source}: hybrid_override_pattern", fix="check the config.json")
        return [True if char == "M" else False if char == "*" else None for char in pattern]
    if isinstance(text.get("layers_block_type"), list):
        return [t == "mamba" for t in text["layers_block_type"][:num_layers]]
    if "attn_layer_indices" in text and text.get("mamba_d_state"):
        indices = set(text.get("attn_layer_indices") or [])
        return [i not in indices for i in range(num_layers)]
    if "attn_layer_period" in text and "attn_layer_offset" in text:
        period = _require_int(text, ("attn_layer_period",), source, "attention layer period")
        offset = _optional_int(text, "attn_layer_offset", source)
        return [i % period != offset for i in range(num_layers)]
    if model_type in ("mamba", "mamba2", "falcon_mamba"):
        return [True] * num_layers
    return None


def _state_layer(text: dict[str, Any], source: str) -> StateLayer:
    model_type = str(text.get("model_type", ""))
    hidden = _require_int(text, HIDDEN_KEYS, source, "hidden size")
    if "linear_num_value_heads" in text:
        return StateLayer(
            mamba_type="gdn",
            conv_kernel=_require_int(text, ("linear_conv_kernel_dim",), source, "GDN conv kernel"),
            num_k_heads=_require_int(text, ("linear_num_key_heads",), source, "GDN key heads"),
            num_v_heads=_require_int(text, ("linear_num_value_heads",), source, "GDN value heads"),
            k_head_dim=_require_int(text, ("linear_key_head_dim",), source, "GDN key head dim"),
            v_head_dim=_require_int(text, ("linear_value_head_dim",), source, "GDN value head dim"),
        )
    heads = first_key(text, ("mamba_num_heads", "mamba_n_heads"))
    if heads or model_type == "mamba2":
        num_heads = heads or _require_int(text, ("num_heads",), source, "Mamba2 heads")
        explicit_head_dim = first_key(text, ("mamba_head_dim", "mamba_d_head"))
        head_dim = explicit_head_dim or first_key(text, ("head_dim",)) or 64
        expand = first_key(text, ("mamba_expand", "expand"))
        # Nemotron-H sizes the mixer by heads x head_dim; Mamba2/Bamba-style configs by expand x hidden.
        intermediate = num_heads * head_dim if explicit_head_dim or not expand else int(expand * hidden)
        return StateLayer(
            mamba_type="mamba2",
            conv_kernel=_require_int(text, ("conv_kernel", "mamba_d_conv"), source, "Mamba conv kernel"),
            intermediate_size=intermediate,
            state_size=_require_int(text, ("ssm_state_size", "mamba_d_state", "state_size"), source, "Mamba state size"),
            n_groups=first_key(text, ("n_groups", "mamba_n_groups")) or 1,
            num_heads=num_heads,
            head_dim=head_dim,
            ssm_fp32=model_type == "nemotron_h",
        )
    expand = first_key(text, ("mamba_expand", "expand")) or 2
    return StateLayer(
        mamba_type="mamba1",
        conv_kernel=_require_int(text, ("mamba_d_conv", "conv_kernel"), source, "Mamba conv kernel"),
        intermediate_size=first_key(text, ("intermediate_size",)) if model_type in ("mamba", "falcon_mamba") else int(expand * hidden),
        state_size=_require_int(text, ("mamba_d_state", "state_size"), source, "Mamba state size"),
    )


def _attention_layer(text: dict[str, Any], kind: str, num_kv_heads: int, head_size: int, source: str) -> AttentionLayer:
    if text.get("kv_lora_rank"):
        rope = _require_int(text, ("qk_rope_head_dim",), source, "MLA rope head dim")
        latent = _require_int(text, ("kv_lora_rank",), source, "MLA KV LoRA rank") + rope
        return AttentionLayer(kind="mla", num_kv_heads=1, head_size=latent, head_size_v=0, latent_size=latent)
    return AttentionLayer(
        kind=kind,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        sliding_window=text.get("sliding_window") if kind == "sliding_window" else None,
        attention_chunk_size=text.get("attention_chunk_size") if kind == "chunked_local" else None,
    )


def describe(config: dict[str, Any], source: str) -> ModelLayout:
    """Turn a parsed ``config.json`` into per-layer descriptors; ``source`` names the file in errors."""
    text = text_config_of(config)
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures:
        architecture = str(architectures[0])
    else:
        architecture = str(config.get("model_type") or "unknown")
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    pattern = text.get("hybrid_override_pattern")
    if first_key(text, LAYER_COUNT_KEYS) is None and isinstance(pattern, str) and pattern:
        num_layers = len(pattern)
    else:
        num_layers = _require_int(text, LAYER_COUNT_KEYS, source, "number of layers")
    if num_layers > MAX_LAYERS:
        raise SeatplanError(f"{num_layers} layers is not a plausible model (limit {MAX_LAYERS})",
                            where=f"{source}: num_hidden_layers", fix="check the config.json for a damaged value")
    state_pattern = _hybrid_pattern(text, num_layers, source)
    if state_pattern is not None and len(state_pattern) < num_layers:
        raise SeatplanError(f"the layer pattern lists {len(state_pattern)} layers but the model has {num_layers}",
                            where=f"{source}: layer_types", fix="check the config.json")
    pure_state = state_pattern is not None and not any(kind is False for kind in state_pattern)
    if pure_state:
        num_kv_heads, head_size = 0, 0
    else:
        if first_key(text, ATTENTION_HEAD_KEYS + KV_HEAD_KEYS) is None:
            raise SeatplanError(
                f"unknown architecture {architecture!r}: the config names no attention heads",
                where=f"{source}: num_attention_heads",
                fix="seatplan needs num_attention_heads / num_key_value_heads (or Mamba state keys) to size the KV cache",
            )
        num_kv_heads = total_kv_heads(text, source)
        head_size = head_size_of(text, source)
    kinds = _attention_kinds(text, num_layers, source) if not pure_state else ["full_attention"] * num_layers
    layers: list[Layer] = []
    state = _state_layer(text, source) if state_pattern is not None else None
    # Gemma-3n style cross-layer sharing: the last layers read an earlier layer's KV and keep none.
    first_shared = num_layers - count_field(text, ("num_kv_shared_layers",), source)
    for index in range(num_layers):
        role = state_pattern[index] if state_pattern is not None else False
        if role is None or (index >= first_shared and not role):
            continue
        if role:
            layers.append(state)  # type: ignore[arg-type]
        else:
            layers.append(_attention_layer(text, kinds[index], num_kv_heads, head_size, source))
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    multimodal = any(isinstance(config.get(key), dict) for key in ("vision_config", "audio_config"))
    return ModelLayout(
        source=source,
        architecture=architecture,
        model_type=model_type,
        text_config=text,
        full_config=config,
        layers=layers,
        config_dtype=str(dtype) if dtype else None,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        multimodal=multimodal,
    )


def check_tensor_parallel(layout: ModelLayout, tp: int) -> None:
    """Refuse a tensor-parallel size vLLM refuses, with vLLM's own reason.

    ``ModelConfig.verify_with_parallel_config``: the attention heads must divide by TP. The attention layers'
    ``QKVParallelLinear`` (e.g. ``models/llama.py``): KV heads at least TP must divide by it, fewer must divide it
    (each rank then holds one replicated head). MLA keeps one latent, never sharded by head.
    """
    attention_heads = count_field(layout.text_config, ATTENTION_HEAD_KEYS, layout.source)
    if attention_heads and attention_heads % tp:
        raise SeatplanError(
            f"vLLM refuses tensor_parallel_size {tp}: Total number of attention heads ({attention_heads}) must be "
            f"divisible by tensor parallel size ({tp}).", where=f"{layout.source}: num_attention_heads",
            fix=f"use a tensor-parallel size that divides {attention_heads}")
    kv_heads = layout.num_kv_heads
    if layout.is_mla or not kv_heads:
        return
    if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
        numerator, denominator = (kv_heads, tp) if kv_heads >= tp else (tp, kv_heads)
        raise SeatplanError(
            f"vLLM refuses tensor_parallel_size {tp}: its attention layers split {kv_heads} KV heads over {tp} ranks "
            f"({numerator} is not divisible by {denominator})", where=f"{layout.source}: num_key_value_heads",
            fix=f"use a tensor-parallel size that divides {kv_heads} KV heads, or a multiple of them")


def kv_heads_per_rank(total_heads: int, tp: int) -> int:
    """Each rank holds ``total // TP`` heads; below TP the heads are replicated, one per rank."""
    return max(1, total_heads // tp) if total_heads else 0


def state_bytes(layer: StateLayer, tp: int, conv_dtype_bytes: int, ssm_dtype_bytes: int) -> int:
    return layer.conv_elements(tp) * conv_dtype_bytes + layer.ssm_elements(tp) * ssm_dtype_bytes
