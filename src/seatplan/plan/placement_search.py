"""The placement problem in index form, and the exhaustive branch-and-bound search over it.

Pure logic, no I/O. :mod:`seatplan.plan.placement` turns the pydantic inputs into a
:class:`Problem` and the search's answers back into documents; the CP-SAT path and the greedy
baselines work on the same :class:`Problem`, so all three agree on what a seat may take.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from seatplan.plan.placement import GpuSlot, SeatDemand

GpuSet = tuple[int, ...]


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

    def split_key(self, assignment: list[GpuSet]) -> tuple:
        """What a layout is, ignoring which of several identical GPUs or identical seats got which part."""
        seat_kind = _seat_kinds(self)
        groups: list[list[int]] = [[] for _ in self.gpu_keys]
        for seat, gpu_set in enumerate(assignment):
            for gpu in gpu_set:
                groups[gpu].append(seat_kind[seat])
        return tuple(
            sorted(
                (self.capacity_bytes[g], self.headroom_bytes[g], self.keep_clear[g], tuple(sorted(groups[g])))
                for g in range(len(groups))
            )
        )


def compile_problem(gpus: list[GpuSlot], seats: list[SeatDemand]) -> Problem:
    from seatplan.errors import SeatplanError

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

    usable = [c - h for c, h in zip(capacity, headroom)]
    candidates = tuple(
        _gpu_sets(gpu_keys, keep_clear, usable, allowed, seat.footprint_bytes, seat.gpu_count)
        for seat, allowed in zip(ordered_seats, allowed_sets)
    )
    return Problem(
        gpu_keys=gpu_keys,
        capacity_bytes=capacity,
        headroom_bytes=headroom,
        keep_clear=keep_clear,
        seat_names=tuple(seat.name for seat in ordered_seats),
        footprint_bytes=tuple(seat.footprint_bytes for seat in ordered_seats),
        gpu_count=tuple(seat.gpu_count for seat in ordered_seats),
        allowed=tuple(allowed_sets),
        candidates=candidates,
        current=tuple(current_set(seat) for seat in ordered_seats),
    )


def _gpu_sets(gpu_keys, keep_clear, usable, allowed, footprint_bytes: int, gpu_count: int) -> tuple[GpuSet, ...]:
    fitting = [g for g in sorted(allowed) if not keep_clear[g] and footprint_bytes <= usable[g]]
    by_host: dict[str, list[int]] = {}
    for g in fitting:
        by_host.setdefault(gpu_keys[g][0], []).append(g)
    sets: list[GpuSet] = []
    for host in sorted(by_host):
        sets.extend(combinations(by_host[host], gpu_count))
    return tuple(sorted(sets))


def _seat_kinds(problem: Problem) -> list[int]:
    """Seats that are interchangeable (same footprint, TP size, allowed GPUs and current GPUs) share a kind."""
    kinds: dict[tuple, int] = {}
    return [
        kinds.setdefault((problem.footprint_bytes[s], problem.gpu_count[s], problem.allowed[s], problem.current[s]), len(kinds))
        for s in range(len(problem.seat_names))
    ]


def water_level_bound(problem: Problem, load_bytes: list[int], remaining_demand_bytes: int) -> int:
    """No layout's worst-case spare can beat this: spares only shrink, and the rest of the demand must land somewhere.

    With the remaining demand poured like water over the open GPUs, the lowest spare is at most the
    current lowest spare and at most the average spare once everything is poured.
    """
    spares = [problem.capacity_bytes[g] - load_bytes[g] for g in problem.open_gpus]
    if not spares:
        return 0
    return min(min(spares), (sum(spares) - remaining_demand_bytes) // len(spares))


def root_bound(problem: Problem) -> int:
    """The water-level bound before anything is placed: a proven upper bound on any layout's worst-case spare."""
    demand = sum(problem.demand_bytes(s) for s in range(len(problem.seat_names)))
    return water_level_bound(problem, [0] * len(problem.gpu_keys), demand)


@dataclass(order=True)
class Layout:
    """One complete assignment; orders best first (higher worst-case spare, then fewer moves)."""

    rank: tuple[int, int]  # (-worst_spare_bytes, moves)
    assignment: tuple[GpuSet, ...] = field(compare=False)
    key: tuple = field(compare=False, repr=False)

    @property
    def worst_spare_bytes(self) -> int:
        return -self.rank[0]

    @property
    def moves(self) -> int:
        return self.rank[1]


@dataclass
class SearchOutcome:
    layouts: list[Layout]  # best first, distinct splits
    complete: bool  # the whole tree was searched (or pruned): layouts[0] is proven optimal
    nodes: int


class _OutOfTime(Exception):
    pass


