"""The pin for moving KV (drift or race) from the planner's own rule (facts API + plan sizing) when the model config is readable."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from kits.paths import MODEL_FIXTURES
from kits.vllm_logs import boot_lines
from seatplan.documents.fleet import Policy, SeatSpec
from seatplan.documents.fleet_file import load_fleet, resolve_model
from seatplan.engine.settings import EngineHost, engine_settings
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.observe.diagnose import diagnose
from seatplan.observe.findings import seat_findings
from seatplan.observe.inputs import kv_rule_pins, seat_map
from seatplan.observe.logparse import parse_log
from seatplan.plan.sizing import choose_kv_bytes
from seatplan.units import GiB, round_up


def racy_boots(model: str):
    lines = []
    for clock, non_torch, kv in (("11-20 09:00:00", 8.11, 20.37), ("11-22 14:00:00", 1.74, 26.74), ("11-25 08:30:00", -0.56, 29.04)):
        lines += boot_lines(1, 107, "qwen3-32b", clock=clock, kv_gib=kv, non_torch_gib=non_torch, model=model)
    return parse_log(lines, year=2026).boots


def test_pin_follows_the_plan_rule_when_the_config_is_here():
    boots = racy_boots(str(MODEL_FIXTURES / "Qwen--Qwen3-32B"))
    pins = kv_rule_pins(boots, None)
    # Qwen3-32B bf16: 64 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 256 KiB per token; one 32,768-token
    # request = 8 GiB; × the policy's 1.25 = 10 GiB, already a multiple of the 0.5 GiB step.
    assert pins["qwen3-32b"][0] == 10 * GiB
    race = next(f for f in seat_findings("qwen3-32b", boots, rule_pin=pins["qwen3-32b"]) if f.kind == "kv_drift")
    assert race.pin_kv_cache_memory_bytes == 10 * GiB and "plan's rule" in race.fix


def test_pin_above_what_the_seat_ever_got_says_to_replan():
    boots = racy_boots("/nowhere")
    race = next(f for f in seat_findings("qwen3-32b", boots, rule_pin=(40 * GiB, "rule")) if f.kind == "kv_drift")
    assert race.pin_kv_cache_memory_bytes == 40 * GiB and "re-plan" in race.fix


def test_without_a_readable_config_the_log_decides():
    boots = racy_boots("/nowhere/at/all")
    assert kv_rule_pins(boots, None) == {}
    race = next(f for f in seat_findings("qwen3-32b", boots) if f.kind == "kv_drift")
    assert race.pin_kv_cache_memory_bytes == 29 * GiB


def big_seat_fleet(tmp_path, seat_line: str, tail: str = ""):
    """A two-GPU fleet with one Qwen3-32B seat "big" (served as qwen3-32b) and one more line of its own."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"""hosts:
  - name: node-1
    gpus:
      - {{index: 0, total_bytes: 95.59GiB}}
      - {{index: 1, total_bytes: 95.59GiB}}
seats:
  - name: big
    model: {MODEL_FIXTURES / "Qwen--Qwen3-32B"}
    served_model_name: qwen3-32b
    {seat_line}
{tail}""")
    return fleet


def test_fleet_names_the_seat_and_its_rule(tmp_path):
    fleet = big_seat_fleet(tmp_path, "kv_factor: 1.5", "current_layout:\n  big: node-1:1\n")

    boots = racy_boots("/elsewhere/on/the/gpu/host")  # the log's path need not exist here: the fleet's does
    view = seat_map(None, fleet)
    assert view is not None and view.seats_on("node-1", 1) == ["big"]
    pins = kv_rule_pins(boots, fleet)
    assert pins["big"][0] == 12 * GiB  # 8 GiB × the seat's own factor 1.5
    report, _ = diagnose(boots=boots, stats=[], series=[], processes=[], seat_map=view, rule_pins=pins)
    seat = next(s for s in report.seats if s.name == "big")
    assert len(seat.boots) == 3
    assert next(f for f in seat.findings if f.kind == "kv_drift").pin_kv_cache_memory_bytes == 12 * GiB


def test_an_operators_pin_is_named_as_theirs_not_as_the_rule(tmp_path):
    """Issue 20: a pin equal to the operator's was described as "the plan's rule" with arithmetic giving another figure."""
    fleet = big_seat_fleet(tmp_path, "kv_cache_memory_bytes: 22GiB")
    boots = racy_boots("/elsewhere")
    pin, why = kv_rule_pins(boots, fleet)["big"]
    assert pin == 22 * GiB and "operator's pin" in why and "plan's rule for" not in why
    assert f"{22 * GiB:,} B" in why and f"{10 * GiB:,} B" in why  # theirs, and what the rule would give
    drift = next(f for f in seat_findings("big", boots, rule_pin=(pin, why)) if f.kind == "kv_drift")
    assert drift.pin_kv_cache_memory_bytes == 22 * GiB and "operator's pin" in drift.fix


