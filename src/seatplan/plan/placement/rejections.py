"""Why a fleet does not fit: every GPU that cannot take a seat gives its own reason.

Like the Kubernetes scheduler's filter plugins, each rule (keep-clear, pin/avoid, too small, too few
GPUs on the host for a tensor-parallel seat, full beside the seats that stay) judges every GPU on
its own, and the seat's summary counts the verdicts ("0/8 GPUs can take it: 1 keep-clear, …")
instead of guessing one merged cause. Pure logic, no I/O.
"""

from __future__ import annotations

from collections import Counter

from seatplan.plan.placement import cpsat
from seatplan.plan.placement.filters import GpuView, first_rejection, too_few_gpus
from seatplan.plan.placement.problem import GpuRejection, GpuSet, Infeasibility, Problem, SeatShortfall, gpu_label
from seatplan.units import human_bytes

FILTER_WORDS = {
    "keep_clear": "keep-clear",
    "pin_or_avoid": "excluded by pin/avoid",
    "too_small": "too small",
    "too_few_gpus": "too few GPUs on the host",
    "full": "full beside the seats that stay",
}


def gpu_rejections(problem: Problem, seat: int, load_bytes: list[int], holders: list[list[int]] | None = None) -> list[GpuRejection]:
    """Each GPU's own verdict on ``seat`` given what is already on it (``load_bytes``, the seats in ``holders``).

    GPUs that could take it are left out.
    """
    footprint = problem.footprint_bytes[seat]
    rejections: list[GpuRejection] = []
    passing: dict[str, list[str]] = {}
    for g, key in enumerate(problem.gpu_keys):
        holding = tuple(problem.seat_names[s] for s in holders[g]) if holders else ()
        view = GpuView(gpu_label(key), problem.keep_clear[g], g in problem.allowed[seat], problem.capacity_bytes[g],
                       problem.headroom_bytes[g], load_bytes[g], holding)
        rejection = first_rejection(view, footprint)
        if rejection is None:
            passing.setdefault(key[0], []).append(view.label)
        else:
            rejections.append(rejection)
    for host, members in sorted(passing.items()):
        rejections += too_few_gpus(host, members, problem.gpu_count[seat])
    return sorted(rejections, key=lambda item: problem.gpu_keys.index(_key(item.gpu)))


def _key(label: str) -> tuple[str, int]:
    host, index = label.rsplit(":", 1)
    return host, int(index)


def tally(problem: Problem, rejections: list[GpuRejection]) -> str:
    """``0/8 GPUs can take it: 1 keep-clear, 3 too small`` (the Kubernetes scheduler's wording)."""
    counts: Counter[str] = Counter(item.filter for item in rejections)
    parts = ", ".join(f"{counts[name]} {words}" for name, words in FILTER_WORDS.items() if counts[name])
    return f"{len(problem.gpu_keys) - len(rejections)}/{len(problem.gpu_keys)} GPUs can take it: {parts}"


def seats_that_never_fit(problem: Problem) -> list[SeatShortfall]:
    return [_alone_shortfall(problem, s) for s in range(len(problem.seat_names)) if not problem.candidates[s]]


def _alone_shortfall(problem: Problem, seat: int) -> SeatShortfall:
    name, footprint, count = problem.seat_names[seat], problem.footprint_bytes[seat], problem.gpu_count[seat]
    rejections = gpu_rejections(problem, seat, [0] * len(problem.gpu_keys))
    verdicts = tally(problem, rejections)
    reachable = [g for g in sorted(problem.allowed[seat]) if not problem.keep_clear[g]]
    if not reachable:
        return SeatShortfall(
            name=name, footprint_bytes=footprint, best_gpu=None, short_by_bytes=None, rejections=rejections,
            reason=f"every GPU it may use is keep-clear or excluded by its pin/avoid ({verdicts})",
        )
    best_set, best_usable = roomiest_set(problem, reachable, count, [0] * len(problem.gpu_keys))
    if best_set is None:
        return SeatShortfall(
            name=name, footprint_bytes=footprint, best_gpu=None, short_by_bytes=None, rejections=rejections,
            reason=f"needs {count} GPUs on one host and no host has {count} GPUs it may use ({verdicts})",
        )
    label = "+".join(gpu_label(problem.gpu_keys[g]) for g in best_set)
    tightest = min(best_set, key=lambda g: problem.usable_bytes(g))
    return SeatShortfall(
        name=name, footprint_bytes=footprint, best_gpu=label, short_by_bytes=footprint - best_usable, rejections=rejections,
        reason=(
            f"needs {human_bytes(footprint)} per GPU even alone; GPU {gpu_label(problem.gpu_keys[tightest])} offers "
            f"{human_bytes(best_usable)} ({human_bytes(problem.capacity_bytes[tightest])} less "
            f"{human_bytes(problem.headroom_bytes[tightest])} headroom) ({verdicts})"
        ),
    )


