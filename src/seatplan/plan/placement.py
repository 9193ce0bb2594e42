"""Which seats go on which GPUs: the layout with the largest worst-case spare memory at plateau.

The objective is the smallest spare (capacity − Σ plateau footprints) over the GPUs that are not
keep-clear; every GPU must keep its headroom free; pins and avoids arrive here already resolved
into each seat's allowed GPU set; a tensor-parallel seat takes ``gpu_count`` distinct GPUs of one
host. Among layouts with the same worst-case spare the one with fewer moves from the current
layout wins, then the first in search order (seats largest first, GPUs by host and index).

Two exact methods: exhaustive branch and bound for host-sized problems (``placement_search``),
OR-Tools CP-SAT for fleets (``placement_cpsat``), started from a greedy layout improved by local
trades (``placement_local``). Both say whether the answer is proven optimal and give a proven
upper bound on the worst-case spare, so a fleet-sized answer that is not proven says how far from
optimal it can at most be.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, Field

from seatplan.plan import placement_search
from seatplan.plan.placement_search import GpuSet, Layout, Problem, Solved
from seatplan.units import human_bytes

Method = Literal["exhaustive", "cp-sat"]

# Problems up to this size try the exhaustive search first; it proves optimality in well under a
# second there. Larger ones, or ones whose search runs out of its share of time, go to CP-SAT.
EXHAUSTIVE_MAX_OPEN_GPUS = 8
EXHAUSTIVE_MAX_SEATS = 16
EXHAUSTIVE_TIME_SHARE = 0.25
LOCAL_SEARCH_SHARE = 0.3  # of a CP-SAT solve's time, for improving its starting layout first
BEST_TIME_SHARE = 0.7  # of the time limit for the best layout when runner-ups are asked for; they share the rest


class GpuSlot(BaseModel):
    """One GPU seatplan may place seats on."""

    host: str
    index: int = Field(ge=0)
    capacity_bytes: int = Field(ge=0, description="total memory − reserved: what seats may use")
    headroom_bytes: int = Field(0, ge=0, description="must stay free at plateau (policy)")
    keep_clear: bool = Field(False, description="nothing may be placed here")


class SeatDemand(BaseModel):
    name: str
    footprint_bytes: int = Field(ge=0, description="plateau footprint on EACH of its GPUs")
    gpu_count: int = Field(1, ge=1, description="tensor-parallel size: distinct GPUs of one host")
    allowed: list[tuple[str, int]] | None = Field(None, description="pins/avoids resolved to (host, index); None = any")
    current: list[tuple[str, int]] = Field(default_factory=list, description="where it runs now (fewer-moves tie-break)")


class Placement(BaseModel):
    assignment: dict[str, list[tuple[str, int]]]
    spare_bytes: dict[str, int] = Field(description='"host:index" → capacity − Σ footprints (keep-clear GPUs included)')
    worst_case_spare_bytes: int = Field(description="min spare over GPUs that are not keep-clear")
    moves: int = Field(description="seats that run now and would run on a different GPU set (new seats are not moves)")


class Alternative(BaseModel):
    placement: Placement
    why_lost: str


class SeatShortfall(BaseModel):
    name: str
    footprint_bytes: int
    best_gpu: str | None = Field(description='"host:index" of the allowed GPU (set) closest to fitting it')
    short_by_bytes: int | None = Field(description="how much smaller the seat must get to fit there; None when no GPU set can take it at any size")
    reason: str


class Infeasibility(BaseModel):
    seats: list[SeatShortfall]
    summary: str


class PlacementResult(BaseModel):
    best: Placement | None
    optimal: bool
    method: Method
    bound_bytes: int | None = Field(description="proven upper bound on the worst-case spare (== best's when optimal)")
    runner_ups: list[Alternative]
    infeasible: Infeasibility | None
    solve_seconds: float


def gpu_label(key: tuple[str, int]) -> str:
    return f"{key[0]}:{key[1]}"


def place(
    gpus: list[GpuSlot],
    seats: list[SeatDemand],
    *,
    runner_ups: int = 3,
    time_limit_s: float = 30.0,
    method: Literal["auto", "exhaustive", "cp-sat"] = "auto",
) -> PlacementResult:
    """The best layout, whether it is proven optimal, up to ``runner_ups`` next-best layouts, or why none fits.

    Runner-up *n* is the best layout that also splits up the seats sharing the bottleneck GPU of
    layout *n − 1* (the lowest-spare GPU holding two or more seats), so each shows what the plan
    would look like if the pairing that limits the one before it were avoided.
    """
    started = time.perf_counter()
    problem = placement_search.compile_problem(gpus, seats)
    chosen: Method = "cp-sat" if method == "cp-sat" or (method == "auto" and not _host_sized(problem)) else "exhaustive"

    alone = _seats_that_never_fit(problem)
    if alone:
        return _infeasible_result(problem, chosen, alone, started, proven_by_size=True)

    best_share = BEST_TIME_SHARE if runner_ups > 0 else 1.0
    solved, chosen = _solve(problem, chosen, fallback=method == "auto", until=started + time_limit_s * best_share)
    if solved.proven_infeasible:
        return _infeasible_result(problem, chosen, [], started, proven_by_size=False, time_limit_s=time_limit_s)
    if solved.layout is None:
        return PlacementResult(
            best=None, optimal=False, method=chosen, bound_bytes=solved.bound_bytes, runner_ups=[],
            infeasible=None, solve_seconds=time.perf_counter() - started,
        )
    best = to_placement(problem, solved.layout.assignment)
    alternatives = _runner_ups(problem, chosen, solved.layout, best, runner_ups, until=started + time_limit_s)
    return PlacementResult(
        best=best, optimal=solved.optimal, method=chosen, bound_bytes=solved.bound_bytes, runner_ups=alternatives,
        infeasible=None, solve_seconds=time.perf_counter() - started,
    )


def _solve(problem: Problem, method: Method, *, fallback: bool, until: float) -> tuple[Solved, Method]:
    """Solve with ``method``; with ``fallback`` an exhaustive search that runs out of its share of time hands over to CP-SAT."""
    start: tuple[GpuSet, ...] | None = None
    if method == "exhaustive":
        now = time.perf_counter()
        stop = now + (until - now) * EXHAUSTIVE_TIME_SHARE if fallback else until
        outcome = placement_search.search(problem, deadline=stop)
        layout = outcome.layout
        if outcome.complete:
            bound = None if layout is None else layout.worst_spare_bytes
            return Solved(layout=layout, optimal=True, bound_bytes=bound, proven_infeasible=layout is None), "exhaustive"
        if not fallback:
            bound = outcome.bound_bytes if outcome.bound_bytes is not None else placement_search.root_bound(problem)
            return Solved(layout=layout, optimal=False, bound_bytes=bound, proven_infeasible=False), "exhaustive"
        start = None if layout is None else layout.assignment
    from seatplan.plan import placement_cpsat
    from seatplan.plan.baselines import greedy
    from seatplan.plan.placement_local import improve

    # CP-SAT proves bounds well but balances a large fleet slowly: start it from a greedy layout
    # improved by local trades, and keep whichever is better.
    if start is None:
        start = greedy(problem, "most-free-first") or greedy(problem, "best-fit")
    if start is not None:
        now = time.perf_counter()
        start = improve(problem, start, deadline=now + (until - now) * LOCAL_SEARCH_SHARE)
    return placement_cpsat.solve(problem, time_limit_s=max(0.5, until - time.perf_counter()), start=start), "cp-sat"


def _runner_ups(problem: Problem, method: Method, best_layout: Layout, best: Placement, count: int, *, until: float) -> list[Alternative]:
    alternatives: list[Alternative] = []
    previous, constrained = best_layout, problem
    for position in range(count):
        group = placement_search.bottleneck_group(problem, previous.assignment)
        if group is None:
            break
        constrained = replace(constrained, apart=constrained.apart + (group,))
        share = (until - time.perf_counter()) / (count - position)
        solved, _ = _solve(constrained, method, fallback=False, until=time.perf_counter() + max(0.5, share))
        if solved.layout is None:
            break
        placement = to_placement(problem, solved.layout.assignment)
        names = [problem.seat_names[s] for s in group]
        alternatives.append(Alternative(placement=placement, why_lost=f"{_apart_words(names)}: {why_lost(problem, best, placement)}"))
        previous = solved.layout
    return alternatives


def _apart_words(names: list[str]) -> str:
    listed = _listing(names)
    return f"with {listed} not all on one GPU" if len(names) > 2 else f"with {listed} on different GPUs"


def _listing(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` (sorted)."""
    ordered = sorted(names)
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]


