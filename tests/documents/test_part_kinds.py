"""Footprint parts are typed (documents.plan.PartKind): each kind says whether the engine holds it before vLLM's
start-up snapshot or inside its --gpu-memory-utilization request, the one place the planner's utilisation and the
rollout's start check read it from."""

from __future__ import annotations

import json

import pytest

from kits.plan import random_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.plan import PartKind, Plan, PlannedVllmSeat, before_snapshot_bytes, inside_request_bytes
from seatplan.plan.planner import build_plan


def test_only_the_context_and_nccl_come_before_the_snapshot_and_creep_is_outside_the_request():
    assert {kind for kind in PartKind if kind.before_snapshot} == {PartKind.CUDA_CONTEXT, PartKind.NCCL_ALLREDUCE}
    assert {kind for kind in PartKind if not kind.before_snapshot and not kind.inside_request} == {PartKind.CREEP_ALLOWANCE}


def test_every_part_a_plan_writes_is_a_kind_and_the_two_sums_and_the_creep_make_the_footprint(tmp_path, rng):
    seen: set[PartKind] = set()
    for trial in range(6):
        directory = tmp_path / str(trial)
        directory.mkdir()
        plan = build_plan(load_fleet(random_fleet(rng, directory)))
        for seat in plan.seats:
            seen |= {part.name for part in seat.footprint_parts}
            creep = sum(part.bytes for part in seat.footprint_parts if part.name is PartKind.CREEP_ALLOWANCE)
            assert before_snapshot_bytes(seat.footprint_parts) + inside_request_bytes(seat.footprint_parts) + creep == seat.footprint_bytes
            if isinstance(seat, PlannedVllmSeat) and seat.launch is not None and seat.footprint_basis == "estimate":
                assert before_snapshot_bytes(seat.footprint_parts) > 0  # its CUDA context at least
        # the kinds read back from the saved document as the same members
        again = Plan.model_validate_json(plan.model_dump_json())
        assert [[part.name for part in seat.footprint_parts] for seat in again.seats] == [[part.name for part in seat.footprint_parts] for seat in plan.seats]
    assert PartKind.WEIGHTS in seen and PartKind.KV_CACHE in seen


def test_a_part_of_no_known_kind_is_refused_naming_it(tmp_path, rng):
    plan = build_plan(load_fleet(random_fleet(rng, tmp_path)))
    document = json.loads(plan.model_dump_json())
    document["seats"][0]["footprint_parts"][0]["name"] = "vram_of_mystery"
    with pytest.raises(ValueError, match="footprint_parts.0.name"):
        Plan.model_validate(document)
