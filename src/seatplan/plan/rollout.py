"""The rollout: the order of the steps from what runs now to the planned layout, every start checked to fit.

Only seats that change appear: a seat gone from the plan is a ``stop``; a new one a ``start``; a seat on other
GPUs a ``stop`` where it runs and a ``start`` where it goes; a seat on the same GPUs whose launch changed in a way
that needs a restart (``engine.change.seat_change``, the one change model) a ``restart`` (its own memory freed
first), and so is a seat still run by what its ``started_by`` names (the first apply cuts it over). Seats that do
not change are never touched.

At each start, on each of the seat's GPUs, with what runs at that moment at plateau (seats that do not change,
seats not yet stopped where they run now, seats already started where they go; fixed seats and reserved memory
included), two things must hold:

* vLLM's start-up check: vLLM 0.32 takes its snapshot after its own CUDA context and NCCL buffers exist
  (``vllm/v1/worker/gpu_worker.py`` lines 505-536) and ``request_memory`` (``vllm/v1/worker/utils.py`` lines
  716-772) raises when ``init_snapshot.free_memory < math.ceil(total_memory × gpu_memory_utilization)``; so
  ``free − own context ≥ ceil(total × util)``;
* the engine fits: ``free ≥ its footprint`` (a fixed seat is held to this alone).

Where no order starts every seat without keeping one stopped while others start (two groups trading GPUs),
the order with the fewest such seats ("down"), then the fewest steps down, then the fewest steps is taken: an
A* search over the seats' states (running where they are, stopped, started where they go), one step group per
start. Seats that share no GPU, old or new, are ordered apart (hosts are independent). Pure logic, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import gpu_refs, resolve_gpu_ref
from seatplan.documents.launch import SeatLaunch
from seatplan.documents.plan import (
    DownSpan,
    Plan,
    PlannedFixedSeat,
    PlannedSeat,
    PlannedVllmSeat,
    Rollout,
    RolloutFailure,
    RolloutStep,
    StartCheck,
    before_snapshot_bytes,
    seat_launch,
)
from seatplan.engine.change import seat_change
from seatplan.plan.current import CurrentLayout
from seatplan.plan.placement import gpu_label
from seatplan.plan.utilisation import requested_bytes
from seatplan.units import human_bytes

SEARCH_BUDGET = 3_000  # states each search expands (the A* search, then a dive for the fewest seats down, then depth first)
MAX_STOP_SETS = 512  # sets of seats tried to make room for one start

# a seat's state during the search
RUNNING, DOWN, STARTED, NOT_RUNNING, STOPPING = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Gpu:
    label: str
    total_bytes: int
    reserved_bytes: int


@dataclass(frozen=True)
class Engine:
    """What a start needs on each of its GPUs."""

    footprint_bytes: int
    own_context_bytes: int
    util: float | None  # None: a fixed seat, held only to fitting


@dataclass(frozen=True)
class Change:
    seat: str
    old_gpus: tuple[str, ...]  # where it runs now; () when it does not run
    old_footprint_bytes: int
    new_gpus: tuple[str, ...]  # where the plan puts it; () when it is gone
    engine: Engine | None  # None when gone

    @property
    def in_place(self) -> bool:
        return bool(self.old_gpus) and self.old_gpus == self.new_gpus


@dataclass(frozen=True)
class Unchanged:
    seat: str
    gpus: tuple[str, ...]
    footprint_bytes: int


@dataclass(frozen=True)
class RolloutProblem:
    gpus: dict[str, Gpu]
    unchanged: list[Unchanged]
    changes: list[Change]


@dataclass(frozen=True)
class Running:
    """What runs now: each seat's GPUs, and where known its command line and footprint."""

    gpus: dict[str, tuple[str, ...]]
    launches: dict[str, SeatLaunch] | None = None  # None: not known (the fleet file's current_layout)
    footprints_bytes: dict[str, int] = field(default_factory=dict)


