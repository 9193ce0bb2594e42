"""Placement against a plain brute force on random small fleets, and CP-SAT against the exhaustive search."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from itertools import combinations, product

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seatplan.plan.placement import GpuSlot, Placement, SeatDemand, cpsat, local, place, solve
from seatplan.plan.placement.bounds import linear_model, lp_bound, relaxed_optimum
from seatplan.plan.placement.greedy import best_fit, greedy, most_free_first
from seatplan.plan.placement.local import construct, fewer_moves, improve
from seatplan.plan.placement.local import search as local_search
from seatplan.plan.placement.problem import compile_problem, to_placement

GiB = 1 << 30


def brute_force(
    gpus: list[GpuSlot], seats: list[SeatDemand], apart: list[set[str]] = (), max_moves: int | None = None
) -> tuple[int, int] | None:
    """(best worst-case spare, fewest moves among those) over every assignment, or None when nothing fits.

    ``apart``: groups of seat names that may not all share one GPU; ``max_moves``: only assignments with at most that many moves.
    """
    keys = [(g.host, g.index) for g in gpus]
    slot = {(g.host, g.index): g for g in gpus}
    options_per_seat = []
    for s in seats:
        allowed = set(keys) if s.allowed is None else set(map(tuple, s.allowed))
        usable = [k for k in keys if k in allowed and not slot[k].keep_clear]
        options = [
            frozenset(combo)
            for combo in combinations(usable, s.gpu_count)
            if len({host for host, _ in combo}) == 1
        ]
        options_per_seat.append(options)
    best: tuple[int, int] | None = None
    for choice in product(*options_per_seat):
        used = dict.fromkeys(keys, 0)
        for s, gpu_set in zip(seats, choice):
            for k in gpu_set:
                used[k] += s.footprint_bytes
        if any(slot[k].capacity_bytes - used[k] < slot[k].headroom_bytes for k in keys):
            continue
        where = {s.name: gpu_set for s, gpu_set in zip(seats, choice)}
        if any(frozenset.intersection(*(where[name] for name in group)) for group in apart):
            continue
        spares = [slot[k].capacity_bytes - used[k] for k in keys if not slot[k].keep_clear]
        worst = min(spares) if spares else 0
        moves = sum(1 for s, gpu_set in zip(seats, choice) if s.current and gpu_set != frozenset(map(tuple, s.current)))
        if max_moves is not None and moves > max_moves:
            continue
        if best is None or (worst, -moves) > (best[0], -best[1]):
            best = (worst, moves)
    return best


def assert_valid(gpus: list[GpuSlot], seats: list[SeatDemand], placement: Placement) -> None:
    """Every rule checked from the inputs, independently of the code under test."""
    slot = {(g.host, g.index): g for g in gpus}
    used = dict.fromkeys(slot, 0)
    assert set(placement.assignment) == {s.name for s in seats}
    for s in seats:
        where = [tuple(k) for k in placement.assignment[s.name]]
        assert len(where) == s.gpu_count == len(set(where))
        assert len({host for host, _ in where}) == 1
        for k in where:
            assert not slot[k].keep_clear
            assert s.allowed is None or k in set(map(tuple, s.allowed))
            used[k] += s.footprint_bytes
    for k, g in slot.items():
        spare = g.capacity_bytes - used[k]
        assert placement.spare_bytes[f"{k[0]}:{k[1]}"] == spare
        assert spare >= g.headroom_bytes
    open_spares = [g.capacity_bytes - used[k] for k, g in slot.items() if not g.keep_clear]
    assert placement.worst_case_spare_bytes == (min(open_spares) if open_spares else 0)
    moves = sum(1 for s in seats if s.current and set(map(tuple, s.current)) != set(map(tuple, placement.assignment[s.name])))
    assert placement.moves == moves


@st.composite
def fleets(draw, max_gpus: int = 4, max_seats: int = 6):
    host_count = draw(st.integers(1, 2))
    gpu_total = draw(st.integers(host_count, max_gpus))
    gpus = []
    for i in range(gpu_total):
        host = f"h{i % host_count}"
        gpus.append(
            GpuSlot(
                host=host,
                index=sum(1 for g in gpus if g.host == host),
                # Mostly equal GPUs, so the symmetry rules of the search are exercised, with odd sizes mixed in.
                capacity_bytes=draw(st.sampled_from([80 * GiB, 80 * GiB, 96 * GiB, 48 * GiB, 61 * GiB + 123])),
                headroom_bytes=draw(st.sampled_from([0, 0, GiB // 2, 2 * GiB])),
                keep_clear=draw(st.integers(0, 5)) == 0,
            )
        )
    keys = [(g.host, g.index) for g in gpus]
    seats = []
    for n in range(draw(st.integers(0, max_seats))):
        gpu_count = draw(st.sampled_from([1, 1, 1, 2]))
        allowed = None
        if draw(st.integers(0, 3)) == 0:
            allowed = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True))
        current = []
        if draw(st.booleans()):
            host = draw(st.sampled_from(sorted({h for h, _ in keys})))
            on_host = [k for k in keys if k[0] == host]
            if len(on_host) >= gpu_count:
                current = draw(st.lists(st.sampled_from(on_host), min_size=gpu_count, max_size=gpu_count, unique=True))
        seats.append(
            SeatDemand(
                name=f"s{n}",
                footprint_bytes=draw(st.sampled_from([4, 8, 10, 16, 20, 24, 30, 40, 45])) * GiB + draw(st.integers(0, 3)) * (GiB // 2),
                gpu_count=gpu_count,
                allowed=allowed,
                current=current,
            )
        )
    return gpus, seats


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_exhaustive_matches_brute_force(fleet):
    gpus, seats = fleet
    expected = brute_force(gpus, seats)
    result = place(gpus, seats, method="exhaustive")
    assert result.method == "exhaustive"
    if expected is None:
        assert result.best is None and result.infeasible is not None and result.infeasible.seats
        return
    assert result.optimal
    assert_valid(gpus, seats, result.best)
    assert (result.best.worst_case_spare_bytes, result.best.moves) == expected
    assert result.bound_bytes == expected[0]
    assert_runner_ups_are_exact(gpus, seats, result)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_the_pooled_lp_bound_is_the_seats_own_and_never_below_the_optimum(fleet):
    """The plan's LP pools seats of one tensor-parallel size and the same GPU sets: its optimum is the per-seat
    relaxation's (within GLOP's tolerance, far inside the bound's slack) and no layout beats it."""
    gpus, seats = fleet
    problem = compile_problem(gpus, seats)
    pooled, per_seat = lp_bound(problem), relaxed_optimum(linear_model(problem))
    assert (pooled is None) == (per_seat is None)
    if pooled is None or per_seat is None:
        return
    assert abs(pooled - per_seat) <= 1024
    expected = brute_force(gpus, seats)
    assert expected is None or pooled >= expected[0]


