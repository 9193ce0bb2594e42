"""``--gpu-memory-utilization`` that passes vLLM's start-up check in both situations an engine starts in.

vLLM (0.14+, see VLLM.md §3) asks for ``requested = ceil(total × util)`` bytes and refuses to start
when the GPU's free memory at that moment is smaller. The engine's own CUDA context (and NCCL's
buffers) are taken before the check, so they are gone from the free memory it sees. With the KV
cache pinned in bytes the value sizes nothing; only the check remains, and seatplan also wants the
budget to cover what the engine allocates inside it (weights, activations, KV, graphs).

An engine starts in one of two situations:

* **cold boot**: the host boots its engines one at a time in boot order; the free memory is what
  the seats booted before it leave (at plateau);
* **rolling restart**: this engine alone restarts while its neighbours keep running at plateau;
  the free memory is what all its neighbours leave. This is what apply does, and it is never more
  than the cold-boot figure.

The value chosen passes both; where no value that covers the engine's allocations passes both,
the rolling-restart value is taken (it passes both checks) and the plan says so. Pure logic, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from seatplan.units import human_bytes

STEP = 1000  # the value is written with three decimals


@dataclass(frozen=True)
class GpuAtStart:
    """One GPU of the seat, and the memory free on it when the engine starts in each situation (before its own context)."""

    label: str
    total_bytes: int
    cold_boot_free_bytes: int  # total − reserved − the plateaus of the seats booted before it here
    rolling_restart_free_bytes: int  # total − reserved − the plateaus of every other seat here


@dataclass(frozen=True)
class Utilisation:
    value: float  # what the command line says
    cold_boot: float  # the highest value that passes the check at a cold boot in boot order
    rolling_restart: float  # the highest value that passes it when this engine alone restarts
    needed: float  # the lowest value that covers what the engine allocates inside its budget
    works_in_both: bool
    inputs: dict[str, int | float | str]
    result: str
    note: str
    warning: str | None


def requested_bytes(total_bytes: int, util: float) -> int:
    """What vLLM asks for at start-up: ``math.ceil(total × util)``, in floating point as vLLM computes it."""
    return math.ceil(total_bytes * util)


def passes_startup_check(free_bytes: int, total_bytes: int, util: float) -> bool:
    """vLLM's start-up check: the free memory it sees (its own context already taken) covers the request."""
    return free_bytes >= requested_bytes(total_bytes, util)


def highest_passing(free_bytes: int, total_bytes: int) -> float:
    """The largest three-decimal value whose request fits in ``free_bytes``; 0.0 when none does."""
    steps = max(0, free_bytes) * STEP // total_bytes
    while steps > 0 and not passes_startup_check(free_bytes, total_bytes, steps / STEP):
        steps -= 1  # the float product can round up by a byte
    return steps / STEP


def choose(gpus: list[GpuAtStart], *, own_context_bytes: int, inside_budget_bytes: int, margin_bytes: int) -> Utilisation:
    """The value for an engine on ``gpus`` (one per tensor-parallel rank; the tightest decides).

    ``margin_bytes`` is kept between the free memory and the request, for what moves in the meantime.
    """

    def seen(free_bytes: int) -> int:
        return free_bytes - own_context_bytes - margin_bytes

    cold_gpu = min(gpus, key=lambda gpu: highest_passing(seen(gpu.cold_boot_free_bytes), gpu.total_bytes))
    rolling_gpu = min(gpus, key=lambda gpu: highest_passing(seen(gpu.rolling_restart_free_bytes), gpu.total_bytes))
    cold = highest_passing(seen(cold_gpu.cold_boot_free_bytes), cold_gpu.total_bytes)
    rolling = highest_passing(seen(rolling_gpu.rolling_restart_free_bytes), rolling_gpu.total_bytes)
    needed = max(math.ceil(inside_budget_bytes * STEP / gpu.total_bytes) / STEP for gpu in gpus)
    both = min(cold, rolling)
    inputs: dict[str, int | float | str] = {
        "gpu": rolling_gpu.label,
        "total_bytes": rolling_gpu.total_bytes,
        "free_at_cold_boot_bytes": cold_gpu.cold_boot_free_bytes,
        "free_at_rolling_restart_bytes": rolling_gpu.rolling_restart_free_bytes,
        "own_context_bytes": own_context_bytes,
        "margin_bytes": margin_bytes,
        "inside_budget_bytes": inside_budget_bytes,
        "cold_boot": cold,
        "rolling_restart": rolling,
        "needed": needed,
    }
    situations = (
        f"cold boot in boot order: {human_bytes(cold_gpu.cold_boot_free_bytes)} free on GPU {cold_gpu.label} → up to {cold:.3f}; "
        f"restarted alone beside its neighbours at plateau: {human_bytes(rolling_gpu.rolling_restart_free_bytes)} free on GPU "
        f"{rolling_gpu.label} → up to {rolling:.3f} (each less {human_bytes(own_context_bytes)} own context and "
        f"{human_bytes(margin_bytes)} margin; vLLM needs free ≥ ceil(total × util))"
    )
    if both >= needed:
        return Utilisation(
            both, cold, rolling, needed, True, inputs, f"{both:.3f}",
            f"passes vLLM's start-up check in both situations and covers the {human_bytes(inside_budget_bytes)} it allocates "
            f"({needed:.3f}). {situations}",
            None,
        )
    if rolling > 0:
        return Utilisation(
            rolling, cold, rolling, needed, False, inputs, f"{rolling:.3f} (below the {needed:.3f} it allocates)",
            f"no value passes both checks and covers the {human_bytes(inside_budget_bytes)} it allocates; the rolling-restart "
            f"value is taken, since apply restarts engines one at a time. {situations}",
            f"--gpu-memory-utilization {rolling:.3f} passes vLLM's start-up check when it restarts beside its "
            f"neighbours, but its budget ({rolling:.3f}) is below the {needed:.3f} it allocates; with the KV cache pinned in bytes "
            "vLLM does not check that, but the neighbours leave it little room",
        )
    value = max(cold, 0.001)
    return Utilisation(
        value, cold, rolling, needed, False, inputs, f"{value:.3f} (cold boot only)",
        f"its neighbours at plateau leave it too little memory to pass the start-up check at all; only a cold boot in "
        f"boot order can start it. {situations}",
        f"cannot restart alone: its neighbours on GPU {rolling_gpu.label} leave "
        f"{human_bytes(rolling_gpu.rolling_restart_free_bytes)} free, less than its own context and margin; restart that GPU's seats together",
    )
