"""Local search: randomized largest-first starts, then trades that relieve the tightest GPU.

Fleet-sized problems are solved here first (CP-SAT then closes what is left and proves bounds).
Each round builds a layout largest seat first onto the GPU (set) left with the most spare, in an
order jittered by a seeded random generator, or kicks a few seats off the tightest GPUs of the best
layout so far; then trades seats between the lowest-spare GPU and the others until no trade helps.
A trade moves one or two seats off a GPU, possibly taking one or two back (a swap), or moves a
tensor-parallel seat to another GPU set, each GPU it takes sending a group of single-GPU seats
back to one it leaves. Under a move budget only the worst GPUs are relieved. Every trade keeps the layout valid (allowed GPU
sets, headroom, apart groups, the move budget) and raises the lower of the spares it touches,
which makes the sorted list of all spares lexicographically larger, so every descent ends.
"""

from __future__ import annotations

import random
import time
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence
from itertools import combinations
from typing import Any, TypeVar

from seatplan.plan.placement.problem import GpuSet, Problem

Trade = list[tuple[int, GpuSet]]  # (seat, its new GPU set)
Cached = TypeVar("Cached")
Bundle = tuple[list[int], int, frozenset[int]]  # single-GPU seats moving together, their bytes, the GPUs each of them may take

ORDER_JITTER = 0.25  # a seat's demand is scaled by up to this much either way when ordering a randomized start
# Seats a kick moves off the tightest GPUs: at least KICKED_SEATS, one per GPUS_PER_KICKED_SEAT GPUs on larger fleets,
# whose tight GPUs are more (measured on 64-GPU fleets, docs/benchmarks.md: 3 left two of ten stuck at 99.36 % for
# 170-270 rounds, 5 reached 99.5 % within 35-70 rounds; on 16-32 GPUs 3 gives the better layouts).
KICKED_SEATS = 3
GPUS_PER_KICKED_SEAT = 11
STALL_ROUNDS_PER_SEAT = 20  # rounds in a row without a better layout (or any layout), per seat, before giving up early
# The search has stalled, and stops before its deadline, once it has gone this many rounds without a better layout.
# Counted in rounds, not seconds, so the layout found does not depend on how busy the machine is. A small fleet's
# rounds are cheap, so it gets more of them: STALL_SEAT_ROUNDS ÷ seats when that is more (48 for 50 seats).
STALL_MIN_ROUNDS = 12
STALL_SEAT_ROUNDS = 2400
# Further than this share below the bound it was given, the search is this many times as patient, and waits at least
# as many rounds as it took to find its best (a search that keeps finding better layouts keeps going): the last
# tenth of a percent is not worth waiting for, a whole percent is. Measured on 64-GPU fleets (docs/benchmarks.md):
# 3 gave up at 99.36 % after 6 s where 30 reaches 99.57 % after 19 s; fleets near the bound stop as soon as before.
NEAR_BOUND_SHARE = 0.005
FAR_PATIENCE_FACTOR = 30
# Fleets of more seats than this are cluster-sized. A round there costs seconds (256 GPUs and 750 seats: the first
# descent 4 s, each later round 1.2-2.9 s), and the first descent already ends within a fifth of a percent of the bound:
# so the search stops as soon as its best is provably near the bound (within NEAR_BOUND_SHARE of the LP bound), and
# the plan leaves CP-SAT out there and works its runner-ups out host by host (solve.py). Fleets up to this size (the
# 16-64-GPU fleets of docs/benchmarks.md, 50-200 seats) search as before.
CLUSTER_SEATS = 200
ROUNDS_PER_RESTART = 6  # kicks from the best layout between two fresh randomized starts
ALL_SUBSETS_UP_TO = 7  # seats on a GPU; beyond this a tensor-parallel trade tries only some groups of them
# Entries in a search's cache of seat groups (a group's bytes and where it may go depend only on which seats are on a
# GPU, which the search asks about thousands of times between two trades); past this many it starts afresh.
GROUP_CACHE_ENTRIES = 200_000


def near_bound(worst_spare_bytes: int, bound_bytes: int | None) -> bool:
    """Whether a worst-case spare is within NEAR_BOUND_SHARE of the bound (False without a bound): the line the search's
    patience, CP-SAT's time and the runner-ups' rounds are drawn at."""
    return bound_bytes is not None and worst_spare_bytes >= bound_bytes * (1 - NEAR_BOUND_SHARE)


def is_cluster(problem: Problem) -> bool:
    """Whether a fleet is cluster-sized (more than CLUSTER_SEATS seats): where a round of the search costs seconds."""
    return len(problem.seat_names) > CLUSTER_SEATS