def bottleneck(placement: Placement, gpus: list[GpuSlot]) -> set[str] | None:
    """The seats on the lowest-spare open GPU holding two or more (ties: first by host, index)."""
    ordered = sorted((g for g in gpus if not g.keep_clear), key=lambda g: (placement.spare_bytes[f"{g.host}:{g.index}"], g.host, g.index))
    for g in ordered:
        names = {name for name, where in placement.assignment.items() if (g.host, g.index) in map(tuple, where)}
        if len(names) >= 2:
            return names
    return None


def assert_runner_ups_are_exact(gpus: list[GpuSlot], seats: list[SeatDemand], result) -> None:
    """Runner-up n is the best layout that also splits the bottleneck group of layout n − 1."""
    apart: list[set[str]] = []
    previous = result.best
    for alternative in result.runner_ups:
        group = bottleneck(previous, gpus)
        assert group is not None
        apart.append(group)
        assert_valid(gpus, seats, alternative.placement)
        where = {name: set(map(tuple, gpus_)) for name, gpus_ in alternative.placement.assignment.items()}
        assert not any(set.intersection(*(where[name] for name in g)) for g in apart)
        expected = brute_force(gpus, seats, apart)
        assert (alternative.placement.worst_case_spare_bytes, alternative.placement.moves) == expected
        previous = alternative.placement
    if len(result.runner_ups) < 3:
        # The chain stopped: nothing left to split, or nothing fits with one more group kept apart.
        group = bottleneck(previous, gpus)
        assert group is None or brute_force(gpus, seats, [*apart, group]) is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_greedy_baselines_are_valid_and_never_beat_the_optimum(fleet):
    gpus, seats = fleet
    expected = brute_force(gpus, seats)
    for baseline in (best_fit, most_free_first):
        layout = baseline(gpus, seats)
        if layout is None:
            continue
        assert expected is not None
        assert_valid(gpus, seats, layout)
        assert layout.worst_case_spare_bytes <= expected[0]


