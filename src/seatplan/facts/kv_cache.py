"""vLLM's KV-cache arithmetic: block sizes, KV-cache groups, blocks, tokens and concurrency by era.

Follows VLLM.md part 2 (§1.3 hybrid alignment, §2.1 grouping, §2.2 blocks, §2.3 the printed figures,
§4 the "to serve at least one request" check and its max-length estimate). Pure functions only.
"""

from __future__ import annotations

from dataclasses import dataclass

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
from seatplan.facts.models import EngineSettings, KvCapacity, LayerGroup
from seatplan.units import GiB, cdiv, format_gib
from seatplan.versions import has

GPU_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
# Block sizes MLA attention backends force (Platform.update_block_size_for_backend).
MLA_BACKEND_BLOCK_SIZES = {"FLASHMLA": 64, "CUTLASS_MLA": 128, "CPU_MLA": 16, "AMX_MLA": CPU_BLOCK_SIZE}
GPU_DEFAULT_MLA_BACKEND = "FLASHMLA"  # vLLM's choice on Hopper
AMX_MLA_LATENT_SIZE = 576  # the only head size vLLM's AMX_MLA backend takes (DeepSeek-style 512 + 64)
GPU_KERNEL_BLOCK_ALIGNMENT = 16


@dataclass(frozen=True)
class GroupPlan:
    groups: list[LayerGroup]
    bytes_per_block: int
    padding_layers: int
    block_size: int
    notes: list[str]


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
        return MLAAttentionSpec(block_size=block_size, latent_size=layer.latent_size or 0, dtype_bytes=dtype_bytes)
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
        raised = cdiv(raised, GPU_KERNEL_BLOCK_ALIGNMENT) * GPU_KERNEL_BLOCK_ALIGNMENT
    return max(base, raised)


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
        ssm_bytes = 4 if settings.device == "cpu" or states[0].ssm_fp32 else model_dtype_bytes
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


def _hybrid_manager_on(specs: list[KvSpec], settings: EngineSettings) -> bool:
    version = settings.version
    if not settings.hybrid_kv_cache_manager or not has("hybrid_kv_cache_manager", version):
        return False
    # Chunked local attention joined the hybrid allocator by default only in 0.14.
    if not has("chunked_local_in_hybrid_manager", version) and any(spec.kind == "chunked_local" for spec in specs):
        return False
    return True


def _unify_without_hybrid_manager(specs: list[KvSpec]) -> list[KvSpec]:
    """Without the hybrid allocator, windowed layers keep blocks for every token, like full attention."""
    has_full = any(spec.kind in ("full_attention", "mla") for spec in specs)
    if not has_full:
        return specs
    return [spec.as_full() if isinstance(spec, (SlidingWindowSpec, ChunkedLocalAttentionSpec)) else spec for spec in specs]


def _group_size_ratio(version: tuple[int, ...]) -> float | None:
    if not has("hybrid_group_size_ratio", version):
        return None
    return 1.5 if has("hybrid_group_size_ratio_1_5", version) else 1.25


