"""Per-layer KV cache specs, one class per layer kind, mirroring vLLM's ``v1/kv_cache_interface.py``.

Each spec knows the bytes of one page (one block of one layer) and how many blocks one request of
``max_model_len`` tokens needs (vLLM's ``max_memory_usage_bytes`` divided by the page).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from seatplan.units import cdiv


class _Spec(BaseModel, ABC):
    model_config = ConfigDict(frozen=True)

    block_size: int
    page_size_padded: int | None = None

    @property
    @abstractmethod
    def raw_page_bytes(self) -> int:
        """Bytes of one block of this layer before any hybrid padding."""

    @abstractmethod
    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` tokens holds (vLLM's ``max_memory_usage_bytes`` / page)."""

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded or self.raw_page_bytes

    def with_block_size(self, block_size: int) -> Self:
        return self.model_copy(update={"block_size": block_size})

    def with_padded_page(self, page_bytes: int) -> Self:
        return self.model_copy(update={"page_size_padded": page_bytes})


class _AttentionSpec(_Spec):
    num_kv_heads: int
    head_size: int
    head_size_v: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * (self.head_size + self.head_size_v) * self.dtype_bytes

    @property
    def raw_page_bytes(self) -> int:
        return self.block_size * self.bytes_per_token


class FullAttentionSpec(_AttentionSpec):
    kind: Literal["full_attention"] = "full_attention"

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return cdiv(max_model_len, self.block_size)


class SlidingWindowSpec(_AttentionSpec):
    kind: Literal["sliding_window"] = "sliding_window"
    sliding_window: int

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        # The window may straddle a block boundary, hence the extra block even when W > mml.
        tokens = min(self.sliding_window - 1 + in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1

    def as_full(self) -> FullAttentionSpec:
        return FullAttentionSpec(**self.model_dump(exclude={"kind", "sliding_window"}))


class ChunkedLocalAttentionSpec(_AttentionSpec):
    kind: Literal["chunked_local"] = "chunked_local"
    attention_chunk_size: int

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        return cdiv(min(self.attention_chunk_size + in_flight_tokens, max_model_len), self.block_size)

    def as_full(self) -> FullAttentionSpec:
        return FullAttentionSpec(**self.model_dump(exclude={"kind", "attention_chunk_size"}))


class MLAAttentionSpec(FullAttentionSpec):
    """One compressed latent per token (``kv_lora_rank + qk_rope_head_dim``): one head, no separate V.

    As vLLM's ``MLAAttentionSpec(FullAttentionSpec)``: a full-attention layer (its blocks per request are
    full attention's) whose page holds ``num_kv_heads × head_size`` per token instead of a K/V pair
    (``real_page_size_bytes``, vllm/v1/kv_cache_interface.py).
    """

    # A narrower Literal than the parent's: the discriminator of KvSpec tells the two apart.
    kind: Literal["mla"] = "mla"  # type: ignore[assignment]
    num_kv_heads: int = 1
    head_size_v: int = 0

    @property
    def latent_size(self) -> int:
        return self.head_size

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * self.head_size * self.dtype_bytes


class MambaSpec(_Spec):
    """A recurrent state (Mamba1/2, gated DeltaNet, linear attention): fixed bytes per request.

    With prefix caching vLLM runs Mamba in "align" mode: two state blocks (current and next
    checkpoint), plus one for Mamba2 mixers' chunk checkpoint; without it, one block per request.
    """

    kind: Literal["mamba"] = "mamba"
    mamba_type: str
    state_bytes: int
    cache_mode: Literal["none", "align"]
    checkpoint_blocks: int = 0

    @property
    def bytes_per_token(self) -> int:
        return 0

    @property
    def raw_page_bytes(self) -> int:
        return self.state_bytes

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        if self.cache_mode == "none":
            return 1
        return 2 + self.checkpoint_blocks


KvSpec = Annotated[
    FullAttentionSpec | SlidingWindowSpec | ChunkedLocalAttentionSpec | MLAAttentionSpec | MambaSpec,
    Field(discriminator="kind"),
]

ATTENTION_KINDS = ("full_attention", "sliding_window", "chunked_local", "mla")


class LayerGroup(BaseModel):
    """One KV-cache group as vLLM's hybrid allocator forms it: layers sharing one block table."""

    model_config = ConfigDict(frozen=True)

    kind: str
    layers: list[int]
    padding_layers: int = 0
    page_bytes: int
    block_size: int
    spec: KvSpec