# --- what runs now, and what changes -----------------------------------------------------------------------------


def running_now(fleet: Fleet, current: CurrentLayout | None) -> Running | None:
    """What runs: the fleet's current_layout (``--current`` already merged in by the planner) and, from ``--current``,
    the seats gone from the fleet, the launches and the footprints. None when nothing is known."""
    gpus: dict[str, tuple[str, ...]] = {}
    if current is not None:
        gpus |= {name: tuple(refs) for name, refs in current.gpus.items()}
    for name, value in fleet.current_layout.items():
        keys = [resolve_gpu_ref(fleet, ref) for ref in gpu_refs(value)]
        gpus[name] = tuple(gpu_label(key) for key in keys if key is not None)
    if not gpus and current is None:
        return None
    return Running(gpus, dict(current.launches) if current is not None else None, dict(current.footprints_bytes) if current is not None else {})


def engine_of(seat: PlannedSeat) -> Engine:
    """What a start is checked with: the one utilisation the seat's launch carries, the value render writes."""
    if not isinstance(seat, PlannedVllmSeat) or seat.launch is None:
        return Engine(seat.footprint_bytes, 0, None)  # a fixed seat: no vLLM start-up check
    return Engine(seat.footprint_bytes, before_snapshot_bytes(seat.footprint_parts), seat.launch.gpu_memory_utilization)


def rollout_problem(plan: Plan, running: Running) -> RolloutProblem:
    """Which seats change and how, from the plan and what runs.

    A fixed seat the current layout does not place is taken to run where planned (seatplan did not start it). A seat
    runs now at the larger of the plan's footprint and the one the plan it runs from gave it (``--current PLAN``):
    the old figure is what its engine was sized to, the new one the newest estimate; the larger never makes a start
    look roomier than it is.
    """
    gpus = {f"{gpu.host}:{gpu.index}": Gpu(f"{gpu.host}:{gpu.index}", gpu.total_bytes, gpu.reserved_bytes) for gpu in plan.gpus}
    unchanged: list[Unchanged] = []
    changes: list[Change] = []
    planned = {seat.name for seat in plan.seats if seat.gpus}
    for name, old in running.gpus.items():
        if name not in planned and old:
            changes.append(Change(name, old, running.footprints_bytes.get(name, 0), (), None))
    for seat in plan.seats:
        if not seat.gpus:
            continue
        new = tuple(seat.gpus)
        now = running.gpus.get(seat.name)
        if now is None and isinstance(seat, PlannedFixedSeat):
            unchanged.append(Unchanged(seat.name, new, seat.footprint_bytes))
            continue
        restart = running.launches is not None and seat_change(running.launches.get(seat.name), seat_launch(seat)).restart
        # a seat run today by what its started_by names, with no launch of seatplan's known (an adopted box planned
        # from the fleet's current_layout), is cut over by the first apply: its engine stops and seatplan's starts,
        # so that start is a step the order checks like any other, whether or not the seat moves
        restart = restart or (running.launches is None and isinstance(seat, PlannedVllmSeat) and seat.started_by is not None)
        old_footprint = max(seat.footprint_bytes, running.footprints_bytes.get(seat.name, 0))
        if now == new and not restart:
            unchanged.append(Unchanged(seat.name, new, old_footprint))
            continue
        changes.append(Change(seat.name, now or (), old_footprint, new, engine_of(seat)))
    return RolloutProblem(gpus, unchanged, changes)


# --- the check at one start --------------------------------------------------------------------------------------


