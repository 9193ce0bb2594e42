"""A seat's vLLM engine settings, the one place they are built: the facts stage's ``EngineSettings`` for
a fleet seat on a host (plan, observe, usage) and for a planned seat (verify, upgrade-check).

Both go through ``_settings``, so the batch limit (it sets a sliding-window layer's in-flight tokens),
the device (it sets the block size and backend) and the flags of ``extra_args`` that change the KV
layout are the same wherever a seat's facts are loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from seatplan.documents.fleet import Device, Fleet, SeatSpec
from seatplan.documents.fleet_file import eligible_gpus
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.engine.parse import int_flag, parse_args, yarn_override_factor
from seatplan.errors import SeatplanError
from seatplan.facts.models import EngineSettings
from seatplan.units import GiB

__all__ = ["BatchDefaults", "EngineHost", "EngineLimits", "batch_limits", "engine_settings", "planned_engine_settings", "server_batch_defaults",
           "usable_gpus"]

# vLLM's API-server batch defaults by GPU memory (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults):
# 8192 tokens and 1024 sequences from 70 GiB (H100/H200 class), else 2048 and 256.
LARGE_GPU_MIN_BYTES = 70 * GiB


@dataclass(frozen=True)
class BatchDefaults:
    max_num_seqs: int
    max_num_batched_tokens: int


def server_batch_defaults(gpu_total_bytes: int | None) -> BatchDefaults:
    """vLLM's server defaults for a GPU of this size (None: unknown, taken as a large one)."""
    if gpu_total_bytes is None or gpu_total_bytes >= LARGE_GPU_MIN_BYTES:
        return BatchDefaults(max_num_seqs=1024, max_num_batched_tokens=8192)
    return BatchDefaults(max_num_seqs=256, max_num_batched_tokens=2048)


