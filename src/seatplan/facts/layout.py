"""The KV layout vLLM fixes at start-up: the block size (the user's, else the attention backend's, raised
for hybrid attention/Mamba models) and one KV spec per layer.

vLLM: the backends' block sizes (``Platform.update_block_size_for_backend``, ``vllm/platforms/``), the
hybrid alignment (``_align_hybrid_block_size``, ``vllm/model_executor/models/config.py``) and each layer's
``get_kv_cache_spec`` (``vllm/attention/layer.py``). Pure functions.
"""

from __future__ import annotations

from seatplan.errors import SeatplanError
from seatplan.facts.architecture import AttentionLayer, ModelLayout, StateLayer, kv_heads_per_rank, state_bytes
from seatplan.facts.kv_specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KvSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from seatplan.facts.settings import EngineSettings
from seatplan.units import cdiv, round_up

GPU_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
# Block sizes MLA attention backends force (Platform.update_block_size_for_backend).
MLA_BACKEND_BLOCK_SIZES = {"FLASHMLA": 64, "CUTLASS_MLA": 128, "CPU_MLA": 16, "AMX_MLA": CPU_BLOCK_SIZE}
GPU_DEFAULT_MLA_BACKEND = "FLASHMLA"  # vLLM's choice on Hopper
AMX_MLA_LATENT_SIZE = 576  # the only head size vLLM's AMX_MLA backend takes (DeepSeek-style 512 + 64)
GPU_KERNEL_BLOCK_ALIGNMENT = 16


def default_block_size(settings: EngineSettings, mla_latent_size: int | None) -> int:
    """vLLM's block size before hybrid raising: the user's, else the attention backend's default."""
    if settings.block_size:
        return settings.block_size
    if mla_latent_size is None:
        return CPU_BLOCK_SIZE if settings.device == "cpu" else GPU_BLOCK_SIZE
    backend = (settings.attention_backend or mla_backend_choice(settings, mla_latent_size)).upper()
    if backend not in MLA_BACKEND_BLOCK_SIZES:
        raise SeatplanError(
            f"seatplan does not know the block size of attention backend {settings.attention_backend!r} for MLA",
            where="--attention-backend",
            fix=f"use one of {', '.join(sorted(MLA_BACKEND_BLOCK_SIZES))}, or give --block-size",
        )
    return MLA_BACKEND_BLOCK_SIZES[backend]


def mla_backend_choice(settings: EngineSettings, mla_latent_size: int) -> str:
    """The MLA backend vLLM picks by itself: FlashMLA on GPUs; on CPUs AMX_MLA where AMX and the head
    size allow it, else the reference CPU_MLA."""
    if settings.device == "cuda":
        return GPU_DEFAULT_MLA_BACKEND
    return "AMX_MLA" if settings.cpu_amx and mla_latent_size == AMX_MLA_LATENT_SIZE else "CPU_MLA"


def _attention_spec(layer: AttentionLayer, block_size: int, tp: int, dtype_bytes: int) -> KvSpec:
    if layer.kind == "mla":
        return MLAAttentionSpec(block_size=block_size, head_size=layer.latent_size or 0, dtype_bytes=dtype_bytes)
    common = dict(
        block_size=block_size,
        num_kv_heads=kv_heads_per_rank(layer.num_kv_heads, tp),
        head_size=layer.head_size,
        head_size_v=layer.head_size_v,
        dtype_bytes=dtype_bytes,
    )
    if layer.kind == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=layer.sliding_window or 0)
    if layer.kind == "chunked_local":
        return ChunkedLocalAttentionSpec(**common, attention_chunk_size=layer.attention_chunk_size or 0)
    return FullAttentionSpec(**common)


def hybrid_block_size(base: int, mamba_page_bytes: int, attention_bytes_per_token: int, device: str) -> int:
    """vLLM's ``_align_hybrid_block_size``: the smallest multiple of the base block whose attention
    page holds one Mamba state; never below the base, and on GPU a multiple of the kernel block."""
    raised = base * cdiv(mamba_page_bytes, base * attention_bytes_per_token)
    if device == "cuda":
        raised = round_up(raised, GPU_KERNEL_BLOCK_ALIGNMENT)
    return max(base, raised)


def kv_bytes_per_token(specs: list[KvSpec]) -> int:
    """KV bytes one token costs on one GPU (one TP rank), over every layer; a Mamba state costs none per token."""
    return sum(spec.bytes_per_token for spec in specs)


def build_specs(
    layout: ModelLayout, settings: EngineSettings, kv_dtype_bytes: int, model_dtype_bytes: int
) -> tuple[list[KvSpec], list[str]]:
    """One spec per layer, with the hybrid attention/Mamba page alignment already applied."""
    tp = settings.tensor_parallel_size
    latent_sizes = [layer.latent_size for layer in layout.layers if isinstance(layer, AttentionLayer) and layer.kind == "mla"]
    base = default_block_size(settings, latent_sizes[0] if latent_sizes else None)
    attention = [layer for layer in layout.layers if isinstance(layer, AttentionLayer)]
    states = [layer for layer in layout.layers if isinstance(layer, StateLayer)]
    notes: list[str] = []
    block_size = base
    mamba_bytes = 0
    mamba_padded: int | None = None
    if states:
        ssm_bytes = 4 if states[0].ssm_fp32 or (settings.device == "cpu" and settings.cpu_avx512_bf16 is not False) else model_dtype_bytes
        mamba_bytes = state_bytes(states[0], tp, model_dtype_bytes, ssm_bytes)
        if attention:
            per_token = _attention_spec(attention[0], 1, tp, kv_dtype_bytes).page_size_bytes
            block_size = hybrid_block_size(base, mamba_bytes, per_token, settings.device)
            if block_size != base:
                notes.append(f"Setting attention block size to {block_size} tokens to ensure that attention page size is >= mamba page size.")
            attention_page = block_size * per_token
            if attention_page > mamba_bytes:
                mamba_padded = attention_page
                percent = 100 * (attention_page - mamba_bytes) / mamba_bytes
                notes.append(f"Padding mamba page size by {percent:.2f}% to ensure that mamba page size and attention page size are exactly equal.")
    specs: list[KvSpec] = []
    for layer in layout.layers:
        if isinstance(layer, AttentionLayer):
            specs.append(_attention_spec(layer, block_size, tp, kv_dtype_bytes))
        else:
            specs.append(
                MambaSpec(
                    block_size=block_size,
                    mamba_type=layer.mamba_type,
                    state_bytes=mamba_bytes,
                    page_size_padded=mamba_padded,
                    cache_mode="align" if settings.prefix_caching else "none",
                    checkpoint_blocks=layer.checkpoint_blocks,
                )
            )
    return specs, notes