def _unify_page_sizes(specs: list[KvSpec]) -> list[KvSpec]:
    """Give every layer the largest page: smaller attention pages get a proportionally larger block."""
    largest = max(spec.page_size_bytes for spec in specs)
    unified: list[KvSpec] = []
    for spec in specs:
        page = spec.page_size_bytes
        if page == largest:
            unified.append(spec)
        elif spec.kind != "mamba" and largest % page == 0:
            unified.append(spec.with_block_size(spec.block_size * (largest // page)))
        elif spec.kind in ("full_attention", "sliding_window", "chunked_local", "mamba"):
            unified.append(spec.with_padded_page(largest))
        else:
            raise SeatplanError(
                "vLLM cannot unify the page sizes of this model's layers (MLA page does not divide the largest page)",
                where="layer specs", fix="try --disable-hybrid-kv-cache-manager or another --block-size",
            )
    return unified


def group_layers(specs: list[KvSpec], settings: EngineSettings) -> GroupPlan:
    """vLLM 0.32's ``get_kv_cache_groups`` with the version differences of VLLM.md §2.1."""
    if not specs or any(spec.page_size_bytes <= 0 for spec in specs):
        raise SeatplanError("the model has no layers with a KV cache or state of positive size", where="config.json",
                            fix="check the model config's head and state dimensions")
    if not _hybrid_manager_on(specs, settings):
        specs = _unify_without_hybrid_manager(specs)
    indices = list(range(len(specs)))
    first = specs[0]
    if all(spec == first for spec in specs):
        group = LayerGroup(kind=first.kind, layers=indices, page_bytes=first.page_size_bytes, block_size=first.block_size, spec=first)
        return GroupPlan([group], len(specs) * first.page_size_bytes, 0, first.block_size, [])
    if _uniform_type(specs):
        page_total = sum(spec.page_size_bytes for spec in specs)
        group = LayerGroup(kind=first.kind, layers=indices, page_bytes=max(s.page_size_bytes for s in specs), block_size=first.block_size, spec=first)
        return GroupPlan([group], page_total, 0, first.block_size, [])
    if not _hybrid_manager_on(specs, settings):
        raise SeatplanError(
            "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type",
            where="--disable-hybrid-kv-cache-manager",
            fix="vLLM needs the hybrid KV cache manager for Mamba/linear-attention hybrids; drop the flag",
        )
    return _hybrid_groups(_unify_page_sizes(specs), settings)


def _uniform_type(specs: list[KvSpec]) -> bool:
    """``UniformTypeKVCacheSpecs``: one kind and one block size, only head sizes or dtypes differ."""
    first = specs[0]
    if first.kind == "mamba":
        return False
    window = getattr(first, "sliding_window", None)
    chunk = getattr(first, "attention_chunk_size", None)
    return all(
        spec.kind == first.kind
        and spec.block_size == first.block_size
        and getattr(spec, "sliding_window", None) == window
        and getattr(spec, "attention_chunk_size", None) == chunk
        for spec in specs
    )


def _hybrid_groups(specs: list[KvSpec], settings: EngineSettings) -> GroupPlan:
    buckets: dict[KvSpec, list[int]] = {}
    for index, spec in enumerate(specs):
        buckets.setdefault(spec, []).append(index)
    sizes = [len(layers) for layers in buckets.values()]
    smallest, largest = min(sizes), max(sizes)
    ratio = _group_size_ratio(settings.version)
    group_size = largest if ratio is not None and largest < ratio * smallest else smallest
    page = specs[0].page_size_bytes
    groups: list[LayerGroup] = []
    notes: list[str] = []
    padding = 0
    for spec, layers in buckets.items():
        count = cdiv(len(layers), group_size)
        bucket_padding = count * group_size - len(layers)
        if bucket_padding:
            padding += bucket_padding
            notes.append(f"Add {bucket_padding} padding layers, may waste at most "
                         f"{100 * bucket_padding / len(layers):.2f}% KV cache memory")
        for offset in range(count):
            members = layers[offset::count]
            groups.append(LayerGroup(kind=spec.kind, layers=members, padding_layers=group_size - len(members),
                                     page_bytes=page, block_size=spec.block_size, spec=spec))
    return GroupPlan(groups, group_size * page, padding, min(g.block_size for g in groups), notes)


def blocks_per_request(groups: list[LayerGroup], max_model_len: int, settings: EngineSettings) -> int:
    in_flight = settings.in_flight_tokens
    return sum(group.spec.blocks_per_request(max_model_len, in_flight) for group in groups)


def request_bytes(groups: list[LayerGroup], bytes_per_block: int, max_model_len: int, settings: EngineSettings) -> int:
    """Bytes vLLM's start-up check wants for one request: 0.29+ counts whole group blocks
    (padding layers included); older versions summed the real layers' needs."""
    if has("request_check_counts_group_blocks", settings.version):
        return blocks_per_request(groups, max_model_len, settings) * bytes_per_block
    in_flight = settings.in_flight_tokens
    return sum(len(g.layers) * g.spec.blocks_per_request(max_model_len, in_flight) * g.spec.page_size_bytes for g in groups)


def check_budget_bytes(kv_cache_memory_bytes: int, bytes_per_block: int, settings: EngineSettings) -> int:
    """The budget the start-up check compares with: 0.29+ first sets the null block aside."""
    if has("request_check_counts_group_blocks", settings.version):
        return kv_cache_memory_bytes - bytes_per_block
    return kv_cache_memory_bytes


def min_budget_bytes(groups: list[LayerGroup], bytes_per_block: int, max_model_len: int, settings: EngineSettings) -> int:
    needed = request_bytes(groups, bytes_per_block, max_model_len, settings)
    if has("request_check_counts_group_blocks", settings.version):
        return needed + bytes_per_block
    return needed


def estimate_max_model_len(
    groups: list[LayerGroup], bytes_per_block: int, kv_cache_memory_bytes: int, upper_len: int, settings: EngineSettings
) -> int:
    """vLLM's ``estimate_max_model_len``: binary search for the longest length whose need fits."""
    available = check_budget_bytes(kv_cache_memory_bytes, bytes_per_block, settings)

    def fits(length: int) -> bool:
        return request_bytes(groups, bytes_per_block, length, settings) <= available

    if upper_len < 1 or not fits(1):
        return 0
    low, high = 1, upper_len
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def printed_figures(num_blocks: int, groups: list[LayerGroup], per_request_blocks: int, max_model_len: int,
                    settings: EngineSettings) -> tuple[int, float]:
    """("KV cache size" tokens, "Maximum concurrency") as the given vLLM era prints them (§2.3)."""
    version = settings.version
    smallest_block = min(group.block_size for group in groups)
    if not has("kv_size_tokens_per_group", version):
        tokens = num_blocks * smallest_block
        return tokens, tokens / max_model_len
    concurrency = num_blocks / per_request_blocks
    if not has("kv_size_tokens_from_concurrency", version):
        return (num_blocks // len(groups)) * smallest_block, concurrency
    return int(concurrency * max_model_len), concurrency


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


def capacity(groups: list[LayerGroup], bytes_per_block: int, kv_cache_memory_bytes: int, max_model_len: int,
             settings: EngineSettings) -> KvCapacity:
    num_blocks = kv_cache_memory_bytes // bytes_per_block
    per_request = blocks_per_request(groups, max_model_len, settings)
    tokens, concurrency = printed_figures(num_blocks, groups, per_request, max_model_len, settings)
    needed = request_bytes(groups, bytes_per_block, max_model_len, settings)
    available = check_budget_bytes(kv_cache_memory_bytes, bytes_per_block, settings)
    fits = needed <= available
    estimate = None
    line = log_line(tokens, concurrency, max_model_len, settings)
    if available <= 0:
        estimate = 0
        line = NO_MEMORY_MESSAGE
    elif not fits:
        estimate = estimate_max_model_len(groups, bytes_per_block, kv_cache_memory_bytes, max_model_len, settings)
        line = not_enough_memory_message(max_model_len, needed, available, estimate, settings)
    return KvCapacity(
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        max_model_len=max_model_len,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        request_kv_bytes=needed,
        fits_one_request=fits,
        estimated_max_model_len=estimate,
        log_line=line,
    )
