"""The rendered playbook run by the real ansible-playbook against this machine, with a stand-in engine.

The stand-in (tests/integration/fake_engine.py) only answers /health, so the rollout rules are checked in seconds: dated
backups, restarts only where the env file changed, one engine at a time, ``--check --diff`` changes
nothing, and rollback puts the tagged backups back. tests/integration/test_apply_vllm.py runs the same
playbook on the real vLLM CPU engine.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, localhost_inventory, render_args, run_seatplan, stop_engines

pytestmark = pytest.mark.ansible


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)


@pytest.mark.slow
def test_rollout_backs_up_restarts_changed_seats_one_at_a_time_and_rolls_back(rollout, capsys, monkeypatch):
    tmp_path = rollout
    ports = {"alpha": free_port(), "beta": free_port()}
    seats = {name: (QWEN3_8B, port) for name, port in ports.items()}
    plan = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB"), tmp_path / "plan.json")
    host_dir, inventory = tmp_path / "host", localhost_inventory(tmp_path)
    starts = tmp_path / "state" / "starts.log"
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0

    # 1. first rollout: no files on the host yet, so no backups; both engines start, beta after alpha is healthy
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"))
    assert code == 0, out + err
    assert json.loads(out)["ok"] is True
    assert starts.read_text().splitlines() == ["alpha start", "beta start alpha=200"]
    today = datetime.now(UTC).strftime("%Y%m%d")
    # no backups: nothing was replaced (the release record on the host says the files are new)
    assert sorted(path.name for path in (host_dir / "env").iterdir()) == ["alpha.env", "beta.env"]

    # 2. the same plan again: nothing changes on the host, nothing restarts
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "again"))
    assert code == 0, out + err
    assert len(starts.read_text().splitlines()) == 2
    assert not list((host_dir / "env").glob("*.bak-*"))

    # 3. beta's output cap changes: --check --diff shows it and touches nothing
    changed = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB", caps={"beta": 32}, name="fleet2.yaml"), tmp_path / "plan2.json")
    before = (host_dir / "env" / "beta.env").read_text()
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, changed, "check", "--check"))
    assert code == 0, out + err
    output = json.loads(out)["output"]
    assert '{\\"max_new_tokens\\": 16}' in output and '{\\"max_new_tokens\\": 32}' in output  # the env file's diff
    assert (host_dir / "env" / "beta.env").read_text() == before
    assert len(starts.read_text().splitlines()) == 2 and not list((host_dir / "env").glob("*.bak-*"))

    # 4. applied: only beta is backed up (dated, tagged) and restarted, with alpha healthy beside it
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, changed, "cap32"))
    assert code == 0, out + err
    backups = sorted(path.name for path in (host_dir / "env").glob("*.bak-*"))
    assert backups == [f"beta.env.bak-{today}-cap32"]
    assert (host_dir / "env" / backups[0]).read_text() == before
    assert starts.read_text().splitlines()[2:] == ["beta start alpha=200"]
    assert '"max_new_tokens\\": 32' in (host_dir / "env" / "beta.env").read_text()

    # 5. rollback to the release before: cap32's backup goes back and beta stops, then starts from it
    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--to", "again", "--inventory", str(inventory),
                                  "-e", f"seatplan_host_dir={host_dir}", "-e", "seatplan_run_verify=false", "--json")
    assert code == 0, out + err
    assert (host_dir / "env" / "beta.env").read_text() == before
    assert starts.read_text().splitlines()[3:] == ["beta stop", "beta start alpha=200"]


@pytest.mark.slow  # over 10 s on the 2-core machine: the full run, not the fast loop
def test_a_failing_restart_fails_apply_and_stops_the_rollout(rollout, capsys, monkeypatch):
    tmp_path = rollout
    seats = {name: (QWEN3_8B, free_port()) for name in ("alpha", "beta")}
    plan = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB"), tmp_path / "plan.json")
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/bin/sh\necho \"$1 ${3:-restart}\" >> \"$(dirname \"$0\")/attempts.log\"\nexit 3\n")
    broken.chmod(0o755)
    rendering = render_args(tmp_path, plan, fake_launcher())
    rendering[rendering.index("--restart-script") + 1] = str(broken)
    assert run_seatplan(capsys, monkeypatch, *rendering)[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t1"))
    assert code == 1
    document = json.loads(out)
    assert document["ok"] is False and document["failed_step"] == "step 1/2 (restart alpha on cpu-box:0)"
    # the failed step is undone: the engine it started is stopped and the file it added is gone; beta was never touched
    assert (tmp_path / "attempts.log").read_text().splitlines() == ["alpha restart", "alpha stop"]
    assert not (tmp_path / "host" / "env" / "alpha.env").exists()
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t2")[:-1])  # without --json
    assert code == 1 and "error: step 1/2 (restart alpha on cpu-box:0) failed" in err
