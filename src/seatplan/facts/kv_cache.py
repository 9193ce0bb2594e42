"""vLLM's KV-cache groups and capacity: the groups the layers form, the blocks a budget holds, the blocks
and bytes one request needs, the printed tokens and concurrency, by era.

vLLM: ``vllm/v1/core/kv_cache_utils.py`` (``get_kv_cache_groups``, ``get_max_concurrency_for_kv_cache_config``,
``check_enough_kv_cache_memory``, ``estimate_max_model_len``). Follows VLLM.md part 2 (§2.1 grouping, §2.2
blocks, §2.3 the printed figures, §4 the "to serve at least one request" check). Pure functions only;
the block size and specs come from ``layout``, the log text from ``vllm_log``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from seatplan.errors import SeatplanError
from seatplan.facts.kv_specs import ChunkedLocalAttentionSpec, KvSpec, LayerGroup, SlidingWindowSpec
from seatplan.facts.settings import EngineSettings
from seatplan.facts.vllm_log import NO_MEMORY_MESSAGE, log_line, not_enough_memory_message
from seatplan.units import cdiv
from seatplan.versions import has


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


@dataclass(frozen=True)
class GroupPlan:
    groups: list[LayerGroup]
    bytes_per_block: int
    padding_layers: int
    block_size: int
    notes: list[str]


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