def roomiest_set(problem: Problem, gpus: list[int], count: int, load_bytes: list[int]) -> tuple[GpuSet | None, int]:
    """The GPU set (``count`` GPUs of one host among ``gpus``) whose tightest member has the most room left."""
    by_host: dict[str, list[int]] = {}
    for g in gpus:
        by_host.setdefault(problem.host_of(g), []).append(g)
    best: tuple[GpuSet | None, int] = (None, 0)
    for host in sorted(by_host):
        members = sorted(by_host[host], key=lambda g: (-(problem.usable_bytes(g) - load_bytes[g]), g))[:count]
        if len(members) < count:
            continue
        room = min(problem.usable_bytes(g) - load_bytes[g] for g in members)
        if best[0] is None or room > best[1]:
            best = (tuple(sorted(members)), room)
    return best


def alone_infeasibility(alone: list[SeatShortfall]) -> Infeasibility:
    names = ", ".join(item.name for item in alone)
    return Infeasibility(seats=alone, summary=f"{len(alone)} seat(s) fit on no allowed GPU even alone: {names}")


def together_infeasibility(problem: Problem, time_limit_s: float) -> Infeasibility:
    """Every seat fits alone but not all together: the total shortfall and the fewest seats to drop or shrink."""
    demand = sum(problem.demand_bytes(s) for s in range(len(problem.seat_names)))
    supply = sum(problem.usable_bytes(g) for g in problem.open_gpus)
    dropped, kept_assignment, minimal = cpsat.fewest_dropped(problem, time_limit_s=time_limit_s)
    holders: list[list[int]] = [[] for _ in problem.gpu_keys]
    for seat, gpu_set in enumerate(kept_assignment):
        for g in gpu_set:
            holders[g].append(seat)
    load_bytes = problem.loads(kept_assignment)
    shortfalls = [
        _shrink_to_fit(problem, seat, load_bytes, holders)
        for seat in sorted(dropped, key=lambda s: (-problem.demand_bytes(s), problem.seat_names[s]))
    ]
    if demand > supply:
        total = (
            f"they need {human_bytes(demand)} and the open GPUs offer {human_bytes(supply)} after headroom "
            f"(short by {human_bytes(demand - supply)})"
        )
    else:
        total = (
            f"they need {human_bytes(demand)} of the {human_bytes(supply)} the open GPUs offer after headroom, "
            "but pins, avoids, tensor-parallel groups or the way the sizes divide leave no arrangement that fits"
        )
    names = ", ".join(item.name for item in shortfalls)
    fewest = "the fewest seats" if minimal else "seats (not proven the fewest)"
    return Infeasibility(
        seats=shortfalls,
        summary=f"every seat fits alone but not all together: {total}; drop or shrink {fewest} to fit: {names}",
    )


def _shrink_to_fit(problem: Problem, seat: int, load_bytes: list[int], holders: list[list[int]]) -> SeatShortfall:
    """Where a dropped seat comes closest to fitting beside the kept ones, and by how much it must shrink there.

    The shrunk seat is then placed, so the shortfalls of several dropped seats add up to one layout that fits.
    """
    rejections = gpu_rejections(problem, seat, load_bytes, holders)
    reachable = sorted({g for gpu_set in problem.candidates[seat] for g in gpu_set})
    gpu_set, room = roomiest_set(problem, reachable, problem.gpu_count[seat], load_bytes)
    footprint = problem.footprint_bytes[seat]
    assert gpu_set is not None  # the seat fits alone, so some GPU set exists
    taken = max(0, min(footprint, room))
    for g in gpu_set:
        load_bytes[g] += taken
        holders[g].append(seat)
    label = "+".join(gpu_label(problem.gpu_keys[g]) for g in gpu_set)
    short = max(0, footprint - max(room, 0))
    return SeatShortfall(
        name=problem.seat_names[seat], footprint_bytes=footprint, best_gpu=label, short_by_bytes=short, rejections=rejections,
        reason=(
            f"fits alone, but beside the seats that stay GPU {label} has {human_bytes(max(room, 0))} left for it: "
            f"drop it or shrink it by {human_bytes(short)} ({tally(problem, rejections)})"
        ),
    )