def test_the_rules_arithmetic_gives_the_figure_it_names():
    rng = np.random.default_rng(20)
    for _ in range(300):
        request = int(rng.integers(1, 64 * GiB))
        factor = float(rng.choice([1.0, 1.1, 1.25, 1.5, 2.0]))
        floor = int(rng.integers(0, 2 * request + 2))
        step = int(rng.choice([0, GiB // 2, GiB, 256 * 2**20]))
        policy = Policy(kv_factor=factor, rounding_step_bytes=step)
        pin = policy.kv_pin(SeatSpec(name="s", model="m"), request, floor)
        rule = pin.rule_bytes
        assert (pin.kv_cache_memory_bytes, pin.source) == (rule, "rule") and rule == policy.rule_kv_bytes(request, floor)
        text = pin.arithmetic()
        numbers = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) B\b", text)]
        assert numbers[0] == request and numbers[1] == math.ceil(request * factor) and numbers[-1] == rule, text
        # Each stated step holds: the product, the floor when it wins, the rounding when it changes the figure.
        assert ("minimum" in text) is (floor > numbers[1])
        assert ("rounded up" in text) is (rule != max(numbers[1], floor))


def test_diagnose_and_explain_state_one_pin_with_one_arithmetic(tmp_path):
    """The KV pin is decided once (Policy.kv_pin): the plan's kv_bytes line (what explain prints) and diagnose's
    kv_drift pin give the same bytes, the same words for the arithmetic. They had two wordings: the plan's said
    "rounded up" where rounding changed nothing and left out vLLM's minimum where it won; diagnose's was right."""
    fleet = big_seat_fleet(tmp_path, "kv_factor: 1.3")
    pin, why = kv_rule_pins(racy_boots("/elsewhere"), fleet)["big"]
    loaded = load_fleet(fleet)
    seat = loaded.fleet.seats[0]
    facts = load_model_facts(resolve_model(seat.model, loaded.base_dir), engine_settings(seat, EngineHost(), loaded.fleet.policy.vllm_version))
    line = next(line for line in choose_kv_bytes(seat, facts, 32_768, loaded.fleet.policy).lines if line.rule == "kv_bytes")
    assert pin == round_up(math.ceil(8 * GiB * 1.3), GiB // 2)  # 10.4 GiB of one 8 GiB request × 1.3, to 10.5 GiB
    assert line.result.startswith(f"{pin:,} B") and why.endswith(line.note) and "rounded up to 512.0 MiB" in line.note


def test_an_operators_pin_vllm_refuses_is_offered_by_neither(tmp_path):
    """A pin below one request: plan refuses the seat, and diagnose no longer offers it as the pin to set (it
    offered 0 B as 'the rule' and a too-small pin as the operator's); the log decides."""
    for pin in ("0", "1GiB"):
        fleet = big_seat_fleet(tmp_path, f"kv_cache_memory_bytes: {pin}")
        assert kv_rule_pins(racy_boots("/elsewhere"), fleet) == {}
        loaded = load_fleet(fleet)
        seat = loaded.fleet.seats[0]
        facts = load_model_facts(resolve_model(seat.model, loaded.base_dir), engine_settings(seat, EngineHost(), loaded.fleet.policy.vllm_version))
        with pytest.raises(SeatplanError, match="cannot hold one 32,768-token request"):
            choose_kv_bytes(seat, facts, 32_768, loaded.fleet.policy)
