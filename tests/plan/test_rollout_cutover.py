"""The first apply cuts over every seat run by what its ``started_by`` names (issue 43, item 2), moving or not.

Planned from the fleet's ``current_layout`` (an adopted box: no launch of seatplan's is known), each such vLLM seat
is a step of the rollout (a ``restart`` where it stays, a ``stop`` and ``start`` where it moves), ordered with every
other step so that each start passes vLLM's start-up check (``request_memory``, vllm/v1/worker/utils.py lines
716-772) and fits; render's steps are the rollout's, with no unchecked restart left after them for those seats.
Random draws on the demo fleet: which seats have ``started_by``, and where each runs today.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from kits.cli import run_cli
from seatplan.documents.plan import Plan
from seatplan.render.ansible import rollout_steps
from seatplan.render.engines import plan_engines
from seatplan.render.settings import RenderSettings

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fleet.yaml"


def adopted_demo(tmp_path: Path, rng) -> tuple[Path, set[str]]:
    """The demo fleet with started_by on a random non-empty subset of its vLLM seats (a systemd unit, a compose
    service or a stop command each), and each seat's current GPU drawn from where it may run."""
    document = yaml.safe_load(DEMO.read_text())
    vllm = [seat for seat in document["seats"] if seat.get("engine", "vllm") == "vllm"]
    chosen = rng.sample(vllm, rng.randint(1, len(vllm)))
    for seat in document["seats"]:
        if "model" in seat and not Path(seat["model"]).is_absolute():
            seat["model"] = str(DEMO.parent / seat["model"])
    for seat in chosen:
        seat["started_by"] = rng.choice([{"systemd_unit": f"vllm-{seat['name']}.service"},
                                         {"compose_file": "/srv/llm/compose.yaml", "compose_service": seat["name"]},
                                         {"stop_command": ["/usr/local/bin/stop-engine", seat["name"]]}])
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path, {seat["name"] for seat in chosen}


def test_every_seat_started_by_another_starter_is_a_checked_step_of_the_first_rollout(rng, tmp_path, capsys, monkeypatch):
    for attempt in range(4):
        case = tmp_path / str(attempt)
        case.mkdir()
        fleet, cut_over = adopted_demo(case, rng)
        result = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json")
        assert result.exit_code == 0, result.stderr
        plan = Plan.model_validate_json(result.stdout)
        assert plan.rollout is not None and plan.rollout.fails is None
        starts = [step for step in plan.rollout.steps if step.action in ("start", "restart")]
        # each seat cut over starts exactly once, where the plan puts it, and every start passes vLLM's check and fits
        assert sorted(step.seat for step in starts if step.seat in cut_over) == sorted(cut_over)
        for step in starts:
            assert step.gpus == plan.seat(step.seat).gpus
            assert step.checks and all(check.passes for check in step.checks), step
            assert all(check.request_margin_bytes is None or check.request_margin_bytes >= 0 for check in step.checks)
        # a seat with no started_by that stays where it runs is not touched by the rollout
        untouched = {seat.name for seat in plan.vllm_seats() if seat.name not in cut_over and seat.name not in {step.seat for step in plan.rollout.steps}}
        assert not untouched & cut_over
        # render runs the rollout's steps first, in its order; only the engines the rollout leaves out get the trailing restart
        steps = rollout_steps(plan, plan_engines(plan, RenderSettings()))
        rolled = [(step.action, step.seat) for step in plan.rollout.steps if step.action == "stop" or step.seat in {seat.name for seat in plan.vllm_seats()}]
        assert [(step["action"], step["seat"]) for step in steps[:len(rolled)]] == rolled
        assert not {step["seat"] for step in steps[len(rolled):]} & cut_over


def test_without_started_by_an_unmoved_seat_is_no_step(tmp_path, capsys, monkeypatch):
    """The counterpart: the demo fleet as it is (no started_by) puts no restart in the rollout for a seat that stays."""
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--json")
    plan = Plan.model_validate_json(result.stdout)
    assert plan.rollout is not None
    assert not [step for step in plan.rollout.steps if step.action == "restart"]
