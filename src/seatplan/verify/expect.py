"""What each planned engine must show when it runs: the plan's own numbers, its KV cache (block size,
block count, "KV cache size" tokens) included.

At the plan's vLLM version the expectation is the plan's own figure (``PlannedSeat.num_gpu_blocks``,
the one the Prometheus rule alerts on), read from the plan's structured fields, never from the rendered
command line. At another version (``upgrade-check``), or for a plan saved before it carried the figure,
the facts stage predicts it again from the plan's settings (``engine.settings.planned_engine_settings``)
and the seat's device, so the engine is held to vLLM's own arithmetic, to the block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from seatplan.documents.fleet_file import resolve_model
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.engine.endpoint import base_url, service_address
from seatplan.engine.settings import planned_engine_settings, with_draft_located
from seatplan.errors import SeatplanError
from seatplan.facts.models import EngineSettings, ModelFacts

FactsLoader = Callable[[str, EngineSettings], ModelFacts]
DEFAULT_DEVICE = "cuda"


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


def planned_kv(seat: PlannedVllmSeat) -> KvPrediction | None:
    """The plan's own KV figures for the seat; None for a plan saved before it carried all of them."""
    if seat.block_size is None or seat.num_gpu_blocks is None or seat.kv_cache_tokens is None or seat.max_concurrency is None:
        return None
    return KvPrediction(block_size=seat.block_size, num_gpu_blocks=seat.num_gpu_blocks,
                        kv_cache_size_tokens=seat.kv_cache_tokens, max_concurrency=seat.max_concurrency)


def seat_facts(seat: PlannedVllmSeat, version: str, fleet_dir: Path, facts_loader: FactsLoader) -> ModelFacts:
    """The seat's model facts under the settings the plan started it with, at ``version``."""
    settings = planned_engine_settings(seat, version)
    if settings is None:
        raise SeatplanError(f"seat {seat.name} has no vLLM engine settings in the plan", where=f"seat {seat.name}",
                            fix="re-plan it with `seatplan plan FLEET -o plan.json`")
    return facts_loader(resolve_model(seat.model or "", fleet_dir), with_draft_located(settings, fleet_dir))


def expected_kv(seat: PlannedVllmSeat, kv_bytes: int, max_model_len: int, version: str, plan_version: str, fleet_dir: Path,
                facts_loader: FactsLoader) -> KvPrediction:
    """The plan's figures at the plan's version; the facts stage's prediction at any other (of the seat's pinned
    ``kv_bytes`` at its ``max_model_len``)."""
    planned = planned_kv(seat) if version == plan_version else None
    if planned is not None:
        return planned
    return predict_kv(seat_facts(seat, version, fleet_dir, facts_loader), kv_bytes, max_model_len)


def seat_expectations(plan: Plan, hosts: dict[str, HostInfo], fleet_dir: Path, facts_loader: FactsLoader,
                      vllm_version: str | None = None, namespace: str | None = None) -> list[SeatExpectation]:
    """What every planned vLLM seat must show; the KV prediction at ``vllm_version`` (default: the plan's). ``namespace``:
    each engine asked at its Kubernetes Service (``SEAT.NAMESPACE.svc``, as render --target kubernetes names it)."""
    version = vllm_version or plan.inputs.vllm_version
    expectations = []
    for seat in plan.vllm_seats():
        if seat.launch is None:
            continue
        host = seat.host or seat_host(seat.gpus) or ""
        address = seat.address or hosts.get(host, HostInfo(address=host)).address
        if namespace is not None:
            address = service_address(seat.name, namespace)
        kv, problem = None, None
        if seat.kv_cache_memory_bytes is None or seat.max_model_len is None:
            problem = "the plan pins no KV size or context for this seat"
        else:
            try:
                kv = expected_kv(seat, seat.kv_cache_memory_bytes, seat.max_model_len, version, plan.inputs.vllm_version, fleet_dir, facts_loader)
            except SeatplanError as error:
                problem = error.message
        expectations.append(SeatExpectation(
            seat=seat.name,
            served_model_name=seat.served_model_name,
            base_url=base_url(address, seat.port),
            max_model_len=seat.max_model_len,
            kv_cache_memory_bytes=seat.kv_cache_memory_bytes,
            max_new_tokens=seat.max_new_tokens,
            kv=kv,
            kv_problem=problem,
        ))
    return expectations
