"""``--gpu-memory-utilization``: from the seat and its GPU's total alone, checked against vLLM's start-up check in
both situations an engine starts in.

vLLM 0.32 takes a memory snapshot in ``gpu_worker.init_device`` after the CUDA context and the
distributed environment (NCCL) exist (``vllm/v1/worker/gpu_worker.py`` lines 505-536) and calls
``request_memory`` (``vllm/v1/worker/utils.py`` lines 716-772): ``requested = math.ceil(total ×
util)``, refused when the snapshot's free memory is smaller. With ``--kv-cache-memory-bytes`` (0.10.2+)
the memory profile does not size anything, so that check is all the value does.

* **KV pinned** (:func:`choose_pinned`): the smallest three-decimal value whose request covers what the
  engine allocates after the snapshot (weights, activation peak, CUDA graphs, pinned KV) plus a margin,
  the margin and the three-decimal rounding together at most 1 GiB. It depends on the seat and its GPU's
  total only, so a replan leaves it alone unless the seat changed, and vLLM refuses exactly the starts
  that would not fit (less the margin). The plan then checks it in both situations and shows the
  headroom each leaves; a seat that fails either is a plan problem.
* **KV sized by utilisation** (before 0.10.2, :func:`choose`): the value sizes the engine's budget (the
  KV cache gets what the request leaves after weights, activation and graphs), so the engine holds the
  whole request at plateau. The value is the smallest whose request covers what the engine allocates,
  with no margin: the footprint the placement counted, its KV the planned bytes and the rounding. (The
  largest value that passes, the rule before, handed each engine what its neighbours' *footprints* left;
  each engine then took its neighbours' room: three seats on one GPU, each refused by the one before.)
  Checked in both situations like a pinned seat.

The two situations: **cold boot** (the host boots its engines one at a time in boot order; the free
memory is what the seats booted before it leave at plateau) and **rolling restart** (this engine alone
restarts while its neighbours keep running at plateau; what apply does). Pure logic, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from seatplan.units import GiB, human_bytes

STEP = 1000  # the value is written with three decimals
MAX_MARGIN_BYTES = GiB  # the margin and the rounding to three decimals together, over what the engine allocates


@dataclass(frozen=True)
class GpuAtStart:
    """One GPU of the seat, and the memory free on it when the engine starts in each situation (before its own context)."""

    label: str
    total_bytes: int
    cold_boot_free_bytes: int  # total − reserved − the plateaus of the seats booted before it here
    rolling_restart_free_bytes: int  # total − reserved − the plateaus of every other seat here


@dataclass(frozen=True)
class UtilisationChoice:
    value: float  # what the command line says
    cold_boot: float  # the highest value that passes the check at a cold boot in boot order
    rolling_restart: float  # the highest value that passes it when this engine alone restarts
    needed: float  # the lowest value that covers what the engine allocates inside its budget
    works_in_both: bool
    cold_boot_headroom_bytes: int | None  # free at the snapshot less the request (negative: vLLM refuses the start)
    rolling_restart_headroom_bytes: int | None
    inputs: dict[str, int | float | str]
    result: str
    note: str
    warning: str | None


def requested_bytes(total_bytes: int, util: float) -> int:
    """What vLLM asks for at start-up: ``math.ceil(total × util)``, in floating point as vLLM computes it.

    A total beyond a double (no GPU has one; a hostile fleet file may) is worked exactly instead of overflowing.
    """
    try:
        return math.ceil(total_bytes * util)
    except OverflowError:
        return math.ceil(Fraction(total_bytes) * Fraction(util))


def passes_startup_check(free_bytes: int, total_bytes: int, util: float) -> bool:
    """vLLM's start-up check: the free memory it sees (its own context already taken) covers the request."""
    return free_bytes >= requested_bytes(total_bytes, util)


def highest_passing(free_bytes: int, total_bytes: int) -> float:
    """The largest three-decimal value whose request fits in ``free_bytes``; 0.0 when none does."""
    steps = max(0, free_bytes) * STEP // total_bytes
    while steps > 0 and not passes_startup_check(free_bytes, total_bytes, steps / STEP):
        steps -= 1  # the float product can round up by a byte
    return steps / STEP


