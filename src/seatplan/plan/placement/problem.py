"""The placement problem: the documents in and out, and the index form every method works on.

Pure logic, no I/O. :func:`compile_problem` turns the pydantic inputs into a :class:`Problem`
(GPUs by host and index, seats largest first, each seat's fitting GPU sets worked out once), so the
exact search, CP-SAT, the local search and the greedy baselines all agree on what a seat may take;
:func:`to_placement` turns an assignment back into a document in exact bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from seatplan.errors import SeatplanError
from seatplan.plan.placement.filters import STATIC_FILTERS, GpuRejection, GpuSet, GpuView, first_rejection, gpu_sets

Method = Literal["exhaustive", "cp-sat"]


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
    moved: list[str] = Field(default_factory=list, description="those seats, by name")


class Alternative(BaseModel):
    placement: Placement
    why_lost: str


class SeatShortfall(BaseModel):
    name: str
    footprint_bytes: int
    best_gpu: str | None = Field(description='"host:index" of the allowed GPU (set) closest to fitting it')
    short_by_bytes: int | None = Field(description="how much smaller the seat must get to fit there; None when no GPU set can take it at any size")
    reason: str
    rejections: list[GpuRejection] = Field(default_factory=list, description="every GPU's own reason for not taking it")


class Infeasibility(BaseModel):
    seats: list[SeatShortfall]
    summary: str


class FrontierPoint(BaseModel):
    """The best layout found with at most ``max_moves`` moves from the current layout."""

    max_moves: int
    placement: Placement
    proven: bool = Field(description="no layout within the budget has a larger worst-case spare")


class PlacementResult(BaseModel):
    best: Placement | None
    optimal: bool
    method: Method
    bound_bytes: int | None = Field(description="proven upper bound on the worst-case spare (== best's when optimal)")
    runner_ups: list[Alternative]
    infeasible: Infeasibility | None
    solve_seconds: float
    frontier: list[FrontierPoint] = Field(default_factory=list, description="spare against moves; empty when nothing runs yet")
    chosen_because: str | None = Field(None, description="why best is a frontier point rather than the layout with the largest spare")


def gpu_label(key: tuple[str, int]) -> str:
    return f"{key[0]}:{key[1]}"


@dataclass(frozen=True)
class Problem:
    """GPUs sorted by (host, index); seats in search order (largest total demand first)."""

    gpu_keys: tuple[tuple[str, int], ...]
    capacity_bytes: tuple[int, ...]
    headroom_bytes: tuple[int, ...]
    keep_clear: tuple[bool, ...]
    seat_names: tuple[str, ...]
    footprint_bytes: tuple[int, ...]
    gpu_count: tuple[int, ...]
    allowed: tuple[frozenset[int], ...]
    # Each seat's GPU sets that fit it with nothing else on them, in (host, index) order.
    candidates: tuple[tuple[GpuSet, ...], ...]
    # Where each seat runs now; None for a seat that does not run yet (starting it is not a move).
    current: tuple[GpuSet | None, ...]
    # Groups of seats that may not all share one GPU (how runner-up layouts are made to differ).
    apart: tuple[tuple[int, ...], ...] = ()

    def keeps_apart(self, assignment: Iterable[GpuSet]) -> bool:
        """No apart group shares a GPU; ``assignment`` may cover only the first seats (groups not yet placed pass)."""
        sets = list(assignment)
        return all(
            max(group) >= len(sets) or not set.intersection(*(set(sets[s]) for s in group)) for group in self.apart
        )

    @property
    def open_gpus(self) -> tuple[int, ...]:
        return tuple(g for g, clear in enumerate(self.keep_clear) if not clear)

    def usable_bytes(self, gpu: int) -> int:
        return self.capacity_bytes[gpu] - self.headroom_bytes[gpu]

    def host_of(self, gpu: int) -> str:
        return self.gpu_keys[gpu][0]

    def demand_bytes(self, seat: int) -> int:
        return self.footprint_bytes[seat] * self.gpu_count[seat]

    def is_move(self, seat: int, gpu_set: GpuSet) -> bool:
        now = self.current[seat]
        return now is not None and now != gpu_set

    def loads(self, assignment: Iterable[GpuSet]) -> list[int]:
        load_bytes = [0] * len(self.gpu_keys)
        for seat, gpu_set in enumerate(assignment):
            for gpu in gpu_set:
                load_bytes[gpu] += self.footprint_bytes[seat]
        return load_bytes

    def worst_spare(self, load_bytes: list[int]) -> int:
        spares = [self.capacity_bytes[g] - load_bytes[g] for g in self.open_gpus]
        return min(spares) if spares else 0

    def moves(self, assignment: Iterable[GpuSet]) -> int:
        return sum(self.is_move(seat, gpu_set) for seat, gpu_set in enumerate(assignment))

    def fits(self, assignment: list[GpuSet]) -> bool:
        load_bytes = self.loads(assignment)
        return all(load_bytes[g] <= self.usable_bytes(g) for g in range(len(load_bytes)))

    def layout(self, assignment: tuple[GpuSet, ...]) -> Layout:
        return Layout((-self.worst_spare(self.loads(assignment)), self.moves(assignment)), assignment)


def compile_problem(gpus: list[GpuSlot], seats: list[SeatDemand]) -> Problem:
    ordered_gpus = sorted(gpus, key=lambda slot: (slot.host, slot.index))
    gpu_keys = tuple((slot.host, slot.index) for slot in ordered_gpus)
    if len(set(gpu_keys)) != len(gpu_keys):
        twice = sorted({f"{h}:{i}" for h, i in gpu_keys if gpu_keys.count((h, i)) > 1})
        raise SeatplanError(f"GPU {', '.join(twice)} is listed twice", where="hosts", fix="give each GPU of a host its own index")
    names = [seat.name for seat in seats]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise SeatplanError(f"seat {', '.join(twice)} is declared twice", where="seats", fix="give every seat its own name")
    position = {key: g for g, key in enumerate(gpu_keys)}
    ordered_seats = sorted(seats, key=lambda s: (-s.footprint_bytes * s.gpu_count, -s.gpu_count, s.name))
    capacity = tuple(slot.capacity_bytes for slot in ordered_gpus)
    headroom = tuple(slot.headroom_bytes for slot in ordered_gpus)
    keep_clear = tuple(slot.keep_clear for slot in ordered_gpus)

    allowed_sets = []
    for seat in ordered_seats:
        if seat.allowed is None:
            allowed_sets.append(frozenset(range(len(gpu_keys))))
            continue
        unknown = [f"{h}:{i}" for h, i in seat.allowed if (h, i) not in position]
        if unknown:
            raise SeatplanError(
                f"seat {seat.name} may use GPU {', '.join(unknown)}, which the fleet does not have",
                where=f"seats.{seat.name}",
                fix="pin or avoid only GPUs declared under hosts",
            )
        allowed_sets.append(frozenset(position[(h, i)] for h, i in seat.allowed))

    def current_set(seat: SeatDemand) -> GpuSet | None:
        if not seat.current:
            return None
        # A GPU that left the fleet maps to -1: no candidate equals it, so the seat counts as moved.
        return tuple(sorted(position.get((h, i), -1) for h, i in seat.current))

    # Seats whose filters pass the same GPUs share one tuple of GPU sets (a 256-GPU fleet's 750 seats need a few dozen).
    shared: dict[tuple[int, frozenset[int]], tuple[GpuSet, ...]] = {}
    candidates = []
    for seat, allowed in zip(ordered_seats, allowed_sets):
        passing = _passing(gpu_keys, keep_clear, capacity, headroom, allowed, seat.footprint_bytes)
        key = (seat.gpu_count, frozenset(g for gpus in passing.values() for g in gpus))
        if key not in shared:
            shared[key] = gpu_sets(passing, seat.gpu_count)
        candidates.append(shared[key])
    return Problem(
        gpu_keys=gpu_keys,
        capacity_bytes=capacity,
        headroom_bytes=headroom,
        keep_clear=keep_clear,
        seat_names=tuple(seat.name for seat in ordered_seats),
        footprint_bytes=tuple(seat.footprint_bytes for seat in ordered_seats),
        gpu_count=tuple(seat.gpu_count for seat in ordered_seats),
        allowed=tuple(allowed_sets),
        candidates=tuple(candidates),
        current=tuple(current_set(seat) for seat in ordered_seats),
    )


def _passing(gpu_keys: tuple[tuple[str, int], ...], keep_clear: tuple[bool, ...], capacity: tuple[int, ...],
             headroom: tuple[int, ...], allowed: frozenset[int], footprint_bytes: int) -> dict[str, list[int]]:
    """The GPUs every static filter passes for the seat, by host. A filter's verdict depends on what it sees of a GPU,
    not on which GPU it is, so GPUs that look alike to the seat are judged once."""
    by_host: dict[str, list[int]] = {}
    verdicts: dict[tuple[bool, bool, int, int], bool] = {}
    for g, key in enumerate(gpu_keys):
        seen = (keep_clear[g], g in allowed, capacity[g], headroom[g])
        if seen not in verdicts:
            verdicts[seen] = first_rejection(GpuView(gpu_label(key), *seen), footprint_bytes, STATIC_FILTERS) is None
        if verdicts[seen]:
            by_host.setdefault(key[0], []).append(g)
    return by_host


@dataclass(order=True)
class Layout:
    """One complete assignment; orders best first (higher worst-case spare, then fewer moves)."""

    cost: tuple[int, int]  # (-worst_spare_bytes, moves): smaller is better, as every method compares layouts
    assignment: tuple[GpuSet, ...] = field(compare=False)

    @property
    def worst_spare_bytes(self) -> int:
        return -self.cost[0]

    @property
    def moves(self) -> int:
        return self.cost[1]


@dataclass
class Solved:
    """What either method answers for one problem."""

    layout: Layout | None
    optimal: bool  # worst-case spare, then moves, proven optimal (or proven infeasible when layout is None)
    bound_bytes: int | None  # proven upper bound on the worst-case spare
    proven_infeasible: bool


def bottleneck_group(problem: Problem, assignment: tuple[GpuSet, ...]) -> tuple[int, ...] | None:
    """The seats on the lowest-spare open GPU that holds two or more seats (what a runner-up must split up)."""
    load_bytes = problem.loads(assignment)
    for g in sorted(problem.open_gpus, key=lambda g: (problem.capacity_bytes[g] - load_bytes[g], g)):
        seats = tuple(s for s, gpu_set in enumerate(assignment) if g in gpu_set)
        if len(seats) >= 2:
            return seats
    return None


def to_placement(problem: Problem, assignment: tuple[GpuSet, ...] | list[GpuSet]) -> Placement:
    """The document for an assignment given in search order; spares recomputed in exact bytes."""
    load_bytes = problem.loads(assignment)
    by_name = {problem.seat_names[s]: [problem.gpu_keys[g] for g in gpu_set] for s, gpu_set in enumerate(assignment)}
    return Placement(
        assignment={name: by_name[name] for name in sorted(by_name)},
        spare_bytes={gpu_label(key): problem.capacity_bytes[g] - load_bytes[g] for g, key in enumerate(problem.gpu_keys)},
        worst_case_spare_bytes=problem.worst_spare(load_bytes),
        moves=problem.moves(assignment),
        moved=sorted(problem.seat_names[s] for s, gpu_set in enumerate(assignment) if problem.is_move(s, gpu_set)),
    )


def seats_on(placement: Placement, label: str) -> list[str]:
    return sorted(name for name, where in placement.assignment.items() if label in (gpu_label(key) for key in where))
