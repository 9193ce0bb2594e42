"""plan.json across versions: version 3 made a planned seat a union on ``engine`` with an explicit ``kv_mode``; this
seatplan still reads the version 1 and 2 plans the previous releases wrote, with the same figures, and a plan
newer than it reads is refused with the upgrade named."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_plan
from seatplan.documents.plan import FIXED_ONLY_FIELDS, PLAN_VERSION, VLLM_ONLY_FIELDS, PlannedFixedSeat, PlannedVllmSeat
from seatplan.errors import SeatplanError
from seatplan.plan.planner import build_plan

ROOT = Path(__file__).resolve().parents[2]
V2_PLAN = ROOT / "tests/fixtures/plans/demo-plan-v2.json"  # written by the release before version 3 (README there)
DEMO_FLEET = ROOT / "examples/demo/fleet.yaml"


def test_a_version_2_plan_reads_as_the_seats_this_seatplan_plans(tmp_path: Path):
    older = json.loads(V2_PLAN.read_text())
    assert older["version"] == 2 and any(seat["engine"] == "fixed" for seat in older["seats"])
    plan = read_plan(V2_PLAN)
    assert plan.version == PLAN_VERSION == 3
    for seat, saved in zip(plan.seats, older["seats"], strict=True):
        assert seat.engine == saved["engine"]
        assert isinstance(seat, PlannedFixedSeat if saved["engine"] == "fixed" else PlannedVllmSeat)
        if isinstance(seat, PlannedVllmSeat):
            assert seat.kv_mode == saved["kv_mode"]
    # the same seats, figure for figure, as this seatplan plans from the same fleet
    fresh = build_plan(load_fleet(DEMO_FLEET))
    assert [seat.model_dump() for seat in plan.seats] == [seat.model_dump() for seat in fresh.seats]


def test_a_plan_saved_before_kv_mode_has_it_guessed_from_its_figures(tmp_path: Path, rng: random.Random):
    """Version 1 plans (and version 2 ones before kv_mode): a pinned seat has a rolling-restart headroom, the
    operator's pin is the one its kv_bytes line calls so; a seat without a headroom was sized by utilisation."""
    older = json.loads(V2_PLAN.read_text())
    expected = {seat["name"]: seat["kv_mode"] for seat in older["seats"] if seat["engine"] == "vllm"}
    for seat in older["seats"]:
        del seat["kv_mode"]
    older["version"] = rng.choice([1, 2])
    path = tmp_path / "older.json"
    path.write_text(json.dumps(older))
    assert {seat.name: seat.kv_mode for seat in read_plan(path).vllm_seats()} == expected
    # a seat sized by utilisation (vLLM before 0.10.2) carries no rolling-restart headroom
    name = rng.choice(sorted(expected))
    seat = next(seat for seat in older["seats"] if seat["name"] == name)
    seat["rolling_restart_headroom_bytes"] = None
    seat["explanation"] = [line for line in seat["explanation"] if line["rule"] != "kv_bytes"]
    path.write_text(json.dumps(older))
    assert {seat.name: seat.kv_mode for seat in read_plan(path).vllm_seats()}[name] == "utilisation"


def test_each_kind_of_seat_keeps_only_its_own_fields():
    plan = read_plan(V2_PLAN)
    for seat in plan.seats:
        dumped = seat.model_dump()
        own, other = (VLLM_ONLY_FIELDS, FIXED_ONLY_FIELDS) if seat.engine == "vllm" else (FIXED_ONLY_FIELDS, VLLM_ONLY_FIELDS)
        assert set(own) <= set(dumped) and not set(other) & set(dumped), seat.name
    assert {"kv_mode", "kv_cache_memory_bytes", "vllm"} <= set(VLLM_ONLY_FIELDS) and {"image", "command", "health_url"} == set(FIXED_ONLY_FIELDS)


def test_a_plan_newer_than_this_seatplan_names_the_upgrade(tmp_path: Path):
    newer = json.loads(V2_PLAN.read_text()) | {"version": PLAN_VERSION + 1}
    path = tmp_path / "newer.json"
    path.write_text(json.dumps(newer))
    with pytest.raises(SeatplanError) as refused:
        read_plan(path)
    assert f"version {PLAN_VERSION + 1} is not one this seatplan reads (1 to {PLAN_VERSION})" in refused.value.message
    assert "upgrade seatplan" in (refused.value.fix or "")


def test_a_fixed_seat_given_kv_fields_in_a_version_3_plan_is_refused(tmp_path: Path):
    plan = read_plan(V2_PLAN)
    document = json.loads(plan.model_dump_json())
    fixed = next(seat for seat in document["seats"] if seat["engine"] == "fixed")
    fixed["kv_mode"] = "rule"
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(document))
    assert read_plan(path).seat(fixed["name"]) is not None  # pydantic ignores an unknown field on a fixed seat...
    del document["seats"][1]["kv_mode"]
    path.write_text(json.dumps(document))
    with pytest.raises(SeatplanError) as refused:  # ...but a vLLM seat of version 3 must say its kv_mode
        read_plan(path)
    assert "kv_mode" in refused.value.message