# CP-SAT reported this fleet's objective bound as 14.999999999999998 units of 0.5 GiB; floored, the bound fell to 7.0 GiB,
# below the 7.5 GiB layout it had just proven optimal.
FLOAT_BOUND_FLEET = (
    [GpuSlot(host="h0", index=0, capacity_bytes=80 * GiB), GpuSlot(host="h1", index=0, capacity_bytes=48 * GiB),
     GpuSlot(host="h0", index=1, capacity_bytes=80 * GiB)],
    [SeatDemand(name="s0", footprint_bytes=81 * GiB // 2, gpu_count=1),
     SeatDemand(name="s1", footprint_bytes=40 * GiB, gpu_count=1, allowed=[("h0", 0)]),
     SeatDemand(name="s2", footprint_bytes=45 * GiB, gpu_count=1), SeatDemand(name="s3", footprint_bytes=9 * GiB // 2, gpu_count=1),
     SeatDemand(name="s4", footprint_bytes=16 * GiB, gpu_count=1)],
)

# OR-Tools 9.15's presolve certified 15.5 GiB as optimal here (google/or-tools#5293), where 16 GiB + 123 bytes fits: the
# odd capacity makes the common unit one byte.
WRONG_PRESOLVE_FLEET = (
    [GpuSlot(host="h0", index=0, capacity_bytes=80 * GiB), GpuSlot(host="h0", index=1, capacity_bytes=61 * GiB + 123)],
    [SeatDemand(name="s0", footprint_bytes=10 * GiB, gpu_count=1, allowed=[("h0", 0), ("h0", 1)]),
     SeatDemand(name="s1", footprint_bytes=51 * GiB // 2, gpu_count=1), SeatDemand(name="s2", footprint_bytes=20 * GiB, gpu_count=1),
     SeatDemand(name="s3", footprint_bytes=45 * GiB, gpu_count=1)],
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(max_gpus=4, max_seats=5))
@example(fleet=FLOAT_BOUND_FLEET)
@example(fleet=WRONG_PRESOLVE_FLEET)
def test_cp_sat_matches_brute_force(fleet):
    gpus, seats = fleet
    expected = brute_force(gpus, seats)
    result = place(gpus, seats, method="cp-sat", runner_ups=1, time_limit_s=10)
    assert result.method == "cp-sat"
    if expected is None:
        assert result.best is None and result.infeasible is not None
        return
    assert result.optimal
    assert_valid(gpus, seats, result.best)
    assert (result.best.worst_case_spare_bytes, result.best.moves) == expected
    assert result.bound_bytes == expected[0]
    for alternative in result.runner_ups:
        assert_valid(gpus, seats, alternative.placement)
        assert alternative.placement.worst_case_spare_bytes <= expected[0]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.randoms(use_true_random=False))
def test_local_trades_keep_layouts_valid_and_never_lose_spare(fleet, rng):
    gpus, seats = fleet
    problem = compile_problem(gpus, seats)
    if seats and rng.random() < 0.5:
        problem = replace(problem, apart=(tuple(sorted(rng.sample(range(len(seats)), min(2, len(seats))))),))
    start = greedy(problem, rng.choice(["best-fit", "most-free-first"]))
    if start is None:
        return
    improved = improve(problem, start, deadline=time.perf_counter() + 5)
    assert problem.fits(list(improved)) and problem.keeps_apart(improved)
    assert all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(improved))
    assert problem.worst_spare(problem.loads(improved)) >= problem.worst_spare(problem.loads(start))
    homebound = fewer_moves(problem, improved, deadline=time.perf_counter() + 5)
    assert problem.fits(list(homebound)) and problem.keeps_apart(homebound)
    assert all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(homebound))
    assert problem.worst_spare(problem.loads(homebound)) >= problem.worst_spare(problem.loads(improved))
    assert problem.moves(homebound) <= problem.moves(improved)


