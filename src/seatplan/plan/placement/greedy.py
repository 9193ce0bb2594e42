"""The two greedy layouts other tools use, as yardsticks for seatplan's exact placement.

Both place seats largest first (total demand: footprint × tensor-parallel size), one at a time,
never revisiting a choice, and honour the same rules as :func:`seatplan.plan.placement.place`:
allowed GPUs, keep-clear GPUs, per-GPU headroom, tensor-parallel seats on distinct GPUs of one host.

* best-fit bin packing: the GPU (set) with the least room left that still takes the seat;
* most-free-first: the GPU (set) with the most free memory.

A GPU set's room is its tightest member's room (what the seat can still grow into there).
Ties go to the first GPU set by host and index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from seatplan.plan.placement.problem import GpuSet, GpuSlot, Placement, Problem, SeatDemand, compile_problem, to_placement

Rule = Literal["best-fit", "most-free-first"]


def best_fit(gpus: list[GpuSlot], seats: list[SeatDemand]) -> Placement | None:
    """Best-fit bin packing; None when it strands a seat (a greedy failure, not proof that none fits)."""
    return _as_placement(gpus, seats, "best-fit")


def most_free_first(gpus: list[GpuSlot], seats: list[SeatDemand]) -> Placement | None:
    """Most-free-first; None when it strands a seat."""
    return _as_placement(gpus, seats, "most-free-first")


def _as_placement(gpus: list[GpuSlot], seats: list[SeatDemand], rule: Rule) -> Placement | None:
    problem = compile_problem(gpus, seats)
    assignment = greedy(problem, rule)
    return None if assignment is None else to_placement(problem, assignment)


def greedy(problem: Problem, rule: Rule) -> tuple[GpuSet, ...] | None:
    """The greedy assignment in the problem's seat order (largest first), or None when a seat finds no room."""
    load_bytes = [0] * len(problem.gpu_keys)
    prefer: Callable[[int], int] = (lambda room: room) if rule == "best-fit" else (lambda room: -room)
    assignment: list[GpuSet] = []
    for seat, options in enumerate(problem.candidates):
        footprint = problem.footprint_bytes[seat]
        choice: GpuSet | None = None
        choice_rank = 0
        for gpu_set in options:
            room = min(problem.usable_bytes(g) - load_bytes[g] for g in gpu_set)
            if room < footprint or not problem.keeps_apart([*assignment, gpu_set]):
                continue
            rank = prefer(room)
            if choice is None or rank < choice_rank:
                choice, choice_rank = gpu_set, rank
        if choice is None:
            return None
        for g in choice:
            load_bytes[g] += footprint
        assignment.append(choice)
    return tuple(assignment)
