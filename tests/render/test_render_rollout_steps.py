"""Apply follows the plan's rollout steps, and rollback undoes them, through the real ansible-playbook against this
machine with the stand-in engine (tests/integration/fake_engine.py answers /health only; the real vLLM CPU engine
runs the same scenario in tests/integration/test_apply_vllm_rollout.py).

The scenario: beta moves from budget 1 to budget 0 (stop, then start), then alpha restarts with a setting that
never answers /health (the test restart script starts a silent process for `SEATPLAN_TEST_BROKEN`). The failed
step puts alpha's file back and restarts it from it; apply names the step; rollback brings beta back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import (
    ansible_installed,
    apply_args,
    build_plan_file,
    cpu_fleet,
    fake_launcher,
    localhost_inventory,
    render_args,
    run_seatplan,
    stop_engines,
    with_rollout,
)
from seatplan.documents.io import read_plan
from seatplan.render.ansible import rollout_steps
from seatplan.render.engines import plan_engines
from seatplan.render.settings import RenderSettings

pytestmark = pytest.mark.ansible
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=20")
MOVE_STEPS = [("stop", "beta", ["cpu-box:1"]), ("start", "beta", ["cpu-box:0"]), ("restart", "alpha", ["cpu-box:0"])]


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)


def log(tmp_path: Path) -> list[str]:
    return (tmp_path / "state" / "starts.log").read_text().splitlines()


def two_plans(tmp_path: Path) -> tuple[Path, Path]:
    seats = {name: (QWEN3_8B, free_port()) for name in ("alpha", "beta")}
    common = {"kv": "256MiB", "total": "64GiB", "budgets": 2}
    first = build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 1}, **common), tmp_path / "plan.json")  # type: ignore[arg-type]
    moved = build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 0}, envs={"alpha": {"SEATPLAN_TEST_BROKEN": "1"}},
                                      name="fleet2.yaml", **common), tmp_path / "plan2.json")  # type: ignore[arg-type]
    return first, with_rollout(moved, MOVE_STEPS)


@pytest.mark.slow
def test_apply_runs_the_steps_in_order_a_failed_step_is_undone_and_rollback_undoes_the_rest(rollout, capsys, monkeypatch):
    tmp_path = rollout
    first, moved = two_plans(tmp_path)
    env = tmp_path / "host" / "env"
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, first, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, first, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    assert log(tmp_path) == ["alpha start", "beta start alpha=200"]
    before = {seat: (env / f"{seat}.env").read_text() for seat in ("alpha", "beta")}

    # stop before start, one at a time; step 3 never answers /health: its file goes back, alpha restarts from it
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, moved, "move"), *FAST_HEALTH)
    document = json.loads(out)
    assert code == 1 and document["failed_step"] == "step 3/3 (restart alpha on cpu-box:0)", out + err
    assert "what the step changed is put back and alpha restarted from it" in document["output"]
    assert log(tmp_path)[2:] == ["beta stop", "beta start alpha=200", "alpha start beta=200", "alpha start beta=200"]
    assert (env / "alpha.env").read_text() == before["alpha"]
    assert "CPU budget 0" in (env / "beta.env").read_text()
    today = datetime.now(UTC).strftime("%Y%m%d")
    assert sorted(path.name for path in env.glob("*-move")) == [f"alpha.env.bak-{today}-move", f"beta.env.bak-{today}-move"]

    # rollback: the steps undone in reverse: beta stopped on budget 0, its file back, started on budget 1; alpha as it runs
    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "move", "--inventory", str(localhost_inventory(tmp_path)),
                                  "-e", "seatplan_run_verify=false", *FAST_HEALTH, "--json")
    assert code == 0, out + err
    assert log(tmp_path)[6:] == ["beta stop", "beta start alpha=200"]
    assert {seat: (env / f"{seat}.env").read_text() for seat in ("alpha", "beta")} == before
    assert not list(env.glob("*.stopped-*"))
    # a second rollback to the same tag changes nothing (the release is set aside as undone)
    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "move", "--inventory", str(localhost_inventory(tmp_path)),
                                  "-e", "seatplan_run_verify=false", *FAST_HEALTH, "--json")
    assert code == 0, out + err
    assert len(log(tmp_path)) == 8


def test_the_steps_are_the_plans_rollout_else_a_restart_per_engine_in_boot_order(tmp_path):

    first, moved = two_plans(tmp_path)
    plan = read_plan(first)
    engines = plan_engines(plan, RenderSettings())
    assert [(step["action"], step["seat"]) for step in rollout_steps(plan, engines)] == [("restart", engine.name) for engine in engines]
    plan = read_plan(moved)
    steps = rollout_steps(plan, plan_engines(plan, RenderSettings()))
    assert [(step["action"], step["seat"], step["gpus"]) for step in steps] == MOVE_STEPS
    assert [step["label"] for step in steps] == ["step 1/3 (stop beta on cpu-box:1)", "step 2/3 (start beta on cpu-box:0)", "step 3/3 (restart alpha on cpu-box:0)"]