def test_fewer_moves_sends_a_seat_home_when_the_worst_spare_allows():
    # Two 80 GiB GPUs; a (40) runs on GPU 0 and b (30) on GPU 1. The layout a→1, b→0 has the same worst
    # spare (40) but two moves; swapping both home keeps 40 and needs none.
    gpus = [GpuSlot(host="h", index=i, capacity_bytes=80 * GiB) for i in range(2)]
    seats = [SeatDemand(name="a", footprint_bytes=40 * GiB, current=[("h", 0)]), SeatDemand(name="b", footprint_bytes=30 * GiB, current=[("h", 1)])]
    problem = compile_problem(gpus, seats)
    crossed = tuple((1,) if now == (0,) else (0,) for now in problem.current)
    assert problem.moves(crossed) == 2
    home = fewer_moves(problem, crossed, deadline=time.perf_counter() + 5)
    assert problem.moves(home) == 0 and problem.worst_spare(problem.loads(home)) == 40 * GiB


def test_a_wrong_proof_from_cp_sat_is_caught_by_the_layout_in_hand(monkeypatch):
    """With presolve's inclusion pass back on, OR-Tools 9.15 proves 15.5 GiB optimal on this fleet (google/or-tools#5293).
    Handed the 16 GiB layout as its start, the solve must keep it, not call it optimal, and keep the LP's bound."""
    gpus, seats = WRONG_PRESOLVE_FLEET
    problem = compile_problem(gpus, seats)
    made = cpsat._solver

    def as_before_the_fix(time_limit_s: float):
        solver = made(time_limit_s)
        solver.parameters.presolve_inclusion_work_limit = 100_000_000  # OR-Tools' default
        return solver

    monkeypatch.setattr(cpsat, "_solver", as_before_the_fix)
    assert cpsat.solve(problem, time_limit_s=5, start=None).layout.worst_spare_bytes == 31 * GiB // 2 + 123, "the bug is gone"
    expected = brute_force(gpus, seats)
    assert expected is not None and expected[0] == 16 * GiB + 123
    start = next(a for a in product(*problem.candidates) if problem.layout(a).worst_spare_bytes == expected[0])
    solved = cpsat.solve(problem, time_limit_s=5, start=start, bound_bytes=lp_bound(problem))
    assert solved.layout is not None and solved.layout.worst_spare_bytes == expected[0]
    assert not solved.optimal and solved.bound_bytes is not None and solved.bound_bytes >= expected[0]