def start_check(gpu: Gpu, running: list[tuple[str, int]], engine: Engine) -> StartCheck:
    """One GPU of a start: vLLM's request against the free memory its snapshot sees, and room for the engine."""
    free = gpu.total_bytes - gpu.reserved_bytes - sum(footprint for _, footprint in running)
    fit_margin = free - engine.footprint_bytes
    requested = request_margin = None
    if engine.util is not None:
        requested = requested_bytes(gpu.total_bytes, engine.util)
        request_margin = free - engine.own_context_bytes - requested
    passes = fit_margin >= 0 and (request_margin is None or request_margin >= 0)
    return StartCheck(
        gpu=gpu.label, total_bytes=gpu.total_bytes, reserved_bytes=gpu.reserved_bytes, running=[name for name, _ in running],
        free_bytes=free, own_context_bytes=engine.own_context_bytes, gpu_memory_utilization=engine.util, requested_bytes=requested,
        footprint_bytes=engine.footprint_bytes, request_margin_bytes=request_margin, fit_margin_bytes=fit_margin, passes=passes,
    )


def short_by(check: StartCheck) -> int:
    """How much more free memory the start needs on this GPU (0 when it passes)."""
    return max(0, -check.fit_margin_bytes, -(check.request_margin_bytes if check.request_margin_bytes is not None else 0))


# --- the search --------------------------------------------------------------------------------------------------

Cost = tuple[int, int, int]  # seats down, steps they are down in all, steps
Block = tuple[tuple[str, int], ...]  # (action, seat index) in order