def _host_sized(problem: Problem) -> bool:
    return len(problem.open_gpus) <= EXHAUSTIVE_MAX_OPEN_GPUS and len(problem.seat_names) <= EXHAUSTIVE_MAX_SEATS


def to_placement(problem: Problem, assignment: tuple[GpuSet, ...] | list[GpuSet]) -> Placement:
    """The document for an assignment given in search order; spares recomputed in exact bytes."""
    load_bytes = problem.loads(assignment)
    by_name = {problem.seat_names[s]: [problem.gpu_keys[g] for g in gpu_set] for s, gpu_set in enumerate(assignment)}
    return Placement(
        assignment={name: by_name[name] for name in sorted(by_name)},
        spare_bytes={gpu_label(key): problem.capacity_bytes[g] - load_bytes[g] for g, key in enumerate(problem.gpu_keys)},
        worst_case_spare_bytes=problem.worst_spare(load_bytes),
        moves=problem.moves(assignment),
    )


def seats_on(placement: Placement, label: str) -> list[str]:
    return sorted(name for name, where in placement.assignment.items() if label in (gpu_label(key) for key in where))


def _worst_gpu(problem: Problem, placement: Placement) -> str:
    open_labels = [gpu_label(problem.gpu_keys[g]) for g in problem.open_gpus]
    return min(open_labels, key=lambda label: (placement.spare_bytes[label], open_labels.index(label)))


