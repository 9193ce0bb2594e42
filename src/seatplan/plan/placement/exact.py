"""The exhaustive branch-and-bound search: proven optimal layouts for host-sized problems.

Pure logic, no I/O; works on the :class:`~seatplan.plan.placement.problem.Problem` every method shares.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from seatplan.plan.placement.problem import GpuSet, Layout, Problem


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
    max_moves: int | None = None,
) -> SearchOutcome:
    """Branch and bound over every seat's GPU sets for the best layout; ties go to the first found.

    ``floor_bytes``: a layout with this worst-case spare is known to exist, so branches that cannot
    reach it are cut from the start. ``ceiling_bytes``: no layout's worst-case spare is above this
    (proven by the caller), so a branch that can at best tie on it is judged on moves alone.

    Seats go largest first. Two symmetry rules cut the tree without losing the optimum:
    a seat tries only one GPU (set) among GPUs in the same state (same host, capacity, headroom,
    the same standing with every seat still to place, the same load so far and the same seats of
    apart groups on them), and a seat identical to the one before it never takes an earlier GPU
    set than that one did. A branch is cut when :class:`_Bound` shows it cannot beat the best so far,
    or when, with ``max_moves``, the seats still to place that must move would take it over budget.
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

    no_layout_cost = (_NO_FLOOR, 0) if floor_bytes is None else (-floor_bytes, seat_count + 1)
    spare = list(problem.capacity_bytes)
    tags: list[tuple[int, ...]] = [() for _ in problem.gpu_keys]  # grouped seats on each GPU
    chosen: list[int] = [0] * seat_count
    best: Layout | None = None
    nodes = 0

    def record() -> None:
        nonlocal best
        layout = problem.layout(tuple(candidates[s][chosen[s]] for s in range(seat_count)))
        if best is None or layout.cost < best.cost:
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
            within_budget = max_moves is None or step_moves + bound.surely_moving[seat + 1] <= max_moves
            if within_budget and bound.may_beat(seat + 1, spare, step_moves, no_layout_cost if best is None else best.cost):
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


_NO_FLOOR = 1 << 80  # a cost every feasible layout beats


def _closing_groups(problem: Problem) -> list[list[tuple[int, ...]]]:
    """For each seat, the other members of every apart group it is the last (in search order) to be placed of."""
    closing: list[list[tuple[int, ...]]] = [[] for _ in problem.seat_names]
    for group in problem.apart:
        last = max(group)
        closing[last].append(tuple(s for s in group if s != last))
    return closing


class _Bound:
    """Whether a partial layout (seats before ``depth`` placed) can still beat a cost.

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

    def may_beat(self, depth: int, spare: list[int], moves_so_far: int, cost: tuple[int, int]) -> bool:
        """Whether some completion can cost less than ``cost`` (or, on a floor cost, reach it)."""
        need = -cost[0]  # the worst-case spare a completion must at least tie
        open_spares = [spare[g] for g in self.open]
        if not open_spares:
            return self.fewest_moves(depth, spare, moves_so_far, need) < cost[1] if need <= 0 else False
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
            bound = min(bound, kept)
        if bound > need:
            return True
        return self.fewest_moves(depth, spare, moves_so_far, need) < cost[1]

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