class Component:
    """Seats that share GPUs (old or new), ordered together."""

    def __init__(self, problem: RolloutProblem, changes: list[Change]) -> None:
        self.changes = changes
        self.gpus = problem.gpus
        self.unchanged = problem.unchanged
        self.base_used = {label: 0 for label in problem.gpus}
        for seat in problem.unchanged:
            for label in seat.gpus:
                if label in self.base_used:
                    self.base_used[label] += seat.footprint_bytes
        self.expanded = 0
        self.truncated = False  # a start had more sets of seats to stop than were tried
        self.steps_while_running = [1 if change.in_place else 2 for change in changes]  # a restart, or a stop and a start
        self.leaving = {label: [index for index, change in enumerate(changes) if label in change.old_gpus] for label in problem.gpus}

    def initial(self) -> tuple[int, ...]:
        return tuple(RUNNING if change.old_gpus else NOT_RUNNING for change in self.changes)

    def usage(self, state: tuple[int, ...]) -> dict[str, int]:
        """What runs on each GPU in ``state``: the unchanged seats, the changing ones where they are."""
        used = dict(self.base_used)
        for change, status in zip(self.changes, state, strict=True):
            if status == RUNNING:
                for label in change.old_gpus:
                    if label in used:
                        used[label] += change.old_footprint_bytes
            elif status == STARTED and change.engine is not None:
                for label in change.new_gpus:
                    used[label] += change.engine.footprint_bytes
        return used

    def fits(self, used: dict[str, int], index: int, freed: list[int]) -> bool:
        """Whether seat ``index`` starts with ``used`` on each GPU less what the seats in ``freed`` hold where they run."""
        change = self.changes[index]
        engine = change.engine
        assert engine is not None
        for label in change.new_gpus:
            gpu = self.gpus[label]
            taken = used[label] - sum(self.changes[other].old_footprint_bytes for other in freed if label in self.changes[other].old_gpus)
            free = gpu.total_bytes - gpu.reserved_bytes - taken
            if free < engine.footprint_bytes:
                return False
            if engine.util is not None and free - engine.own_context_bytes < requested_bytes(gpu.total_bytes, engine.util):
                return False
        return True

    def blocks(self, state: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], Block, Cost]]:
        """Every next start, each with the smallest sets of running seats stopped to make room for it."""
        down = [index for index, status in enumerate(state) if status == DOWN]
        used = self.usage(state)
        for index, status in enumerate(state):
            if status not in (RUNNING, DOWN, NOT_RUNNING):
                continue
            change = self.changes[index]
            after = list(state)
            own = [index] if status == RUNNING else []
            if status == RUNNING:
                after[index] = STOPPING
            candidates = sorted({other for label in change.new_gpus for other in self.leaving[label] if other != index and state[other] == RUNNING})
            found: list[set[int]] = []
            tried = 0
            for size in range(len(candidates) + 1):
                for stopped in itertools.combinations(candidates, size):
                    tried += 1
                    if tried > MAX_STOP_SETS:
                        self.truncated = True
                        break
                    if any(minimal <= set(stopped) for minimal in found):
                        continue
                    if not self.fits(used, index, own + list(stopped)):
                        continue
                    found.append(set(stopped))
                    trial = list(after)
                    for other in stopped:
                        trial[other] = DOWN
                    trial[index] = STARTED
                    block = self.block(index, status, stopped)
                    yield tuple(trial), block, self.cost(block, down, stopped)

    def block(self, index: int, status: int, stopped: tuple[int, ...]) -> Block:
        stops = tuple(("stop", other) for other in stopped)
        if status == RUNNING and self.changes[index].in_place:
            return (*stops, ("restart", index))
        if status == RUNNING:
            return (("stop", index), *stops, ("start", index))
        return (*stops, ("start", index))

    @staticmethod
    def cost(block: Block, down: list[int], stopped: tuple[int, ...]) -> Cost:
        length = len(block)
        span = length * len(down)  # every step of the block counts for each seat already down (its own start included)
        span += sum(length - position for position, (action, seat) in enumerate(block, start=1) if action == "stop" and seat in stopped)
        return (len(stopped), span, length)

    def heuristic(self, state: tuple[int, ...]) -> Cost:
        """A lower bound on the rest: every seat down still starts (one step each), every seat still to start its steps."""
        steps = down = 0
        for steps_running, status in zip(self.steps_while_running, state, strict=True):
            if status == RUNNING:
                steps += steps_running
            elif status == DOWN:
                steps, down = steps + 1, down + 1
            elif status == NOT_RUNNING:
                steps += 1
        return (0, down, steps)

    def search(self, budget: int, mode: str = "best") -> tuple[list[Block] | None, tuple[int, ...], bool]:
        """Over the states: ``best`` A* (the fewest seats down for the fewest steps); ``dive`` the fewest seats down
        first, then the most seats started; ``deep`` the most seats started first. Returns the blocks of the order found
        (None when there is none), the furthest state reached, and whether the search finished within its budget."""
        start = self.initial()
        goal = tuple(STARTED for _ in self.changes)
        counter = itertools.count()
        best: dict[tuple[int, ...], Cost] = {start: (0, 0, 0)}
        came_from: dict[tuple[int, ...], tuple[tuple[int, ...], Block]] = {}
        heap = [(self.priority(start, (0, 0, 0), mode), next(counter), start)]
        furthest = start
        closed: set[tuple[int, ...]] = set()
        while heap:
            _, _, state = heapq.heappop(heap)
            if state in closed:
                continue
            closed.add(state)
            if state.count(STARTED) > furthest.count(STARTED):
                furthest = state
            if state == goal:
                return self.path(came_from, state), furthest, True
            self.expanded += 1
            if self.expanded > budget:
                return None, furthest, False
            cost = best[state]
            for after, block, step_cost in self.blocks(state):
                total = (cost[0] + step_cost[0], cost[1] + step_cost[1], cost[2] + step_cost[2])
                if after in closed or (after in best and best[after] <= total):
                    continue
                best[after] = total
                came_from[after] = (state, block)
                heapq.heappush(heap, (self.priority(after, total, mode), next(counter), after))
        return None, furthest, True

    def priority(self, state: tuple[int, ...], cost: Cost, mode: str) -> tuple[int, ...]:
        started = state.count(STARTED)
        if mode == "dive":
            return (cost[0], -started, cost[1], cost[2])
        if mode == "deep":
            return (-started, *cost)
        rest = self.heuristic(state)
        return (cost[0] + rest[0], cost[1] + rest[1], cost[2] + rest[2], -started)

    @staticmethod
    def path(came_from: dict[tuple[int, ...], tuple[tuple[int, ...], Block]], state: tuple[int, ...]) -> list[Block]:
        blocks = []
        while state in came_from:
            state, block = came_from[state]
            blocks.append(block)
        return blocks[::-1]

    def closest_failure(self, state: tuple[int, ...]) -> tuple[str, list[StartCheck]]:
        """From the furthest state: each seat not started, with every running seat on its GPUs stopped (the most room
        any order leaves it there); the one that misses by least."""
        options = []
        for index, status in enumerate(state):
            if status == STARTED:
                continue
            change = self.changes[index]
            trial = tuple(DOWN if other_status == RUNNING and (other == index or set(change.new_gpus) & set(self.changes[other].old_gpus))
                          else other_status for other, other_status in enumerate(state))
            checks = [self.check(trial, index, label) for label in change.new_gpus]
            options.append((max(short_by(check) for check in checks), change.seat, checks))
        _, seat, checks = min(options, key=lambda option: (option[0], option[1]))
        return seat, checks

    def check(self, state: tuple[int, ...], index: int, label: str) -> StartCheck:
        engine = self.changes[index].engine
        assert engine is not None
        return start_check(self.gpus[label], self.running_on(state, label), engine)

    def running_on(self, state: tuple[int, ...], label: str) -> list[tuple[str, int]]:
        occupants = [(seat.seat, seat.gpus, seat.footprint_bytes) for seat in self.unchanged]
        for change, status in zip(self.changes, state, strict=True):
            if status == RUNNING:
                occupants.append((change.seat, change.old_gpus, change.old_footprint_bytes))
            elif status == STARTED and change.engine is not None:
                occupants.append((change.seat, change.new_gpus, change.engine.footprint_bytes))
        return [(name, footprint) for name, gpus, footprint in occupants if label in gpus]


