"""Which seats go on which GPUs: the layout with the largest worst-case spare memory at plateau.

The objective is the smallest spare (capacity − Σ plateau footprints) over the GPUs that are not
keep-clear; every GPU must keep its headroom free; pins and avoids arrive here already resolved
into each seat's allowed GPU set; a tensor-parallel seat takes ``gpu_count`` distinct GPUs of one
host. Among layouts with the same worst-case spare the one with fewer moves from the current
layout wins, then the first in search order (seats largest first, GPUs by host and index).

Host-sized problems go to the exhaustive search (:mod:`.exact`), which proves its answer. Fleets go
to the local search (:mod:`.local`: randomized largest-first starts, trades on the tightest GPU)
and then to CP-SAT (:mod:`.cpsat`), hinted with the local search's layout, to close the rest and to
prove what it can; the LP relaxation (:mod:`.bounds`) caps the bound either way, so an answer that
is not proven says how far from optimal it can at most be. When seats run somewhere already, the
spare-versus-moves frontier (:mod:`.frontier`) shows what each budget of moves buys, and a move
budget or a price per move picks the layout from it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Literal

from seatplan.plan.placement import cpsat, exact, frontier, local, rejections, stay
from seatplan.plan.placement.bounds import lp_bound, root_bound
from seatplan.plan.placement.problem import (
    Alternative,
    FrontierPoint,
    GpuSet,
    GpuSlot,
    Layout,
    Method,
    Placement,
    PlacementResult,
    Problem,
    SeatDemand,
    Solved,
    bottleneck_group,
    compile_problem,
    gpu_label,
    seats_on,
    to_placement,
)
from seatplan.units import human_bytes

# Problems up to this size try the exhaustive search first; it proves optimality in well under a
# second there. Larger ones, or ones whose search runs out of its share of time, go to the local
# search and CP-SAT.
EXHAUSTIVE_MAX_OPEN_GPUS = 8
EXHAUSTIVE_MAX_SEATS = 16
EXHAUSTIVE_TIME_SHARE = 0.25
LP_TIME_SHARE = 0.2  # at most, of a fleet-sized solve's time, for the LP bound (it takes about a second on 64 GPUs)
LOCAL_SEARCH_SHARE = 0.85  # of a fleet-sized solve's time at most; CP-SAT, hinted with its layout, gets the rest
# A local search that stopped early (it stalled) leaves CP-SAT this much of the CPU time it took, at least CPSAT_MIN_S,
# rather than the whole rest of the time limit: on fleets CP-SAT rarely betters a stalled local search late.
CPSAT_SHARE_OF_LOCAL = 0.25
CPSAT_MIN_S = 0.5
# Those are CPU seconds; CP-SAT's limit is wall time. On a busy machine (a CI runner, a box serving its engines) the
# wall time of that CPU is longer by the ratio the local search just saw, up to this: a 3-GPU fleet whose proof takes
# 0.05 s alone was left unproven in 0.5 s with 2 cores shared by a test run.
CPSAT_MAX_LOAD_FACTOR = 8.0
# A runner-up's search starts from the layout before it with one seat moved apart, close to its best already; it
# illustrates a trade-off, so it gets a few rounds, not the best layout's patience. Where the best is still more than
# local.NEAR_BOUND_SHARE below the bound it gets more: a runner-up's search there often finds a better best (PROMOTIONS);
# within it, the last tenth of a percent is not worth the wait (on 64-GPU fleets the runner-ups took 25-50 % of the
# plan's time; docs/benchmarks.md).
RUNNER_UP_STALL_ROUNDS = 3
RUNNER_UP_MAX_ROUNDS = 10
RUNNER_UP_NEAR_STALL_ROUNDS = 1
RUNNER_UP_NEAR_MAX_ROUNDS = 4
# A runner-up's search may find a better layout than the best (which becomes the best): how many times, at most, the
# runner-ups are then worked out again.
PROMOTIONS = 2
# Of the time limit: the best layout, then the frontier (when seats run somewhere), then runner-ups. From scratch there is
# no frontier, and the best gets more: on the hardest 64-GPU fleets (95-98 % full) its search still gains after 15 s, on
# a slow machine it reached 99.44 % of the bound with 0.6 and 99.53 % with 0.75; runner-ups near the bound need seconds
# (docs/benchmarks.md, "The best layout's share from scratch").
BEST_TIME_SHARE = 0.6
BEST_TIME_SHARE_FROM_SCRATCH = 0.75
FRONTIER_TIME_SHARE = 0.25


def place(
    gpus: list[GpuSlot],
    seats: list[SeatDemand],
    *,
    runner_ups: int = 3,
    time_limit_s: float = 30.0,
    method: Literal["auto", "exhaustive", "cp-sat"] = "auto",
    max_moves: int | None = None,
    move_cost_bytes: int = 0,
) -> PlacementResult:
    """The best layout, whether it is proven optimal, up to ``runner_ups`` next-best layouts, or why none fits.

    Runner-up *n* is the best layout that also splits up the seats sharing the bottleneck GPU of
    layout *n − 1* (the lowest-spare GPU holding two or more seats), so each shows what the plan
    would look like if the pairing that limits the one before it were avoided. When ``max_moves``
    or ``move_cost_bytes`` picks another point of the frontier, the other points are the runner-ups.
    """
    started = time.perf_counter()
    problem = compile_problem(gpus, seats)
    chosen: Method = "cp-sat" if method == "cp-sat" or (method == "auto" and not _host_sized(problem)) else "exhaustive"

    alone = rejections.seats_that_never_fit(problem)
    if alone:
        return _infeasible(rejections.alone_infeasibility(alone), chosen, started)

    running = any(now is not None for now in problem.current)
    if running and method == "auto" and chosen == "cp-sat":
        proof = stay.nothing_moves(problem, move_cost_bytes=move_cost_bytes)
        if proof is not None:
            return _staying(problem, proof, chosen, started, runner_ups=runner_ups, max_moves=max_moves, move_cost_bytes=move_cost_bytes)
    shares = _time_shares(runner_ups > 0, running)
    until = started + time_limit_s * shares[0]
    solved, chosen = _solve(problem, chosen, fallback=method == "auto", until=until)
    if solved.proven_infeasible:
        return _infeasible(rejections.together_infeasibility(problem, time_limit_s), chosen, started)
    if solved.layout is None:
        return PlacementResult(
            best=None, optimal=False, method=chosen, bound_bytes=solved.bound_bytes, runner_ups=[],
            infeasible=None, solve_seconds=time.perf_counter() - started,
        )
    points = []
    if running:
        until += time_limit_s * shares[1]
        budgets = [max_moves] if max_moves is not None else []
        points = frontier.frontier(problem, solved, host_sized=chosen == "exhaustive", until=until, extra_budgets=budgets)
    pick, because = frontier.choose(points, max_moves=max_moves, move_cost_bytes=move_cost_bytes)
    if pick is None or pick.placement.worst_case_spare_bytes == solved.layout.worst_spare_bytes and pick.placement.moves == solved.layout.moves:
        best, alternatives, promoted = _best_and_runner_ups(problem, chosen, solved.layout, runner_ups, until=started + time_limit_s,
                                                            bound_bytes=solved.bound_bytes)
        optimal, because = solved.optimal and not promoted, None
    else:
        best = pick.placement
        alternatives = frontier.other_points(points, pick, move_cost_bytes=move_cost_bytes, max_moves=max_moves)[:runner_ups]
        optimal = pick.proven
    return PlacementResult(
        best=best, optimal=optimal, method=chosen, bound_bytes=solved.bound_bytes, runner_ups=alternatives,
        infeasible=None, solve_seconds=time.perf_counter() - started, frontier=points, chosen_because=because,
    )


def _staying(
    problem: Problem, proof: stay.StayProof, method: Method, started: float, *, runner_ups: int, max_moves: int | None, move_cost_bytes: int
) -> PlacementResult:
    """The current layout, proven worth the most at the price per move; the frontier lists 0 moves and, when it
    raises the worst-case spare, the best single move (both exact)."""
    points = [FrontierPoint(max_moves=0, placement=to_placement(problem, proof.current.assignment), proven=True)]
    single = proof.best_single_move
    if single is not None and single.worst_spare_bytes > proof.current.worst_spare_bytes:
        points.append(FrontierPoint(max_moves=1, placement=to_placement(problem, single.assignment), proven=True))
    pick = points[0]
    return PlacementResult(
        best=pick.placement, optimal=True, method=method, bound_bytes=proof.bound_bytes,
        runner_ups=frontier.other_points(points, pick, move_cost_bytes=move_cost_bytes, max_moves=max_moves)[:runner_ups],
        infeasible=None, solve_seconds=time.perf_counter() - started, frontier=points, chosen_because=proof.why,
    )


def load_factor(wall_s: float, cpu_s: float) -> float:
    """How much longer than its CPU time a single-threaded step took in wall time, from 1 to CPSAT_MAX_LOAD_FACTOR
    (a step too short to time, under a millisecond of CPU, counts as one millisecond)."""
    return min(CPSAT_MAX_LOAD_FACTOR, max(1.0, wall_s / max(cpu_s, 1e-3)))


def _time_shares(runner_ups: bool, running: bool) -> tuple[float, float]:
    """(best layout, frontier) shares of the time limit; runner-ups get what is left."""
    frontier_share = FRONTIER_TIME_SHARE if running else 0.0
    if not runner_ups:
        return 1.0 - frontier_share, frontier_share
    return (BEST_TIME_SHARE if running else BEST_TIME_SHARE_FROM_SCRATCH), frontier_share


def _infeasible(infeasible, method: Method, started: float) -> PlacementResult:
    return PlacementResult(
        best=None, optimal=True, method=method, bound_bytes=None, runner_ups=[], infeasible=infeasible,
        solve_seconds=time.perf_counter() - started,
    )


def _solve(
    problem: Problem, method: Method, *, fallback: bool, until: float, bound_bytes: int | None = None
) -> tuple[Solved, Method]:
    """Solve with ``method``; with ``fallback`` an exhaustive search that runs out of its share of time hands over to the fleet path.

    ``bound_bytes``: a bound already proven for this problem or a less constrained one (the fleet path then skips the LP).
    """
    start: tuple[GpuSet, ...] | None = None
    if method == "exhaustive":
        now = time.perf_counter()
        stop = now + (until - now) * EXHAUSTIVE_TIME_SHARE if fallback else until
        outcome = exact.search(problem, deadline=stop)
        layout = outcome.layout
        if outcome.complete:
            bound = None if layout is None else layout.worst_spare_bytes
            return Solved(layout=layout, optimal=True, bound_bytes=bound, proven_infeasible=layout is None), "exhaustive"
        if not fallback:
            bound = outcome.bound_bytes if outcome.bound_bytes is not None else root_bound(problem)
            return Solved(layout=layout, optimal=False, bound_bytes=bound, proven_infeasible=False), "exhaustive"
        start = None if layout is None else layout.assignment
    return solve_fleet(problem, until=until, start=start, bound_bytes=bound_bytes), "cp-sat"


def solve_fleet(
    problem: Problem, *, until: float, start: tuple[GpuSet, ...] | None = None, bound_bytes: int | None = None
) -> Solved:
    """The fleet path: the LP bound, the local search for most of the time, then CP-SAT hinted with its layout."""
    if bound_bytes is None:
        bound_bytes = lp_bound(problem, time_limit_s=(until - time.perf_counter()) * LP_TIME_SHARE)
    now, cpu_now = time.perf_counter(), time.process_time()
    found = local.search(problem, deadline=now + (until - now) * LOCAL_SEARCH_SHARE, start=start, target_bytes=bound_bytes)
    # CPU time, not wall: on a busy machine the wall time of the search would buy CP-SAT more than it is worth.
    local_s = time.process_time() - cpu_now
    # Within NEAR_BOUND_SHARE of the bound CP-SAT gets its least: the last tenth of a percent is not worth the wait.
    near = found is not None and local.near_bound(problem.layout(found).worst_spare_bytes, bound_bytes)
    if near and found is not None and bound_bytes is not None and local.is_cluster(problem):
        return _near_on_a_cluster(problem, found, bound_bytes, until=until)
    cpsat_cpu_s = CPSAT_MIN_S if near else max(CPSAT_MIN_S, CPSAT_SHARE_OF_LOCAL * local_s)
    cpsat_s = min(until - time.perf_counter(), cpsat_cpu_s * load_factor(time.perf_counter() - now, local_s))
    if found is None:
        # The search built no start (it gives up within rounds on a fleet too full for largest-first): CP-SAT alone
        # can still find one or prove there is none, and the plan's "not found within the time limit" must be true.
        cpsat_s = until - time.perf_counter()
    solved = cpsat.solve(problem, time_limit_s=max(0.5, cpsat_s), start=found, bound_bytes=bound_bytes)
    if solved.layout is None or solved.optimal:
        return solved
    # CP-SAT may hand back another layout of the same worst-case spare, one a trade still improves: without this
    # descent a runner-up, which starts from the best with one trade made, could beat the best.
    descended = problem.layout(local.improve(problem, solved.layout.assignment, deadline=until))
    return replace(solved, layout=min(solved.layout, descended))


def _near_on_a_cluster(problem: Problem, found: tuple[GpuSet, ...], bound_bytes: int, *, until: float) -> Solved:
    """The local search's layout on a cluster-sized fleet, within local.NEAR_BOUND_SHARE of the LP bound, without CP-SAT:
    there its model alone takes 2.4 s (256 GPUs, 750 seats) and in its least time it neither betters nor proves such a
    layout. Seats go home where the worst-case spare allows (what CP-SAT's second pass starts from). Optimal only where
    the layout meets the bound with no moves but those no layout avoids."""
    if any(now is not None for now in problem.current):
        found = local.fewer_moves(problem, found, deadline=until)
    layout = problem.layout(found)
    optimal = layout.worst_spare_bytes >= bound_bytes and layout.moves == frontier.forced_moves(problem)
    return Solved(layout=layout, optimal=optimal, bound_bytes=bound_bytes, proven_infeasible=False)


def _best_and_runner_ups(
    problem: Problem, method: Method, layout: Layout, count: int, *, until: float, bound_bytes: int | None
) -> tuple[Placement, list[Alternative], bool]:
    """The best layout with its runner-ups, and whether a runner-up's search found a better one than the best's.

    On a fleet the best is found, not proven: a runner-up's search, which keeps more seats apart, may find a
    layout better than it (every such layout is valid without that constraint too). That layout becomes the
    best and the runner-ups are worked out again from it (at most PROMOTIONS times; after that the best
    keeps no runner-up better than itself), so no runner-up ever says it lost to a worse plan.
    """
    promoted = False
    for _ in range(PROMOTIONS + 1):
        best = to_placement(problem, layout.assignment)
        alternatives, better = _runner_ups(problem, method, layout, best, count, until=until, bound_bytes=bound_bytes)
        if better is None:
            return best, alternatives, promoted
        layout, promoted = better, True
    return to_placement(problem, layout.assignment), [], promoted


def _runner_ups(
    problem: Problem, method: Method, best_layout: Layout, best: Placement, count: int, *, until: float, bound_bytes: int | None
) -> tuple[list[Alternative], Layout | None]:
    """Up to ``count`` runner-ups, or, as soon as one is better than ``best_layout``, that layout (to become the best)."""
    alternatives: list[Alternative] = []
    previous, constrained = best_layout, problem
    near = local.near_bound(best_layout.worst_spare_bytes, bound_bytes)
    for position in range(count):
        group = bottleneck_group(problem, previous.assignment)
        if group is None:
            break
        constrained = replace(constrained, apart=constrained.apart + (group,))
        share = (until - time.perf_counter()) / (count - position)
        layout = _runner_up_layout(constrained, method, previous, group, until=time.perf_counter() + max(0.5, share), bound_bytes=bound_bytes,
                                   near=near)
        if layout is None:
            break
        if layout < best_layout:
            return [], layout  # valid without the apart constraint too, at the same cost
        placement = to_placement(problem, layout.assignment)
        names = [problem.seat_names[s] for s in group]
        alternatives.append(Alternative(placement=placement, why_lost=f"{_apart_words(names)}: {why_lost(problem, best, placement)}"))
        previous = layout
    return alternatives, None


def _runner_up_layout(
    constrained: Problem, method: Method, previous: Layout, group: tuple[int, ...], *, until: float, bound_bytes: int | None,
    near: bool,
) -> Layout | None:
    """The best layout keeping ``group`` apart. On a fleet: the local search from the layout before with one seat of
    the group moved apart (a runner-up illustrates a trade-off; it is not worth a CP-SAT model per runner-up); where no
    such move fits, as many rounds from fresh starts; the full fleet path only when those find no layout either. On a
    cluster-sized fleet (local.is_cluster) a descent on the hosts that move touched, and no runner-up where no such
    move fits (a fresh start there costs seconds: a round of the whole fleet)."""
    if method != "exhaustive":
        start = local.split_up(constrained, previous.assignment, group)
        if local.is_cluster(constrained):
            return None if start is None else constrained.layout(_descend_where_moved(constrained, previous.assignment, start, until=until))
        # A fresh start where no seat of the group can move apart alone: the search builds one (on a 64-GPU fleet the
        # full path took 3-5 s per runner-up here, more than the best layout itself).
        found = local.search(constrained, deadline=until, start=start, target_bytes=bound_bytes,
                             stall_min_rounds=RUNNER_UP_NEAR_STALL_ROUNDS if near else RUNNER_UP_STALL_ROUNDS,
                             max_rounds=RUNNER_UP_NEAR_MAX_ROUNDS if near else RUNNER_UP_MAX_ROUNDS)
        if found is not None:
            return constrained.layout(found)
    solved, _ = _solve(constrained, method, fallback=False, until=until, bound_bytes=bound_bytes)
    return solved.layout


def _descend_where_moved(problem: Problem, before: tuple[GpuSet, ...], start: tuple[GpuSet, ...], *, until: float) -> tuple[GpuSet, ...]:
    """A descent from ``start`` restricted to the hosts where it differs from ``before`` (a layout the search had left
    with no trade to make): once seats are split among hosts each host's layout is its own problem, and the other hosts
    keep theirs. On 256 GPUs and 750 seats a descent over the whole fleet took 2.5 s per runner-up."""
    hosts = {problem.host_of(g) for s, gpu_set in enumerate(start) if gpu_set != before[s] for g in (*gpu_set, *before[s])}
    within = [g for g in range(len(problem.gpu_keys)) if problem.host_of(g) in hosts]
    return local.improve(problem, start, deadline=until, within=within)


def _apart_words(names: list[str]) -> str:
    listed = _listing(names)
    return f"with {listed} not all on one GPU" if len(names) > 2 else f"with {listed} on different GPUs"


def _listing(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c`` (sorted)."""
    ordered = sorted(names)
    return ordered[0] if len(ordered) == 1 else ", ".join(ordered[:-1]) + " and " + ordered[-1]


def _host_sized(problem: Problem) -> bool:
    return len(problem.open_gpus) <= EXHAUSTIVE_MAX_OPEN_GPUS and len(problem.seat_names) <= EXHAUSTIVE_MAX_SEATS


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
