"""The plan's estimates held against what was observed (``plan --observed``, issue 46): each seat's estimate against
its observed footprint, and each GPU's estimated use for today's layout (``current_layout``) against the memory seen
in use there (``seatplan adopt --observed``: nvidia-smi's ``memory.used``).

A difference is worth a warning when it is over ``DIFFERENCE_SHARE`` of the larger figure and at least
``DIFFERENCE_FLOOR_BYTES``: the footprint profiles' non-KV error is 0.17-0.5 GiB per engine (``overhead_model.json``,
``non_kv_mae_gib``) and a reading of a running engine moves by a few hundred MiB (the allocator's cache, a request in
flight), so a smaller gap says nothing about the estimate; 10 % of a GPU is a rule of thumb, not a measurement.
Pure: sized seats, the fleet and the observations in, warnings out.
"""

from __future__ import annotations

from collections.abc import Sequence

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import gpu_refs, resolve_gpu_ref
from seatplan.documents.observed import ObservedFootprints, ObservedGpu
from seatplan.documents.plan import FootprintPart
from seatplan.plan.size_seat import GpuKey, SizedSeat
from seatplan.units import GiB, human_bytes

DIFFERENCE_SHARE = 0.10
DIFFERENCE_FLOOR_BYTES = GiB
# the estimate's parts that are themselves estimates (weights are read from the files, a pinned KV cache is exact)
UNCERTAIN_PARTS = ("activation_peak", "cuda_graphs", "cuda_context", "nccl_allreduce", "creep_allowance")


def differs(estimated_bytes: int, observed_bytes: int) -> bool:
    gap = abs(estimated_bytes - observed_bytes)
    return gap >= DIFFERENCE_FLOOR_BYTES and gap > DIFFERENCE_SHARE * max(estimated_bytes, observed_bytes)


def gap_said(estimated_bytes: int, observed_bytes: int) -> str:
    gap = estimated_bytes - observed_bytes
    share = abs(gap) / max(observed_bytes, 1)
    return f"the estimate is {human_bytes(abs(gap))} ({share:.0%} of the observed) {'above' if gap > 0 else 'below'} it"


def uncertain_parts(parts: Sequence[FootprintPart], count: int = 3) -> str:
    """The estimate's own estimated parts, largest first: where an estimate that is off is most likely off."""
    guessed = sorted((part for part in parts if part.name in UNCERTAIN_PARTS and part.bytes > 0), key=lambda part: -part.bytes)
    return ", ".join(f"{part.name} {human_bytes(part.bytes)}" for part in guessed[:count])


def seat_warnings(sized: Sequence[SizedSeat], observed: ObservedFootprints, observed_path: str | None) -> list[str]:
    """A vLLM seat whose observed footprint and estimate differ: both figures, the parts that differ, the one used."""
    warnings = []
    given = observed_path or "the observations"
    for seat in sized:
        seen = observed.seats.get(seat.spec.name)
        if seen is None or seat.estimate is None or seat.kv_cache_memory_bytes is None:
            continue
        estimate = seat.estimate
        if not differs(estimate.footprint_bytes, seen.footprint_bytes):
            continue
        estimated_kv = next((part.bytes for part in estimate.parts if part.name == "kv_cache"), 0)
        ran_with = seen.kv_cache_memory_bytes
        if ran_with is not None:
            parts = (f"non-KV estimated {human_bytes(estimate.footprint_bytes - estimated_kv)} ({uncertain_parts(estimate.parts)} of it "
                     f"estimated), observed {human_bytes(max(0, seen.footprint_bytes - ran_with))}; KV {human_bytes(estimated_kv)} planned, "
                     f"{human_bytes(ran_with)} when observed")
        else:
            parts = f"the estimate's own estimated parts: {uncertain_parts(estimate.parts)}; the observation does not say its KV cache"
        used = "derived from the observation (its non-KV part with this plan's KV)" if seat.observation and seat.observation.use == "derived" else "observed"
        warnings.append(f"seat {seat.spec.name}: estimated {human_bytes(estimate.footprint_bytes)} per GPU, observed {human_bytes(seen.footprint_bytes)} "
                        f"({seen.source}{', at ' + seen.observed_at.isoformat(timespec='seconds') if seen.observed_at else ''}): "
                        f"{gap_said(estimate.footprint_bytes, seen.footprint_bytes)}; {parts}. The plan uses the figure {used}; "
                        f"to plan from the estimate instead, delete seats.{seat.spec.name} from {given} (or plan without --observed)")
    return warnings