def why_lost(problem: Problem, best: Placement, alternative: Placement) -> str:
    """One line: what makes ``alternative`` worse than ``best``."""
    lower_bytes = best.worst_case_spare_bytes - alternative.worst_case_spare_bytes
    if lower_bytes > 0:
        label = _worst_gpu(problem, alternative)
        holds = _listing(seats_on(alternative, label)) if seats_on(alternative, label) else "nothing"
        return (
            f"worst-case spare {human_bytes(lower_bytes)} lower: GPU {label} would hold {holds}, "
            f"leaving {human_bytes(alternative.spare_bytes[label])}"
        )
    extra_moves = alternative.moves - best.moves
    if extra_moves > 0:
        return f"same worst-case spare, {extra_moves} more move{'s' if extra_moves > 1 else ''}"
    return "same worst-case spare and moves; the plan keeps the first such layout in search order (largest seats first, GPUs by host and index)"


# ---------------------------------------------------------------------------------------------
# Infeasible fleets


def _seats_that_never_fit(problem: Problem) -> list[SeatShortfall]:
    return [_alone_shortfall(problem, s) for s in range(len(problem.seat_names)) if not problem.candidates[s]]


def _alone_shortfall(problem: Problem, seat: int) -> SeatShortfall:
    name, footprint, count = problem.seat_names[seat], problem.footprint_bytes[seat], problem.gpu_count[seat]
    reachable = [g for g in sorted(problem.allowed[seat]) if not problem.keep_clear[g]]
    if not reachable:
        return SeatShortfall(
            name=name, footprint_bytes=footprint, best_gpu=None, short_by_bytes=None,
            reason="every GPU it may use is keep-clear or excluded by its pin/avoid",
        )
    best_set, best_usable = _roomiest_set(problem, reachable, count, [0] * len(problem.gpu_keys))
    if best_set is None:
        return SeatShortfall(
            name=name, footprint_bytes=footprint, best_gpu=None, short_by_bytes=None,
            reason=f"needs {count} GPUs on one host and no host has {count} GPUs it may use",
        )
    label = "+".join(gpu_label(problem.gpu_keys[g]) for g in best_set)
    tightest = min(best_set, key=lambda g: problem.usable_bytes(g))
    return SeatShortfall(
        name=name, footprint_bytes=footprint, best_gpu=label, short_by_bytes=footprint - best_usable,
        reason=(
            f"needs {human_bytes(footprint)} per GPU even alone; GPU {gpu_label(problem.gpu_keys[tightest])} offers "
            f"{human_bytes(best_usable)} ({human_bytes(problem.capacity_bytes[tightest])} less "
            f"{human_bytes(problem.headroom_bytes[tightest])} headroom)"
        ),
    )


