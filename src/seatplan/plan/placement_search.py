"""The placement problem in index form, and the exhaustive branch-and-bound search over it.

Pure logic, no I/O. :mod:`seatplan.plan.placement` turns the pydantic inputs into a
:class:`Problem` and the search's answers back into documents; the CP-SAT path and the greedy
baselines work on the same :class:`Problem`, so all three agree on what a seat may take.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import TYPE_CHECKING

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
    """Seats that are interchangeable (same footprint, TP size, allowed GPUs and current GPUs, in no apart group) share a kind."""
    grouped = {s for group in problem.apart for s in group}
    kinds: dict[tuple, int] = {}
    return [
        kinds.setdefault(
            (problem.footprint_bytes[s], problem.gpu_count[s], problem.allowed[s], problem.current[s], s if s in grouped else None),
            len(kinds),
        )
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

    @property
    def worst_spare_bytes(self) -> int:
        return -self.rank[0]

    @property
    def moves(self) -> int:
        return self.rank[1]


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


@dataclass
class SearchOutcome:
    layout: Layout | None  # the best layout found; None when none fits (proven so when complete)
    complete: bool  # the whole tree was searched or cut: the layout is proven optimal
    nodes: int
    bound_bytes: int | None = None  # proven upper bound on the worst-case spare, when known


class _OutOfTime(Exception):
    pass


def search(problem: Problem, *, deadline: float | None = None) -> SearchOutcome:
    """The best layout by (worst-case spare, moves), proven optimal when ``complete``.

    The current layout tells GPUs apart and so defeats most symmetry cuts. Searching first as if
    nothing ran anywhere is fast and proves the best worst-case spare; the second, move-aware
    search then only looks at layouts that reach exactly that spare, ranked on moves.
    """
    if all(now is None for now in problem.current):
        return exhaustive(problem, deadline=deadline)
    fresh = replace(problem, current=tuple(None for _ in problem.current))
    first = exhaustive(fresh, deadline=deadline)
    if not first.complete or first.layout is None:
        found = None if first.layout is None else problem.layout(first.layout.assignment)
        return SearchOutcome(layout=found, complete=first.complete, nodes=first.nodes)
    optimum = first.layout.worst_spare_bytes
    second = exhaustive(problem, deadline=deadline, floor_bytes=optimum, ceiling_bytes=optimum)
    # Cut short, the second search may not have reached the optimum yet; the first one's layout has it.
    candidates = [layout for layout in (second.layout, problem.layout(first.layout.assignment)) if layout is not None]
    return SearchOutcome(layout=min(candidates), complete=second.complete, nodes=first.nodes + second.nodes, bound_bytes=optimum)


def exhaustive(
    problem: Problem,
    *,
    deadline: float | None = None,
    floor_bytes: int | None = None,
    ceiling_bytes: int | None = None,
) -> SearchOutcome:
    """Branch and bound over every seat's GPU sets for the best layout; ties go to the first found.

    ``floor_bytes``: a layout with this worst-case spare is known to exist, so branches that cannot
    reach it are cut from the start. ``ceiling_bytes``: no layout's worst-case spare is above this
    (proven by the caller), so a branch that can at best tie on it is judged on moves alone.

    Seats go largest first. Two symmetry rules cut the tree without losing the optimum:
    a seat tries only one GPU (set) among GPUs in the same state (same host, capacity, headroom,
    the same standing with every seat still to place, the same load so far and the same seats of
    apart groups on them), and a seat identical to the one before it never takes an earlier GPU
    set than that one did. A branch is cut when :class:`_Bound` shows it cannot beat the best so far.
    """
    seat_count = len(problem.seat_names)
    footprint = problem.footprint_bytes
    headroom = problem.headroom_bytes
    candidates = problem.candidates
    moving = [[problem.is_move(s, gpu_set) for gpu_set in options] for s, options in enumerate(candidates)]
    classes = _gpu_classes(problem)
    same_as_previous = _identical_to_previous(problem)
    closing = _closing_groups(problem)
    grouped = {s for group in problem.apart for s in group}
    bound = _Bound(problem, ceiling_bytes)

    no_layout_rank = (_NO_FLOOR, 0) if floor_bytes is None else (-floor_bytes, seat_count + 1)
    spare = list(problem.capacity_bytes)
    tags: list[tuple[int, ...]] = [() for _ in problem.gpu_keys]  # grouped seats on each GPU
    chosen: list[int] = [0] * seat_count
    best: Layout | None = None
    nodes = 0

    def record() -> None:
        nonlocal best
        layout = problem.layout(tuple(candidates[s][chosen[s]] for s in range(seat_count)))
        if best is None or layout.rank < best.rank:
            best = layout

    def breaks_apart_rule(seat: int, gpu_set: GpuSet) -> bool:
        return any(all(seat_ in tags[g] for seat_ in others) for others in closing[seat] for g in gpu_set)

    def visit(seat: int, moves: int) -> None:
        nonlocal nodes
        nodes += 1
        if deadline is not None and nodes % 1024 == 1 and time.perf_counter() > deadline:
            raise _OutOfTime
        if seat == seat_count:
            record()
            return
        size = footprint[seat]
        options = candidates[seat]
        state = classes[seat]
        seen: set = set()
        children: list[tuple[bool, int, int]] = []
        for option in range(chosen[seat - 1] if same_as_previous[seat] else 0, len(options)):
            gpu_set = options[option]
            if len(gpu_set) == 1:
                g = gpu_set[0]
                if spare[g] - size < headroom[g]:
                    continue
                signature: tuple = (state[g], spare[g], tags[g])
                roomiest = spare[g]
            else:
                if any(spare[g] - size < headroom[g] for g in gpu_set):
                    continue
                signature = tuple(sorted((state[g], spare[g], tags[g]) for g in gpu_set))
                roomiest = min(spare[g] for g in gpu_set)
            if signature in seen or (closing[seat] and breaks_apart_rule(seat, gpu_set)):
                continue
            seen.add(signature)
            # Staying put first, then most free first: good layouts turn up early, so the bound cuts more.
            children.append((moving[seat][option], -roomiest, option))
        children.sort()
        tagged = seat in grouped
        for _, _, option in children:
            gpu_set = options[option]
            for g in gpu_set:
                spare[g] -= size
                if tagged:
                    tags[g] = tags[g] + (seat,)
            step_moves = moves + moving[seat][option]
            if bound.may_beat(seat + 1, spare, step_moves, no_layout_rank if best is None else best.rank):
                chosen[seat] = option
                visit(seat + 1, step_moves)
            for g in gpu_set:
                spare[g] += size
                if tagged:
                    tags[g] = tags[g][:-1]

    complete = True
    try:
        visit(0, 0)
    except _OutOfTime:
        complete = False
    proven = best.worst_spare_bytes if complete and best is not None else None
    return SearchOutcome(layout=best, complete=complete, nodes=nodes, bound_bytes=proven)


_NO_FLOOR = 1 << 80  # a rank every feasible layout beats


def _closing_groups(problem: Problem) -> list[list[tuple[int, ...]]]:
    """For each seat, the other members of every apart group it is the last (in search order) to be placed of."""
    closing: list[list[tuple[int, ...]]] = [[] for _ in problem.seat_names]
    for group in problem.apart:
        last = max(group)
        closing[last].append(tuple(s for s in group if s != last))
    return closing


class _Bound:
    """Whether a partial layout (seats before ``depth`` placed) can still beat a rank.

    Upper bounds on the final worst-case spare: the water level (see :func:`water_level_bound`),
    and, for each seat still to place, the most spare any GPU set it fits on keeps after taking it
    (only the largest seat of each kind of GPU choice matters: a smaller one leaves more).
    A lower bound on the moves: seats whose current GPUs can no longer take them must move.
    """

    def __init__(self, problem: Problem, ceiling_bytes: int | None = None) -> None:
        seat_count = len(problem.seat_names)
        self.problem = problem
        self.ceiling_bytes = ceiling_bytes
        self.open = problem.open_gpus
        self.headroom = problem.headroom_bytes
        self.remaining_demand = [0] * (seat_count + 1)
        for seat in range(seat_count - 1, -1, -1):
            self.remaining_demand[seat] = self.remaining_demand[seat + 1] + problem.demand_bytes(seat)
        # Seats go largest first, so the first seat of each GPU choice at or after a depth is its largest.
        self.lookahead: list[list[tuple[int, tuple[int, ...] | None, tuple[GpuSet, ...]]]] = []
        for depth in range(seat_count + 1):
            firsts: dict[tuple[GpuSet, ...], int] = {}
            for seat in range(depth, seat_count):
                firsts.setdefault(problem.candidates[seat], problem.footprint_bytes[seat])
            self.lookahead.append(
                [
                    (size, tuple(gpu_set[0] for gpu_set in options) if all(len(gs) == 1 for gs in options) else None, options)
                    for options, size in firsts.items()
                ]
            )
        # Seats still to place that could stay where they run: single-GPU ones grouped by GPU (largest
        # first), tensor-parallel ones with their GPU sets.
        self.staying_by_gpu: list[list[tuple[int, list[int]]]] = []
        self.staying_sets: list[list[tuple[int, GpuSet]]] = []
        for depth in range(seat_count + 1):
            by_gpu: dict[int, list[int]] = {}
            sets = []
            for seat in range(depth, seat_count):
                now = problem.current[seat]
                if now is None or now not in problem.candidates[seat]:
                    continue
                if len(now) == 1:
                    by_gpu.setdefault(now[0], []).append(problem.footprint_bytes[seat])
                else:
                    sets.append((problem.footprint_bytes[seat], now))
            self.staying_by_gpu.append([(g, sorted(sizes, reverse=True)) for g, sizes in sorted(by_gpu.items())])
            self.staying_sets.append(sets)
        self.surely_moving = [
            sum(1 for seat in range(depth, seat_count) if problem.current[seat] is not None and problem.current[seat] not in problem.candidates[seat])
            for depth in range(seat_count + 1)
        ]

    def may_beat(self, depth: int, spare: list[int], moves_so_far: int, rank: tuple[int, int]) -> bool:
        """Whether some completion can rank better than ``rank`` (or, on a floor rank, reach it)."""
        need = -rank[0]  # the worst-case spare a completion must at least tie
        open_spares = [spare[g] for g in self.open]
        if not open_spares:
            return self.fewest_moves(depth, spare, moves_so_far, need) < rank[1] if need <= 0 else False
        bound = min(min(open_spares), (sum(open_spares) - self.remaining_demand[depth]) // len(open_spares))
        if self.ceiling_bytes is not None and self.ceiling_bytes < bound:
            bound = self.ceiling_bytes
        if bound < need:
            return False
        headroom = self.headroom
        for size, single_gpus, gpu_sets in self.lookahead[depth]:
            kept = need - 1
            if single_gpus is not None:
                for g in single_gpus:
                    left = spare[g] - size
                    if left > kept and left >= headroom[g]:
                        kept = left
            else:
                for gpu_set in gpu_sets:
                    left = min(spare[g] - size for g in gpu_set)
                    if left > kept and all(spare[g] - size >= headroom[g] for g in gpu_set):
                        kept = left
            if kept < need:
                return False
            if kept < bound:
                bound = kept
        if bound > need:
            return True
        return self.fewest_moves(depth, spare, moves_so_far, need) < rank[1]

    def fewest_moves(self, depth: int, spare: list[int], moves_so_far: int, need_bytes: int) -> int:
        """Moves so far plus the seats still to place that cannot all stay where they run.

        A completion worth having leaves every open GPU at least ``need_bytes`` spare (and its
        headroom), so the single-GPU seats that would stay on a GPU must fit in what is left above
        that; the fewest that must leave are the largest ones. Tensor-parallel seats are counted only
        when they alone no longer fit, so no seat is counted twice.
        """
        headroom, keep_clear = self.headroom, self.problem.keep_clear
        forced = self.surely_moving[depth]
        for g, sizes in self.staying_by_gpu[depth]:
            budget = spare[g] - (headroom[g] if keep_clear[g] else max(headroom[g], need_bytes))
            total = sum(sizes)
            for size in sizes:
                if total <= budget:
                    break
                total -= size
                forced += 1
        for size, gpu_set in self.staying_sets[depth]:
            if any(spare[g] - size < headroom[g] for g in gpu_set):
                forced += 1
        return moves_so_far + forced


def _gpu_classes(problem: Problem) -> list[list[int]]:
    """For each search depth, a class id per GPU: GPUs with equal ids are interchangeable for the seats still to place."""
    seat_count = len(problem.seat_names)
    per_depth: list[list[int]] = []
    for depth in range(seat_count + 1):
        ids: dict[tuple, int] = {}
        row = []
        for g, (host, _index) in enumerate(problem.gpu_keys):
            standing = tuple(
                (g in problem.allowed[s], g in (problem.current[s] or ()))
                for s in range(depth, seat_count)
            )
            signature = (host, problem.capacity_bytes[g], problem.headroom_bytes[g], problem.keep_clear[g], standing)
            row.append(ids.setdefault(signature, len(ids)))
        per_depth.append(row)
    return per_depth


def _identical_to_previous(problem: Problem) -> list[bool]:
    kinds = _seat_kinds(problem)
    return [seat > 0 and kinds[seat] == kinds[seat - 1] for seat in range(len(kinds))]
