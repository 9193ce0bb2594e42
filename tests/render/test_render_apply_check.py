"""``seatplan apply PLAN --check`` prints what runs, per host and seat, read on the host (issue 43, item 1).

Through the real ansible-playbook against this machine in script mode, with the stand-in engine
(tests/integration/fake_engine.py) started by hand the way an operator's box runs one: the first play of every apply
runs ``seatplan-health.py observe`` from the rendered directory (nothing is copied to the host for it), and
``--check`` tabulates it: runs as planned, runs differently, runs from another starter (``started_by``), not
running, port held by a stranger (PID and command line). The real vLLM CPU engines run the same table in
tests/integration/test_apply_adopted_vllm.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from kits.parts import free_port, require, stop_process
from kits.paths import REPO_ROOT
from kits.render import QWEN3_8B
from kits.rollout import (
    FAKE_ENGINE,
    ansible_installed,
    apply_args,
    build_plan_file,
    cpu_fleet,
    fake_launcher,
    kill_recorded_group,
    render_args,
    run_seatplan,
    serve_by_hand,
    stop_engines,
)
from seatplan.render import hostcheck

pytestmark = [pytest.mark.ansible, pytest.mark.slow]
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=30")


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    started: list[subprocess.Popen] = []
    yield tmp_path, started
    stop_engines(tmp_path)
    for process in started:
        stop_process(process)


def table(out: str) -> dict[str, str]:
    """seat → the state its row of `apply --check`'s table says."""
    rows = {}
    for line in out.splitlines():
        words = line.split()
        for state in hostcheck.STATES:
            if f"  {state}  " in line and len(words) > 2:
                rows[words[1]] = state
    return rows


def test_apply_check_tabulates_what_runs_and_changes_nothing(rollout, capsys, monkeypatch):
    tmp_path, started = rollout
    ports = {"alpha": free_port(), "beta": free_port(), "gamma": free_port()}
    hand = serve_by_hand(ports["alpha"], started)  # alpha: run by hand today, declared as started_by
    stop = [sys.executable, "-c", f"import os, signal; os.killpg({hand.pid}, signal.SIGTERM)"]
    stranger = serve_by_hand(ports["gamma"], started)  # gamma: something nobody declared answers on its port
    fleet = cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="64GiB",
                      more={"alpha": ["started_by:", f"  stop_command: {json.dumps(stop)}"]})
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    check = [word for word in apply_args(tmp_path, plan, "look") if word != "--json"] + ["--check"]

    code, out, err = run_seatplan(capsys, monkeypatch, *check)
    assert code == 1, out + err  # gamma's step would fail: --check says so with exit 1
    assert table(out) == {"alpha": "runs from another starter", "beta": "not running", "gamma": "port held by a stranger"}, out
    said = " ".join(out.split())
    assert f"PID {stranger.pid} ({sys.executable} {FAKE_ENGINE} --host 127.0.0.1 --port {ports['gamma']})" in said
    assert "apply: refused: that step fails before anything stops" in said and "apply: cut over: started_by stopped" in said
    assert not (tmp_path / "host" / "env").exists() and hand.poll() is None  # read only: nothing written, nothing stopped
    # docs/render.md shows this table: the same heading, seats, GPUs and states
    page = (REPO_ROOT / "docs" / "render.md").read_text().split("checks the page against it):\n\n```\n", 1)[1].split("```", 1)[0]
    assert page.splitlines()[0] == out.splitlines()[0] and table(page) == table(out)
    assert [line.split()[:3] for line in page.splitlines()[1:]] == [line.split()[:3] for line in out.splitlines()[1:4]]

    # --json: the same rows as documents
    code, out, err = run_seatplan(capsys, monkeypatch, *check, "--json")
    rows = {row["seat"]: row for row in json.loads(out)["observed"]}
    assert code == 1 and rows["gamma"]["strangers"] == [stranger.pid] and rows["alpha"]["held_by"] == [hand.pid] and rows["beta"]["held_by"] == []

    # apply itself refuses the stranger in its first play: before alpha's hand-started engine is stopped or a file written
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "refused"), *FAST_HEALTH)
    said = " ".join(err.split())
    assert code == 2, out + err
    assert "a seat's port is held by a process neither seatplan nor started_by runs; nothing was changed or stopped" in said
    assert f"seat gamma: port {ports['gamma']} is held by PID {stranger.pid} ({sys.executable} {FAKE_ENGINE}" in said and "declare it: started_by" in said
    assert not (tmp_path / "host" / "env").exists() and hand.poll() is None and not (tmp_path / "state" / "starts.log").exists()

    # the stranger gone, apply cuts alpha over and starts every seat; then --check sees each as planned
    stop_process(stranger)
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    assert hand.wait(timeout=30) is not None
    code, out, err = run_seatplan(capsys, monkeypatch, *check)
    assert code == 0 and table(out) == dict.fromkeys(ports, "runs as planned"), out + err

    # beta killed, alpha's env file edited on the host by hand: not running, and alpha still runs as planned
    kill_recorded_group(tmp_path / "state" / "beta.pid")
    for _ in range(100):
        if not hostcheck.listening_inodes(ports["beta"]):
            break
        time.sleep(0.1)
    env_file = tmp_path / "host" / "env" / "alpha.env"
    env_file.write_text(env_file.read_text() + "# edited by hand\n")
    code, out, err = run_seatplan(capsys, monkeypatch, *check)
    # the running engine's restart digest is the planned one (engine.change): it runs as planned, only the file differs
    assert code == 0 and table(out) == {"alpha": "runs as planned", "beta": "not running", "gamma": "runs as planned"}, out + err
    assert "its env file on the host differs from the planned one in what needs no restart" in " ".join(out.split())
    # a plan whose alpha launches otherwise (its batch limit): alpha runs differently from it
    document = json.loads(plan.read_text())
    entry = next(item for item in document["seats"] if item["name"] == "alpha")
    entry["launch"]["max_num_seqs"] += 1
    other = tmp_path / "plan-seqs.json"
    other.write_text(json.dumps(document, indent=2) + "\n")
    code, out, err = run_seatplan(capsys, monkeypatch, *[str(other) if word == str(plan) else word for word in check])
    assert code == 0 and table(out) == {"alpha": "runs differently", "beta": "not running", "gamma": "runs as planned"}, out + err

    # alpha is seatplan's now (its env file is on the host): a process on its port is a stranger, though alpha has
    # started_by, and apply refuses it before anything stops
    kill_recorded_group(tmp_path / "state" / "alpha.pid")
    for _ in range(100):
        if not hostcheck.listening_inodes(ports["alpha"]):
            break
        time.sleep(0.1)
    late = serve_by_hand(ports["alpha"], started)
    code, out, err = run_seatplan(capsys, monkeypatch, *check)
    assert code == 1 and table(out)["alpha"] == "port held by a stranger" and f"PID {late.pid}" in out, out + err
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "late"), *FAST_HEALTH)
    assert code == 2 and f"seat alpha: port {ports['alpha']} is held by PID {late.pid}" in " ".join(err.split()), out + err
