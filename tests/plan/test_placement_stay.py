"""Fleet-scale speed without lost correctness (issue 33): the replan proof that nothing moves, checked against every
layout of small random fleets; the local search's early stop; runner-up starts that split the bottleneck pair."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from itertools import product

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seatplan.plan.placement import GpuSlot, SeatDemand, local, place
from seatplan.plan.placement.problem import Problem, bottleneck_group, compile_problem
from seatplan.plan.placement.stay import best_single_move, current_layout, nothing_moves

GiB = 1 << 30


@st.composite
def running_fleets(draw):
    """1–2 hosts of 2–3 GPUs, 2–6 seats (some tensor-parallel, some pinned), every seat running somewhere on its host."""
    host_count = draw(st.integers(1, 2))
    gpus = [
        GpuSlot(
            host=f"h{h}", index=i, capacity_bytes=draw(st.sampled_from([48 * GiB, 80 * GiB, 80 * GiB, 61 * GiB + 123])),
            headroom_bytes=draw(st.sampled_from([0, GiB // 2, 2 * GiB])), keep_clear=draw(st.integers(0, 6)) == 0,
        )
        for h in range(host_count)
        for i in range(draw(st.integers(2, 3)))
    ]
    keys = [(g.host, g.index) for g in gpus]
    seats = []
    for n in range(draw(st.integers(2, 6))):
        gpu_count = draw(st.sampled_from([1, 1, 1, 2]))
        host = draw(st.sampled_from(sorted({h for h, _ in keys})))
        on_host = [k for k in keys if k[0] == host]
        current = draw(st.lists(st.sampled_from(on_host), min_size=gpu_count, max_size=gpu_count, unique=True))
        allowed = None
        if draw(st.integers(0, 4)) == 0:
            allowed = sorted(set(draw(st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True))) | set(current))
        seats.append(SeatDemand(
            name=f"s{n}", footprint_bytes=draw(st.sampled_from([4, 8, 10, 16, 20, 30])) * GiB + draw(st.integers(0, 7)) * (GiB // 8),
            gpu_count=gpu_count, allowed=allowed, current=current,
        ))
    return gpus, seats


def every_layout(problem: Problem):
    """Every assignment of the problem's seats to their candidate GPU sets that fits."""
    for assignment in product(*problem.candidates):
        if problem.fits(list(assignment)):
            yield assignment


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running_fleets(), st.sampled_from([0, GiB // 4, GiB, 4 * GiB, 16 * GiB, 64 * GiB]))
def test_when_the_proof_says_nothing_moves_no_layout_is_worth_more(fleet, move_cost_bytes):
    gpus, seats = fleet
    problem = compile_problem(gpus, seats)
    stays = current_layout(problem)
    proof = nothing_moves(problem, move_cost_bytes=move_cost_bytes)
    if stays is None:
        assert proof is None
        return
    layouts = [problem.layout(assignment) for assignment in every_layout(problem)]
    one_move = [layout for layout in layouts if layout.moves == 1]
    single = best_single_move(problem, stays)
    # the single move is the exact best of all layouts one move away
    assert (single is None) == (not one_move)
    if single is not None:
        assert single.moves == 1 and single.worst_spare_bytes == max(layout.worst_spare_bytes for layout in one_move)
    stay_value = problem.layout(stays).worst_spare_bytes
    best_value = max(layout.worst_spare_bytes - move_cost_bytes * layout.moves for layout in layouts)
    if proof is not None:
        assert proof.current.assignment == stays and proof.current.moves == 0
        assert best_value <= stay_value, "a layout is worth more than staying, though the proof said nothing moves"
        assert all(layout.worst_spare_bytes <= proof.bound_bytes for layout in layouts)
    elif single is not None and single.worst_spare_bytes - move_cost_bytes > stay_value:
        assert best_value > stay_value  # the proof was refused because a move does pay


def fleet_of(rng: random.Random, hosts: int, gpus_per_host: int, seats: int) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """A fleet too large for the exhaustive search that fits by construction: each seat (every seventh a TP-2 one) is
    drawn at a tenth to a half of the room left on the GPUs of a random host that have the most."""
    gpus = [GpuSlot(host=f"n{h}", index=i, capacity_bytes=80 * GiB, headroom_bytes=GiB // 2) for h in range(hosts) for i in range(gpus_per_host)]
    room = {(gpu.host, gpu.index): gpu.capacity_bytes - gpu.headroom_bytes for gpu in gpus}
    demands = []
    for n in range(seats):
        count = 2 if n % 7 == 3 else 1
        host = f"n{rng.randrange(hosts)}"
        chosen = sorted((key for key in room if key[0] == host), key=lambda key: -room[key])[:count]
        size = int(min(room[key] for key in chosen) * rng.uniform(0.1, 0.5))
        for key in chosen:
            room[key] -= size
        demands.append(SeatDemand(name=f"s{n:02d}", footprint_bytes=size, gpu_count=count))
    return gpus, demands


def test_a_fleet_replanned_where_it_runs_keeps_its_layout_with_the_proof(rng):
    gpus, seats = fleet_of(rng, 3, 4, 24)
    first = place(gpus, seats, time_limit_s=10, runner_ups=0)
    assert first.best is not None
    running = [seat.model_copy(update={"current": first.best.assignment[seat.name]}) for seat in seats]
    grown = rng.randrange(len(running))
    running[grown] = running[grown].model_copy(update={"footprint_bytes": running[grown].footprint_bytes + rng.randrange(GiB)})
    problem = compile_problem(gpus, running)
    if current_layout(problem) is None:
        return  # the grown seat no longer fits where it runs: the full search decides
    result = place(gpus, running, time_limit_s=10, move_cost_bytes=64 * GiB)
    assert result.best is not None and result.best.moves == 0
    assert result.chosen_because.startswith("nothing moves: every seat fits where it runs")
    assert result.frontier[0].max_moves == 0 and all(point.proven for point in result.frontier)
    assert result.best.worst_case_spare_bytes <= (result.bound_bytes or 0)
    # the frontier's one-move point, when listed, is the best layout one move away
    if len(result.frontier) > 1:
        single = best_single_move(problem, current_layout(problem))
        assert single is not None and result.frontier[1].placement.worst_case_spare_bytes == single.worst_spare_bytes > result.best.worst_case_spare_bytes


def test_the_stalled_search_stops_by_itself_and_never_claims_more_than_it_holds(rng):
    gpus, seats = fleet_of(rng, 2, 5, 20)
    problem = compile_problem(gpus, seats)
    # an hour's deadline: only the stall rule can end these searches, and rounds (not seconds) decide, so twice is the same layout
    first = local.search(problem, deadline=time.perf_counter() + 3600)
    assert first is not None and problem.fits(list(first)) and all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(first))
    assert local.search(problem, deadline=time.perf_counter() + 3600) == first
    result = place(gpus, seats, time_limit_s=3600, runner_ups=1)
    assert result.best is not None and result.bound_bytes is not None
    assert result.best.worst_case_spare_bytes <= result.bound_bytes
    layout = problem.layout(tuple(tuple(sorted(problem.gpu_keys.index(tuple(key)) for key in result.best.assignment[name])) for name in problem.seat_names))
    assert layout.worst_spare_bytes == result.best.worst_case_spare_bytes and problem.fits(list(layout.assignment))
    # the plan's own search is the same seeded search, at least as patient (it knows the bound), then CP-SAT: never worse
    assert result.best.worst_case_spare_bytes >= problem.layout(first).worst_spare_bytes


def test_a_runner_up_starts_from_the_best_layout_with_the_bottleneck_pair_split(rng):
    gpus, seats = fleet_of(rng, 2, 5, 20)
    problem = compile_problem(gpus, seats)
    best = local.search(problem, deadline=time.perf_counter() + 3600)
    assert best is not None
    group = bottleneck_group(problem, best)
    if group is None:
        return
    constrained = replace(problem, apart=(group,))
    start = local.split_up(constrained, best, group)
    if start is None:
        return
    assert constrained.fits(list(start)) and constrained.keeps_apart(start)
    # One seat of the group moved, or swapped with one seat of the GPU it went to.
    assert sum(a != b for a, b in zip(start, best)) in (1, 2)
    assert not set.intersection(*(set(start[s]) for s in group))
    assert all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(start))
