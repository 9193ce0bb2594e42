"""Speculative decoding's memory: a draft model's (or EAGLE head's) weights as loaded on each rank, and its attention
layers' KV specs, which join the target's in the one KV budget.

vLLM 0.32 loads the draft beside the target in the same worker (``vllm/v1/worker/gpu_model_runner.py:611``,
``DraftModelProposer``). Its attention layers register in the same static forward context as the target's, so
``get_kv_cache_spec`` (``gpu_model_runner.py:7146-7181``) returns one spec per layer of both models, and
``get_kv_cache_groups`` (``vllm/v1/core/kv_cache_utils.py:2159``) groups them together: one group when every spec is
the same (``is_kv_cache_spec_uniform``, line 2184), one group of several page sizes when only head sizes or dtypes
differ (``UniformTypeKVCacheSpecs``, line 2189), else the hybrid grouping. The draft runs in the target's dtype
(``vllm/config/speculative.py:1301``), with the target's cache config (block size, KV dtype), and on as many
tensor-parallel ranks as the target unless ``draft_tensor_parallel_size`` says 1 (``_verify_and_get_draft_tp``,
line 1712). n-gram and suffix decoding keep no draft on the GPU (line 1226: the "draft" config is the target's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.facts import architecture, reader, weights
from seatplan.facts import layout as kv_layout
from seatplan.facts.kv_specs import KvSpec
from seatplan.facts.settings import DRAFT_METHODS, MTP_METHOD, NO_DRAFT_METHODS, EngineSettings, SpeculativeSettings

__all__ = ["DraftPart", "draft_part"]


@dataclass(frozen=True)
class DraftPart:
    """What a speculative method adds to one GPU (one tensor-parallel rank)."""

    method: str
    model: str | None
    num_speculative_tokens: int
    specs: list[KvSpec] = field(default_factory=list)
    weights_bytes: int = 0
    weights_exact: bool = True
    weights_source: str = ""
    tensor_parallel_size: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_layout.kv_bytes_per_token(self.specs)


def mtp_part(speculative: SpeculativeSettings, layout: architecture.ModelLayout, target_specs: list[KvSpec], model_dir: Path,
             settings: EngineSettings, dtype_bytes: int) -> DraftPart:
    """The target's own MTP layers (``num_nextn_predict_layers``): vLLM loads them as the draft (``vllm/config/speculative.py``
    lines 1147-1158: the MTP draft is the target's checkpoint; ``deepseek_mtp.py:151-162``: layers ``num_hidden_layers`` …
    ``+ num_nextn_predict_layers``), each with one attention layer of the target's kind, and the main model skips their
    weights (``weights.is_mtp_tensor``)."""
    count = weights.mtp_layer_count(layout)
    if not count:
        raise SeatplanError("speculative method mtp, but the model has no MTP layers (no num_nextn_predict_layers in its config)",
                            where=f"{layout.source}: num_nextn_predict_layers", fix="use a draft model or ngram, or a checkpoint with MTP layers")
    attention = [spec for spec in target_specs if spec.kind in ("full_attention", "mla")] or target_specs[:1]
    specs = [attention[-1]] * count  # the MTP layer's attention is the target's full (or MLA) attention
    loaded = weights.weights(model_dir, layout, settings.tensor_parallel_size, dtype_bytes, mtp=True)
    return DraftPart(MTP_METHOD, None, speculative.num_speculative_tokens, specs, loaded.per_rank_bytes, loaded.exact,
                     f"MTP layers: {loaded.source}", settings.tensor_parallel_size,
                     [f"speculative decoding by mtp: {count} MTP layer(s) of the checkpoint join the KV cache groups"])


def draft_part(speculative: SpeculativeSettings, settings: EngineSettings, block_size: int, kv_dtype_bytes: int,
               dtype_bytes: int, locate: Any) -> DraftPart:
    """The draft's share of one rank under ``settings`` (the target's), with the target's ``block_size`` and KV dtype.
    ``locate`` turns the draft's model (a directory or Hub id) into its directory."""
    method = speculative.method
    tokens = speculative.num_speculative_tokens
    if method in NO_DRAFT_METHODS:
        return DraftPart(method, None, tokens, notes=[f"speculative decoding by {method}: no draft model on the GPU, the blocks are the target's"])
    if method not in DRAFT_METHODS:
        raise SeatplanError(
            f"seatplan does not model the memory of speculative method {method!r}",
            where="speculative.method",
            fix=f"use one of {', '.join(sorted(DRAFT_METHODS | NO_DRAFT_METHODS))}, or run the seat as `engine: fixed` with the "
                "memory_cap_bytes you measured")
    if not speculative.model:
        raise SeatplanError(f"speculative method {method} needs the draft's model", where="speculative.model",
                            fix="give speculative.model: the draft model's directory or Hugging Face id")
    draft_dir = Path(locate(speculative.model))
    config_path = draft_dir / "config.json"
    config = reader.read_json(config_path)
    layout = architecture.describe(config, str(config_path))
    tp = speculative.draft_tensor_parallel_size or settings.tensor_parallel_size
    if tp not in (1, settings.tensor_parallel_size):
        raise SeatplanError(f"draft_tensor_parallel_size {tp} is neither 1 nor the target's {settings.tensor_parallel_size}: vLLM refuses it "
                            "(vllm/config/speculative.py, _verify_and_get_draft_tp)", where="speculative.draft_tensor_parallel_size",
                            fix=f"use 1 or {settings.tensor_parallel_size}")
    architecture.check_tensor_parallel(layout, tp)
    draft_settings = settings.model_copy(update={"tensor_parallel_size": tp, "block_size": block_size, "speculative": None})
    specs, notes = kv_layout.build_specs(layout, draft_settings, kv_dtype_bytes, dtype_bytes)
    loaded = weights.weights(draft_dir, layout, tp, dtype_bytes)
    return DraftPart(method, str(speculative.model), tokens, specs, loaded.per_rank_bytes, loaded.exact,
                     f"draft {speculative.model}: {loaded.source}", tp, notes)
