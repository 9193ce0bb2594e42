"""Reconcile (issue 43, item 6): re-applying a plan starts every seat that is not running, or not running from its
files on the host, though none of its files changed; ``apply --restart SEAT`` restarts one on purpose. Through the
real ansible-playbook against this machine in script mode, with the stand-in engine (tests/integration/fake_engine.py);
the real vLLM CPU engine runs the killed-engine case in tests/integration/test_apply_vllm.py.
"""

from __future__ import annotations

import json
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
    kill_recorded_group,
    render_args,
    run_seatplan,
    starts,
    stop_engines,
    with_rollout,
)
from seatplan.render import hostcheck

pytestmark = pytest.mark.ansible
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=30")


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)



def engine_pid(tmp_path: Path, seat: str) -> int:
    return int((tmp_path / "host" / "run" / f"{seat}.pid").read_text().split()[0])


@pytest.mark.slow
def test_reapplying_starts_a_killed_engine_and_restart_names_one_on_purpose(rollout, capsys, monkeypatch):
    tmp_path = rollout
    ports = {"alpha": free_port(), "beta": free_port()}
    plan = build_plan_file(cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="64GiB"), tmp_path / "plan.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    assert starts(tmp_path) == ["alpha start", "beta start"]

    # the same plan again, both running from their files: nothing restarts
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "again"), *FAST_HEALTH)
    assert code == 0 and starts(tmp_path) == ["alpha start", "beta start"], out + err

    # alpha's engine killed: its files are unchanged, and the re-apply starts it (beta left running)
    beta = engine_pid(tmp_path, "beta")
    kill_recorded_group(tmp_path / "state" / "alpha.pid")
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "revive"), *FAST_HEALTH)
    assert code == 0, out + err
    assert starts(tmp_path) == ["alpha start", "beta start", "alpha start"]
    assert hostcheck.owns_port(engine_pid(tmp_path, "alpha"), ports["alpha"]) and engine_pid(tmp_path, "beta") == beta

    # a plan with a rollout that names only alpha: beta, killed, is brought back by the step every other engine gets
    kill_recorded_group(tmp_path / "state" / "beta.pid")
    rolled = with_rollout(build_plan_file(tmp_path / "fleet.yaml", tmp_path / "plan-rollout.json"), [("restart", "alpha", ["cpu-box:0"])])
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, rolled, "revive2"), *FAST_HEALTH)
    assert code == 0, out + err
    assert starts(tmp_path)[3:] == ["beta start"] and "step 2/2 (restart beta on cpu-box:0)" in json.loads(out)["output"]
    assert hostcheck.owns_port(engine_pid(tmp_path, "beta"), ports["beta"])

    # --restart SEAT: restarted though nothing changed; a name the plan has no engine for is refused before anything runs
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "kick"), *FAST_HEALTH, "--restart", "beta")
    assert code == 0 and starts(tmp_path)[4:] == ["beta start"], out + err
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "kick2"), "--restart", "gamma")
    assert code == 2 and "--restart gamma: not an engine of the plan (its engines: alpha, beta)" in err
    assert len(starts(tmp_path)) == 5
