"""Placement with OR-Tools CP-SAT, for fleets too large to search exhaustively.

Boolean ``x[seat, gpu]``; a tensor-parallel seat first chooses one host (``use[seat, host]``) and
then exactly ``gpu_count`` of that host's GPUs. Pass 1 maximises ``worst`` with ``worst ≤ spare``
on every open GPU; pass 2 keeps ``worst`` at pass 1's value and minimises moves. All sizes are
divided by their greatest common divisor, so the solver works in small integers and still answers
in exact bytes.

OR-Tools is imported where a model is built, not at the top: it takes 0.7 s to load, and the plans that
the exhaustive search settles (every single host) never need it.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from seatplan.plan.placement.bounds import root_bound
from seatplan.plan.placement.local import fewer_moves
from seatplan.plan.placement.problem import GpuSet, Problem, Solved

if TYPE_CHECKING:
    from ortools.sat.python.cp_model import IntVar

WORKERS = 2  # the machines this runs on have two cores
PASS1_SHARE = 0.75  # of a solve's time, when there is a current layout to prefer (pass 2 gets the rest)
# CP-SAT works in integers but reports its objective bound as a float, which can land a hair below the integer
# (14.999999999999998 for 15 units of 0.5 GiB): floored as it is, the bound lost a whole unit and fell below the
# layout the solver had just proven optimal.
OBJECTIVE_BOUND_TOLERANCE = 1e-6


class _Model:
    """The CP-SAT model of a :class:`Problem`; with ``optional`` a seat may stay unplaced (``placed[seat]``)."""

    def __init__(self, problem: Problem, *, optional: bool = False) -> None:
        from ortools.sat.python import cp_model  # noqa: PLC0415 (0.7 s to load; see the module's docstring)

        self.problem = problem
        self.model = cp_model.CpModel()
        self.unit = _common_unit(problem)
        self.x: dict[tuple[int, int], IntVar] = {}
        self.placed: dict[int, IntVar] = {}
        self.seat_gpus: list[list[int]] = []
        model = self.model
        for seat, options in enumerate(problem.candidates):
            gpus = sorted({g for gpu_set in options for g in gpu_set})
            self.seat_gpus.append(gpus)
            for g in gpus:
                self.x[seat, g] = model.new_bool_var(f"x_{seat}_{g}")
            if optional:
                self.placed[seat] = model.new_bool_var(f"placed_{seat}")
            self._one_gpu_set(seat, gpus, self.placed[seat] if optional else 1)
        for group in problem.apart:
            self.forbid_together(group)
        self.load = {}
        for g in range(len(problem.gpu_keys)):
            terms = [(problem.footprint_bytes[s] // self.unit, self.x[s, g]) for s in range(len(problem.seat_names)) if (s, g) in self.x]
            load = sum(coef * var for coef, var in terms) if terms else 0
            self.load[g] = load
            if terms:
                model.add(load <= problem.usable_bytes(g) // self.unit)

    def _one_gpu_set(self, seat: int, gpus: list[int], placed) -> None:
        problem, model = self.problem, self.model
        count = problem.gpu_count[seat]
        if count == 1:
            model.add(sum(self.x[seat, g] for g in gpus) == placed)
            return
        hosts = sorted({problem.host_of(gpu_set[0]) for gpu_set in problem.candidates[seat]})
        use = {host: model.new_bool_var(f"use_{seat}_{host}") for host in hosts}
        model.add(sum(use.values()) == placed)
        for host in {problem.host_of(g) for g in gpus}:
            on_host = [self.x[seat, g] for g in gpus if problem.host_of(g) == host]
            if host in use:
                model.add(sum(on_host) == count * use[host])
            else:
                model.add(sum(on_host) == 0)

    def add_worst(self, bound_bytes: int):
        problem, unit = self.problem, self.unit
        low = min((problem.headroom_bytes[g] // unit for g in problem.open_gpus), default=0)
        high = max(low, bound_bytes // unit)
        worst = self.model.new_int_var(low, high, "worst")
        for g in problem.open_gpus:
            self.model.add(worst <= problem.capacity_bytes[g] // unit - self.load[g])
        return worst

    def moves(self):
        problem = self.problem
        terms: list[Any] = []  # 1 for a seat that must move, else 1 − stay
        for seat, now in enumerate(problem.current):
            if now is None:
                continue
            if now not in problem.candidates[seat]:
                terms.append(1)
                continue
            stay = self.model.new_bool_var(f"stay_{seat}")
            for g in now:
                self.model.add_implication(stay, self.x[seat, g])
            terms.append(1 - stay)
        return sum(terms) if terms else 0

    def hint(self, assignment: tuple[GpuSet, ...]) -> None:
        self.model.clear_hints()
        for (seat, g), var in self.x.items():
            self.model.add_hint(var, g in assignment[seat])

    def forbid_together(self, seats: tuple[int, ...]) -> None:
        """These seats may not all share one GPU again."""
        for g in range(len(self.problem.gpu_keys)):
            if all((s, g) in self.x for s in seats):
                self.model.add(sum(self.x[s, g] for s in seats) <= len(seats) - 1)

    def assignment(self, solver) -> tuple[GpuSet, ...]:
        return tuple(
            tuple(g for g in self.seat_gpus[s] if solver.boolean_value(self.x[s, g])) for s in range(len(self.problem.seat_names))
        )


def _common_unit(problem: Problem) -> int:
    """The largest unit every size is a whole multiple of: exact, and much smaller numbers for the solver."""
    sizes = [*problem.footprint_bytes, *problem.capacity_bytes, *problem.headroom_bytes]
    unit = 0
    for size in sizes:
        unit = math.gcd(unit, size)
    return unit or 1


def _whole_units(objective_bound: float) -> int:
    """The integer objective bound CP-SAT reports as a float: the objective (``worst``, in units) is an integer, so
    any bound on it holds floored, once the float's rounding is allowed for."""
    return math.floor(objective_bound + OBJECTIVE_BOUND_TOLERANCE)