def exhaustive(problem: Problem, *, keep: int = 1, deadline: float | None = None) -> SearchOutcome:
    """Branch and bound over every seat's GPU sets, keeping the ``keep`` best distinct layouts.

    Seats go largest first. Two symmetry rules cut the tree without losing any optimum:
    a seat tries only one GPU (set) among GPUs in the same state (same host, capacity, headroom,
    the same standing with every seat still to place, and the same load so far), and a seat
    identical to the one before it never takes an earlier GPU set than that one did.
    A branch is cut when the water-level bound shows it cannot beat the ``keep``-th best layout.
    """
    seat_count = len(problem.seat_names)
    gpu_count = len(problem.gpu_keys)
    footprint = problem.footprint_bytes
    usable = [problem.usable_bytes(g) for g in range(gpu_count)]
    candidates = problem.candidates
    classes = _gpu_classes(problem)
    same_as_previous = _identical_to_previous(problem)
    remaining_demand = [0] * (seat_count + 1)
    for seat in range(seat_count - 1, -1, -1):
        remaining_demand[seat] = remaining_demand[seat + 1] + problem.demand_bytes(seat)

    load = [0] * gpu_count
    chosen: list[int] = [0] * seat_count
    best: list[Layout] = []
    by_key: dict[tuple, Layout] = {}
    nodes = 0

    def threshold() -> tuple[int, int] | None:
        return best[-1].rank if len(best) >= keep else None

    def record() -> None:
        assignment = tuple(candidates[s][chosen[s]] for s in range(seat_count))
        layout = Layout((-problem.worst_spare(load), problem.moves(assignment)), assignment, problem.split_key(list(assignment)))
        known = by_key.get(layout.key)
        if known is not None:
            if layout.rank >= known.rank:
                return
            # Layouts compare by rank only; remove this very one, not another of equal rank.
            del best[next(i for i, other in enumerate(best) if other is known)]
        elif len(best) >= keep and layout.rank >= best[-1].rank:
            return
        by_key[layout.key] = layout
        best.append(layout)
        best.sort()
        if len(best) > keep:
            del by_key[best.pop().key]

    def visit(seat: int, moves: int) -> None:
        nonlocal nodes
        nodes += 1
        if deadline is not None and nodes % 2048 == 0 and time.perf_counter() > deadline:
            raise _OutOfTime
        if seat == seat_count:
            record()
            return
        size = footprint[seat]
        options = candidates[seat]
        first = chosen[seat - 1] if same_as_previous[seat] else 0
        seen: set = set()
        children: list[tuple[int, int]] = []
        state = classes[seat]
        for option in range(first, len(options)):
            gpu_set = options[option]
            if any(load[g] + size > usable[g] for g in gpu_set):
                continue
            signature = tuple(sorted((state[g], load[g]) for g in gpu_set))
            if signature in seen:
                continue
            seen.add(signature)
            # Most free first: good layouts turn up early, so the bound cuts more.
            children.append((-min(problem.capacity_bytes[g] - load[g] for g in gpu_set), option))
        children.sort()
        for _, option in children:
            gpu_set = options[option]
            for g in gpu_set:
                load[g] += size
            step_moves = moves + problem.is_move(seat, gpu_set)
            limit = threshold()
            if limit is None or _may_beat(water_level_bound(problem, load, remaining_demand[seat + 1]), step_moves, limit):
                chosen[seat] = option
                visit(seat + 1, step_moves)
            for g in gpu_set:
                load[g] -= size

    complete = True
    try:
        visit(0, 0)
    except _OutOfTime:
        complete = False
    return SearchOutcome(layouts=best, complete=complete, nodes=nodes)


def _may_beat(bound_bytes: int, moves_so_far: int, limit: tuple[int, int]) -> bool:
    return (-bound_bytes, moves_so_far) < limit


def _gpu_classes(problem: Problem) -> list[list[int]]:
    """For each search depth, a class id per GPU: GPUs with equal ids are interchangeable for the seats still to place."""
    seat_count = len(problem.seat_names)
    per_depth: list[list[int]] = []
    for depth in range(seat_count + 1):
        ids: dict[tuple, int] = {}
        row = []
        for g, (host, _index) in enumerate(problem.gpu_keys):
            standing = tuple(
                (g in problem.allowed[s], problem.current[s] is not None and g in problem.current[s])
                for s in range(depth, seat_count)
            )
            signature = (host, problem.capacity_bytes[g], problem.headroom_bytes[g], problem.keep_clear[g], standing)
            row.append(ids.setdefault(signature, len(ids)))
        per_depth.append(row)
    return per_depth


def _identical_to_previous(problem: Problem) -> list[bool]:
    kinds = _seat_kinds(problem)
    return [seat > 0 and kinds[seat] == kinds[seat - 1] for seat in range(len(kinds))]