# --- the whole rollout -------------------------------------------------------------------------------------------


def components(problem: RolloutProblem) -> list[list[Change]]:
    """The seats that stay or arrive, grouped by the GPUs they share (old or new), in the fleet's GPU order."""
    order = {label: position for position, label in enumerate(problem.gpus)}
    moving = [change for change in problem.changes if change.new_gpus]
    groups: list[tuple[set[str], list[Change]]] = []
    for change in moving:
        touched = {label for label in (*change.old_gpus, *change.new_gpus) if label in problem.gpus}
        joined = [group for group in groups if group[0] & touched]
        merged = (touched.union(*(group[0] for group in joined)), [change for group in joined for change in group[1]] + [change])
        groups = [group for group in groups if not any(group is other for other in joined)] + [merged]
    return [changes for _, changes in sorted(groups, key=lambda group: min(order[label] for label in group[0]))]


def order_rollout(problem: RolloutProblem, budget: int = SEARCH_BUDGET) -> Rollout:
    """The steps in the order apply runs them: the seats gone stop first, then each group of seats sharing GPUs in
    the order with the fewest seats down for the fewest steps; each start's checks recorded."""
    steps = [RolloutStep(action="stop", seat=change.seat, gpus=list(change.old_gpus)) for change in problem.changes if not change.new_gpus]
    proven = True
    for changes in components(problem):
        component = Component(problem, changes)
        blocks, furthest, finished = component.search(budget)
        for mode in ("dive", "deep"):  # out of budget: settle for an order, the fewest seats down first, then any
            if blocks is not None or finished:
                break
            proven = False
            component.expanded = 0
            blocks, furthest, finished = component.search(budget, mode)
        proven = proven and not component.truncated
        if blocks is None:
            return Rollout(proven=proven, fails=failure(component, furthest, finished))
        for block in blocks:
            for action, index in block:
                change = changes[index]
                gpus = change.old_gpus if action == "stop" else change.new_gpus
                steps.append(RolloutStep(action=action, seat=change.seat, gpus=list(gpus)))
    return Rollout(steps=replay(problem, steps), down=down_spans(steps), proven=proven)


