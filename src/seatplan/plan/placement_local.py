"""Local improvement of a layout: relieve low-spare GPUs by trading seats with other GPUs.

The CP-SAT solver proves bounds well but, on a max-min objective over a large fleet, finds
balanced layouts slowly; this gives it a good starting point. Every trade keeps the layout valid
(allowed GPU sets, headroom, apart groups) and raises the lower of the two spares it touches, which
makes the sorted list of all spares lexicographically larger, so the search always ends.
"""

from __future__ import annotations

import time
from itertools import combinations

from seatplan.plan.placement_search import GpuSet, Problem

Trade = list[tuple[int, GpuSet]]  # (seat, its new GPU set)


def improve(problem: Problem, assignment: tuple[GpuSet, ...], *, deadline: float) -> tuple[GpuSet, ...]:
    """A layout at least as good as ``assignment`` (which must be valid), stopping at a local optimum or the deadline."""
    state = _State(problem, assignment)
    while time.perf_counter() < deadline and state.relieve_lowest():
        pass
    return tuple(state.assignment)


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


class _State:
    def __init__(self, problem: Problem, assignment: tuple[GpuSet, ...]) -> None:
        self.problem = problem
        self.assignment = list(assignment)
        load = problem.loads(assignment)
        self.spare = [c - used for c, used in zip(problem.capacity_bytes, load)]
        self.on_gpu: list[set[int]] = [set() for _ in problem.gpu_keys]
        for seat, gpu_set in enumerate(assignment):
            for g in gpu_set:
                self.on_gpu[g].add(seat)
        self.open = problem.open_gpus
        self.single_gpus = [
            frozenset(gpu_set[0] for gpu_set in options) if problem.gpu_count[s] == 1 else frozenset()
            for s, options in enumerate(problem.candidates)
        ]
        self.groups_of: dict[int, list[tuple[int, ...]]] = {}
        for group in problem.apart:
            for seat in group:
                self.groups_of.setdefault(seat, []).append(group)

    def relieve_lowest(self) -> bool:
        """Apply the best trade for the lowest-spare GPU that has one; False when none has."""
        for gpu in sorted(self.open, key=lambda g: (self.spare[g], g)):
            trade = self._best_trade(gpu)
            if trade is not None:
                for seat, gpu_set in trade:
                    self._place(seat, gpu_set)
                return True
        return False

    def _best_trade(self, gpu: int) -> Trade | None:
        """The trade that leaves the most spare on the lower of ``gpu`` and its partner, if that beats ``gpu``'s spare now."""
        problem, spare = self.problem, self.spare
        floor = spare[gpu]
        best_gain, best = floor, None
        for seat in sorted(self.on_gpu[gpu]):
            if problem.gpu_count[seat] > 1:
                for gpu_set in problem.candidates[seat]:
                    gain = self._gain([(seat, gpu_set)])
                    if gain > best_gain:
                        best_gain, best = gain, [(seat, gpu_set)]
        leaving = self._bundles(gpu, lambda s: True)
        for partner in self.open:
            room = spare[partner]
            if partner == gpu or room <= best_gain:
                continue  # giving it anything would leave it below what we already have
            arriving: list[tuple[list[int], int]] = [([], 0)] + self._bundles(partner, lambda s: gpu in self.single_gpus[s])
            for out_seats, out_bytes in leaving:
                if any(partner not in self.single_gpus[s] for s in out_seats):
                    continue
                for in_seats, in_bytes in arriving:
                    shift = out_bytes - in_bytes
                    if shift <= 0:
                        continue
                    gain = min(floor + shift, room - shift)
                    if gain <= best_gain or room - shift < problem.headroom_bytes[partner]:
                        continue
                    trade: Trade = [*((s, (partner,)) for s in out_seats), *((s, (gpu,)) for s in in_seats)]
                    if self._apart_ok(trade):
                        best_gain, best = gain, trade
        return best

    def _bundles(self, gpu: int, may_leave) -> list[tuple[list[int], int]]:
        """One or two single-GPU seats on ``gpu`` (that ``may_leave``), with their bytes."""
        seats = [s for s in sorted(self.on_gpu[gpu]) if self.problem.gpu_count[s] == 1 and may_leave(s)]
        size = self.problem.footprint_bytes
        return [([s], size[s]) for s in seats] + [([a, b], size[a] + size[b]) for a, b in combinations(seats, 2)]

    def _gain(self, trade: Trade) -> int:
        """The lowest spare among the open GPUs ``trade`` touches, after it; -1 when it breaks a rule."""
        problem = self.problem
        after = {g: self.spare[g] + change for g, change in self._delta(trade).items()}
        if any(after[g] < problem.headroom_bytes[g] for g in after) or not self._apart_ok(trade):
            return -1
        return min((after[g] for g in after if not problem.keep_clear[g]), default=-1)

    def send_one_home(self, floor: int) -> bool:
        problem = self.problem
        for seat, home in enumerate(problem.current):
            if home is None or home == self.assignment[seat] or home not in problem.candidates[seat]:
                continue
            for trade in self._homecomings(seat, home):
                if self._keeps_floor(trade, floor):
                    for moved, gpu_set in trade:
                        self._place(moved, gpu_set)
                    return True
        return False

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

    def _place(self, seat: int, gpu_set: GpuSet) -> None:
        size = self.problem.footprint_bytes[seat]
        for g in self.assignment[seat]:
            self.spare[g] += size
            self.on_gpu[g].discard(seat)
        for g in gpu_set:
            self.spare[g] -= size
            self.on_gpu[g].add(seat)
        self.assignment[seat] = gpu_set

