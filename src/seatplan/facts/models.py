"""The facts stage's documents: engine settings in, model facts out.

``ModelFacts`` carries everything vLLM fixes at start-up (layer groups, block size, bytes per block)
and answers the questions that depend on the KV budget and the context length through methods, so the
planner can ask "how many blocks in 22 GiB at 32K?" without re-reading the model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from seatplan.facts.kv_specs import KvSpec
from seatplan.versions import DEFAULT_VLLM_VERSION, has
from seatplan.versions import modelled as parse_vllm_version  # the one parser; other stages import it from here


class EngineSettings(BaseModel):
    """The vLLM flags that change KV layout and sizing; defaults are vLLM 0.32's on a GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    device: Literal["cuda", "cpu"] = "cuda"
    block_size: int | None = Field(None, ge=1)
    vllm_version: str = DEFAULT_VLLM_VERSION
    prefix_caching: bool = True
    hybrid_kv_cache_manager: bool = True
    max_num_batched_tokens: int | None = Field(None, ge=1)
    async_scheduling: bool | None = None
    enable_yarn: bool = False
    yarn_factor: float = Field(4.0, gt=1.0)
    max_model_len: int | None = Field(None, ge=1)
    # vLLM's --attention-backend; it fixes the block size of MLA models (None: vLLM's own choice).
    attention_backend: str | None = None
    # CPU only: whether the CPU has AMX, which makes vLLM pick its AMX_MLA backend (block 128) over
    # the reference CPU_MLA backend (block 16). None: detect on the machine seatplan runs on.
    cpu_amx: bool | None = None

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        parse_vllm_version(value)
        return value

    @property
    def version(self) -> tuple[int, ...]:
        return parse_vllm_version(self.vllm_version)

    @property
    def effective_max_num_batched_tokens(self) -> int:
        """vLLM's API-server default: 2048 on CPU, 8192 on a large (>= 70 GiB) GPU."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return 2048 if self.device == "cpu" else 8192

    @property
    def effective_async_scheduling(self) -> bool:
        if self.async_scheduling is not None:
            return self.async_scheduling
        return self.device == "cuda"

    @property
    def in_flight_tokens(self) -> int:
        """Tokens a sliding-window layer must keep beyond its window (``T_if`` in VLLM.md §1.2).

        0.27 started counting every batch in flight; async scheduling keeps two.
        """
        tokens = self.effective_max_num_batched_tokens
        if has("in_flight_counts_async_batches", self.version) and self.effective_async_scheduling:
            return 2 * tokens
        return tokens


class LayerGroup(BaseModel):
    """One KV-cache group as vLLM's hybrid allocator forms it: layers sharing one block table."""

    model_config = ConfigDict(frozen=True)

    kind: str
    layers: list[int]
    padding_layers: int = 0
    page_bytes: int
    block_size: int
    spec: KvSpec


class KvCapacity(BaseModel):
    """What vLLM prints for one KV budget and one ``--max-model-len``."""

    kv_cache_memory_bytes: int
    max_model_len: int
    num_blocks: int
    blocks_per_request: int
    kv_cache_tokens: int
    max_concurrency: float
    request_kv_bytes: int
    fits_one_request: bool
    estimated_max_model_len: int | None = None
    log_line: str


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
    weights_bytes: int  # per rank, as loaded (weights_rule says how)
    weights_total_bytes: int
    weights_exact: bool
    weights_source: str
    weights_stored_bytes: int | None = None  # per rank, the checkpoint's share as stored
    weights_rule: str = ""
    max_context_derived: int
    max_context_default: int
    max_context_published: int | None
    yarn: YarnOption | None = None
    shape: ModelShape
    generation_defaults: dict[str, Any] = {}
    notes: list[str] = []

    def blocks_per_request(self, max_model_len: int) -> int:
        from seatplan.facts import kv_cache

        return kv_cache.blocks_per_request(self.layer_groups, max_model_len, self.settings)

    def request_kv_bytes(self, max_model_len: int) -> int:
        """Bytes one max-length request needs, counted as vLLM's start-up check counts them."""
        from seatplan.facts import kv_cache

        return kv_cache.request_bytes(self.layer_groups, self.bytes_per_block, max_model_len, self.settings)

    def min_kv_cache_bytes(self, max_model_len: int) -> int:
        """The smallest ``--kv-cache-memory-bytes`` vLLM starts with at this length."""
        from seatplan.facts import kv_cache

        return kv_cache.min_budget_bytes(self.layer_groups, self.bytes_per_block, max_model_len, self.settings)

    def capacity(self, kv_cache_memory_bytes: int, max_model_len: int | None = None) -> KvCapacity:
        from seatplan.facts import kv_cache

        length = max_model_len or self.settings.max_model_len or self.max_context_default
        return kv_cache.capacity(
            self.layer_groups, self.bytes_per_block, kv_cache_memory_bytes, length, self.settings
        )

    def max_model_len_fit(self, kv_cache_memory_bytes: int, upper_len: int | None = None) -> int:
        """vLLM's own estimate (binary search) of the longest ``max_model_len`` the budget holds.

        vLLM searches up to the configured length; by default that is the model's derived maximum.
        """
        from seatplan.facts import kv_cache

        bound = upper_len or self.settings.max_model_len or self.max_context_derived
        return kv_cache.estimate_max_model_len(
            self.layer_groups, self.bytes_per_block, kv_cache_memory_bytes, bound, self.settings
        )
