"""plan.json across versions: version 4 gave a vLLM seat its typed ``launch`` (how the engine is started) and
``utilisation`` in place of its command line, settings, utilisation figures and ``kv_mode``; version 3 made a planned
seat a union on ``engine``. This seatplan reads the version 1 to 3 plans the previous releases wrote through the one
upgrade (``documents.plan.upgraded_plan``), with the same figures and the same command lines, and refuses a plan newer
than it reads with the upgrade named."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_plan
from seatplan.documents.launch import ByUtilisation, Pinned
from seatplan.documents.plan import PLAN_VERSION, V3_FIXED_ONLY_FIELDS, PlannedFixedSeat, PlannedVllmSeat
from seatplan.engine.command import engine_command
from seatplan.errors import SeatplanError
from seatplan.plan.planner import build_plan

ROOT = Path(__file__).resolve().parents[2]
V2_PLAN = ROOT / "tests/fixtures/plans/demo-plan-v2.json"  # written by the release before version 3 (README there)
V3_PLAN = ROOT / "tests/fixtures/plans/demo-plan-v3.json"  # written by the release before version 4 (README there)
DEMO_FLEET = ROOT / "examples/demo/fleet.yaml"


@pytest.mark.parametrize("saved", [V2_PLAN, V3_PLAN], ids=["version 2", "version 3"])
def test_an_older_plan_reads_as_the_seats_this_seatplan_plans(saved: Path):
    older = json.loads(saved.read_text())
    assert older["version"] == int(saved.stem[-1]) and any(seat["engine"] == "fixed" for seat in older["seats"])
    plan = read_plan(saved)
    assert plan.version == PLAN_VERSION == 4
    for seat, kept in zip(plan.seats, older["seats"], strict=True):
        assert isinstance(seat, PlannedFixedSeat if kept["engine"] == "fixed" else PlannedVllmSeat)
        if isinstance(seat, PlannedVllmSeat):
            assert seat.launch is not None and isinstance(seat.launch.kv, Pinned if kept["kv_mode"] != "utilisation" else ByUtilisation)
            # the launch starts the engine the older plan's command line started, word for word
            assert engine_command(seat.launch) == kept["vllm_args"]
            assert seat.utilisation is not None and seat.utilisation.rolling_restart == kept["gpu_memory_utilization_rolling_restart"]
    # the same seats, figure for figure, as this seatplan plans from the same fleet
    fresh = build_plan(load_fleet(DEMO_FLEET))
    assert [seat.model_dump() for seat in plan.seats] == [seat.model_dump() for seat in fresh.seats]


def test_a_plan_saved_before_kv_mode_has_its_kv_pin_read_from_its_figures(tmp_path: Path, rng: random.Random):
    """Version 1 plans (and version 2 ones before kv_mode): a pinned seat has a rolling-restart headroom; a seat
    without one was sized by utilisation, and its launch says so."""
    older = json.loads(V2_PLAN.read_text())
    for seat in older["seats"]:
        seat.pop("kv_mode")
    older["version"] = rng.choice([1, 2])
    path = tmp_path / "older.json"
    path.write_text(json.dumps(older))
    assert all(seat.launch is not None and seat.launch.kv_pinned for seat in read_plan(path).vllm_seats())
    name = rng.choice([seat["name"] for seat in older["seats"] if seat["engine"] == "vllm"])
    seat = next(seat for seat in older["seats"] if seat["name"] == name)
    seat["rolling_restart_headroom_bytes"] = None
    path.write_text(json.dumps(older))
    launch = read_plan(path).vllm_seats()[[s["name"] for s in older["seats"] if s["engine"] == "vllm"].index(name)].launch
    assert launch is not None and launch.kv == ByUtilisation(gpu_memory_utilization=seat["gpu_memory_utilization"])


def test_a_version_1_plan_without_the_situations_reads_without_its_utilisation(tmp_path: Path):
    older = json.loads(V2_PLAN.read_text()) | {"version": 1}
    for seat in older["seats"]:
        for key in ("gpu_memory_utilization_cold_boot", "gpu_memory_utilization_rolling_restart"):
            seat.pop(key, None)
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(older))
    seats = read_plan(path).vllm_seats()
    assert seats and all(seat.utilisation is None and seat.launch is not None for seat in seats)


def test_each_kind_of_seat_keeps_only_its_own_fields():
    for seat in read_plan(V3_PLAN).seats:
        dumped = seat.model_dump()
        if seat.engine == "vllm":
            assert {"launch", "utilisation", "kv_cache_memory_bytes"} <= set(dumped) and not set(V3_FIXED_ONLY_FIELDS) & set(dumped)
            assert not {"vllm", "vllm_args", "kv_mode", "gpu_memory_utilization"} & set(dumped), seat.name
        else:
            assert set(V3_FIXED_ONLY_FIELDS) <= set(dumped) and not {"launch", "kv_cache_memory_bytes", "vllm"} & set(dumped)


def test_a_plan_newer_than_this_seatplan_names_the_upgrade(tmp_path: Path):
    newer = json.loads(read_plan(V3_PLAN).model_dump_json()) | {"version": PLAN_VERSION + 1}
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(newer))
    with pytest.raises(SeatplanError) as refused:
        read_plan(path)
    assert f"version {PLAN_VERSION + 1} is not one this seatplan reads (1 to {PLAN_VERSION})" in refused.value.message
    assert "upgrade seatplan" in (refused.value.fix or "")


def test_a_launch_that_disagrees_with_its_seat_is_refused_naming_both(tmp_path: Path):
    document = json.loads(read_plan(V3_PLAN).model_dump_json())
    seat = next(seat for seat in document["seats"] if seat["engine"] == "vllm")
    seat["launch"]["max_model_len"] = seat["max_model_len"] + 1
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SeatplanError) as refused:
        read_plan(path)
    assert f"the launch's max_model_len {seat['max_model_len'] + 1} is not the seat's {seat['max_model_len']}" in refused.value.message
    assert refused.value.message.startswith(f"seats.{document['seats'].index(seat)}.vllm")


@pytest.mark.parametrize("broken", [{"vllm": "x"}, {"vllm": {"model": 7}}, {"gpu_memory_utilization": "high"}, {"vllm": {"model": "m"}}])
def test_a_broken_older_seat_is_an_error_naming_its_field(tmp_path: Path, broken: dict):
    older = json.loads(V3_PLAN.read_text())
    position, seat = next((position, seat) for position, seat in enumerate(older["seats"]) if seat["engine"] == "vllm")
    seat |= broken
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(older))
    with pytest.raises(SeatplanError) as refused:
        read_plan(path)
    assert refused.value.message.startswith(f"seats.{position}.vllm.launch"), refused.value.message
