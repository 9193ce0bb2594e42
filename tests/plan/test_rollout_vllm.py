"""Every step of a plan's rollout, replayed from what runs, against vLLM 0.32's own start-up check (issue 29).

Random fleets (one or two hosts, GPUs of varied size with reserved memory, vLLM seats of several models and
contexts, TP 2 seats, fixed seats) are planned once for their footprints; then a random current layout that fits at
plateau is drawn from them: seats on other GPUs or hosts (chains of moves and trades), seats grown in place (a smaller
footprint and another command line), seats not running yet, and seats gone from the fleet. The plan made from it
(``build_plan(current=...)``, as ``plan --current``) carries a rollout; the test replays its steps on its own
bookkeeping and feeds every start's snapshot (free less the engine's own context) to ``request_memory`` imported
from the test vLLM virtualenv (``tests/integration/vllm_request_memory.py``), and checks the engine's footprint fits.
A rollout that says no order exists is held to every order of the starts with all changing seats stopped first.
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
from pathlib import Path

import pytest

from kits.parts import require
from kits.vllm_engine import vllm_installed, vllm_python
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.launch import Pinned, SeatLaunch, VllmLaunch
from seatplan.documents.plan import Plan, PlannedSeat, PlannedVllmSeat, seat_launch
from seatplan.plan.current import CurrentLayout
from seatplan.plan.planner import build_plan
from seatplan.plan.rollout import plan_rollout
from seatplan.plan.utilisation import requested_bytes

GiB = 1 << 30
MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
CHOICES = ["meta-llama--Llama-3.1-8B-Instruct", "microsoft--Phi-3.5-mini-instruct", "Qwen--Qwen3-4B", "Qwen--Qwen3-8B"]
SCRIPT = Path(__file__).resolve().parents[1] / "integration" / "vllm_request_memory.py"
OWN_CONTEXT = ("cuda_context", "nccl_allreduce")


def random_fleet(rng: random.Random) -> str:
    hosts = rng.choice([["box"], ["box"], ["a", "b"]])
    text = "hosts:\n"
    for host in hosts:
        text += f"  - name: {host}\n    gpus:\n"
        for index in range(rng.randint(2, 3) if len(hosts) > 1 else rng.randint(2, 4)):
            total = int(rng.choice([24, 32, 48, 80, 141]) * GiB + rng.randrange(GiB))
            reserved = rng.choice([0, 0, rng.randrange(2 * GiB)])
            text += f"      - {{index: {index}, total_bytes: {total}, reserved_bytes: {reserved}}}\n"
    margin = rng.choice(["0", "256MiB", "512MiB", "1GiB"])
    seats = []
    for number in range(rng.randint(3, 9)):
        if rng.random() < 0.15:
            seats.append(f"  - {{name: f{number}, engine: fixed, memory_cap_bytes: {rng.randint(1, 16)}GiB}}")
            continue
        tp = 2 if rng.random() < 0.2 else 1
        context = rng.choice([2048, 4096, 8192, 16384, 32768])
        seats.append(f"  - {{name: s{number}, model: {MODELS / rng.choice(CHOICES)}, port: {8001 + number}, max_model_len: {context}, "
                     f"tensor_parallel_size: {tp}}}")
    return text + f"policy: {{boot_margin_bytes: {margin}}}\nseats:\n" + "\n".join(seats) + "\n"


def random_current(rng: random.Random, plan: Plan) -> CurrentLayout:
    """A layout that fits at plateau and differs from the plan by moves, trades, growth in place, new and gone seats."""
    free = {f"{gpu.host}:{gpu.index}": gpu.total_bytes - gpu.reserved_bytes for gpu in plan.gpus}
    hosts = sorted({gpu.host for gpu in plan.gpus})
    gpus: dict[str, list[str]] = {}
    commands: dict[str, SeatLaunch] = {}
    footprints: dict[str, int] = {}

    # a trade of GPUs: what the plan puts on GPU x runs on GPU y now, and the other way round
    pairs = [(x, y) for x in free for y in free if x < y and x.split(":")[0] == y.split(":")[0]]
    swap: dict[str, str] = {}
    if pairs and rng.random() < 0.6:
        x, y = rng.choice(pairs)
        swap = {x: y, y: x}

    def put(name: str, width: int, footprint: int, planned: list[str] | None) -> bool:
        traded = sorted(swap.get(label, label) for label in planned or [])
        if swap and traded != sorted(planned or []) and all(free[label] >= footprint for label in traded):
            chosen = traded
        elif planned and rng.random() < 0.4 and all(free[label] >= footprint for label in planned):
            chosen = list(planned)
        else:
            host = rng.choice(hosts)
            options = [label for label in free if label.startswith(host + ":") and free[label] >= footprint]
            if len(options) < width:
                return False
            chosen = sorted(rng.sample(options, width))
        for label in chosen:
            free[label] -= footprint
        gpus[name], footprints[name] = chosen, footprint
        return True

    for seat in rng.sample(plan.seats, len(plan.seats)):
        if not seat.gpus or (seat.engine == "vllm" and rng.random() < 0.15):
            continue  # not running yet
        grown = seat.engine == "vllm" and rng.random() < 0.3
        footprint = int(seat.footprint_bytes * rng.uniform(0.6, 0.97)) if grown else seat.footprint_bytes
        if put(seat.name, len(seat.gpus), footprint, seat.gpus):
            launch = seat_launch(seat)
            if grown and isinstance(seat, PlannedVllmSeat) and seat.launch is not None:
                launch = launch.model_copy(update={"launch": seat.launch.model_copy(update={"extra_args": [*seat.launch.extra_args, "--seed", "7"]})})
            commands[seat.name] = launch
    for number in range(rng.randint(0, 2)):
        if put(f"gone{number}", 1, rng.randrange(GiB, 30 * GiB), None):
            commands[f"gone{number}"] = SeatLaunch(launch=None)
    return CurrentLayout("random", gpus, commands, footprints)


def own_context(seat: PlannedSeat) -> int:
    return sum(part.bytes for part in seat.footprint_parts if part.name in OWN_CONTEXT)


def runs_the_same(now: SeatLaunch | None, planned: SeatLaunch) -> bool:
    """With the KV cache pinned on both sides a running engine keeps what it has whatever the utilisation (vLLM 0.32
    reads it only in its start-up check, ``vllm/v1/worker/utils.py`` lines 716-772): no restart for that alone."""
    if now is None:
        return False
    was, will = now.launch, planned.launch
    if isinstance(was, VllmLaunch) and isinstance(will, VllmLaunch) and isinstance(was.kv, Pinned) and isinstance(will.kv, Pinned):
        kv = will.kv.model_copy(update={"gpu_memory_utilization": was.kv.gpu_memory_utilization})
        planned = planned.model_copy(update={"launch": will.model_copy(update={"kv": kv})})
    return now == planned


def changing(plan: Plan, current: CurrentLayout) -> set[str]:
    placed = {seat.name: seat for seat in plan.seats if seat.gpus}
    out = {name for name in current.gpus if name not in placed}
    for name, seat in placed.items():
        if name in current.gpus and (current.gpus[name] != seat.gpus or not runs_the_same(current.launches.get(name), seat_launch(seat))):
            out.add(name)
        elif name not in current.gpus and seat.engine == "vllm":
            out.add(name)
    return out


def running_at_start(plan: Plan, current: CurrentLayout, basis: str = "current") -> dict[str, tuple[list[str], int]]:
    """What runs before the first step, each seat at its current footprint, at the plan's (``basis="plan"``), or at
    the larger of the two (``basis="larger"``, the rollout's own)."""
    planned = {seat.name: seat.footprint_bytes for seat in plan.seats}

    def footprint(name: str) -> int:
        now, new = current.footprints_bytes[name], planned.get(name, current.footprints_bytes[name])
        return {"current": now, "plan": new, "larger": max(now, new)}[basis]

    where = {name: (gpus, footprint(name)) for name, gpus in current.gpus.items()}
    # a fixed seat the current layout does not place runs where planned
    where |= {seat.name: (seat.gpus, seat.footprint_bytes) for seat in plan.seats if seat.engine == "fixed" and seat.gpus and seat.name not in where}
    return where


def snapshot(plan: Plan, where: dict[str, tuple[list[str], int]], seat: PlannedSeat, label: str) -> tuple[int, int]:
    """(free before the engine's own context, total) on one GPU with what runs."""
    gpu = next(gpu for gpu in plan.gpus if f"{gpu.host}:{gpu.index}" == label)
    used = sum(footprint for gpus, footprint in where.values() if label in gpus)
    return gpu.total_bytes - gpu.reserved_bytes - used, gpu.total_bytes


def no_order_exists(plan: Plan, current: CurrentLayout) -> bool:
    """Every changing seat stopped first (the most room any order gives), then every order of the starts."""
    moving = changing(plan, current)
    base = {name: value for name, value in running_at_start(plan, current, "larger").items() if name not in moving}
    starting = [seat for seat in plan.seats if seat.name in moving and seat.gpus]
    assert len(starting) <= 7
    for order in itertools.permutations(starting):
        where = dict(base)
        for seat in order:
            for label in seat.gpus:
                free, total = snapshot(plan, where, seat, label)
                if free < seat.footprint_bytes or (isinstance(seat, PlannedVllmSeat) and seat.gpu_memory_utilization is not None and
                                                    free - own_context(seat) < requested_bytes(total, seat.gpu_memory_utilization)):
                    break
            else:
                where[seat.name] = (seat.gpus, seat.footprint_bytes)
                continue
            break
        else:
            return False
    return True


def replay(plan: Plan, current: CurrentLayout, cases: list[dict], expected: list[tuple[str, bool, int]], seen: dict[str, int]) -> None:
    """The plan's rollout step by step on the test's own bookkeeping; each start's snapshot queued for vLLM."""
    assert plan.rollout is not None
    if plan.rollout.fails is not None:
        assert no_order_exists(plan, current), plan.rollout.fails.reason
        seen["fails"] += 1
        return
    seats = {seat.name: seat for seat in plan.seats}
    assert {step.seat for step in plan.rollout.steps} == changing(plan, current)  # only seats that change appear
    # the seats running their old command count at their old footprint, and again at the plan's: both must pass
    for basis in ("current", "plan"):
        replay_on(plan, running_at_start(plan, current, basis), cases, expected)
    # down: every seat stopped while another starts, from its stop to its start
    down = []
    for number, step in enumerate(plan.rollout.steps, start=1):
        if step.action == "start":
            stop = max((at for at, other in enumerate(plan.rollout.steps[:number - 1], start=1) if other.seat == step.seat), default=None)
            if stop is not None and any(other.action != "stop" for other in plan.rollout.steps[stop:number - 1]):
                down.append((step.seat, stop, number))
    assert sorted(down) == sorted((span.seat, span.from_step, span.to_step) for span in plan.rollout.down)
    seen["steps"] += len(plan.rollout.steps)
    seen["down"] += len(plan.rollout.down)
    seen["hosts>1"] += len({gpu.host for gpu in plan.gpus}) > 1
    seen["tp"] += any(len(seats[step.seat].gpus) > 1 for step in plan.rollout.steps if step.seat in seats)


def replay_on(plan: Plan, where: dict[str, tuple[list[str], int]], cases: list[dict], expected: list[tuple[str, bool, int]]) -> None:
    assert plan.rollout is not None
    seats = {seat.name: seat for seat in plan.seats}
    for number, step in enumerate(plan.rollout.steps, start=1):
        if step.action in ("stop", "restart"):
            assert step.seat in where and (step.action == "stop" or where[step.seat][0] == seats[step.seat].gpus)
            del where[step.seat]
        if step.action in ("start", "restart"):
            seat = seats[step.seat]
            assert step.seat not in where and step.gpus == seat.gpus
            for label in seat.gpus:
                free, total = snapshot(plan, where, seat, label)
                assert free >= seat.footprint_bytes, f"step {number}: {seat.name} does not fit on {label}"
                if isinstance(seat, PlannedVllmSeat) and seat.gpu_memory_utilization is not None:
                    requested = requested_bytes(total, seat.gpu_memory_utilization)
                    cases += [{"free_bytes": free - own_context(seat), "total_bytes": total, "util": seat.gpu_memory_utilization},
                              {"free_bytes": requested - 1, "total_bytes": total, "util": seat.gpu_memory_utilization}]
                    expected += [(f"step {number}: {seat.name} on {label}", True, requested), (f"{seat.name} one byte short", False, requested)]
            where[step.seat] = (seat.gpus, seat.footprint_bytes)
    # the steps end in the planned layout
    assert {name: gpus for name, (gpus, _) in where.items()} == {seat.name: seat.gpus for seat in plan.seats if seat.gpus}


@pytest.mark.slow  # over 10 s on the 2-core machine: the full run, not the fast loop
@pytest.mark.vllm  # runs vLLM's own code in its virtualenv: after scripts/test.sh installs it
def test_every_start_of_the_rollout_passes_vllms_own_check_with_the_engine_fitting(tmp_path, rng):
    require(vllm_installed(), "the vLLM CPU engine (SEATPLAN_VLLM_VENV)")
    cases: list[dict] = []
    expected: list[tuple[str, bool, int]] = []
    seen = {"steps": 0, "down": 0, "fails": 0, "hosts>1": 0, "tp": 0}
    for trial in range(10):
        fleet_path = tmp_path / f"fleet-{trial}.yaml"
        fleet_path.write_text(random_fleet(rng))
        loaded = load_fleet(fleet_path)
        first = build_plan(loaded)
        if first.worst_case_spare_bytes is None:
            continue
        current = random_current(rng, first)
        # the plan made from what runs (plan --current), and the plan made before it rolled out from there (more moves, trades)
        replanned = build_plan(loaded, current=current)
        assert replanned.worst_case_spare_bytes is not None and replanned.rollout is not None
        assert set(replanned.restarts or []) == {name for name in changing(replanned, current) if (seat := replanned.seat(name)) and seat.engine == "vllm"}
        replay(replanned, current, cases, expected, seen)
        first.rollout = plan_rollout(first, loaded.fleet, current)
        replay(first, current, cases, expected, seen)
    assert seen["steps"] and cases, seen
    completed = subprocess.run([str(vllm_python()), str(SCRIPT)], input=json.dumps(cases), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    answers = json.loads(completed.stdout.strip().splitlines()[-1])
    for (what, starts, requested), answer in zip(expected, answers, strict=True):
        if starts:
            assert answer == requested, f"{what}: vLLM refused the start: {answer}"
        else:
            assert isinstance(answer, str) and "is less than desired GPU memory utilization" in answer, f"{what}: {answer}"
