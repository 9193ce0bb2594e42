"""The facts stage's documents: engine settings in, model facts out.

``ModelFacts`` carries everything vLLM fixes at start-up (layer groups, block size, bytes per block)
and answers the questions that depend on the KV budget and the context length through methods, so the
planner can ask "how many blocks in 22 GiB at 32K?" without re-reading the model.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from seatplan.facts import kv_cache
from seatplan.facts.kv_cache import KvCapacity
from seatplan.facts.kv_specs import LayerGroup
from seatplan.facts.settings import NO_DRAFT_METHODS, EngineSettings, LoraSettings, SpeculativeSettings, parse_vllm_version, speculative_method

# The facts stage's public documents (with facts.api): other stages import these names from here.
__all__ = ["NO_DRAFT_METHODS", "EngineSettings", "KvCapacity", "LayerGroup", "LoraFacts", "LoraSettings", "ModelFacts", "ModelShape",
           "SpeculativeFacts", "SpeculativeSettings", "YarnOption", "parse_vllm_version", "speculative_method"]


class YarnOption(BaseModel):
    """Extending the context with YaRN: the length it gives and what one such request costs."""

    enabled: bool
    factor: float
    original_max_position_embeddings: int
    extended_max_model_len: int
    extended_request_kv_bytes: int
    needs_long_max_model_len_env: bool = False


class ModelShape(BaseModel):
    """Sizes the planner's activation and overhead estimates need."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    intermediate_size: int | None
    num_attention_heads: int
    num_kv_heads: int
    head_size: int
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    multimodal: bool = False
    total_params: int
    active_params: int


class SpeculativeFacts(BaseModel):
    """What speculative decoding adds per GPU (``facts.speculative``): the draft's layers, KV and weights."""

    method: str
    model: str | None = None
    num_speculative_tokens: int
    tensor_parallel_size: int = 1
    num_layers: int = 0  # the draft's KV layers, joined to the target's in the KV cache groups
    kv_bytes_per_token: int = 0
    weights_bytes: int = 0  # per rank, as loaded; already inside ModelFacts.weights_bytes
    weights_exact: bool = True
    weights_source: str = ""


class LoraFacts(BaseModel):
    """The LoRA slots vLLM allocates per GPU at load (``facts.lora``), already inside ``ModelFacts.weights_bytes``."""

    max_loras: int
    max_lora_rank: int
    lora_dtype: str
    modules: list[str]
    slot_bytes: int
    per_module_bytes: dict[str, int]


class ModelFacts(BaseModel):
    """Everything seatplan knows about one model under one set of engine settings (per GPU)."""

    model: str
    model_dir: str
    architecture: str
    model_type: str
    settings: EngineSettings
    dtype: str
    kv_cache_dtype: str
    kv_dtype_bytes: int
    kv_heads_per_rank: int
    kv_bytes_per_token: int
    state_bytes_per_request: int = 0
    block_size: int
    bytes_per_block: int
    layer_groups: list[LayerGroup]
    padding_layers: int = 0
    weights_bytes: int  # per rank, as loaded (weights_rule says how); a speculative draft's and LoRA's slots included
    weights_total_bytes: int
    weights_exact: bool
    weights_source: str
    weights_stored_bytes: int | None = None  # per rank, the checkpoint's share as stored
    weights_rule: str = ""
    max_context_derived: int
    max_context_default: int
    max_context_published: int | None
    yarn: YarnOption | None = None
    speculative: SpeculativeFacts | None = None
    lora: LoraFacts | None = None
    shape: ModelShape
    generation_defaults: dict[str, Any] = {}
    notes: list[str] = []

    def blocks_per_request(self, max_model_len: int) -> int:
        return kv_cache.blocks_per_request(self.layer_groups, max_model_len, self.settings)

    def request_kv_bytes(self, max_model_len: int) -> int:
        """Bytes one max-length request needs, counted as vLLM's start-up check counts them."""
        return kv_cache.request_bytes(self.layer_groups, self.bytes_per_block, max_model_len, self.settings)

    def min_kv_cache_bytes(self, max_model_len: int) -> int:
        """The smallest ``--kv-cache-memory-bytes`` vLLM starts with at this length."""
        return kv_cache.min_budget_bytes(self.layer_groups, self.bytes_per_block, max_model_len, self.settings)

    def capacity(self, kv_cache_memory_bytes: int, max_model_len: int | None = None) -> KvCapacity:
        length = max_model_len or self.settings.max_model_len or self.max_context_default
        return kv_cache.capacity(
            self.layer_groups, self.bytes_per_block, kv_cache_memory_bytes, length, self.settings
        )

    def max_model_len_fit(self, kv_cache_memory_bytes: int, upper_len: int | None = None) -> int:
        """vLLM's own estimate (binary search) of the longest ``max_model_len`` the budget holds.

        vLLM searches up to the configured length; by default that is the model's derived maximum.
        """
        bound = upper_len or self.settings.max_model_len or self.max_context_derived
        return kv_cache.estimate_max_model_len(
            self.layer_groups, self.bytes_per_block, kv_cache_memory_bytes, bound, self.settings
        )
