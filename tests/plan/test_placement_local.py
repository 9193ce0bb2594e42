"""The local search's shortcuts against the plain search they stand for, on random fleets of many shapes.

A GPU that found no trade is later asked only about the GPUs changed since (``_State._changed_since``): the descent
must end where a search that asks every GPU about every partner every time ends. The groups of seats a GPU could trade
are cached by the seats on it, shared by a layout and its copies (``_State._cached``): every descent, kick and copy must
end where a search that caches nothing ends. A kick and a runner-up's start
(``split_up``) may swap seats on a nearly full fleet: every layout they make must keep every rule.
"""

from __future__ import annotations

import random
from dataclasses import replace

from seatplan.plan.placement import GpuSlot, SeatDemand, local
from seatplan.plan.placement.problem import Problem, bottleneck_group, compile_problem

GiB = 1 << 30
MiB = 1 << 20


class _LooksEverywhere(local._State):
    """The search without the shortcut: every GPU looks at every partner every time."""

    def _changed_since(self, gpu: int) -> frozenset[int] | None:
        return None


class _Forgetful(local._State):
    """The search without the cache: every group of seats worked out afresh each time it is asked for."""

    def _cached(self, key, build):
        return build()


def random_fleet(
    rng: random.Random, *, tensor_parallel_share: float = 0.2, allowed_share: float = 0.1
) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """1–4 hosts of 2–8 GPUs, odd capacities and headrooms, keep-clear GPUs, 60–100 % full, TP 2/4 seats, pins, avoids,
    seats running somewhere (some where they could not run any more)."""
    hosts = rng.randint(1, 4)
    per_host = rng.randint(2, 8)
    slots = [
        GpuSlot(
            host=f"h{h}", index=i, capacity_bytes=rng.choice([24, 48, 80, 96]) * GiB - rng.randrange(4 * GiB),
            headroom_bytes=rng.choice([0, GiB // 2, 2 * GiB]), keep_clear=rng.random() < 0.1,
        )
        for h in range(hosts)
        for i in range(per_host)
    ]
    open_slots = [slot for slot in slots if not slot.keep_clear] or slots[:1]
    supply = sum(slot.capacity_bytes - slot.headroom_bytes for slot in open_slots)
    fill = rng.uniform(0.6, 1.0)
    count = rng.randint(len(open_slots), 4 * len(open_slots))
    sizes = [rng.lognormvariate(0.0, rng.uniform(0.2, 0.9)) for _ in range(count)]
    scale = fill * supply / sum(sizes)
    smallest = min(slot.capacity_bytes - slot.headroom_bytes for slot in open_slots)
    keys = [(slot.host, slot.index) for slot in slots]
    seats = []
    for n, size in enumerate(sizes):
        gpu_count = rng.choice([2, 4]) if per_host >= 4 and rng.random() < tensor_parallel_share else 1
        allowed = None
        if rng.random() < allowed_share:
            allowed = rng.sample(keys, rng.randint(1, len(keys)))
        current: list[tuple[str, int]] = []
        if rng.random() < 0.5:
            host = f"h{rng.randrange(hosts)}"
            current = rng.sample([k for k in keys if k[0] == host], min(gpu_count, per_host))
        footprint = max(MiB, min(int(size * scale / gpu_count), smallest // 2)) + rng.randrange(MiB)
        seats.append(SeatDemand(name=f"s{n:03d}", footprint_bytes=footprint, gpu_count=gpu_count, allowed=allowed, current=current))
    return slots, seats


def assert_keeps_every_rule(problem: Problem, assignment: tuple) -> None:
    assert all(gpu_set in problem.candidates[s] for s, gpu_set in enumerate(assignment))
    assert problem.fits(list(assignment))
    assert problem.keeps_apart(assignment)


def drawn_problem(rng: random.Random, **shares: float) -> tuple[Problem, tuple] | None:
    """A random fleet (``shares`` as random_fleet's) with a valid start (randomized largest-first), sometimes with a group kept apart."""
    for _ in range(20):
        problem = compile_problem(*random_fleet(rng, **shares))
        if any(not options for options in problem.candidates):
            continue
        if rng.random() < 0.3 and len(problem.seat_names) >= 2:
            problem = replace(problem, apart=(tuple(sorted(rng.sample(range(len(problem.seat_names)), min(len(problem.seat_names), rng.randint(2, 3))))),))
        start = local.construct(problem, rng)
        if start is not None:
            return problem, start
    return None


def descend_alike(problem: Problem, state: local._State, plain: local._State) -> None:
    """One descent each from the same layout: the shortcut's must end where the plain search's ends, keeping every rule."""
    state.descend(float("inf"))
    plain.descend(float("inf"))
    assert state.assignment == plain.assignment
    assert state.spare == plain.spare and state.moves == plain.moves
    assert_keeps_every_rule(problem, tuple(state.assignment))


def test_looking_only_at_what_changed_ends_where_looking_everywhere_ends(rng):
    checked = 0
    for _ in range(25):
        drawn = drawn_problem(rng)
        if drawn is None:
            continue
        problem, start = drawn
        max_moves = rng.choice([None, None, rng.randint(0, len(problem.seat_names))])
        seed = rng.randrange(1 << 30)
        shortcut, everywhere = local._State(problem, start, max_moves), _LooksEverywhere(problem, start, max_moves)
        kicks_shortcut, kicks_everywhere = random.Random(seed), random.Random(seed)
        for _ in range(rng.randint(1, 4)):
            descend_alike(problem, shortcut, everywhere)
            shortcut.kick(kicks_shortcut)
            everywhere.kick(kicks_everywhere)
            assert_keeps_every_rule(problem, tuple(shortcut.assignment))
        checked += 1
    assert checked >= 10


def assert_cache_answers_as_fresh(state: local._State, rng: random.Random) -> None:
    """What the cache answers for this layout is what a state that caches nothing works out for it."""
    fresh = _Forgetful(state.problem, tuple(state.assignment), state.max_moves)
    gpus = range(len(state.problem.gpu_keys))
    for g in gpus:
        assert state._singles(g) == fresh._singles(g)
        assert state._bundles(g, pairs=True) == fresh._bundles(g, pairs=True) and state._bundles(g, pairs=False) == fresh._bundles(g, pairs=False)
        to, ideal_bytes = rng.choice(gpus), rng.randrange(64 * GiB)
        assert state._shedding(g, to, ideal_bytes) == fresh._shedding(g, to, ideal_bytes)
    for seat, here in enumerate(state.assignment):
        if state.problem.gpu_count[seat] > 1:
            # Where it is, and where it could be (another layout's copy may have moved it there).
            for where in [here, *rng.sample(state.problem.candidates[seat], min(3, len(state.problem.candidates[seat])))]:
                assert state._moves_from(seat, where) == fresh._moves_from(seat, where)


def test_the_cache_of_seat_groups_changes_no_trade(rng, monkeypatch):
    """Layouts and their copies go different ways (a kick each) while sharing the cache: each must end where the
    same steps end without a cache, with a cache large enough to keep everything and with one that starts afresh often."""
    checked = 0
    for draw in range(20):
        # Many tensor-parallel seats and allowed lists: the cached groups and moves depend on both.
        drawn = drawn_problem(rng, tensor_parallel_share=rng.uniform(0.1, 0.6), allowed_share=rng.uniform(0.1, 0.7))
        if drawn is None:
            continue
        problem, start = drawn
        monkeypatch.setattr(local, "GROUP_CACHE_ENTRIES", rng.choice([local.GROUP_CACHE_ENTRIES, rng.randint(1, 50)]))
        max_moves = rng.choice([None, None, rng.randint(0, len(problem.seat_names))])
        seed = rng.randrange(1 << 30)
        cached, forgetful = local._State(problem, start, max_moves), _Forgetful(problem, start, max_moves)
        kicks_cached, kicks_forgetful = random.Random(seed), random.Random(seed)
        for _ in range(rng.randint(1, 4)):
            descend_alike(problem, cached, forgetful)
            twin_cached, twin_forgetful = cached.copy(), forgetful.copy()
            twin_cached.kick(kicks_cached)
            twin_forgetful.kick(kicks_forgetful)
            descend_alike(problem, twin_cached, twin_forgetful)
            assert twin_cached.groups_cache is cached.groups_cache and not forgetful.groups_cache
            assert_cache_answers_as_fresh(cached, rng)
            assert_cache_answers_as_fresh(twin_cached, rng)
            cached, forgetful = (twin_cached, twin_forgetful) if draw % 2 else (cached, forgetful)
        checked += 1
    assert checked >= 10


def _moves_and_swaps_apart(problem: Problem, assignment: tuple, group: tuple[int, ...]) -> int:
    """How many single moves or one-for-one swaps take one seat of ``group`` off the GPUs it shares, keeping every rule
    (counted by trying each on the whole layout)."""
    shared = set.intersection(*(set(assignment[s]) for s in group))
    found = 0
    for seat in group:
        for gpu_set in problem.candidates[seat]:
            if shared & set(gpu_set):
                continue
            trials = [{seat: gpu_set}]
            if problem.gpu_count[seat] == 1:
                trials += [{seat: gpu_set, other: assignment[seat]} for other, there in enumerate(assignment)
                           if there == gpu_set and other not in group and assignment[seat] in problem.candidates[other]]
            for trial in trials:
                moved = tuple(trial.get(s, where) for s, where in enumerate(assignment))
                if problem.fits(list(moved)) and problem.keeps_apart(moved):
                    found += 1
    return found


def test_a_runner_ups_start_moves_or_swaps_one_seat_apart_whenever_one_can(rng):
    tried = 0
    for _ in range(40):
        drawn = drawn_problem(rng)
        if drawn is None:
            continue
        problem, start = drawn
        layout = tuple(local.improve(problem, start, deadline=float("inf")))
        group = bottleneck_group(problem, layout)
        if group is None:
            continue
        constrained = replace(problem, apart=problem.apart + (group,))
        split = local.split_up(constrained, layout, group)
        possible = _moves_and_swaps_apart(constrained, layout, group)
        assert (split is not None) == (possible > 0)
        if split is not None:
            assert_keeps_every_rule(constrained, split)
            assert sum(a != b for a, b in zip(split, layout)) in (1, 2)
            assert not set.intersection(*(set(split[s]) for s in group))
        tried += 1
    assert tried >= 10


def _spares(problem: Problem, assignment: tuple) -> list[int]:
    return [capacity - load for capacity, load in zip(problem.capacity_bytes, problem.loads(assignment))]


def test_a_descent_within_some_hosts_trades_only_among_them(rng):
    """``improve(within=...)`` (a cluster's runner-ups, host by host) moves only seats on those hosts and only among their
    GPUs, keeps every rule, never lowers the lowest spare there, and with every GPU given is the plain descent."""
    checked = 0
    for _ in range(30):
        drawn = drawn_problem(rng)
        if drawn is None:
            continue
        problem, start = drawn
        hosts = sorted({host for host, _ in problem.gpu_keys})
        chosen = set(rng.sample(hosts, rng.randint(1, len(hosts))))
        within = [g for g, (host, _) in enumerate(problem.gpu_keys) if host in chosen]
        found = local.improve(problem, start, deadline=float("inf"), within=within)
        assert_keeps_every_rule(problem, found)
        for before, after in zip(start, found):
            if before != after:
                assert set(before) | set(after) <= set(within)
        open_within = [g for g in within if not problem.keep_clear[g]]
        if open_within:
            assert min(_spares(problem, found)[g] for g in open_within) >= min(_spares(problem, start)[g] for g in open_within)
        everywhere = range(len(problem.gpu_keys))
        assert local.improve(problem, start, deadline=float("inf"), within=everywhere) == local.improve(problem, start, deadline=float("inf"))
        checked += 1
    assert checked >= 10


def test_on_a_cluster_the_search_stops_once_near_the_bound(rng, monkeypatch):
    """Counted in rounds: on a cluster-sized fleet (more than local.CLUSTER_SEATS seats; lowered here so a small fleet
    counts) a search whose first round ends within NEAR_BOUND_SHARE of the bound stops there; a smaller fleet, or a
    cluster further from the bound, searches on as before."""
    descents = []
    descend = local._State.descend

    def counted(state: local._State, deadline: float) -> None:
        descents.append(1)
        descend(state, deadline)

    monkeypatch.setattr(local._State, "descend", counted)

    def rounds(problem: Problem, target_bytes: int) -> int:
        """Rounds run, up to two: a search that goes on past its first round is all the point needs (a full search
        towards an unreachable target waits out its patience: minutes on a loaded worker)."""
        descents.clear()
        local.search(problem, deadline=float("inf"), target_bytes=target_bytes, max_rounds=2)
        return len(descents)

    checked = 0
    for _ in range(40):
        drawn = drawn_problem(rng)
        if drawn is None or local.construct(drawn[0], None) is None:
            continue
        problem = drawn[0]
        first = local.search(problem, deadline=float("inf"), max_rounds=1)
        assert first is not None
        worst = problem.worst_spare(problem.loads(first))
        near = int(worst / (1 - rng.uniform(0.1, 0.9) * local.NEAR_BOUND_SHARE))
        if worst < 1 << 20 or not worst < near or not local.near_bound(worst, near):
            continue
        seats = len(problem.seat_names)
        monkeypatch.setattr(local, "CLUSTER_SEATS", seats - 1)
        assert rounds(problem, near) == 1
        assert rounds(problem, int(worst / (1 - rng.uniform(2, 10) * local.NEAR_BOUND_SHARE))) == 2
        monkeypatch.setattr(local, "CLUSTER_SEATS", seats)
        assert rounds(problem, near) == 2
        checked += 1
    assert checked >= 10