def failure(component: Component, furthest: tuple[int, ...], finished: bool) -> RolloutFailure:
    seat, checks = component.closest_failure(furthest)
    worst = max(checks, key=short_by)
    gap = short_by(worst)
    if worst.request_margin_bytes is not None and worst.request_margin_bytes < 0 and -worst.request_margin_bytes == gap:
        what = (f"vLLM asks {human_bytes(worst.requested_bytes or 0)} (--gpu-memory-utilization {worst.gpu_memory_utilization:.3f} × "
                f"{human_bytes(worst.total_bytes)}), {human_bytes(worst.free_bytes - worst.own_context_bytes)} is free at its snapshot")
    else:
        what = f"the engine takes {human_bytes(worst.footprint_bytes)} at plateau, {human_bytes(worst.free_bytes)} is free"
    beside = ", ".join(worst.running) or "nothing else"
    if not finished:
        return RolloutFailure(seat=seat, gpu=worst.gpu, short_by_bytes=gap, checks=checks, reason=(
            f"no order found within the search budget ({SEARCH_BUDGET:,} states); the closest it came leaves {seat} to start on GPU "
            f"{worst.gpu} beside {beside}: {what}, short by {human_bytes(gap)}; change fewer seats at once (--max-moves)"))
    return RolloutFailure(
        seat=seat, gpu=worst.gpu, short_by_bytes=gap, checks=checks,
        reason=(f"no order starts every seat: {seat} cannot start on GPU {worst.gpu} beside {beside} even with every seat "
                f"that leaves it stopped: {what}, short by {human_bytes(gap)}"),
    )


def replay(problem: RolloutProblem, steps: list[RolloutStep]) -> list[RolloutStep]:
    """The steps with each start's checks, replayed from what runs now; a failing check here is a bug of the search."""
    where: dict[str, tuple[tuple[str, ...], int]] = {seat.seat: (seat.gpus, seat.footprint_bytes) for seat in problem.unchanged}
    where |= {change.seat: (change.old_gpus, change.old_footprint_bytes) for change in problem.changes if change.old_gpus}
    by_name = {change.seat: change for change in problem.changes}
    checked: list[RolloutStep] = []
    for step in steps:
        change = by_name[step.seat]
        if step.action in ("stop", "restart"):
            where.pop(step.seat, None)
        if step.action in ("start", "restart"):
            assert change.engine is not None
            step = step.model_copy(update={"checks": [
                start_check(problem.gpus[label], [(name, footprint) for name, (gpus, footprint) in where.items() if label in gpus], change.engine)
                for label in change.new_gpus]})
            assert all(check.passes for check in step.checks), f"rollout step {len(checked) + 1} fails its own check"
            where[step.seat] = (change.new_gpus, change.engine.footprint_bytes)
        checked.append(step)
    return checked


def down_spans(steps: list[RolloutStep]) -> list[DownSpan]:
    """Every seat stopped while another seat starts: from its stop to its start (1-based steps)."""
    spans = []
    stopped_at: dict[str, int] = {}
    for number, step in enumerate(steps, start=1):
        if step.action == "stop":
            stopped_at[step.seat] = number
        elif step.action == "start" and step.seat in stopped_at:
            began = stopped_at.pop(step.seat)
            if any(other.action in ("start", "restart") for other in steps[began:number - 1]):
                spans.append(DownSpan(seat=step.seat, from_step=began, to_step=number))
    return sorted(spans, key=lambda span: (span.from_step, span.seat))


def plan_rollout(plan: Plan, fleet: Fleet, current: CurrentLayout | None) -> Rollout | None:
    """The plan's rollout from what runs (None when nothing is known of what runs, or nothing was placed)."""
    running = running_now(fleet, current)
    if running is None or plan.worst_case_spare_bytes is None:
        return None
    return order_rollout(rollout_problem(plan, running))
