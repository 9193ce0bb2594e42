"""Spare against moves: a hand-worked fleet where each move buys a known spare, --max-moves and move_cost_bytes."""

from __future__ import annotations

import json

import pytest

from kits.cli import run_cli
from kits.plan import write_fleet
from seatplan.plan.placement import GpuSlot, SeatDemand, place
from seatplan.plan.placement.frontier import budgets

GiB = 1 << 30


def three_gpus() -> list[GpuSlot]:
    return [GpuSlot(host="h", index=i, capacity_bytes=60 * GiB) for i in range(3)]


# Three 60 GiB GPUs. Tonight a, b and c (20 GiB each) share GPU 0, which is full (spare 0); d and e
# (10 GiB) run alone on GPUs 1 and 2. Worked by hand:
#   0 moves: spares 0, 50, 50                          → worst  0
#   1 move:  a to GPU 1 (or 2): spares 20, 30, 50       → worst 20  (no single move does better)
#   2 moves: a to GPU 1, b to GPU 2: spares 20+20=40, 30, 30 → worst 30 = the optimum
#            (80 GiB over 180: no GPU can keep more than 100/3 = 33.3 GiB, and sizes come in 10s).
RUNNING = [
    SeatDemand(name="a", footprint_bytes=20 * GiB, current=[("h", 0)]),
    SeatDemand(name="b", footprint_bytes=20 * GiB, current=[("h", 0)]),
    SeatDemand(name="c", footprint_bytes=20 * GiB, current=[("h", 0)]),
    SeatDemand(name="d", footprint_bytes=10 * GiB, current=[("h", 1)]),
    SeatDemand(name="e", footprint_bytes=10 * GiB, current=[("h", 2)]),
]


