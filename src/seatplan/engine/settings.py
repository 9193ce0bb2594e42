"""A seat's vLLM engine settings, the one place they are built: the facts stage's ``EngineSettings`` for
a fleet seat on a host (plan, observe, usage) and for a planned seat (verify, upgrade-check).

Both go through ``_settings``, so the batch limit (it sets a sliding-window layer's in-flight tokens),
the device (it sets the block size and backend) and the flags of ``extra_args`` that change the KV
layout are the same wherever a seat's facts are loaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from seatplan.documents.fleet import Device, Fleet, SeatSpec
from seatplan.documents.fleet_file import eligible_gpus, resolve_model
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.engine.flag_memory import refused_flags
from seatplan.engine.parse import int_flag, parse_args, yarn_override_factor
from seatplan.errors import SeatplanError
from seatplan.facts.models import NO_DRAFT_METHODS, EngineSettings, LoraSettings, SpeculativeSettings, speculative_method
from seatplan.units import GiB

__all__ = ["BatchDefaults", "EngineHost", "EngineLimits", "batch_limits", "engine_settings", "planned_engine_settings", "server_batch_defaults",
           "speculative_config", "usable_gpus", "with_draft_located"]

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
    """The settings a fleet seat's engine starts with on this host at this vLLM version. A flag of extra_args that
    changes the memory and is not modelled (``engine.flag_memory``) is refused here too, for every stage that sizes
    a fleet seat (``seatplan plan`` names its line first)."""
    refused = refused_flags(seat.extra_args)
    if refused:
        raise SeatplanError(f"seat {seat.name}: {refused[0].message}", where=f"seat {seat.name}, extra_args {refused[0].flag}",
                            fix=refused[0].fix)
    tokens = batch_limits(seat.max_num_seqs, seat.max_num_batched_tokens, host.gpu_total_bytes).max_num_batched_tokens
    settings = _settings(tensor_parallel_size=seat.tensor_parallel_size, dtype=seat.dtype, kv_cache_dtype=seat.kv_cache_dtype,
                         device=host.device, version=version, max_num_batched_tokens=tokens, extra_args=seat.extra_args,
                         hf_overrides=None)
    if seat.lora is not None:
        if settings.lora is not None:
            raise SeatplanError(f"seat {seat.name} gives LoRA twice: the `lora` key and --enable-lora in extra_args",
                                where=f"seat {seat.name}, lora", fix="keep one: the `lora` key (the plan writes the flags)")
        lora = seat.lora
        settings = settings.model_copy(update={"lora": LoraSettings(
            max_loras=lora.max_loras, max_lora_rank=lora.max_lora_rank, max_cpu_loras=lora.max_cpu_loras,
            target_modules=tuple(lora.target_modules) if lora.target_modules else None, lora_dtype=lora.lora_dtype)})
    if seat.speculative is None:
        return settings
    if settings.speculative is not None:
        raise SeatplanError(f"seat {seat.name} gives speculative decoding twice: the `speculative` key and --speculative-config in extra_args",
                            where=f"seat {seat.name}, speculative", fix="keep one: the `speculative` key (the plan writes the flag)")
    spec = seat.speculative
    return settings.model_copy(update={"speculative": SpeculativeSettings(
        method=speculative_method(spec.method, spec.model), model=spec.model, num_speculative_tokens=spec.num_speculative_tokens,
        draft_tensor_parallel_size=spec.draft_tensor_parallel_size)})


def with_draft_located(settings: EngineSettings, base_dir: Path) -> EngineSettings:
    """The settings with a speculative draft read like the seat's model: a directory relative to the fleet file, or a Hub id."""
    draft = settings.speculative
    if draft is None or not draft.model or draft.method in NO_DRAFT_METHODS:
        return settings
    return settings.model_copy(update={"speculative": draft.model_copy(update={"model": resolve_model(draft.model, base_dir)})})


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


# The flags of vLLM's features that _settings reads besides the KV-layout ones above (issue 47): speculative decoding,
# LoRA's slots (max_cpu_loras is host memory, read for the record), online quantization and weight offload.
FEATURE_FLAGS = frozenset({"--speculative-config", "--enable-lora", "--max-loras", "--max-lora-rank", "--lora-target-modules",
                           "--lora-dtype", "--fully-sharded-loras", "--quantization", "--cpu-offload-gb"})

