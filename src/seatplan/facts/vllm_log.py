"""vLLM's own words for a KV budget: the "KV cache size" and "Maximum concurrency" lines and the start-up
errors, worded as each release wrote them (``vllm/v1/core/kv_cache_utils.py``: ``_report_kv_cache_config``,
``check_enough_kv_cache_memory``). Text only; the figures come from ``kv_cache``.
"""

from __future__ import annotations

from seatplan.facts.settings import EngineSettings
from seatplan.units import GiB, format_gib
from seatplan.versions import has


def log_line(tokens: int, concurrency: float, max_model_len: int, settings: EngineSettings) -> str:
    version = settings.version
    device = "CPU" if settings.device == "cpu" and has("log_device_word", version) else "GPU"
    size = f"{device} KV cache size: {tokens:,} tokens"
    concurrency_text = f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
    if has("log_kv_size_one_line", version):
        return f"{size}, {concurrency_text}"
    return f"{size}\n{concurrency_text}"


NO_MEMORY_MESSAGE = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."


def not_enough_memory_message(max_model_len: int, needed_bytes: int, available_bytes: int, estimate: int,
                               settings: EngineSettings) -> str:
    """The start of vLLM's "To serve at least one request" error, worded as the given era worded it."""
    version = settings.version
    owner = "model's" if has("log_model_s_spelling", version) else "models's"
    unit = "GiB" if has("log_gib_unit", version) else "GB"

    def gib(value: int) -> str:
        # format_gib since 0.14; two fixed decimals before
        return format_gib(value) if has("log_format_gib", version) else f"{value / GiB:.2f}"

    text = (
        f"To serve at least one request with the {owner} max seq len ({max_model_len}), ({gib(needed_bytes)} {unit} KV cache "
        f"is needed, which is larger than the available KV cache memory ({gib(available_bytes)} {unit}). Based on the "
        f"available memory,"
    )
    # 0.8.5 - 0.9.0 dropped the estimate by a string-concatenation slip.
    if has("log_estimate_dropped", version):
        return text
    return f"{text} the estimated maximum model length is {estimate}."