def frontier_of(result) -> list[tuple[int, int, int]]:
    return [(point.max_moves, point.placement.moves, point.placement.worst_case_spare_bytes // GiB) for point in result.frontier]


@pytest.mark.parametrize("method", ["exhaustive", "cp-sat"])
def test_each_move_buys_a_known_spare(method):
    result = place(three_gpus(), RUNNING, method=method, time_limit_s=10)
    assert frontier_of(result) == [(0, 0, 0), (1, 1, 20), (2, 2, 30)]
    assert result.best.worst_case_spare_bytes == 30 * GiB and result.best.moves == 2 and result.chosen_because is None
    # the one move is one of the 20 GiB seats off the full GPU; the two moves take two of them off it
    one_move = result.frontier[1].placement
    assert len(one_move.moved) == 1 and one_move.moved[0] in {"a", "b", "c"}
    assert len(result.best.moved) == 2 and set(result.best.moved) <= {"a", "b", "c"}
    if method == "exhaustive":
        assert all(point.proven for point in result.frontier)


def test_max_moves_takes_a_point_on_the_frontier():
    result = place(three_gpus(), RUNNING, max_moves=1)
    assert result.best.moves == 1 and result.best.worst_case_spare_bytes == 20 * GiB and result.optimal
    assert result.chosen_because.startswith("--max-moves 1: 1 move(s) for a worst-case spare of 20.00 GiB, where 2 would reach 30.00 GiB")
    lost = {alternative.placement.moves: alternative.why_lost for alternative in result.runner_ups}
    assert lost[2] == "2 moves, over --max-moves 1 (worst-case spare 10.00 GiB higher)"
    assert lost[0] == "1 fewer move(s) but worst-case spare 20.00 GiB lower"


def test_max_moves_zero_keeps_everything_where_it_runs():
    result = place(three_gpus(), RUNNING, max_moves=0)
    assert result.best.moves == 0 and result.best.worst_case_spare_bytes == 0


@pytest.mark.parametrize(
    ("cost_gib", "moves", "worst_gib"),
    [
        (5, 2, 30),  # values 0, 15, 20: both moves pay for themselves
        (15, 1, 20),  # values 0, 5, 0: the first move buys 20 GiB, the second only 10
        (25, 0, 0),  # values 0, -5, -20: no move buys 25 GiB
    ],
)
def test_move_cost_lets_a_move_happen_only_where_it_buys_that_much(cost_gib, moves, worst_gib):
    result = place(three_gpus(), RUNNING, move_cost_bytes=cost_gib * GiB)
    assert (result.best.moves, result.best.worst_case_spare_bytes) == (moves, worst_gib * GiB)
    if moves < 2:
        assert f"move_cost_bytes {cost_gib}.00 GiB" in result.chosen_because
        assert all("more move(s) buy" in alt.why_lost or "lower" in alt.why_lost for alt in result.runner_ups)


def test_a_seat_on_a_gpu_that_can_no_longer_take_it_must_move():
    # b is pinned to GPU 1 now, so it moves whatever the budget: the frontier starts at one move.
    seats = [seat.model_copy(update={"allowed": [("h", 1)]}) if seat.name == "b" else seat for seat in RUNNING]
    result = place(three_gpus(), seats, max_moves=0)
    assert result.frontier[0].placement.moves == 1 and result.best.moves == 1
    assert "no layout found with at most 0 moves" in result.chosen_because


def test_new_seats_are_not_moves_and_nothing_running_means_no_frontier():
    fresh = [seat.model_copy(update={"current": []}) for seat in RUNNING]
    result = place(three_gpus(), fresh)
    assert result.frontier == [] and result.best.moves == 0


def test_budgets_double_up_to_the_best_layouts_moves():
    assert budgets(0, 13, []) == [0, 1, 2, 4, 8]
    assert budgets(3, 13, [5]) == [3, 4, 5, 8]
    assert budgets(0, 0, []) == []


FLEET = """
hosts:
  - name: h
    gpus:
      - {index: 0, total_bytes: 60GiB}
      - {index: 1, total_bytes: 60GiB}
      - {index: 2, total_bytes: 60GiB}
seats:
  - {name: a, engine: fixed, memory_cap_bytes: 20GiB}
  - {name: b, engine: fixed, memory_cap_bytes: 20GiB}
  - {name: c, engine: fixed, memory_cap_bytes: 20GiB}
  - {name: d, engine: fixed, memory_cap_bytes: 10GiB}
  - {name: e, engine: fixed, memory_cap_bytes: 10GiB}
current_layout: {a: 0, b: 0, c: 0, d: 1, e: 2}
"""


def test_plan_shows_the_frontier_and_takes_max_moves_and_move_cost(capsys, monkeypatch, tmp_path):
    fleet = write_fleet(tmp_path, FLEET)
    plain = json.loads(run_cli(capsys, monkeypatch, "plan", str(fleet), "--json").stdout)
    assert [(p["max_moves"], p["moves"], p["worst_case_spare_bytes"] // GiB) for p in plain["frontier"]] == [(0, 0, 0), (1, 1, 20), (2, 2, 30)]
    assert plain["moves"] == 2 and plain["chosen_because"] is None

    budget = run_cli(capsys, monkeypatch, "plan", str(fleet), "--max-moves", "1")
    assert budget.exit_code == 0, budget.stderr
    assert "Spare against moves" in budget.stdout and "layout taken from the frontier: --max-moves 1" in budget.stdout
    assert budget.stdout.splitlines()[0].startswith("worst-case spare 20.00 GiB")

    priced = write_fleet(tmp_path, FLEET + "policy: {move_cost_bytes: 15GiB}\n", name="priced.yaml")
    document = json.loads(run_cli(capsys, monkeypatch, "plan", str(priced), "--json").stdout)
    assert document["moves"] == 1 and document["worst_case_spare_bytes"] == 20 * GiB
    assert document["chosen_because"].startswith("move_cost_bytes 15.00 GiB")
    assert {runner["moves"] for runner in document["runner_ups"]} == {0, 2}
