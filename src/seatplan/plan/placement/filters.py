"""The placement filters, one function each, shared by the solver and the explanations.

As in the Kubernetes scheduler, where one filter plugin both decides whether a node may take a pod and
says why not (``framework.FilterPlugin``: a ``Status`` of ``Unschedulable`` with its reason), each filter
here judges one GPU for one seat and answers a ``GpuRejection`` or None. The solver keeps the GPUs every
static filter passes (``problem._gpu_sets``); ``rejections.gpu_rejections`` reports the first filter that
rejects each GPU. ``too_few_gpus`` judges a host's passing GPUs for a tensor-parallel seat. Pure logic.
Which GPUs a seat's pin/avoid allows (``GpuView.allowed``) is decided once, by ``documents.fleet_file.allowed_gpus``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

from pydantic import BaseModel, Field

from seatplan.units import human_bytes

GpuSet = tuple[int, ...]


class GpuRejection(BaseModel):
    """Why one GPU (or, for a tensor-parallel seat, one host) cannot take a seat: one filter's verdict."""

    gpu: str = Field(description='"host:index", or "host" when the whole host is ruled out')
    filter: Literal["keep_clear", "pin_or_avoid", "too_small", "too_few_gpus", "full"]
    reason: str
    short_by_bytes: int | None = Field(None, description="how much smaller the seat must get to fit here, when size is the reason")


@dataclass(frozen=True)
class GpuView:
    """What the filters see of one GPU when judging one seat."""

    label: str
    keep_clear: bool
    allowed: bool  # among the GPUs the seat's pin/avoid allows
    capacity_bytes: int
    headroom_bytes: int
    load_bytes: int = 0  # what the seats already on it take
    holders: tuple[str, ...] = ()  # their names, for the reason

    @property
    def usable_bytes(self) -> int:
        return self.capacity_bytes - self.headroom_bytes


GpuFilter = Callable[[GpuView, int], GpuRejection | None]


def keep_clear(gpu: GpuView, footprint_bytes: int) -> GpuRejection | None:
    if gpu.keep_clear:
        return GpuRejection(gpu=gpu.label, filter="keep_clear", reason="keep-clear: nothing may be placed here")
    return None


def pin_or_avoid(gpu: GpuView, footprint_bytes: int) -> GpuRejection | None:
    if not gpu.allowed:
        return GpuRejection(gpu=gpu.label, filter="pin_or_avoid", reason="not among the GPUs its pin/avoid allows")
    return None


def too_small(gpu: GpuView, footprint_bytes: int) -> GpuRejection | None:
    usable = gpu.usable_bytes
    if footprint_bytes <= usable:
        return None
    return GpuRejection(
        gpu=gpu.label, filter="too_small", short_by_bytes=footprint_bytes - usable,
        reason=(f"offers {human_bytes(usable)} ({human_bytes(gpu.capacity_bytes)} less {human_bytes(gpu.headroom_bytes)} headroom), "
                f"needs {human_bytes(footprint_bytes)}"),
    )


def full(gpu: GpuView, footprint_bytes: int) -> GpuRejection | None:
    left = gpu.usable_bytes - gpu.load_bytes
    if footprint_bytes <= left:
        return None
    return GpuRejection(
        gpu=gpu.label, filter="full", short_by_bytes=footprint_bytes - max(left, 0),
        reason=f"{human_bytes(max(left, 0))} left beside {', '.join(sorted(gpu.holders)) or 'the seats that stay'}, needs {human_bytes(footprint_bytes)}",
    )


# What holds whatever else is placed: the solver's candidate GPUs pass all of these.
STATIC_FILTERS: tuple[GpuFilter, ...] = (keep_clear, pin_or_avoid, too_small)
# Every GPU filter, in the order a GPU's verdict is taken (the first that rejects it).
GPU_FILTERS: tuple[GpuFilter, ...] = (*STATIC_FILTERS, full)


def first_rejection(gpu: GpuView, footprint_bytes: int, filters: Sequence[GpuFilter] = GPU_FILTERS) -> GpuRejection | None:
    return next((rejection for rejection in (check(gpu, footprint_bytes) for check in filters) if rejection is not None), None)


def too_few_gpus(host: str, passing: Sequence[str], gpu_count: int) -> list[GpuRejection]:
    """A tensor-parallel seat needs ``gpu_count`` passing GPUs on one host: each passing GPU of a host with fewer."""
    if len(passing) >= gpu_count:
        return []
    return [GpuRejection(gpu=label, filter="too_few_gpus",
                         reason=f"host {host} has {len(passing)} GPU(s) that could take it, tensor parallelism needs {gpu_count}")
            for label in passing]


def gpu_sets(passing_by_host: dict[str, list[int]], gpu_count: int) -> tuple[GpuSet, ...]:
    """Every set of ``gpu_count`` passing GPUs of one host (none where ``too_few_gpus`` rejects the host)."""
    sets: list[GpuSet] = []
    for host in sorted(passing_by_host):
        sets.extend(combinations(sorted(passing_by_host[host]), gpu_count))
    return tuple(sorted(sets))