def search(
    problem: Problem,
    *,
    deadline: float,
    start: tuple[GpuSet, ...] | None = None,
    max_moves: int | None = None,
    target_bytes: int | None = None,
    seed: int = 1,
    stall_min_rounds: int | None = None,
    max_rounds: int | None = None,
) -> tuple[GpuSet, ...] | None:
    """The best layout found by the deadline (``start`` first, if given and valid), or None when no start could be built.

    With ``max_moves`` no trade takes the layout past that many seats away from where they run.
    It stops early on reaching ``target_bytes`` (a proven bound: nothing better exists) or once it has
    stalled (``stall_min_rounds`` rounds without a better layout, by default STALL_MIN_ROUNDS or STALL_SEAT_ROUNDS ÷
    seats; more while far below ``target_bytes``), and after ``max_rounds`` rounds when given. On a cluster-sized
    fleet (``is_cluster``) it also stops once within NEAR_BOUND_SHARE of ``target_bytes`` (without a move budget).
    """
    rng = random.Random(seed)
    best: _State | None = None
    round_number = stalled = improved_at = 0
    least_patience = max(STALL_MIN_ROUNDS, STALL_SEAT_ROUNDS // max(1, len(problem.seat_names))) if stall_min_rounds is None else stall_min_rounds
    while True:
        fresh = round_number - (start is not None)  # rounds since the given start: 0 is the plain largest-first start
        if start is not None and fresh < 0:
            candidate: _State | None = _State(problem, start, max_moves)
        elif best is None or fresh % (ROUNDS_PER_RESTART + 1) == 0:
            layout = construct(problem, rng if fresh else None, max_moves=max_moves)
            candidate = None if layout is None else _State(problem, layout, max_moves)
        else:
            candidate = best.copy()
            candidate.kick(rng)
        if candidate is not None:
            candidate.descend(deadline)
            if best is None or candidate.cost() < best.cost():
                best, stalled, improved_at = candidate, -1, round_number
        round_number += 1
        stalled += 1
        patience = least_patience
        # (Under a move budget the bound is the unbudgeted one, which the budget may put out of reach: no reason to wait.)
        if best is not None and target_bytes is not None and max_moves is None and not near_bound(-best.cost()[0], target_bytes):
            patience = FAR_PATIENCE_FACTOR * max(least_patience, improved_at)
        if time.perf_counter() >= deadline or stalled > min(STALL_ROUNDS_PER_SEAT * len(problem.seat_names), patience):
            break
        if max_rounds is not None and round_number >= max_rounds:
            break
        if best is not None and max_moves is None and is_cluster(problem) and near_bound(-best.cost()[0], target_bytes):
            break
        if best is not None and target_bytes is not None and -best.cost()[0] >= target_bytes:
            break
    return None if best is None else tuple(best.assignment)


def improve(
    problem: Problem, assignment: tuple[GpuSet, ...], *, deadline: float, max_moves: int | None = None, within: Collection[int] | None = None
) -> tuple[GpuSet, ...]:
    """One descent from ``assignment`` (which must be valid): a layout at least as good.

    With ``within`` (GPUs, whole hosts) only the seats on those GPUs trade, and only among them: once seats are split
    among hosts, each host's layout is its own problem, and the rest of the fleet stays as it is."""
    state = _State(problem, assignment, max_moves, within=within)
    state.descend(deadline)
    return tuple(state.assignment)


def construct(problem: Problem, rng: random.Random | None, *, max_moves: int | None = None) -> tuple[GpuSet, ...] | None:
    """Largest seat first onto the GPU set left with the most spare; None when a seat finds no room.

    Seats that could stay where they run do so first when there is a move budget, so the start
    spends none of it. With ``rng`` the order is jittered and ties broken at random.
    """
    seat_count = len(problem.seat_names)
    load = [0] * len(problem.gpu_keys)
    chosen: list[GpuSet | None] = [None] * seat_count

    groups_of = _groups_of(problem)

    def breaks_apart(seat: int, gpu_set: GpuSet) -> bool:
        for group in groups_of.get(seat, ()):
            others = [chosen[member] for member in group if member != seat]
            if all(other is not None for other in others) and set(gpu_set).intersection(*(set(other) for other in others if other)):
                return True
        return False

    def take(seat: int, gpu_set: GpuSet) -> None:
        chosen[seat] = gpu_set
        for g in gpu_set:
            load[g] += problem.footprint_bytes[seat]

    if max_moves is not None:
        for seat, now in enumerate(problem.current):
            if now is not None and now in problem.candidates[seat] and all(
                load[g] + problem.footprint_bytes[seat] <= problem.usable_bytes(g) for g in now
            ):
                take(seat, now)

    def weight(seat: int) -> float:
        jitter = 1.0 if rng is None else rng.uniform(1.0 - ORDER_JITTER, 1.0 + ORDER_JITTER)
        # Seats with few GPU sets to choose from go first: later they might find them taken.
        return -problem.demand_bytes(seat) * jitter * (4.0 if len(problem.candidates[seat]) <= 2 else 1.0)

    for seat in sorted((s for s in range(seat_count) if chosen[s] is None), key=weight):
        size = problem.footprint_bytes[seat]
        best_set, best_left = None, None
        for gpu_set in problem.candidates[seat]:
            if any(load[g] + size > problem.usable_bytes(g) for g in gpu_set) or breaks_apart(seat, gpu_set):
                continue
            left = min(problem.capacity_bytes[g] - load[g] - size for g in gpu_set)
            if rng is not None:
                left += rng.randrange(1 << 20)  # random tie-break among sets within a MiB of each other
            if best_left is None or left > best_left:
                best_set, best_left = gpu_set, left
        if best_set is None:
            return None
        take(seat, best_set)
    assignment = tuple(gpu_set for gpu_set in chosen if gpu_set is not None)
    return assignment if len(assignment) == seat_count else None


def split_up(problem: Problem, assignment: tuple[GpuSet, ...], group: tuple[int, ...]) -> tuple[GpuSet, ...] | None:
    """``assignment`` with one seat of ``group`` moved off the GPU the group shares, where that leaves the most spare:
    a valid start for a runner-up search (``problem`` already keeps ``group`` apart), or None when no such move fits.

    On a nearly full fleet no GPU has room for a whole seat, so a single-GPU seat may also swap places with a seat of
    the GPU it goes to."""
    shared = set.intersection(*(set(assignment[s]) for s in group))
    load = problem.loads(assignment)
    size = problem.footprint_bytes
    best: tuple[int, tuple[GpuSet, ...]] | None = None
    for moved in _split_moves(problem, assignment, group, shared):
        touched = {g for s in moved for g in (*assignment[s], *moved[s])}
        after = {g: load[g] - sum(size[s] for s in moved if g in assignment[s]) + sum(size[s] for s in moved if g in moved[s])
                 for g in touched}
        if any(after[g] > problem.usable_bytes(g) for g in touched):
            continue
        # The lowest spare among the GPUs the trade fills: the others only gain.
        filled = [g for g in touched if after[g] > load[g]] or list(touched)
        left = min(problem.capacity_bytes[g] - after[g] for g in filled)
        if best is not None and left <= best[0]:
            continue
        candidate = tuple(moved.get(s, gpu_set) for s, gpu_set in enumerate(assignment))
        if problem.keeps_apart(candidate):
            best = (left, candidate)
    return None if best is None else best[1]


def _split_moves(problem: Problem, assignment: tuple[GpuSet, ...], group: tuple[int, ...], shared: set[int]) -> list[dict[int, GpuSet]]:
    """Each way one seat of ``group`` leaves the GPUs the group shares: alone to a GPU set with room, or (a
    single-GPU seat) swapped with a single-GPU seat of the GPU it goes to."""
    on_gpu: list[list[int]] = [[] for _ in problem.gpu_keys]
    for other, gpu_set in enumerate(assignment):
        if problem.gpu_count[other] == 1:
            on_gpu[gpu_set[0]].append(other)
    ways: list[dict[int, GpuSet]] = []
    for seat in group:
        here = assignment[seat]
        for gpu_set in problem.candidates[seat]:
            if shared & set(gpu_set):
                continue
            ways.append({seat: gpu_set})
            if problem.gpu_count[seat] == 1:
                ways += [{seat: gpu_set, other: here} for other in on_gpu[gpu_set[0]]
                         if other not in group and here in problem.candidates[other]]
    return ways


def fewer_moves(problem: Problem, assignment: tuple[GpuSet, ...], *, deadline: float) -> tuple[GpuSet, ...]:
    """Send seats back where they run now, directly or by swapping with a seat that is away from home too.

    Every step keeps each GPU it fills at or above the layout's worst-case spare (and its
    headroom), so the worst-case spare never drops, and takes at least one move away.
    """
    state = _State(problem, assignment)
    floor = problem.worst_spare(problem.loads(assignment))
    while time.perf_counter() < deadline and state.send_one_home(floor):
        pass
    return tuple(state.assignment)


def homeward(problem: Problem, assignment: tuple[GpuSet, ...], budgets: list[int], *, deadline: float) -> dict[int, tuple[GpuSet, ...]]:
    """From a layout with many moves, send seats home one step at a time, each step the one that costs the least
    worst-case spare; the layout at each budget on the way down (the frontier seen from the top)."""
    state = _State(problem, assignment)
    found: dict[int, tuple[GpuSet, ...]] = {}
    for budget in sorted(budgets, reverse=True):
        while state.moves > budget and time.perf_counter() < deadline and state.send_cheapest_home():
            pass
        if state.moves <= budget:
            found[budget] = tuple(state.assignment)
    return found


def _subsets(seats: list[int], size: tuple[int, ...]) -> list[tuple[list[int], int]]:
    """Every group of ``seats`` (the empty one included) with its bytes."""
    groups: list[tuple[list[int], int]] = [([], 0)]
    for seat in seats:
        groups += [(members + [seat], total + size[seat]) for members, total in groups]
    return groups


def _any_pair_at_most(spare: list[int], pairs: tuple[tuple[int, int], ...], total_bytes: int) -> bool:
    for one, other in pairs:
        if spare[one] + spare[other] <= total_bytes:
            return True
    return False


_NOBODY: Bundle = ([], 0, frozenset())


def _groups_of(problem: Problem) -> dict[int, list[tuple[int, ...]]]:
    groups_of: dict[int, list[tuple[int, ...]]] = {}
    for group in problem.apart:
        for seat in group:
            groups_of.setdefault(seat, []).append(group)
    return groups_of


class _State:
    """A layout being improved: its assignment, each GPU's spare and seats, and its moves."""

    def __init__(
        self, problem: Problem, assignment: tuple[GpuSet, ...], max_moves: int | None = None, *, within: Collection[int] | None = None
    ) -> None:
        self.problem = problem
        # The GPUs trades may touch (``improve``'s ``within``): every open GPU unless given.
        self.within = None if within is None else frozenset(within)
        self.max_moves = max_moves
        self.assignment = list(assignment)
        load = problem.loads(assignment)
        self.spare = [c - used for c, used in zip(problem.capacity_bytes, load)]
        self.on_gpu: list[set[int]] = [set() for _ in problem.gpu_keys]
        for seat, gpu_set in enumerate(assignment):
            for g in gpu_set:
                self.on_gpu[g].add(seat)
        self.seats_on = [tuple(sorted(seats)) for seats in self.on_gpu]  # the cache's keys
        # Shared with every copy: what it holds depends only on the problem and the seats its keys name.
        self.groups_cache: dict[tuple, Any] = {}
        self.moves = problem.moves(assignment)
        self.open = problem.open_gpus if self.within is None else tuple(g for g in problem.open_gpus if g in self.within)
        self.single_gpus = [
            frozenset(gpu_set[0] for gpu_set in options if self.within is None or gpu_set[0] in self.within) if problem.gpu_count[s] == 1
            else frozenset()
            for s, options in enumerate(problem.candidates)
        ]
        self.groups_of = _groups_of(problem)
        # Which GPUs changed since a GPU last found no trade: a trade for it can only involve those, so it is looked
        # for among them alone (the layout found is the same, the search much cheaper). Trades change the clock.
        self.clock = 0
        self.changed_at = [0] * len(problem.gpu_keys)
        self.failed_at = [-1] * len(problem.gpu_keys)

    def copy(self) -> _State:
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.assignment = list(self.assignment)
        twin.spare = list(self.spare)
        twin.on_gpu = [set(seats) for seats in self.on_gpu]
        twin.seats_on = list(self.seats_on)
        twin.changed_at = list(self.changed_at)
        twin.failed_at = list(self.failed_at)
        return twin

    def cost(self) -> tuple[int, int]:
        """As ``Layout.cost``, smaller is better: the negated worst-case spare, then the moves."""
        return (-min((self.spare[g] for g in self.open), default=0), self.moves)

    def descend(self, deadline: float) -> None:
        while time.perf_counter() < deadline and self.relieve_lowest():
            pass

    def kick(self, rng: random.Random) -> None:
        """Move a few seats off the tightest GPUs to random GPUs that take them (the worst-case spare may drop)."""
        problem = self.problem
        tight = sorted(self.open, key=lambda g: self.spare[g])[: max(2, len(self.open) // 8)]
        seats = sorted({s for g in tight for s in self.on_gpu[g] if problem.gpu_count[s] == 1})
        kicked = max(KICKED_SEATS, len(self.open) // GPUS_PER_KICKED_SEAT)
        for seat in rng.sample(seats, min(kicked, len(seats))):
            here = self.assignment[seat]
            targets = sorted(g for g in self.single_gpus[seat] if (g,) != here)
            rng.shuffle(targets)
            for g in targets:
                # On a nearly full fleet no GPU has room for a whole seat: it swaps places with one there instead.
                others = sorted(u for u in self.on_gpu[g] if problem.gpu_count[u] == 1 and here[0] in self.single_gpus[u])
                rng.shuffle(others)
                alone: Trade = [(seat, (g,))]
                trades = [alone] + [alone + [(u, here)] for u in others]
                trade = next((trade for trade in trades if self._fits(trade) and self._allowed(trade)), None)
                if trade is not None:
                    self._apply(trade)
                    break

    def _fits(self, trade: Trade) -> bool:
        headroom = self.problem.headroom_bytes
        return all(self.spare[g] + change >= headroom[g] for g, change in self._delta(trade).items())

    def relieve_lowest(self) -> bool:
        """Apply the best trade for the lowest-spare GPU that has one; False when none of the lowest quarter has.

        Under a move budget only the GPUs at the worst-case spare are relieved: a move spent on a GPU
        above it buys no spare and may be the one the worst GPU needs later.
        """
        lowest = sorted(self.open, key=lambda g: (self.spare[g], g))[: max(8, len(self.open) // 4)]
        if self.max_moves is not None and lowest:
            lowest = [g for g in lowest if self.spare[g] == self.spare[lowest[0]]]
        for gpu in lowest:
            trade = self._best_trade(gpu, self._changed_since(gpu))
            if trade is not None:
                self._apply(trade)
                return True
            self.failed_at[gpu] = self.clock
        return False

    def _changed_since(self, gpu: int) -> frozenset[int] | None:
        """The GPUs changed since ``gpu`` last found no trade, or None when it must look everywhere (it changed itself,
        or never looked)."""
        failed = self.failed_at[gpu]
        if failed < 0 or self.changed_at[gpu] > failed:
            return None
        return frozenset(g for g in self.open if self.changed_at[g] > failed)

    def _best_trade(self, gpu: int, changed: frozenset[int] | None = None) -> Trade | None:
        """The trade that leaves the most spare on the lower of ``gpu`` and its partner, if that beats ``gpu``'s spare now.

        The cheap trades first: single seats moved or swapped one for one, then tensor-parallel seats
        traded against groups, then pairs of seats; the first kind that helps is taken. With ``changed`` (``gpu`` found
        no trade before and only these GPUs changed since) only trades with them are looked at: any other was there before.
        """
        problem = self.problem
        if changed is not None and not changed:
            return None
        partners = self.open if changed is None else sorted(changed)
        floor = self.spare[gpu]
        best_gain, best = self._best_exchange(gpu, floor, None, pairs=False, partners=partners)
        if best is not None:
            return best
        for seat in sorted(self.on_gpu[gpu]):
            if problem.gpu_count[seat] > 1:
                best_gain, best = self._best_tensor_parallel_move(seat, best_gain, best, changed)
        if best is not None:
            return best
        best = self._best_exchange(gpu, floor, None, pairs=True, partners=partners)[1]
        return best if best is not None else self._best_subset_exchange(gpu, partners)

    def _best_subset_exchange(self, gpu: int, partners: Sequence[int]) -> Trade | None:
        """Any group of ``gpu``'s single-GPU seats for any group of a partner's, the two groups' sizes differing by as
        close to half the partners' spare difference as there is: on a nearly full fleet only such exact trades help.

        Each partner's group sizes are sorted once, so every group of ``gpu``'s finds its best counterpart by bisection.
        The seats are taken in the order their GPU's set holds them (which decides which of more than ALL_SUBSETS_UP_TO
        take part), not by number: the layouts found stay the ones measured in docs/benchmarks.md.
        """
        problem, spare, single_gpus = self.problem, self.spare, self.single_gpus
        floor = spare[gpu]
        best_gain, best, best_partner = floor, None, -1
        ours = [s for s in self.on_gpu[gpu] if problem.gpu_count[s] == 1][:ALL_SUBSETS_UP_TO]
        for partner in self._roomiest_first(partners):
            # Balanced, two GPUs keep at best the average of their spares (and the partners after this one have less).
            at_most = (floor + spare[partner]) // 2
            if at_most < best_gain:
                break
            if partner == gpu or (at_most == best_gain and not partner < best_partner):
                continue
            leaving = self._subsets_of(tuple(s for s in ours if partner in single_gpus[s]))
            arriving, arriving_bytes = self._sorted_subsets_of(
                tuple([s for s in self.on_gpu[partner] if problem.gpu_count[s] == 1 and gpu in single_gpus[s]][:ALL_SUBSETS_UP_TO])
            )
            ideal = (spare[partner] - floor) // 2
            for out_seats, out_bytes in leaving:
                at = bisect_left(arriving_bytes, out_bytes - ideal)
                for in_seats, in_bytes in arriving[max(0, at - 1) : at + 1]:
                    shift = out_bytes - in_bytes
                    gain = min(floor + shift, spare[partner] - shift)
                    if shift <= 0 or gain < best_gain or (gain == best_gain and not partner < best_partner) \
                            or spare[partner] - shift < problem.headroom_bytes[partner]:
                        continue
                    trade: Trade = [(s, (partner,)) for s in out_seats]
                    trade += [(s, (gpu,)) for s in in_seats]
                    if self._allowed(trade):
                        best_gain, best, best_partner = gain, trade, partner
        return best

    def _best_tensor_parallel_move(
        self, seat: int, best_gain: int, best: Trade | None, changed: frozenset[int] | None = None
    ) -> tuple[int, Trade | None]:
        """Move a tensor-parallel seat to another GPU set, each GPU it takes sending a group of single-GPU seats to one it leaves.

        On a busy fleet no GPU has room for a large tensor-parallel seat on top of what it holds;
        trading it against small seats going the other way is what moves it at all. With ``changed`` only the moves
        that touch a changed GPU are looked at (as in ``_best_trade``).
        """
        spare = self.spare
        size = self.problem.footprint_bytes[seat]
        here = self.assignment[seat]
        only_changed = changed is not None and changed.isdisjoint(here)
        best_here = max(spare[g] for g in here)
        sent_back: dict[tuple[int, int], tuple[list[int], int] | None] = {}  # (GPU left, GPU taken) → its best group
        for host_gpus, elsewhere, moves in self._moves_from(seat, here):
            if only_changed:
                assert changed is not None
                if changed.isdisjoint(host_gpus):
                    continue
                moves = [(target, swapped) for target, swapped in moves if not changed.isdisjoint(target)]
            # On another host every GPU taken pairs with one left: where too few of that host's GPUs could balance even
            # the roomiest GPU left above the best so far, no move there passes the check below (a fleet of many hosts
            # skips most of its moves here).
            if elsewhere and sum(2 * best_gain - spare[g] < best_here for g in host_gpus) < len(here):
                continue
            for target, swapped in moves:
                # Balanced, a pair of GPUs keeps at best the average of their spares: skip targets that cannot help.
                if _any_pair_at_most(spare, swapped, 2 * best_gain):
                    continue
                trade: Trade = [(seat, target)]
                for left, taken in swapped:
                    if (left, taken) not in sent_back:
                        sent_back[left, taken] = self._best_group_back(size, left, taken)
                    group = sent_back[left, taken]
                    if group is None or group[1] <= best_gain:
                        break
                    trade += [(s, (left,)) for s in group[0]]
                else:
                    gain = self._gain(trade)
                    if gain > best_gain:
                        best_gain, best = gain, trade
        return best_gain, best

    def _best_group_back(self, size: int, left: int, taken: int) -> tuple[list[int], int] | None:
        """The group of seats ``taken`` sends to ``left`` when a seat of ``size`` goes the other way: the one leaving the
        most spare on the lower of the two, with that spare; None when no group keeps both within their headroom."""
        headroom = self.problem.headroom_bytes
        room_left, room_taken = self.spare[left] + size, self.spare[taken] - size
        least_left, least_taken = headroom[left], headroom[taken]
        best: tuple[list[int], int] | None = None
        for group, group_bytes in self._shedding(taken, left, (room_left - room_taken) // 2):
            after_left, after_taken = room_left - group_bytes, room_taken + group_bytes
            if after_left < least_left or after_taken < least_taken:
                continue
            lower = after_left if after_left < after_taken else after_taken
            if best is None or lower > best[1]:
                best = (group, lower)
        return best

    def _shedding(self, gpu: int, to: int, ideal_bytes: int) -> list[tuple[list[int], int]]:
        """Groups of single-GPU seats ``gpu`` could send to ``to``: every subset when there are few, else none, any
        one or two, and largest first up to ``ideal_bytes``. A large seat often fits only for a narrow range of bytes
        sent back, which only an exact subset hits. Seats of equal size go by number (the order of the cache's key)."""
        size = self.problem.footprint_bytes
        seats = self.seats_on[gpu]
        may_go = self._cached(("may go", seats, to), lambda: sorted((s for s in seats if to in self.single_gpus[s]), key=lambda s: -size[s]))
        if len(may_go) <= ALL_SUBSETS_UP_TO:
            return self._subsets_of(tuple(may_go))
        filled, filled_bytes = [], 0
        for seat in may_go:
            if filled_bytes + size[seat] <= ideal_bytes:
                filled.append(seat)
                filled_bytes += size[seat]
        return [([], 0), (filled, filled_bytes)] + [(seats, group_bytes) for seats, group_bytes, goes in self._bundles(gpu, pairs=True) if to in goes]

    def _best_exchange(
        self, gpu: int, best_gain: int, best: Trade | None, *, pairs: bool, partners: Sequence[int]
    ) -> tuple[int, Trade | None]:
        problem, spare = self.problem, self.spare
        headroom = problem.headroom_bytes
        floor = spare[gpu]
        leaving = self._bundles(gpu, pairs=pairs)
        best_partner = -1
        for partner in self._roomiest_first(partners):
            room = spare[partner]
            # Balanced, two GPUs keep at best the average of their spares: giving it anything would leave one of them
            # below what we already have (and the partners after this one have less room).
            at_most = (floor + room) // 2
            if at_most < best_gain:
                break
            if partner == gpu or (at_most == best_gain and not partner < best_partner):
                continue
            arriving = [_NOBODY] + [bundle for bundle in self._bundles(partner, pairs=pairs) if gpu in bundle[2]]
            least_room = headroom[partner]
            for out_seats, out_bytes, goes in leaving:
                if partner not in goes:
                    continue
                for in_seats, in_bytes, _ in arriving:
                    shift = out_bytes - in_bytes
                    if shift <= 0:
                        continue
                    after_gpu, after_partner = floor + shift, room - shift
                    gain = after_gpu if after_gpu < after_partner else after_partner
                    if gain < best_gain or (gain == best_gain and not partner < best_partner) or after_partner < least_room:
                        continue
                    trade: Trade = [(s, (partner,)) for s in out_seats]
                    trade += [(s, (gpu,)) for s in in_seats]
                    if self._allowed(trade):
                        best_gain, best, best_partner = gain, trade, partner
        return best_gain, best

    def _roomiest_first(self, partners: Sequence[int]) -> list[int]:
        """``partners`` by spare, the largest first (ties by number): a trade with a partner keeps at best the average of
        the two spares, so once the best trade found beats that, no later partner can do better. Ties between trades
        go to the lower-numbered partner, so the trade taken is the one a search in number order takes."""
        spare = self.spare
        return sorted(partners, key=lambda g: (-spare[g], g))

    def _bundles(self, gpu: int, *, pairs: bool) -> list[Bundle]:
        """Single-GPU seats on ``gpu``, one at a time, or two at a time and then one at a time with ``pairs``."""
        return self._cached(("bundles", self.seats_on[gpu], pairs), lambda: self._bundles_of(self._singles(gpu), pairs))

    def _bundles_of(self, seats: list[int], pairs: bool) -> list[Bundle]:
        size, single_gpus = self.problem.footprint_bytes, self.single_gpus
        singles = [([s], size[s], single_gpus[s]) for s in seats]
        if not pairs:
            return singles
        return [([a, b], size[a] + size[b], single_gpus[a] & single_gpus[b]) for a, b in combinations(seats, 2)] + singles

    def _singles(self, gpu: int) -> list[int]:
        """The single-GPU seats on ``gpu``, by number."""
        seats = self.seats_on[gpu]
        return self._cached(("singles", seats), lambda: [s for s in seats if self.problem.gpu_count[s] == 1])

    def _subsets_of(self, seats: tuple[int, ...]) -> list[tuple[list[int], int]]:
        return self._cached(("subsets", seats), lambda: _subsets(list(seats), self.problem.footprint_bytes))

    def _sorted_subsets_of(self, seats: tuple[int, ...]) -> tuple[list[tuple[list[int], int]], list[int]]:
        """Every group of ``seats`` by bytes (a stable sort, so ties keep the order of ``seats``), and the bytes alone."""

        def build() -> tuple[list[tuple[list[int], int]], list[int]]:
            groups = sorted(self._subsets_of(seats), key=lambda group: group[1])
            return groups, [group_bytes for _, group_bytes in groups]

        return self._cached(("sorted subsets", seats), build)

    def _moves_from(self, seat: int, here: GpuSet) -> list[tuple[frozenset[int], bool, list[tuple[GpuSet, tuple[tuple[int, int], ...]]]]]:
        """Each other GPU set tensor-parallel ``seat`` may take from ``here``, with the (GPU left, GPU taken) pairs, in
        order, host by host: (the host's GPUs among them, whether it is another host than ``here``'s, its moves)."""

        def build() -> list[tuple[frozenset[int], bool, list[tuple[GpuSet, tuple[tuple[int, int], ...]]]]]:
            blocks: dict[str, list[tuple[GpuSet, tuple[tuple[int, int], ...]]]] = {}
            for target in self.problem.candidates[seat]:
                if self.within is not None and not self.within.issuperset(target):
                    continue
                swapped = tuple(zip([g for g in here if g not in target], [g for g in target if g not in here]))
                if swapped:
                    blocks.setdefault(self.problem.host_of(target[0]), []).append((target, swapped))
            home = self.problem.host_of(here[0])
            return [(frozenset(g for target, _ in moves for g in target), host != home, moves) for host, moves in blocks.items()]

        return self._cached(("moves from", seat, here), build)

    def _cached(self, key: tuple, build: Callable[[], Cached]) -> Cached:
        """``build()``, worked out once per key (the key names everything the answer depends on)."""
        found = self.groups_cache.get(key)
        if found is None:
            if len(self.groups_cache) >= GROUP_CACHE_ENTRIES:
                self.groups_cache.clear()
            found = self.groups_cache[key] = build()
        return found

    def _gain(self, trade: Trade) -> int:
        """The lowest spare among the open GPUs ``trade`` touches, after it; -1 when it breaks a rule."""
        problem = self.problem
        after = {g: self.spare[g] + change for g, change in self._delta(trade).items()}
        if any(after[g] < problem.headroom_bytes[g] for g in after) or not self._allowed(trade):
            return -1
        return min((after[g] for g in after if not problem.keep_clear[g]), default=-1)

    def _moves_after(self, trade: Trade) -> int:
        problem = self.problem
        return self.moves + sum(problem.is_move(seat, gpu_set) - problem.is_move(seat, self.assignment[seat]) for seat, gpu_set in trade)

    def _allowed(self, trade: Trade) -> bool:
        """Apart groups stay apart, and the move budget holds (or is not exceeded further)."""
        if self.max_moves is not None:
            after = self._moves_after(trade)
            if after > self.max_moves and after > self.moves:
                return False
        return self._apart_ok(trade)

    def send_one_home(self, floor: int) -> bool:
        problem = self.problem
        for seat, home in enumerate(problem.current):
            if home is None or home == self.assignment[seat] or home not in problem.candidates[seat]:
                continue
            for trade in self._homecomings(seat, home):
                if self._keeps_floor(trade, floor):
                    self._apply(trade)
                    return True
        return False

    def send_cheapest_home(self) -> bool:
        """The homecoming that leaves the largest worst-case spare (ties: the one that saves more moves); False when none fits."""
        problem = self.problem
        lowest = sorted(self.open, key=lambda g: self.spare[g])[:8]
        best_key, best_trade = None, None
        for seat, home in enumerate(problem.current):
            if home is None or home == self.assignment[seat] or home not in problem.candidates[seat]:
                continue
            for trade in self._homecomings(seat, home):
                delta = self._delta(trade)
                if any(self.spare[g] + change < problem.headroom_bytes[g] for g, change in delta.items()) or not self._apart_ok(trade):
                    continue
                untouched = next((self.spare[g] for g in lowest if g not in delta), None)
                touched = [self.spare[g] + change for g, change in delta.items() if not problem.keep_clear[g]]
                worst = min(touched + ([] if untouched is None else [untouched]), default=0)
                key = (worst, self.moves - self._moves_after(trade))
                if best_key is None or key > best_key:
                    best_key, best_trade = key, trade
        if best_trade is None:
            return False
        self._apply(best_trade)
        return True

    def _homecomings(self, seat: int, home: GpuSet) -> list[Trade]:
        """Going straight home, or (single-GPU seats) swapping places with a seat on the home GPU that is away from its own home."""
        problem = self.problem
        trades: list[Trade] = [[(seat, home)]]
        here = self.assignment[seat]
        if len(home) == 1 and len(here) == 1:
            for other in sorted(self.on_gpu[home[0]]):
                if problem.gpu_count[other] == 1 and problem.current[other] != (home[0],) and here[0] in self.single_gpus[other]:
                    trades.append([(seat, home), (other, here)])
        return trades

    def _keeps_floor(self, trade: Trade, floor: int) -> bool:
        problem = self.problem
        for g, change in self._delta(trade).items():
            after = self.spare[g] + change
            if after < problem.headroom_bytes[g] or (change < 0 and not problem.keep_clear[g] and after < floor):
                return False
        return self._apart_ok(trade)

    def _delta(self, trade: Trade) -> dict[int, int]:
        """How each GPU's spare changes if ``trade`` happens."""
        size = self.problem.footprint_bytes
        delta: dict[int, int] = {}
        for seat, gpu_set in trade:
            for g in self.assignment[seat]:
                delta[g] = delta.get(g, 0) + size[seat]
            for g in gpu_set:
                delta[g] = delta.get(g, 0) - size[seat]
        return delta

    def _apart_ok(self, trade: Trade) -> bool:
        moved = dict(trade)
        for seat in moved:
            for group in self.groups_of.get(seat, ()):
                if set.intersection(*(set(moved.get(member, self.assignment[member])) for member in group)):
                    return False
        return True

    def _apply(self, trade: Trade) -> None:
        moves = self._moves_after(trade)
        if self.max_moves is not None and moves != self.moves:
            self.failed_at = [-1] * len(self.failed_at)  # the budget left decides what is allowed anywhere
        self.moves = moves
        self.clock += 1
        touched = {g for seat, gpu_set in trade for g in (*self.assignment[seat], *gpu_set)}
        for g in touched:
            self.changed_at[g] = self.clock
        size = self.problem.footprint_bytes
        for seat, gpu_set in trade:
            for g in self.assignment[seat]:
                self.spare[g] += size[seat]
                self.on_gpu[g].discard(seat)
            for g in gpu_set:
                self.spare[g] -= size[seat]
                self.on_gpu[g].add(seat)
            self.assignment[seat] = gpu_set
        for g in touched:
            self.seats_on[g] = tuple(sorted(self.on_gpu[g]))
