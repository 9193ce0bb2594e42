"""Replan fast path: the proof that nothing should move, found in a fraction of a second.

When every seat runs now, still fits where it runs, and the price per move (``move_cost_bytes``)
exceeds what any move can buy, the plan keeps the current layout without searching. The frontier
picks the layout maximising worst-case spare − price × moves (ties: fewer moves), so staying is the
answer when

- every layout with exactly one move is no better: all of them are enumerated, exactly (one seat to
  any other GPU set that takes it with everything else where it runs); and
- every layout with two or more moves is no better: none has a worst-case spare above the proven
  bound (the water level, else the LP relaxation), so none is worth more than bound − 2 × price.

Anything else (a seat that must move, a new seat, a move worth its price) goes to the full search.
"""

from __future__ import annotations

from dataclasses import dataclass

from seatplan.plan.placement.bounds import lp_bound, root_bound
from seatplan.plan.placement.problem import GpuSet, Layout, Problem
from seatplan.units import human_bytes

LP_TIME_LIMIT_S = 2.0  # the LP takes well under a second on 64 GPUs; past this the full search decides


@dataclass(frozen=True)
class StayProof:
    current: Layout  # the layout as it runs, 0 moves
    best_single_move: Layout | None  # the best layout one move away (exact), when one fits
    bound_bytes: int  # no layout's worst-case spare exceeds this
    why: str  # the proof in words


def current_layout(problem: Problem) -> tuple[GpuSet, ...] | None:
    """Where every seat runs now, when every seat runs, each still on a GPU set that takes it and all together fitting."""
    current = problem.current
    if any(now is None or now not in problem.candidates[seat] for seat, now in enumerate(current)):
        return None
    assignment = tuple(now for now in current if now is not None)
    return assignment if problem.fits(list(assignment)) and problem.keeps_apart(assignment) else None


def best_single_move(problem: Problem, assignment: tuple[GpuSet, ...]) -> Layout | None:
    """The layout one seat away from ``assignment`` with the largest worst-case spare (first in search order on ties), exactly."""
    load_bytes = problem.loads(assignment)
    spare_order = sorted((problem.capacity_bytes[g] - load_bytes[g], g) for g in problem.open_gpus)
    open_gpus = set(problem.open_gpus)
    best: tuple[int, int, GpuSet] | None = None
    for seat, now in enumerate(assignment):
        size = problem.footprint_bytes[seat]
        for gpu_set in problem.candidates[seat]:
            if gpu_set == now:
                continue
            arriving = [g for g in gpu_set if g not in now]
            if any(load_bytes[g] + size > problem.usable_bytes(g) for g in arriving):
                continue
            leaving = [g for g in now if g not in gpu_set]
            touched = set(arriving) | set(leaving)  # a GPU the seat keeps (tensor-parallel) keeps its spare
            # The untouched GPUs keep their spares: the lowest of them is the first in spare order not touched.
            worst = next((spare for spare, g in spare_order if g not in touched), None)
            changed = [problem.capacity_bytes[g] - load_bytes[g] - size for g in arriving if g in open_gpus]
            changed += [problem.capacity_bytes[g] - load_bytes[g] + size for g in leaving if g in open_gpus]
            candidates = changed + ([worst] if worst is not None else [])
            spare = min(candidates) if candidates else 0
            if (best is None or spare > best[0]) and (
                not problem.apart or problem.keeps_apart(assignment[:seat] + (gpu_set,) + assignment[seat + 1 :])
            ):
                best = (spare, seat, gpu_set)
    if best is None:
        return None
    _, seat, gpu_set = best
    return problem.layout(assignment[:seat] + (gpu_set,) + assignment[seat + 1 :])


def nothing_moves(problem: Problem, *, move_cost_bytes: int) -> StayProof | None:
    """The proof that no layout is worth more than the current one at ``move_cost_bytes`` a move, or None."""
    assignment = current_layout(problem)
    if assignment is None:
        return None
    current = problem.layout(assignment)
    stay_bytes = current.worst_spare_bytes
    single = best_single_move(problem, assignment)
    if single is not None and single.worst_spare_bytes - move_cost_bytes > stay_bytes:
        return None
    bound_bytes = root_bound(problem)
    if bound_bytes - 2 * move_cost_bytes > stay_bytes:
        lp = lp_bound(problem, time_limit_s=LP_TIME_LIMIT_S)
        if lp is None or lp - 2 * move_cost_bytes > stay_bytes:
            return None
        bound_bytes = min(bound_bytes, lp)
    single_words = (
        "no single move fits"
        if single is None
        else f"the best single move reaches {human_bytes(single.worst_spare_bytes)}, no more than that + move_cost_bytes {human_bytes(move_cost_bytes)}"
        if single.worst_spare_bytes > stay_bytes
        else f"no single move raises it (the best reaches {human_bytes(single.worst_spare_bytes)})"
    )
    why = (
        f"nothing moves: every seat fits where it runs, with a worst-case spare of {human_bytes(stay_bytes)}; {single_words}; "
        f"two or more moves reach at most the proven bound {human_bytes(bound_bytes)}, no more than that + 2 × move_cost_bytes"
    )
    return StayProof(current=current, best_single_move=single, bound_bytes=bound_bytes, why=why)