def today_on_gpus(fleet: Fleet, sized: Sequence[SizedSeat]) -> dict[GpuKey, list[SizedSeat]]:
    """The seats on each GPU in today's layout (the fleet's current_layout, ``--current`` merged in)."""
    by_name = {seat.spec.name: seat for seat in sized}
    on: dict[GpuKey, list[SizedSeat]] = {}
    for name, value in fleet.current_layout.items():
        if name not in by_name:
            continue
        for key in (resolve_gpu_ref(fleet, ref) for ref in gpu_refs(value)):
            if key is not None:
                on.setdefault(key, []).append(by_name[name])
    return on


def _gpu_key(fleet: Fleet, gpu: ObservedGpu) -> GpuKey | None:
    return resolve_gpu_ref(fleet, gpu.index if gpu.host is None else f"{gpu.host}:{gpu.index}")


def gpu_warnings(fleet: Fleet, sized: Sequence[SizedSeat], observed: ObservedFootprints, observed_path: str | None) -> list[str]:
    """A GPU whose estimated use for today's layout (its reserved memory and the estimates of the seats on it; a fixed
    seat its declared cap) differs from the memory observed in use there. ``fleet``: before observed corrections."""
    if not observed.gpus_used or not fleet.current_layout:
        return []
    given = observed_path or "the observations"
    today = today_on_gpus(fleet, sized)
    reserved = {(host.name, gpu.index): gpu.reserved_bytes for host in fleet.hosts for gpu in host.gpus}
    corrected = {key for correction in observed.gpu_corrections if correction.extra_bytes > 0
                 for key in [resolve_gpu_ref(fleet, correction.index if correction.host is None else f"{correction.host}:{correction.index}")]}
    warnings = []
    for gpu in observed.gpus_used:
        key = _gpu_key(fleet, gpu)
        if key is None:
            continue
        seats = today.get(key, [])
        figures = [(seat, (seat.estimate or seat.footprint).footprint_bytes) for seat in seats]
        estimated = reserved[key] + sum(figure for _, figure in figures)
        if not differs(estimated, gpu.used_bytes):
            continue
        ref = f"{key[0]}:{key[1]}"
        each = ", ".join(f"{seat.spec.name} {human_bytes(figure)}" for seat, figure in sorted(figures, key=lambda item: -item[1]))
        reserved_said = f"{human_bytes(reserved[key])} reserved" if reserved[key] else ""
        made_of = ", ".join(part for part in (each, reserved_said) if part) or "no seat runs here today"
        guessed = [f"{seat.spec.name}: {uncertain_parts(seat.estimate.parts)}" for seat, _ in figures if seat.estimate is not None]
        parts = f"; the estimates' own estimated parts, largest first: {'; '.join(guessed)}" if guessed else ""
        observed_seats = [seat.spec.name for seat in seats if seat.spec.name in observed.seats]
        estimated_seats = [seat.spec.name for seat in seats if seat.spec.name not in observed.seats and seat.estimate is not None]
        if observed_seats:
            used = (f"the plan uses the observed figures of {', '.join(observed_seats)}"
                    + (f" and the estimates of {', '.join(estimated_seats)}" if estimated_seats else "")
                    + f"; to plan from the estimates, delete those seats from {given}")
        elif estimated_seats:
            used = (f"the plan uses the estimates (no observation of {', '.join(estimated_seats)}); to plan from observed figures, adopt "
                    "with --compute-apps and --processes FILE (or --processes-from-host) and --observed FILE, then plan --observed FILE")
        else:
            used = "no seat runs here today"
        if key in corrected:
            used += f"; the memory no seat accounts for is reserved on this GPU ({given}: gpu_corrections)"
        warnings.append(f"GPU {ref}: estimated {human_bytes(estimated)} in use for today's layout ({made_of}), observed {human_bytes(gpu.used_bytes)} "
                        f"({gpu.source}{', at ' + gpu.observed_at.isoformat(timespec='seconds') if gpu.observed_at else ''}): "
                        f"{gap_said(estimated, gpu.used_bytes)}{parts}. {used[0].upper()}{used[1:]}")
    return warnings