def _solver(time_limit_s: float):
    from ortools.sat.python import cp_model  # noqa: PLC0415 (0.7 s to load; see the module's docstring)

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = WORKERS
    solver.parameters.max_time_in_seconds = max(0.05, time_limit_s)
    solver.parameters.random_seed = 1
    # OR-Tools 9.15's presolve can certify a wrong optimum (google/or-tools#5293, open: ProcessAtMostOneAndLinear, under
    # this work limit). Here it did on two GPUs of 80 GiB and 61 GiB + 123 bytes: "OPTIMAL" at 15.5 GiB of worst-case
    # spare where a layout of 16 GiB exists, and that figure became the plan's proven bound. Off, as the issue advises.
    solver.parameters.presolve_inclusion_work_limit = 0
    return solver


def solve(
    problem: Problem,
    *,
    time_limit_s: float,
    start: tuple[GpuSet, ...] | None,
    bound_bytes: int | None = None,
    max_moves: int | None = None,
) -> Solved:
    """The best layout CP-SAT finds in the time, never worse than ``start`` (a valid layout, also the solver's hint).

    ``bound_bytes``: an upper bound on the worst-case spare proven elsewhere (the LP relaxation);
    ``max_moves``: only layouts with at most that many moves count.
    """
    from ortools.sat.python import cp_model  # noqa: PLC0415 (0.7 s to load; see the module's docstring)

    deadline = time.perf_counter() + time_limit_s  # building a fleet-sized model takes a while too
    proven_bytes = root_bound(problem) if bound_bytes is None else min(bound_bytes, root_bound(problem))
    built = _Model(problem)
    worst = built.add_worst(proven_bytes)
    built.model.maximize(worst)
    if start is not None:
        built.hint(start)
    moves = built.moves()
    if max_moves is not None:
        if isinstance(moves, int):
            if moves > max_moves:
                return Solved(layout=None, optimal=True, bound_bytes=None, proven_infeasible=True)
        else:
            built.model.add(moves <= max_moves)
    found = [start] if start is not None else []
    start_spare_bytes = None if start is None else problem.layout(start).worst_spare_bytes
    status = cp_model.UNKNOWN
    if start_spare_bytes is None or start_spare_bytes < proven_bytes:
        first = _solver((deadline - time.perf_counter()) * (1.0 if isinstance(moves, int) else PASS1_SHARE))
        status = first.solve(built.model)
        if status == cp_model.INFEASIBLE:
            return Solved(layout=None, optimal=True, bound_bytes=None, proven_infeasible=True)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            found.append(built.assignment(first))
            # Only then is the solver's bound defined; otherwise the bounds given are all that is proven.
            solver_bytes = _whole_units(first.best_objective_bound) * built.unit
            if start_spare_bytes is not None and start_spare_bytes > solver_bytes:
                # The layout in hand beats what the solver proved: its proof is wrong (google/or-tools#5293), and only
                # the bounds given stand.
                status = cp_model.FEASIBLE
            else:
                proven_bytes = min(proven_bytes, solver_bytes)
    if not found:
        return Solved(layout=None, optimal=False, bound_bytes=proven_bytes, proven_infeasible=False)
    best = min(problem.layout(assignment) for assignment in found)
    worst_proven = status == cp_model.OPTIMAL or best.worst_spare_bytes >= proven_bytes
    moves_proven = True
    if not isinstance(moves, int) and time.perf_counter() < deadline:
        # Pass 2: keep the worst-case spare reached so far, fewest moves, starting from local trades
        # that send seats home (the solver alone rarely gets far on a fleet in the time).
        now = time.perf_counter()
        best = min(best, problem.layout(fewer_moves(problem, best.assignment, deadline=now + (deadline - now) / 2)))
        built.model.add(worst >= best.worst_spare_bytes // built.unit)
        built.model.minimize(moves)
        built.hint(best.assignment)
        second = _solver(deadline - time.perf_counter())
        status2 = second.solve(built.model)
        moves_proven = status2 == cp_model.OPTIMAL
        if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            best = min(best, problem.layout(built.assignment(second)))
    elif not isinstance(moves, int):
        moves_proven = False
    return Solved(layout=best, optimal=worst_proven and moves_proven, bound_bytes=proven_bytes, proven_infeasible=False)


def fewest_dropped(problem: Problem, *, time_limit_s: float) -> tuple[set[int], list[GpuSet], bool]:
    """The fewest seats (then the fewest bytes) to leave out so the rest fits; whether that is proven minimal."""
    from ortools.sat.python import cp_model  # noqa: PLC0415 (0.7 s to load; see the module's docstring)

    built = _Model(problem, optional=True)
    seats = range(len(problem.seat_names))
    dropped_count = sum(1 - built.placed[s] for s in seats)
    built.model.minimize(dropped_count)
    first = _solver(time_limit_s / 2)
    status = first.solve(built.model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # Dropping every seat always fits; only a time-out gets here.
        return set(seats), [() for _ in seats], False
    built.model.add(dropped_count <= round(first.objective_value))
    built.model.minimize(sum(problem.demand_bytes(s) // built.unit * (1 - built.placed[s]) for s in seats))
    second = _solver(time_limit_s / 2)
    chosen = second if second.solve(built.model) in (cp_model.OPTIMAL, cp_model.FEASIBLE) else first
    assignment = list(built.assignment(chosen))
    dropped = {s for s in seats if not chosen.boolean_value(built.placed[s])}
    return dropped, [() if s in dropped else assignment[s] for s in seats], status == cp_model.OPTIMAL