def test_large_fleets_go_to_cp_sat_and_report_an_honest_bound():
    rng = random.Random(5)
    gpus = [GpuSlot(host=f"n{h}", index=i, capacity_bytes=94 * GiB, headroom_bytes=GiB // 2) for h in range(3) for i in range(4)]
    seats = [SeatDemand(name=f"s{n}", footprint_bytes=rng.randint(6 * GiB, 30 * GiB), gpu_count=2 if n < 3 else 1) for n in range(30)]
    result = place(gpus, seats, time_limit_s=4, runner_ups=1)
    assert result.method == "cp-sat"
    assert_valid(gpus, seats, result.best)
    assert result.bound_bytes >= result.best.worst_case_spare_bytes
    total = sum(s.footprint_bytes * s.gpu_count for s in seats)
    assert result.bound_bytes <= (sum(g.capacity_bytes for g in gpus) - total) // len(gpus)
    if result.optimal:
        assert result.bound_bytes == result.best.worst_case_spare_bytes


def test_an_exhaustive_search_cut_short_says_it_is_not_proven():
    rng = random.Random(9)
    gpus = [GpuSlot(host=h, index=i, capacity_bytes=80 * GiB) for h in ("a", "b") for i in range(4)]
    seats = [
        SeatDemand(name=f"s{n}", footprint_bytes=rng.randint(5 * GiB, 30 * GiB), current=[(rng.choice("ab"), rng.randrange(4))])
        for n in range(16)
    ]
    result = place(gpus, seats, method="exhaustive", time_limit_s=1e-9, runner_ups=0)
    assert not result.optimal and result.method == "exhaustive"
    assert result.bound_bytes is not None
    if result.best is not None:
        assert result.bound_bytes >= result.best.worst_case_spare_bytes


def mid_size_fleet(seed: int) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """Two hosts of three 80 GiB GPUs, ten seats, one TP=2, a pin, an avoid, a current layout for half."""
    rng = random.Random(seed)
    gpus = [GpuSlot(host=h, index=i, capacity_bytes=80 * GiB, headroom_bytes=GiB) for h in ("a", "b") for i in range(3)]
    keys = [(g.host, g.index) for g in gpus]
    seats = [SeatDemand(name="tp", footprint_bytes=rng.randint(20, 35) * GiB, gpu_count=2)]
    for n in range(9):
        seats.append(
            SeatDemand(
                name=f"s{n}",
                footprint_bytes=rng.randint(8, 40) * GiB + rng.randint(0, 1) * (GiB // 2),
                allowed=[keys[n % 6]] if n == 0 else ([k for k in keys if k != keys[1]] if n == 1 else None),
                current=[keys[rng.randrange(6)]] if n % 2 else [],
            )
        )
    return gpus, seats


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_cp_sat_agrees_with_exhaustive_on_mid_size_fleets(seed):
    gpus, seats = mid_size_fleet(seed)
    exhaustive = place(gpus, seats, method="exhaustive", runner_ups=0)
    solver = place(gpus, seats, method="cp-sat", runner_ups=2, time_limit_s=20)
    assert exhaustive.optimal
    assert exhaustive.best is not None and solver.best is not None
    assert_valid(gpus, seats, solver.best)
    assert (solver.best.worst_case_spare_bytes, solver.best.moves) == (exhaustive.best.worst_case_spare_bytes, exhaustive.best.moves)
    # The fleet path gives CP-SAT a share of wall time, so whether it also proves the layout within it depends on how
    # busy the machine is (CI's two cores, shared with the engine tests, often leave it unproven); what it claims holds.
    assert solver.bound_bytes is not None and solver.bound_bytes >= exhaustive.best.worst_case_spare_bytes
    if solver.optimal:
        assert solver.bound_bytes == exhaustive.best.worst_case_spare_bytes
    for alternative in solver.runner_ups:
        assert_valid(gpus, seats, alternative.placement)
        assert alternative.placement.worst_case_spare_bytes <= solver.best.worst_case_spare_bytes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_every_frontier_point_is_the_best_within_its_move_budget(fleet):
    gpus, seats = fleet
    result = place(gpus, seats, method="exhaustive", runner_ups=0)
    if result.best is None:
        return
    previous = None
    for point in result.frontier:
        assert point.proven and point.placement.moves <= max(point.max_moves, result.frontier[0].placement.moves)
        assert_valid(gpus, seats, point.placement)
        expected = brute_force(gpus, seats, max_moves=point.max_moves)
        assert (point.placement.worst_case_spare_bytes, point.placement.moves) == expected
        assert previous is None or point.placement.worst_case_spare_bytes >= previous
        previous = point.placement.worst_case_spare_bytes
    if result.frontier:
        last = result.frontier[-1].placement
        assert (last.worst_case_spare_bytes, last.moves) == (result.best.worst_case_spare_bytes, result.best.moves)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.integers(0, 3), st.integers(0, 50))
def test_local_search_stays_valid_and_within_its_move_budget(fleet, budget, seed):
    gpus, seats = fleet
    problem = compile_problem(gpus, seats)
    found = local_search(problem, deadline=time.perf_counter() + 2, max_moves=budget, seed=seed)
    if found is None:
        return
    assert problem.fits(list(found)) and all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(found))
    start = construct(problem, None, max_moves=budget)
    assert start is None or problem.moves(found) <= max(budget, problem.moves(start))
    expected = brute_force(gpus, seats)
    assert expected is not None and problem.worst_spare(problem.loads(found)) <= expected[0]


def twelve_gpus_and_their_plain_start(rng: random.Random):
    """Three 4-GPU hosts, 30 seats (three of them TP 2), and the plain largest-first layout (no trade made)."""
    gpus = [GpuSlot(host=f"n{h}", index=i, capacity_bytes=94 * GiB, headroom_bytes=GiB // 2) for h in range(3) for i in range(4)]
    seats = [SeatDemand(name=f"s{n}", footprint_bytes=rng.randint(4 * GiB, 24 * GiB), gpu_count=2 if n < 3 else 1) for n in range(30)]
    problem = compile_problem(gpus, seats)
    start = construct(problem, None)
    assert start is not None
    return gpus, seats, problem, start


def test_a_runner_up_better_than_the_best_becomes_the_best(rng):
    """On a fleet the best is found, not proven, and a runner-up's search (more seats kept apart) may find a better
    layout: handed a poor best (one largest-first start, no trade made), the runner-ups' searches beat it, and
    what comes back is a best that no runner-up beats, with runner-ups worked out from it."""
    gpus, seats, problem, start = twelve_gpus_and_their_plain_start(rng)
    poor = problem.layout(start)
    best, alternatives, promoted = solve._best_and_runner_ups(problem, "cp-sat", poor, 3, until=time.perf_counter() + 20, bound_bytes=None)
    assert_valid(gpus, seats, best)
    if problem.layout(improve(problem, start, deadline=time.perf_counter() + 5)) < poor:
        assert promoted and best.worst_case_spare_bytes >= poor.worst_spare_bytes
    for alternative in alternatives:
        assert_valid(gpus, seats, alternative.placement)
        assert (-alternative.placement.worst_case_spare_bytes, alternative.placement.moves) >= (-best.worst_case_spare_bytes, best.moves)


@pytest.mark.parametrize("draw", range(3))
def test_no_runner_up_beats_the_best_on_fleets(draw, rng):
    hosts, per_host = rng.randint(2, 4), rng.choice([4, 8])
    gpus = [GpuSlot(host=f"n{h}", index=i, capacity_bytes=rng.choice([80, 94, 141]) * GiB, headroom_bytes=GiB // 2)
            for h in range(hosts) for i in range(per_host)]
    seats = [SeatDemand(name=f"s{n}", footprint_bytes=rng.randint(2 * GiB, 40 * GiB), gpu_count=rng.choice([1, 1, 1, 2]))
             for n in range(rng.randint(hosts * per_host, hosts * per_host * 3))]
    result = place(gpus, seats, method="cp-sat", time_limit_s=3, runner_ups=3)
    if result.best is None:
        return
    assert_valid(gpus, seats, result.best)
    for alternative in result.runner_ups:
        assert (-alternative.placement.worst_case_spare_bytes, alternative.placement.moves) >= (-result.best.worst_case_spare_bytes, result.best.moves)


@pytest.mark.parametrize("near", [True, False])
def test_a_runner_ups_search_is_short_only_where_the_best_is_near_the_bound(near, rng, monkeypatch):
    """Within local.NEAR_BOUND_SHARE of the bound a runner-up's search gets RUNNER_UP_NEAR_MAX_ROUNDS rounds; further
    from it RUNNER_UP_MAX_ROUNDS, so a runner-up can still find a better best where the best falls short."""
    _, _, problem, start = twelve_gpus_and_their_plain_start(rng)
    best = problem.layout(start)
    # The best's worst-case spare is this share below the bound: inside the near band, or well outside it.
    below = rng.uniform(0.0, 0.8) * local.NEAR_BOUND_SHARE if near else rng.uniform(1.5, 10.0) * local.NEAR_BOUND_SHARE
    bound_bytes = int(best.worst_spare_bytes / (1 - below))
    budgets = []

    def spied(*args, **kwargs):
        budgets.append((kwargs["max_rounds"], kwargs["stall_min_rounds"]))
        return local_search(*args, **kwargs)

    monkeypatch.setattr(local, "search", spied)
    solve._runner_ups(problem, "cp-sat", best, to_placement(problem, best.assignment), 3, until=time.perf_counter() + 20,
                      bound_bytes=bound_bytes)
    expected = (solve.RUNNER_UP_NEAR_MAX_ROUNDS, solve.RUNNER_UP_NEAR_STALL_ROUNDS) if near else (solve.RUNNER_UP_MAX_ROUNDS, solve.RUNNER_UP_STALL_ROUNDS)
    assert budgets and set(budgets) == {expected}
    assert solve.RUNNER_UP_NEAR_MAX_ROUNDS < solve.RUNNER_UP_MAX_ROUNDS


def test_from_scratch_the_best_layouts_search_gets_three_quarters_of_the_limit(rng, monkeypatch):
    """With no seat running there is no frontier to work out, and the best layout's search may run until
    BEST_TIME_SHARE_FROM_SCRATCH of the limit (its LOCAL_SEARCH_SHARE of it): on the hardest fleets that search still
    gains late. Where seats run, the frontier keeps its FRONTIER_TIME_SHARE and the best keeps BEST_TIME_SHARE."""
    gpus, seats, _, _ = twelve_gpus_and_their_plain_start(rng)
    # At least 6 s: the LP bound runs before the search's deadline is set, and its first run in a busy worker (0.2 s
    # idle) must not eat the 0.15 of the limit that tells the two shares apart.
    time_limit_s = rng.uniform(6.0, 12.0)
    deadlines = []

    def spied(problem, *, deadline, **kwargs):
        deadlines.append(deadline - time.perf_counter())
        return local_search(problem, deadline=min(deadline, time.perf_counter() + 0.3), **kwargs)

    monkeypatch.setattr(local, "search", spied)
    place(gpus, seats, method="cp-sat", time_limit_s=time_limit_s, runner_ups=1)
    best_search_s = deadlines[0]
    assert solve.BEST_TIME_SHARE * solve.LOCAL_SEARCH_SHARE * time_limit_s < best_search_s
    assert best_search_s <= solve.BEST_TIME_SHARE_FROM_SCRATCH * solve.LOCAL_SEARCH_SHARE * time_limit_s
    assert solve._time_shares(True, True) == (solve.BEST_TIME_SHARE, solve.FRONTIER_TIME_SHARE)


@pytest.mark.parametrize("meets_the_bound", [True, False])
def test_on_a_cluster_near_the_bound_the_search_s_layout_stands_without_cp_sat(meets_the_bound, rng, monkeypatch):
    """A cluster-sized fleet (local.CLUSTER_SEATS lowered so 30 seats count) whose search ends within NEAR_BOUND_SHARE
    of the bound: no CP-SAT model, the search's first round is the layout, and it says optimal only where it meets the bound."""
    _, _, problem, _ = twelve_gpus_and_their_plain_start(rng)
    monkeypatch.setattr(local, "CLUSTER_SEATS", len(problem.seat_names) - 1)
    first = local_search(problem, deadline=float("inf"), max_rounds=1)
    assert first is not None
    worst = problem.layout(first).worst_spare_bytes
    bound_bytes = worst if meets_the_bound else int(worst / (1 - rng.uniform(0.1, 0.9) * local.NEAR_BOUND_SHARE))

    def no_model(*args, **kwargs):
        raise AssertionError("CP-SAT ran")

    monkeypatch.setattr(cpsat, "solve", no_model)
    solved = solve.solve_fleet(problem, until=time.perf_counter() + 30, bound_bytes=bound_bytes)
    assert solved.layout is not None and solved.layout.assignment == first
    assert solved.bound_bytes == bound_bytes and solved.optimal == meets_the_bound


def test_a_search_that_builds_no_start_leaves_cp_sat_the_rest_of_the_time(rng, monkeypatch):
    """Where the local search builds no start (largest-first fails on a nearly full fleet, and the search gives up within
    rounds), CP-SAT gets all the time left, not its share of the search's: on a 750-seat fleet plan said "no layout
    found within the 30 s time limit" after 6 s."""
    _, _, problem, _ = twelve_gpus_and_their_plain_start(rng)
    monkeypatch.setattr(local, "search", lambda *args, **kwargs: None)
    limits: list[float] = []
    solve_model = cpsat.solve

    def timed(*args, time_limit_s: float, **kwargs):
        limits.append(time_limit_s)
        return solve_model(*args, time_limit_s=min(time_limit_s, 5), **kwargs)

    monkeypatch.setattr(cpsat, "solve", timed)
    left_s = rng.uniform(60, 600)
    solve.solve_fleet(problem, until=time.perf_counter() + left_s, bound_bytes=None)
    assert len(limits) == 1 and limits[0] > left_s - 30  # the LP bound's share and the model's build before it


def test_a_cluster_s_runner_ups_each_move_apart_on_at_most_two_hosts(rng, monkeypatch):
    """On a cluster-sized fleet a runner-up is the layout before it with one seat of the bottleneck moved apart (alone or
    swapped) and a descent on the hosts that touched: it differs from the layout before on two hosts at most, keeps
    every rule and that pairing apart, and never beats the best."""
    hosts, per_host = rng.randint(3, 5), rng.choice([4, 8])
    gpus = [GpuSlot(host=f"n{h}", index=i, capacity_bytes=rng.choice([80, 94, 141]) * GiB, headroom_bytes=GiB // 2)
            for h in range(hosts) for i in range(per_host)]
    seats = [SeatDemand(name=f"s{n}", footprint_bytes=rng.randint(2 * GiB, 30 * GiB), gpu_count=rng.choice([1, 1, 1, 2]))
             for n in range(rng.randint(hosts * per_host, hosts * per_host * 2))]
    monkeypatch.setattr(local, "CLUSTER_SEATS", 1)
    result = place(gpus, seats, method="cp-sat", time_limit_s=10, runner_ups=3)
    if result.best is None:
        return
    assert_valid(gpus, seats, result.best)
    before = result.best
    for alternative in result.runner_ups:
        after = alternative.placement
        assert_valid(gpus, seats, after)
        assert (-after.worst_case_spare_bytes, after.moves) >= (-result.best.worst_case_spare_bytes, result.best.moves)
        changed = {host for name in after.assignment if sorted(after.assignment[name]) != sorted(before.assignment[name])
                   for host, _ in (*after.assignment[name], *before.assignment[name])}
        assert 1 <= len(changed) <= 2
        # The pairing it splits up: the seats on the lowest-spare GPU holding two or more in the layout before it.
        holding = {label: [name for name, where in before.assignment.items() if label in (f"{h}:{i}" for h, i in where)] for label in before.spare_bytes}
        label = min((label for label in holding if len(holding[label]) >= 2), key=lambda label: (before.spare_bytes[label], gpu_ref(label)))
        assert not set.intersection(*(set(map(tuple, after.assignment[name])) for name in holding[label]))
        before = after


def gpu_ref(label: str) -> tuple[str, int]:
    host, index = label.rsplit(":", 1)
    return host, int(index)