@dataclass(frozen=True)
class EngineLimits:
    """The batch limits an engine runs with (the plan passes both to vLLM, so its activation estimate holds)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    source: str


def batch_limits(max_num_seqs: int | None, max_num_batched_tokens: int | None, gpu_total_bytes: int | None) -> EngineLimits:
    """A seat's batch limits, the one place they are decided: each as the seat gives it, else vLLM's server default
    for the smallest GPU it may use (``server_batch_defaults``)."""
    defaults = server_batch_defaults(gpu_total_bytes)
    chosen_seqs = max_num_seqs or defaults.max_num_seqs
    chosen_tokens = max_num_batched_tokens or defaults.max_num_batched_tokens
    given = [name for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)) if value]
    source = "seat: " + ", ".join(given) if given else "vLLM's server defaults for this GPU size"
    if given and len(given) < 2:
        source += "; the rest vLLM's server defaults"
    return EngineLimits(chosen_seqs, chosen_tokens, source)


@dataclass(frozen=True)
class EngineHost:
    """What the host fixes in a seat's settings: the device, and the smallest GPU the seat may use
    (vLLM's batch defaults follow its memory; the plan passes them explicitly)."""

    device: Device = "cuda"
    gpu_total_bytes: int | None = None

    @classmethod
    def of(cls, fleet: Fleet, gpus: Iterable[tuple[str, int]]) -> EngineHost:
        """The host of a seat that may use these ``(host, index)`` GPUs: the first one's device (the plan
        refuses a seat that could land on both kinds) and the smallest GPU among them."""
        keys = set(gpus)
        chosen = [(host.device, gpu.total_bytes) for host in fleet.hosts for gpu in host.gpus if (host.name, gpu.index) in keys]
        if not chosen:
            return cls()
        return cls(device=chosen[0][0], gpu_total_bytes=min(total for _, total in chosen))

    @classmethod
    def for_seat(cls, fleet: Fleet, seat: SeatSpec) -> EngineHost:
        """The host a fleet seat's settings are built for, from the GPUs it may use (``usable_gpus``)."""
        return cls.of(fleet, usable_gpus(fleet, seat))


def usable_gpus(fleet: Fleet, seat: SeatSpec) -> list[tuple[str, int]]:
    """The GPUs a seat's settings are built for: those it may land on (``documents.fleet_file.eligible_gpus``, the
    one rule); for a seat no GPU takes (the plan says why it does not fit), every GPU not kept clear, else every GPU."""
    every = [(host.name, gpu.index) for host in fleet.hosts for gpu in host.gpus]
    clear = {(host.name, gpu.index) for host in fleet.hosts for gpu in host.gpus if gpu.keep_clear}
    return eligible_gpus(fleet, seat) or [key for key in every if key not in clear] or every


def engine_settings(seat: SeatSpec, host: EngineHost, version: str) -> EngineSettings:
    """The settings a fleet seat's engine starts with on this host at this vLLM version."""
    tokens = batch_limits(seat.max_num_seqs, seat.max_num_batched_tokens, host.gpu_total_bytes).max_num_batched_tokens
    return _settings(tensor_parallel_size=seat.tensor_parallel_size, dtype=seat.dtype, kv_cache_dtype=seat.kv_cache_dtype,
                     device=host.device, version=version, max_num_batched_tokens=tokens, extra_args=seat.extra_args,
                     hf_overrides=None)


def planned_engine_settings(seat: PlannedVllmSeat, version: str) -> EngineSettings | None:
    """The settings the plan's launch starts this seat with, at ``version``; None for a seat not placed (no launch)."""
    launch = seat.launch
    if launch is None:
        return None
    return _settings(tensor_parallel_size=launch.tensor_parallel_size, dtype=launch.dtype, kv_cache_dtype=launch.kv_cache_dtype,
                     device=seat.device, version=version, max_num_batched_tokens=launch.max_num_batched_tokens,
                     extra_args=launch.extra_args, hf_overrides=launch.hf_overrides)


# extra_args flags that change the KV layout, and the EngineSettings field each sets.
_NUMBER_FLAGS = {"--block-size": "block_size", "--max-num-batched-tokens": "max_num_batched_tokens"}
_TEXT_FLAGS = {"--attention-backend": "attention_backend"}
_SWITCH_FLAGS = {
    "--enable-prefix-caching": ("prefix_caching", True),
    "--no-enable-prefix-caching": ("prefix_caching", False),
    "--disable-hybrid-kv-cache-manager": ("hybrid_kv_cache_manager", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
}


def _settings(*, tensor_parallel_size: int, dtype: str, kv_cache_dtype: str, device: Device, version: str,
              max_num_batched_tokens: int, extra_args: Sequence[str], hf_overrides: Mapping[str, Any] | None) -> EngineSettings:
    fields: dict[str, Any] = {"tensor_parallel_size": tensor_parallel_size, "dtype": dtype, "kv_cache_dtype": kv_cache_dtype,
                              "device": device, "vllm_version": version, "max_num_batched_tokens": max_num_batched_tokens}
    # The command line puts extra_args last, and vLLM's parser lets the last occurrence win.
    flags = parse_args(extra_args)
    for flag, field in _NUMBER_FLAGS.items():
        value = int_flag(flags, flag)
        if value is not None:
            fields[field] = value
    fields.update({field: flags[flag] for flag, field in _TEXT_FLAGS.items() if flags.get(flag)})
    fields.update({field: value for flag, (field, value) in _SWITCH_FLAGS.items() if flag in flags})
    yarn_factor = yarn_override_factor(hf_overrides if hf_overrides is not None else flags.get("--hf-overrides"))
    if yarn_factor is not None:
        fields.update(enable_yarn=True, yarn_factor=yarn_factor)
    try:
        return EngineSettings(**fields)
    except ValidationError as problem:
        first = problem.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise SeatplanError(f"the engine setting {field} {first['msg'].lower()}", where=f"seat settings, {field}",
                            fix="fix the seat in the fleet file (or its extra_args) and re-plan") from None
