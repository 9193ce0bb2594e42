"""nvidia-smi's ``memory.used`` on a GPU against what the seats adopted there take: a process outside the fleet, or
an engine not adopted, shows as memory nobody accounts for; the plan would hand it out as free.

What a seat takes is bounded from below by what the facts stage's public API gives (``facts.api.load_model_facts``:
its weights per rank, for a model directory adopt can read here) plus its pinned KV bytes, and from above by that
plus ``ENGINE_OVERHEAD_MIB`` per engine (activations, CUDA graphs, the CUDA context, allocator slack: the plan's
own footprint parts are the plan stage's, which adopt may not import). A fixed seat takes up to its ``memory_cap_bytes``.
A GPU where a seat's share is not known (a Hub id, whose facts adopt does not fetch; KV not pinned) is not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seatplan.adopt.evidence import GpuReading
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings

MiB = 2**20
# Beside weights and KV, a vLLM engine holds activations (its profile run), CUDA graphs and the CUDA context: 1-3 GiB
# on the GPUs seatplan's overhead model covers. A rule of thumb, not a measurement: the comparison's slack.
ENGINE_OVERHEAD_MIB = 3072
TOLERANCE_MIB = 1024  # nvidia-smi's rounding, the allocator's caching, a reading taken mid-request


@dataclass(frozen=True)
class Share:
    """What one adopted seat takes on one of its GPUs: at least ``floor_bytes``, at most ``floor_bytes + overhead``."""

    seat: str
    floor_bytes: int | None  # None: not known (why says)
    overhead_bytes: int
    why: str


def seat_share(name: str, tree: dict[str, Any]) -> Share:
    """A seat's share from its adopted values (``tree``: key → value), through the facts stage's public API."""
    value = {key: getattr(noted, "value", None) for key, noted in tree.items()}
    if value.get("engine") == "fixed":
        cap = value.get("memory_cap_bytes")
        # anything up to its cap on each of its GPUs (the cap is the most it holds on one of them)
        return Share(name, 0 if isinstance(cap, int) else None, cap if isinstance(cap, int) else 0,
                     "" if isinstance(cap, int) else "its memory cap is not known")
    kv, model = value.get("kv_cache_memory_bytes"), value.get("model")
    if not isinstance(kv, int):
        return Share(name, None, 0, "its KV cache is not pinned")
    if not isinstance(model, str) or not Path(model).is_dir():
        return Share(name, None, 0, "its model is no directory here (adopt does not fetch a Hub id's facts)")
    tp = value.get("tensor_parallel_size")
    try:
        facts = load_model_facts(model, EngineSettings(tensor_parallel_size=tp if isinstance(tp, int) else 1))
    except SeatplanError as problem:
        return Share(name, None, 0, f"its model's facts cannot be read ({problem.message[:80]})")
    return Share(name, facts.weights_bytes + kv, ENGINE_OVERHEAD_MIB * MiB, "")


def compare(reading: GpuReading, shares: list[Share]) -> tuple[str, int] | None:
    """(why, the reserved_bytes to suggest, 0 for none) where ``memory.used`` and the seats' shares differ by more than
    the tolerance; None where they agree or cannot be compared."""
    if reading.used_mib is None or not shares or any(share.floor_bytes is None for share in shares):
        return None
    floor_mib = sum(share.floor_bytes or 0 for share in shares) // MiB
    ceiling_mib = floor_mib + sum(share.overhead_bytes for share in shares) // MiB
    names = ", ".join(share.seat for share in shares)
    if reading.used_mib > ceiling_mib + TOLERANCE_MIB:
        extra_mib = reading.used_mib - ceiling_mib
        return (f"{reading.source}: memory.used {reading.used_mib} MiB, and the seats adopted here ({names}) take at most about "
                f"{ceiling_mib} MiB (weights and KV {floor_mib} MiB, plus {ENGINE_OVERHEAD_MIB} MiB per engine): {extra_mib} MiB more, "
                "likely an engine not adopted or a process outside the fleet; add it as a seat or set reserved_bytes", extra_mib * MiB)
    if reading.used_mib < floor_mib - TOLERANCE_MIB:
        return (f"{reading.source}: memory.used {reading.used_mib} MiB, less than the weights and KV of the seats adopted here "
                f"({names}: {floor_mib} MiB): an engine not running, or files written for a restart still pending", 0)
    return None