# --speculative-config keys that change a draft's memory and that seatplan does not model
_UNMODELLED_SPECULATIVE_KEYS = {"quantization": "the draft's own quantization", "enable_multimodal_draft": "a multimodal draft"}


def speculative_config(text: str) -> SpeculativeSettings:
    """``--speculative-config JSON`` as vLLM reads it (a JSON object: vllm/engine/arg_utils.py takes it as the
    ``SpeculativeConfig`` fields), the fields that change the memory; a key that changes it and is not modelled is refused."""
    fix = 'write it as one JSON object, e.g. {"method": "draft_model", "model": "DIR", "num_speculative_tokens": 2}, or use the seat\'s `speculative` key'
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise SeatplanError(f"--speculative-config {text[:80]!r} is no JSON object", where="extra_args --speculative-config", fix=fix)
    for key, why in _UNMODELLED_SPECULATIVE_KEYS.items():
        if document.get(key):
            raise SeatplanError(f"--speculative-config {key}: {why} changes the memory, and seatplan does not model it",
                                where=f"extra_args --speculative-config {key}", fix="drop the key, or run the seat as `engine: fixed` with "
                                "the memory_cap_bytes you measured")
    method, model = document.get("method"), document.get("model")
    tokens = document.get("num_speculative_tokens")
    draft_tp = document.get("draft_tensor_parallel_size")
    try:
        return SpeculativeSettings(method=speculative_method(method if isinstance(method, str) else None, model if isinstance(model, str) else None),
                                   model=model, num_speculative_tokens=tokens if tokens is not None else 1, draft_tensor_parallel_size=draft_tp)
    except ValidationError as problem:
        first = problem.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise SeatplanError(f"--speculative-config {field}: {first['msg'].lower()}", where=f"extra_args --speculative-config {field}", fix=fix) from None


def _offload_bytes(text: str) -> int:
    """``--cpu-offload-gb`` (a float of GiB) as the bytes vLLM offloads at most (vllm/model_executor/offloader/base.py:174)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1 << 20:
        raise SeatplanError(f"--cpu-offload-gb {text[:40]!r} is no size in GiB", where="extra_args --cpu-offload-gb",
                            fix="give the GiB of weights to keep in host memory, e.g. --cpu-offload-gb 4")
    return int(value * 1024**3)


def _lora_of_flags(flags: Mapping[str, str | None]) -> LoraSettings:
    """``--enable-lora`` and the flags beside it (each only counts with it: vLLM builds no LoRA config without)."""
    fields: dict[str, Any] = {}
    for flag, field in (("--max-loras", "max_loras"), ("--max-lora-rank", "max_lora_rank"), ("--max-cpu-loras", "max_cpu_loras")):
        value = int_flag(flags, flag)
        if value is not None:
            fields[field] = value
    if flags.get("--lora-target-modules"):
        fields["target_modules"] = tuple((flags["--lora-target-modules"] or "").split())
    if flags.get("--lora-dtype"):
        fields["lora_dtype"] = flags["--lora-dtype"]
    fields["fully_sharded"] = "--fully-sharded-loras" in flags
    try:
        return LoraSettings(**fields)
    except ValidationError as problem:
        first = problem.errors()[0]
        raise SeatplanError(f"the LoRA setting {first['loc'][0]} {first['msg'].lower()}", where=f"extra_args --{str(first['loc'][0]).replace('_', '-')}",
                            fix="fix the flag in the seat's extra_args (or use the seat's `lora` key)") from None


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
    if flags.get("--speculative-config"):
        fields["speculative"] = speculative_config(flags["--speculative-config"] or "")
    if "--enable-lora" in flags:
        fields["lora"] = _lora_of_flags(flags)
    if flags.get("--quantization"):
        fields["quantization"] = flags["--quantization"]
    if flags.get("--cpu-offload-gb"):
        fields["cpu_offload_bytes"] = _offload_bytes(flags["--cpu-offload-gb"] or "")
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
