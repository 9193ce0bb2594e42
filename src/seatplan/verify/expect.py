"""What each planned engine must show when it runs: the plan's own numbers plus the facts stage's
prediction of its KV cache (block size, block count, "KV cache size" tokens) at a given vLLM version.

The prediction is recomputed from the model's config with the engine settings the plan's command line
gives and the host's device (the CPU build uses other block sizes than a GPU), so verify checks the
engine against what vLLM's own arithmetic gives for exactly this command line, to the block.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seatplan.documents.fleet_file import resolve_model
from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.facts.models import EngineSettings, ModelFacts

FactsLoader = Callable[[str, EngineSettings], ModelFacts]
DEFAULT_DEVICE = "cuda"
VLLM_DEFAULT_PORT = 8000  # what an engine started without --port listens on


@dataclass(frozen=True)
class HostInfo:
    """What verify needs of a fleet host: where its engines answer and which vLLM build runs there."""

    address: str
    device: str = DEFAULT_DEVICE


@dataclass(frozen=True)
class KvPrediction:
    block_size: int
    num_gpu_blocks: int
    kv_cache_size_tokens: int
    max_concurrency: float


@dataclass(frozen=True)
class SeatExpectation:
    seat: str
    served_model_name: str
    base_url: str
    max_model_len: int | None
    kv_cache_memory_bytes: int | None
    max_new_tokens: int | None
    kv: KvPrediction | None
    kv_problem: str | None  # why there is no KV prediction


# vLLM flags that change the KV layout, mapped to EngineSettings fields (value flags).
_VALUE_FLAGS = {
    "--tensor-parallel-size": ("tensor_parallel_size", int),
    "--dtype": ("dtype", str),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--block-size": ("block_size", int),
    "--attention-backend": ("attention_backend", str),
    "--max-model-len": ("max_model_len", int),
}
_SWITCH_FLAGS = {
    "--enable-prefix-caching": ("prefix_caching", True),
    "--no-enable-prefix-caching": ("prefix_caching", False),
    "--disable-hybrid-kv-cache-manager": ("hybrid_kv_cache_manager", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
}


def parse_args(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` and ``--flag=value`` pairs of a command line; switches map to None; the last one wins."""
    flags: dict[str, str | None] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if not arg.startswith("--"):
            continue
        if "=" in arg:
            name, value = arg.split("=", 1)
            flags[name] = value
        elif position < len(args) and not args[position].startswith("--"):
            flags[arg] = args[position]
            position += 1
        else:
            flags[arg] = None
    return flags


def engine_settings(args: list[str], device: str, vllm_version: str) -> EngineSettings:
    """The facts stage's settings for the engine this command line starts."""
    flags = parse_args(args)
    fields: dict[str, object] = {"device": device, "vllm_version": vllm_version}
    for flag, (field, kind) in _VALUE_FLAGS.items():
        if flags.get(flag) is not None:
            try:
                fields[field] = kind(flags[flag])
            except ValueError:
                raise SeatplanError(f"{flag} {flags[flag]!r} is not a whole number", where=f"vllm_args {flag}",
                                    fix="re-plan, or fix the seat's extra_args") from None
    for flag, (field, value) in _SWITCH_FLAGS.items():
        if flag in flags:
            fields[field] = value
    yarn_factor = yarn_override_factor(flags.get("--hf-overrides"))
    if yarn_factor is not None:
        fields.update(enable_yarn=True, yarn_factor=yarn_factor)
    return EngineSettings(**fields)


def yarn_override_factor(hf_overrides: str | None) -> float | None:
    """The YaRN factor an ``--hf-overrides`` switches on (under ``rope_parameters`` or ``rope_scaling``)."""
    try:
        overrides = json.loads(hf_overrides) if hf_overrides else {}
    except ValueError:
        return None
    for key in ("rope_parameters", "rope_scaling"):
        rope = overrides.get(key) if isinstance(overrides, dict) else None
        if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn":
            factor = rope.get("factor")
            return float(factor) if isinstance(factor, (int, float)) and factor > 1 else None
    return None


def predict_kv(facts: ModelFacts, kv_cache_memory_bytes: int, max_model_len: int) -> KvPrediction:
    capacity = facts.capacity(kv_cache_memory_bytes, max_model_len)
    return KvPrediction(
        block_size=facts.block_size,
        num_gpu_blocks=capacity.num_blocks,
        kv_cache_size_tokens=capacity.kv_cache_tokens,
        max_concurrency=capacity.max_concurrency,
    )


def seat_host(gpu_labels: list[str]) -> str | None:
    """The host of a planned seat, from its ``HOST:INDEX`` GPU labels."""
    return gpu_labels[0].rsplit(":", 1)[0] if gpu_labels else None


def base_url(address: str, port: int | None) -> str:
    port = VLLM_DEFAULT_PORT if port is None else port
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"http://{host}:{port}"


def seat_expectations(plan: Plan, hosts: dict[str, HostInfo], fleet_dir: Path, facts_loader: FactsLoader,
                      vllm_version: str | None = None) -> list[SeatExpectation]:
    """What every planned vLLM seat must show; the KV prediction at ``vllm_version`` (default: the plan's)."""
    version = vllm_version or plan.inputs.vllm_version
    expectations = []
    for seat in plan.seats:
        if seat.engine != "vllm" or not seat.vllm_args:
            continue
        host = seat_host(seat.gpus) or ""
        info = hosts.get(host, HostInfo(address=host))
        kv, problem = None, None
        if seat.kv_cache_memory_bytes is None or seat.max_model_len is None:
            problem = "the plan pins no KV size or context for this seat"
        else:
            try:
                settings = engine_settings(seat.vllm_args, info.device, version)
                facts = facts_loader(resolve_model(seat.model or "", fleet_dir), settings)
                kv = predict_kv(facts, seat.kv_cache_memory_bytes, seat.max_model_len)
            except SeatplanError as error:
                problem = error.message
        expectations.append(SeatExpectation(
            seat=seat.name,
            served_model_name=seat.served_model_name,
            base_url=base_url(info.address, seat.port),
            max_model_len=seat.max_model_len,
            kv_cache_memory_bytes=seat.kv_cache_memory_bytes,
            max_new_tokens=seat.max_new_tokens,
            kv=kv,
            kv_problem=problem,
        ))
    return expectations