def lowest_covering(covered_bytes: int, total_bytes: int) -> float:
    """The smallest three-decimal value whose request covers ``covered_bytes`` (above 1.0 when nothing does)."""
    steps = max(1, -(-max(0, covered_bytes) * STEP // total_bytes))
    while requested_bytes(total_bytes, steps / STEP) < covered_bytes:
        steps += 1  # the float product can round down by a byte
    while steps > 1 and requested_bytes(total_bytes, (steps - 1) / STEP) >= covered_bytes:
        steps -= 1
    return steps / STEP


def margin_within_limit(margin_bytes: int, total_bytes: int) -> int:
    """The policy's boot margin, cut so that it and the rounding to three decimals stay within 1 GiB in all."""
    return max(0, min(margin_bytes, MAX_MARGIN_BYTES - -(-total_bytes // STEP)))


def choose_pinned(gpus: list[GpuAtStart], *, own_context_bytes: int, inside_budget_bytes: int, margin_bytes: int) -> UtilisationChoice:
    """The value for an engine whose KV cache is pinned in bytes, on ``gpus`` (one per tensor-parallel rank): the
    smallest whose request covers what it allocates after vLLM's snapshot plus the margin (cut to 1 GiB with the
    rounding), so that vLLM refuses exactly the starts that would not fit.

    ``inside_budget_bytes`` is what it allocates after vLLM's snapshot; ``own_context_bytes`` what it holds
    before (CUDA context, NCCL), gone from the free memory the snapshot sees.
    """
    margins = {gpu.label: margin_within_limit(margin_bytes, gpu.total_bytes) for gpu in gpus}
    return _covering(gpus, own_context_bytes, inside_budget_bytes, margins, kv_pinned=True)


def choose(gpus: list[GpuAtStart], *, own_context_bytes: int, inside_budget_bytes: int) -> UtilisationChoice:
    """Before 0.10.2 (the value sizes the KV cache): the smallest value whose request covers what the engine allocates
    after vLLM's snapshot, with no margin, on ``gpus`` (one per tensor-parallel rank; the largest GPU need decides).

    vLLM gives the KV cache what the request leaves after the profile (vLLM 0.32 ``vllm/v1/worker/gpu_worker.py``
    lines 740-744: ``available_kv_cache_memory_bytes = requested_memory − non_kv_cache_memory − …``; per engine since
    0.9.1, VLLM.md §3), so the engine holds its own context plus the whole request at plateau. The request is the
    footprint the placement counted (the planned KV and the rounding to three decimals, under ``total / 1000``,
    which goes to the KV cache); a margin would be KV cache the placement never counted, taken from the neighbours.
    """
    return _covering(gpus, own_context_bytes, inside_budget_bytes, dict.fromkeys((gpu.label for gpu in gpus), 0), kv_pinned=False)


def _covering(gpus: list[GpuAtStart], own_context_bytes: int, inside_budget_bytes: int, margins: dict[str, int], *,
              kv_pinned: bool) -> UtilisationChoice:
    value = max(lowest_covering(inside_budget_bytes + margins[gpu.label], gpu.total_bytes) for gpu in gpus)

    def headroom(free_bytes: int, gpu: GpuAtStart) -> int:
        return free_bytes - own_context_bytes - requested_bytes(gpu.total_bytes, value)

    cold_gpu = min(gpus, key=lambda gpu: headroom(gpu.cold_boot_free_bytes, gpu))
    rolling_gpu = min(gpus, key=lambda gpu: headroom(gpu.rolling_restart_free_bytes, gpu))
    cold_headroom = headroom(cold_gpu.cold_boot_free_bytes, cold_gpu)
    rolling_headroom = headroom(rolling_gpu.rolling_restart_free_bytes, rolling_gpu)
    cold = min(highest_passing(gpu.cold_boot_free_bytes - own_context_bytes, gpu.total_bytes) for gpu in gpus)
    rolling = min(highest_passing(gpu.rolling_restart_free_bytes - own_context_bytes, gpu.total_bytes) for gpu in gpus)
    requested = requested_bytes(rolling_gpu.total_bytes, value)
    inputs: dict[str, int | float | str] = {
        "gpu": rolling_gpu.label,
        "total_bytes": rolling_gpu.total_bytes,
        "inside_budget_bytes": inside_budget_bytes,
        "margin_bytes": margins[rolling_gpu.label],
        "requested_bytes": requested,
        "own_context_bytes": own_context_bytes,
        "free_at_cold_boot_bytes": cold_gpu.cold_boot_free_bytes,
        "free_at_rolling_restart_bytes": rolling_gpu.rolling_restart_free_bytes,
        "cold_boot_headroom_bytes": cold_headroom,
        "rolling_restart_headroom_bytes": rolling_headroom,
    }
    situations = (
        f"cold boot in boot order: {human_bytes(cold_gpu.cold_boot_free_bytes)} free on GPU {cold_gpu.label}, "
        f"headroom {human_bytes(cold_headroom)}; restarted alone beside its neighbours at plateau: "
        f"{human_bytes(rolling_gpu.rolling_restart_free_bytes)} free on GPU {rolling_gpu.label}, headroom {human_bytes(rolling_headroom)} "
        f"(each less {human_bytes(own_context_bytes)} own context taken before vLLM's snapshot; vLLM needs free ≥ ceil(total × util))"
    )
    if kv_pinned:
        note = (
            f"the smallest value whose request ({human_bytes(requested)}) covers the {human_bytes(inside_budget_bytes)} it allocates after "
            f"vLLM's snapshot plus a {human_bytes(margins[rolling_gpu.label])} margin; with the KV cache pinned, vLLM uses it only in its "
            f"start-up check. {situations}"
        )
    else:
        note = (
            f"the smallest value whose request ({human_bytes(requested)}) covers the {human_bytes(inside_budget_bytes)} it allocates after "
            f"vLLM's snapshot; with no --kv-cache-memory-bytes the request is the engine's budget and its KV cache gets what the "
            f"weights, activation and graphs leave of it (the planned KV and {human_bytes(requested - inside_budget_bytes)} of rounding). "
            f"{situations}"
        )
    failing = [name for name, room in (("a cold boot in boot order", cold_headroom), ("a restart beside its neighbours", rolling_headroom)) if room < 0]
    warning = None
    if value > 1.0:
        warning = f"plan problem: what it allocates ({human_bytes(inside_budget_bytes)}) exceeds its GPU's total; vLLM cannot start it"
    elif failing:
        short = -min(cold_headroom, rolling_headroom)
        warning = (f"plan problem: vLLM refuses {' and '.join(failing)} (--gpu-memory-utilization {value:.3f} asks "
                   f"{human_bytes(requested)}, {human_bytes(short)} more than is free); give its GPU more room")
    return UtilisationChoice(
        value, cold, rolling, value, warning is None, cold_headroom, rolling_headroom, inputs, f"{value:.3f}", note, warning,
    )
