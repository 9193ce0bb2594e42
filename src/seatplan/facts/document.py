"""The ``seatplan model`` document: a model's facts plus the figures for one KV budget and length (``--json``
prints it; ``show.py`` draws it for people)."""

from __future__ import annotations

from typing import Any

from seatplan.facts.models import ModelFacts


def model_document(facts: ModelFacts, kv_cache_memory_bytes: int | None, max_model_len: int | None) -> dict[str, Any]:
    """The facts plus the figures for one KV budget and length (null where no budget was given)."""
    length = max_model_len or facts.max_context_default
    document = facts.model_dump(mode="json")
    document.update(
        max_model_len=length,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        blocks_per_request=facts.blocks_per_request(length),
        request_kv_bytes=facts.request_kv_bytes(length),
        min_kv_cache_bytes=facts.min_kv_cache_bytes(length),
        num_blocks=None,
        kv_cache_tokens=None,
        max_concurrency=None,
        fits_one_request=None,
        max_model_len_fit=None,
        log_line=None,
        capacity=None,
        warnings=_length_warnings(facts, length),
    )
    if kv_cache_memory_bytes is not None:
        capacity = facts.capacity(kv_cache_memory_bytes, length)
        document.update(
            capacity=capacity.model_dump(mode="json"),
            num_blocks=capacity.num_blocks,
            kv_cache_tokens=capacity.kv_cache_tokens,
            max_concurrency=capacity.max_concurrency,
            fits_one_request=capacity.fits_one_request,
            max_model_len_fit=facts.max_model_len_fit(kv_cache_memory_bytes, max(length, facts.max_context_derived)),
            log_line=capacity.log_line,
        )
    return document


def _length_warnings(facts: ModelFacts, length: int) -> list[str]:
    if length <= facts.max_context_derived:
        return []
    return [f"vLLM refuses max_model_len {length:,} above the derived {facts.max_context_derived:,} unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set (positions beyond it may produce garbage)"]
