"""Context limits: the max length vLLM derives from a config (by version), the published native
context, and the YaRN extension option (VLLM.md part 2, §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.versions import has

MAX_LEN_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
UNSCALED_ROPE_UNTIL_0_29 = frozenset({"su", "longrope", "llama3"})
UNSCALED_ROPE_SINCE_0_30 = UNSCALED_ROPE_UNTIL_0_29 | {"yarn", "deepseek_yarn", "deepseek_llama_scaling"}
VLLM_FALLBACK_MAX_LEN = 2048
# Families whose model cards extend the native context with YaRN (rope_scaling added by the user).
YARN_FAMILIES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next"})
# Qwen3 publishes max_position_embeddings 40960 = 32,768 context + 8,192 reserved for output.
QWEN3_RESERVED_POSITIONS = 40960
QWEN3_NATIVE_CONTEXT = 32768


@dataclass(frozen=True)
class ContextLimits:
    derived: int
    default: int
    published: int | None
    yarn_factor: float | None
    yarn_original: int | None
    yarn_enabled: bool
    yarn_extended: int | None
    yarn_needs_env: bool


def _positive(scaling: dict[str, Any], key: str, default: float | None, source: str) -> float:
    value = scaling.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SeatplanError(f"rope scaling {key} must be a positive number, got {value!r}",
                            where=f"{source}: rope_scaling.{key}", fix="check the config.json for a damaged value")
    return float(value)


def rope_scaling_of(text: dict[str, Any]) -> dict[str, Any] | None:
    scaling = text.get("rope_scaling")
    if not isinstance(scaling, dict):
        scaling = text.get("rope_parameters") if isinstance(text.get("rope_parameters"), dict) else None
        if scaling and all(isinstance(value, dict) for value in scaling.values()):
            scaling = scaling.get("full_attention") or next(iter(scaling.values()), None)
    return scaling or None


def rope_type_of(scaling: dict[str, Any] | None) -> str:
    if not scaling:
        return "default"
    return str(scaling.get("rope_type") or scaling.get("type") or "default")


def _positions(text: dict[str, Any]) -> float | None:
    values = [text[key] for key in MAX_LEN_KEYS
              if isinstance(text.get(key), (int, float)) and not isinstance(text.get(key), bool) and text[key] > 0]
    if text.get("model_max_length"):
        return float(text["model_max_length"])
    return float(min(values)) if values else None


def derive_max_len(text: dict[str, Any], version: tuple[int, ...], scaling: dict[str, Any] | None,
                   source: str = "config.json") -> int:
    """vLLM's ``_get_and_verify_max_len`` without a user value: the config's limit, RoPE-scaled by era."""
    derived = _positions(text)
    if derived is None:
        return VLLM_FALLBACK_MAX_LEN
    model_type = str(text.get("model_type", ""))
    rope_type = rope_type_of(scaling)
    if scaling and "gemma3" not in model_type and rope_type not in ("default", "mrope"):
        unscaled = UNSCALED_ROPE_SINCE_0_30 if has("yarn_context_not_scaled", version) else UNSCALED_ROPE_UNTIL_0_29
        if rope_type not in unscaled:
            factor = _positive(scaling, "factor", 1.0, source)
            if rope_type == "yarn":
                derived = _positive(scaling, "original_max_position_embeddings", derived, source) * factor
            else:
                derived = derived * factor
    return int(derived)


def default_max_len(text: dict[str, Any], derived: int, scaling: dict[str, Any] | None) -> int:
    """Without ``--max-model-len`` vLLM uses the derived length, except LongRoPE's original length."""
    if rope_type_of(scaling) == "longrope":
        original = text.get("original_max_position_embeddings") or (scaling or {}).get("original_max_position_embeddings")
        if isinstance(original, int) and original > 0:
            return original
    return derived


def published_context(text: dict[str, Any], source: str = "config.json") -> int | None:
    """The context the model is published for, from the config's own conventions."""
    positions = _positions(text)
    if positions is None:
        return None
    model_type = str(text.get("model_type", ""))
    if model_type.startswith("qwen3") and int(positions) == QWEN3_RESERVED_POSITIONS:
        return QWEN3_NATIVE_CONTEXT
    scaling = rope_scaling_of(text)
    if rope_type_of(scaling) == "yarn" and "original_max_position_embeddings" in (scaling or {}):
        return int(_positive(scaling, "original_max_position_embeddings", None, source)  # type: ignore[arg-type]
                   * _positive(scaling, "factor", 1.0, source))  # type: ignore[arg-type]
    return int(positions)


def context_limits(text: dict[str, Any], version: tuple[int, ...], enable_yarn: bool, yarn_factor: float,
                   source: str = "config.json") -> ContextLimits:
    scaling = rope_scaling_of(text)
    published = published_context(text, source)
    model_type = str(text.get("model_type", ""))
    yarn_factor_used: float | None = None
    yarn_original: int | None = None
    yarn_enabled = False
    yarn_extended: int | None = None
    yarn_needs_env = False
    if rope_type_of(scaling) == "yarn":
        yarn_factor_used = _positive(scaling, "factor", 1.0, source)  # type: ignore[arg-type]
        original = scaling.get("original_max_position_embeddings")  # type: ignore[union-attr]
        yarn_original = int(_positive(scaling, "original_max_position_embeddings", None, source)) if original else None  # type: ignore[arg-type]
        yarn_enabled = True
    elif scaling is None and model_type in YARN_FAMILIES and published:
        yarn_factor_used = yarn_factor
        yarn_original = published
        if enable_yarn:
            scaling = {"rope_type": "yarn", "factor": yarn_factor, "original_max_position_embeddings": published}
            yarn_enabled = True
    derived = derive_max_len(text, version, scaling, source)
    if yarn_factor_used is not None and yarn_original:
        yarn_extended = int(yarn_original * yarn_factor_used)
        # 0.30+ no longer scales YaRN configs: longer than the config's positions needs the env override.
        yarn_needs_env = yarn_extended > derived
    return ContextLimits(
        derived=derived,
        default=default_max_len(text, derived, scaling),
        published=published,
        yarn_factor=yarn_factor_used,
        yarn_original=yarn_original,
        yarn_enabled=yarn_enabled,
        yarn_extended=yarn_extended,
        yarn_needs_env=yarn_needs_env,
    )
