"""Proven upper bounds on the worst-case spare: the water level and the LP relaxation.

The linear formulation is written once, solver-neutral (:class:`LinearModel`): the benchmark hands it,
integral, to HiGHS as the plain-MILP yardstick, and the plan solves its LP relaxation with GLOP (part of
OR-Tools) for an honest bound, with the seats pooled (:func:`relaxation`: the same optimum, a fraction of
the columns).

Variables: ``x[seat, gpu]`` (the seat takes this GPU), for a tensor-parallel seat ``use[seat, host]``
(it takes ``gpu_count`` GPUs of this host, each at most once), and ``worst`` (the worst-case spare,
in GiB so the solver sees numbers near 1). ``worst ≤ capacity − load`` on every open GPU and
``load ≤ capacity − headroom`` on every GPU.

OR-Tools is imported inside :func:`relaxed_optimum`, as in ``cpsat.py``: it takes 0.7 s to load and a plan the
exhaustive search settles never needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from seatplan.plan.placement.filters import GpuSet
from seatplan.plan.placement.problem import Problem
from seatplan.units import GiB

# The LP answer is a float; it is rounded up by this much so that solver tolerances can only make
# the bound looser, never wrong.
LP_SLACK_BYTES = 64 * 1024


@dataclass
class LinearModel:
    """max ``objective · v`` s.t. ``row_lower ≤ Σ coeffs · v ≤ row_upper``, ``lower ≤ v ≤ upper``; ``integer`` marks 0/1 columns."""

    names: list[str] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    objective: list[float] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)
    x: dict[tuple[int, int], int] = field(default_factory=dict)  # (seat, gpu) → column
    worst: int = -1

    def column(self, name: str, lower: float, upper: float, *, integer: bool, objective: float = 0.0) -> int:
        self.names.append(name)
        self.lower.append(lower)
        self.upper.append(upper)
        self.integer.append(integer)
        self.objective.append(objective)
        return len(self.names) - 1

    def row(self, coeffs: dict[int, float], lower: float, upper: float) -> None:
        self.rows.append((coeffs, lower, upper))


def linear_model(problem: Problem) -> LinearModel:
    model = LinearModel()
    high = max(problem.capacity_bytes, default=0) / GiB
    model.worst = model.column("worst", -high, high, integer=False, objective=1.0)
    for seat, options in enumerate(problem.candidates):
        gpus = sorted({g for gpu_set in options for g in gpu_set})
        for g in gpus:
            model.x[seat, g] = model.column(f"x_{seat}_{g}", 0.0, 1.0, integer=True)
        count = problem.gpu_count[seat]
        if count == 1:
            model.row({model.x[seat, g]: 1.0 for g in gpus}, 1.0, 1.0)
            continue
        hosts = sorted({problem.host_of(gpu_set[0]) for gpu_set in options})
        use = {host: model.column(f"use_{seat}_{host}", 0.0, 1.0, integer=True) for host in hosts}
        model.row({column: 1.0 for column in use.values()}, 1.0, 1.0)
        for host, column in use.items():
            on_host = [model.x[seat, g] for g in gpus if problem.host_of(g) == host]
            model.row({**{x: 1.0 for x in on_host}, column: -float(count)}, 0.0, 0.0)
            for x in on_host:
                model.row({x: 1.0, column: -1.0}, -math.inf, 0.0)
    for g in range(len(problem.gpu_keys)):
        load = {model.x[s, g]: problem.footprint_bytes[s] / GiB for s in range(len(problem.seat_names)) if (s, g) in model.x}
        if load:
            model.row(load, -math.inf, problem.usable_bytes(g) / GiB)
        if not problem.keep_clear[g]:
            model.row({**load, model.worst: 1.0}, -math.inf, problem.capacity_bytes[g] / GiB)
    return model


def relaxation(problem: Problem) -> LinearModel:
    """The LP relaxation of :func:`linear_model`, its seats pooled: seats of one tensor-parallel size whose GPU sets are
    the same are one column per GPU, the GiB of them it holds (and per host, for tensor-parallel seats, the GiB whose
    GPU sets are on it).

    The same optimum: summed, every fractional layout of the seats is a layout of the pools; split in proportion to the
    seats' footprints, every layout of a pool is one of its seats. A fleet of 256 GPUs and 750 seats has about a hundred
    pools, and GLOP solves that in a fraction of the time the seats take."""
    pools: dict[tuple[int, tuple[GpuSet, ...]], int] = {}  # (tensor-parallel size, GPU sets) → bytes, in seat order
    for seat, options in enumerate(problem.candidates):
        key = (problem.gpu_count[seat], options)
        pools[key] = pools.get(key, 0) + problem.footprint_bytes[seat]
    model = LinearModel()
    high = max(problem.capacity_bytes, default=0) / GiB
    model.worst = model.column("worst", -high, high, integer=False, objective=1.0)
    held: list[dict[int, float]] = [{} for _ in problem.gpu_keys]  # per GPU: pool column → GiB per GiB
    for pool, ((count, options), pool_bytes) in enumerate(pools.items()):
        total = pool_bytes / GiB
        gpus = sorted({g for gpu_set in options for g in gpu_set})
        columns = {g: model.column(f"pool_{pool}_{g}", 0.0, total, integer=False) for g in gpus}
        for g, column in columns.items():
            held[g][column] = 1.0
        if count == 1:
            model.row(dict.fromkeys(columns.values(), 1.0), total, total)
            continue
        hosts = sorted({problem.host_of(gpu_set[0]) for gpu_set in options})
        use = {host: model.column(f"pool_{pool}_{host}", 0.0, total, integer=False) for host in hosts}
        model.row(dict.fromkeys(use.values(), 1.0), total, total)
        for host, column in use.items():
            on_host = [columns[g] for g in gpus if problem.host_of(g) == host]
            model.row({**dict.fromkeys(on_host, 1.0), column: -float(count)}, 0.0, 0.0)
            for x in on_host:
                model.row({x: 1.0, column: -1.0}, -math.inf, 0.0)
    for g, load in enumerate(held):
        if load:
            model.row(load, -math.inf, problem.usable_bytes(g) / GiB)
        if not problem.keep_clear[g]:
            model.row({**load, model.worst: 1.0}, -math.inf, problem.capacity_bytes[g] / GiB)
    return model


def lp_bound(problem: Problem, *, time_limit_s: float | None = None) -> int | None:
    """The LP relaxation's worst-case spare in bytes (rounded up), or None when GLOP gives no optimum (in the time)."""
    return relaxed_optimum(relaxation(problem), time_limit_s=time_limit_s)


def relaxed_optimum(model: LinearModel, *, time_limit_s: float | None = None) -> int | None:
    """``model``'s optimum with every column continuous, in bytes (rounded up), or None when GLOP gives none (in the time)."""
    from ortools.linear_solver import pywraplp  # noqa: PLC0415 (0.7 s to load; see the module's docstring)

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if time_limit_s is not None:
        solver.SetTimeLimit(max(1, int(time_limit_s * 1000)))
    columns = [solver.NumVar(lo, hi, name) for lo, hi, name in zip(model.lower, model.upper, model.names)]
    for coeffs, lo, hi in model.rows:
        constraint = solver.RowConstraint(-solver.infinity() if lo == -math.inf else lo, hi)
        for column, coeff in coeffs.items():
            constraint.SetCoefficient(columns[column], coeff)
    objective = solver.Objective()
    for column, coeff in zip(columns, model.objective):
        if coeff:
            objective.SetCoefficient(column, coeff)
    objective.SetMaximization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return math.floor(objective.Value() * GiB) + LP_SLACK_BYTES


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