def _roomiest_set(problem: Problem, gpus: list[int], count: int, load_bytes: list[int]) -> tuple[GpuSet | None, int]:
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


def _infeasible_result(
    problem: Problem, method: Method, alone: list[SeatShortfall], started: float, *, proven_by_size: bool, time_limit_s: float = 30.0
) -> PlacementResult:
    if proven_by_size:
        names = ", ".join(item.name for item in alone)
        infeasible = Infeasibility(seats=alone, summary=f"{len(alone)} seat(s) fit on no allowed GPU even alone: {names}")
    else:
        infeasible = _together_shortfall(problem, time_limit_s)
    return PlacementResult(
        best=None, optimal=True, method=method, bound_bytes=None, runner_ups=[], infeasible=infeasible,
        solve_seconds=time.perf_counter() - started,
    )


def _together_shortfall(problem: Problem, time_limit_s: float) -> Infeasibility:
    """Every seat fits alone but not all together: the total shortfall and the fewest seats to drop or shrink."""
    from seatplan.plan import placement_cpsat

    demand = sum(problem.demand_bytes(s) for s in range(len(problem.seat_names)))
    supply = sum(problem.usable_bytes(g) for g in problem.open_gpus)
    dropped, kept_assignment, minimal = placement_cpsat.fewest_dropped(problem, time_limit_s=time_limit_s)
    load_bytes = problem.loads(kept_assignment)
    shortfalls = []
    for seat in sorted(dropped, key=lambda s: (-problem.demand_bytes(s), problem.seat_names[s])):
        shortfall = _shrink_to_fit(problem, seat, load_bytes)
        shortfalls.append(shortfall)
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


def _shrink_to_fit(problem: Problem, seat: int, load_bytes: list[int]) -> SeatShortfall:
    """Where a dropped seat comes closest to fitting beside the kept ones, and by how much it must shrink there.

    The shrunk seat is then placed, so the shortfalls of several dropped seats add up to one layout that fits.
    """
    reachable = sorted({g for gpu_set in problem.candidates[seat] for g in gpu_set})
    gpu_set, room = _roomiest_set(problem, reachable, problem.gpu_count[seat], load_bytes)
    footprint = problem.footprint_bytes[seat]
    assert gpu_set is not None  # the seat fits alone, so some GPU set exists
    taken = max(0, min(footprint, room))
    for g in gpu_set:
        load_bytes[g] += taken
    label = "+".join(gpu_label(problem.gpu_keys[g]) for g in gpu_set)
    short = max(0, footprint - max(room, 0))
    return SeatShortfall(
        name=problem.seat_names[seat], footprint_bytes=footprint, best_gpu=label, short_by_bytes=short,
        reason=(
            f"fits alone, but beside the seats that stay GPU {label} has {human_bytes(max(room, 0))} left for it: "
            f"drop it or shrink it by {human_bytes(short)}"
        ),
    )
