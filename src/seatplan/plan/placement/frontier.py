"""Spare against moves: the best worst-case spare with at most 0, 1, 2, 4, 8 … moves from the current layout.

Every move is a cold start and an outage of that seat, so an operator wants to see what each budget
of moves buys before restarting anything. A point's layout is the best found within its budget:
host-sized problems get the exhaustive search with the budget as a cut (proven when it finishes);
fleets get the budgeted local search (proven only where it reaches the bound), each point starting
from the better of the point before and the layout met at that budget while walking seats home
from the best layout. Seats whose current GPUs can no longer take them must move, so the frontier
starts at that many moves. Then a budget (``--max-moves``) or a price per move
(``move_cost_bytes``: the layout maximising worst-case spare − price × moves, so every move beyond
a fewer-move point buys at least the price on average) picks the plan's layout from it.
"""

from __future__ import annotations

import time

from seatplan.plan.placement import exact, local
from seatplan.plan.placement.problem import Alternative, FrontierPoint, GpuSet, Layout, Problem, Solved, to_placement
from seatplan.units import human_bytes

HOMEWARD_SHARE = 0.3  # of the frontier's time on a fleet, for walking home from the best layout


def budgets(forced_moves: int, best_moves: int, extra: list[int]) -> list[int]:
    """0, 1, 2, 4, 8 … below the best layout's moves, starting at the moves no layout avoids, plus ``extra``."""
    steps = {0} | {1 << power for power in range(best_moves.bit_length() + 1)} | set(extra)
    return sorted({max(step, forced_moves) for step in steps if step < best_moves})


def forced_moves(problem: Problem) -> int:
    """Seats that run on GPUs that can no longer take them (gone, too small now, or outside their pin)."""
    return sum(1 for seat, now in enumerate(problem.current) if now is not None and now not in problem.candidates[seat])


def frontier(problem: Problem, best: Solved, *, host_sized: bool, until: float, extra_budgets: list[int]) -> list[FrontierPoint]:
    """The points, fewest moves first, ending with the best layout (when it is reached with fewer moves, there)."""
    assert best.layout is not None
    points: list[FrontierPoint] = []
    previous: tuple[GpuSet, ...] | None = None
    previous_rank: Layout | None = None
    steps = budgets(forced_moves(problem), best.layout.moves, extra_budgets)
    from_the_top: dict[int, tuple[GpuSet, ...]] = {}
    if not host_sized:
        now = time.perf_counter()
        from_the_top = local.homeward(problem, best.layout.assignment, steps, deadline=now + (until - now) * HOMEWARD_SHARE)
    for position, budget in enumerate(steps):
        share = max(0.05, (until - time.perf_counter()) / (len(steps) - position))
        start = _better(problem, previous, from_the_top.get(budget))
        layout, proven = _point(problem, budget, start, best, host_sized=host_sized, deadline=time.perf_counter() + share)
        if layout is None:
            continue  # no layout found within this budget: new seats need room that only moves make
        if previous_rank is not None and previous_rank < layout:
            layout = previous_rank  # a smaller budget did better; its layout is within this one too
        if layout.worst_spare_bytes >= best.layout.worst_spare_bytes:
            points.append(_as_point(problem, budget, layout, proven or best.optimal))
            return points
        points.append(_as_point(problem, budget, layout, proven))
        previous, previous_rank = layout.assignment, layout
    points.append(_as_point(problem, best.layout.moves, best.layout, best.optimal))
    return points


def _better(problem: Problem, *layouts: tuple[GpuSet, ...] | None) -> tuple[GpuSet, ...] | None:
    ranked = [problem.layout(layout) for layout in layouts if layout is not None]
    return min(ranked).assignment if ranked else None


def _point(
    problem: Problem, budget: int, previous: tuple[GpuSet, ...] | None, best: Solved, *, host_sized: bool, deadline: float
) -> tuple[Layout | None, bool]:
    layout, proven = None, False
    if not host_sized:
        found = local.search(problem, deadline=deadline, start=previous, max_moves=budget, target_bytes=best.bound_bytes)
        layout = None if found is None or problem.moves(found) > budget else problem.layout(found)
        proven = layout is not None and best.bound_bytes is not None and layout.worst_spare_bytes >= best.bound_bytes
    else:
        outcome = exact.exhaustive(problem, deadline=deadline, max_moves=budget)
        layout, proven = outcome.layout, outcome.complete
    return layout, proven


def _as_point(problem: Problem, budget: int, layout: Layout, proven: bool) -> FrontierPoint:
    return FrontierPoint(max_moves=budget, placement=to_placement(problem, layout.assignment), proven=proven)


def _value(point: FrontierPoint, move_cost_bytes: int) -> int:
    return point.placement.worst_case_spare_bytes - move_cost_bytes * point.placement.moves


def choose(points: list[FrontierPoint], *, max_moves: int | None, move_cost_bytes: int) -> tuple[FrontierPoint | None, str | None]:
    """The point the plan takes, and why (None when it is simply the best layout)."""
    if not points:
        return None, None
    within = [point for point in points if max_moves is None or point.placement.moves <= max_moves]
    if not within:
        fewest = points[0]
        return fewest, f"no layout found with at most {max_moves} moves; this one needs {fewest.placement.moves}"
    pick = max(within, key=lambda point: (_value(point, move_cost_bytes), -point.placement.moves))
    top = max(points, key=lambda point: (point.placement.worst_case_spare_bytes, -point.placement.moves))
    if pick is top:
        return pick, None
    reasons = []
    if max_moves is not None and top.placement.moves > max_moves:
        reasons.append(f"--max-moves {max_moves}")
    if move_cost_bytes and _value(pick, move_cost_bytes) > _value(top, move_cost_bytes):
        reasons.append(f"move_cost_bytes {human_bytes(move_cost_bytes)}")
    return pick, (
        f"{' and '.join(reasons)}: {pick.placement.moves} move(s) for a worst-case spare of "
        f"{human_bytes(pick.placement.worst_case_spare_bytes)}, where {top.placement.moves} would reach "
        f"{human_bytes(top.placement.worst_case_spare_bytes)}"
    )


def other_points(points: list[FrontierPoint], pick: FrontierPoint, *, move_cost_bytes: int, max_moves: int | None) -> list[Alternative]:
    """The frontier's other points as runner-ups, largest worst-case spare first, each saying why it lost."""
    others = sorted((point for point in points if point is not pick), key=lambda point: -point.placement.worst_case_spare_bytes)
    return [Alternative(placement=point.placement, why_lost=_why_lost(point, pick, move_cost_bytes, max_moves)) for point in others]


def _why_lost(point: FrontierPoint, pick: FrontierPoint, move_cost_bytes: int, max_moves: int | None) -> str:
    gain = point.placement.worst_case_spare_bytes - pick.placement.worst_case_spare_bytes
    extra = point.placement.moves - pick.placement.moves
    if max_moves is not None and point.placement.moves > max_moves:
        return f"{point.placement.moves} moves, over --max-moves {max_moves} (worst-case spare {human_bytes(gain)} higher)"
    if gain > 0:
        return (
            f"{extra} more move(s) buy {human_bytes(gain)} of worst-case spare, less than "
            f"move_cost_bytes {human_bytes(move_cost_bytes)} each"
        )
    if extra < 0:
        return f"{-extra} fewer move(s) but worst-case spare {human_bytes(-gain)} lower"
    return f"worst-case spare {human_bytes(-gain)} lower with {extra} more move(s)"
