"""One change model for ``plan``'s rollout, ``diff`` and ``apply`` (issue 43, item 7).

``engine.change.seat_change`` decides; apply, which runs on the host without seatplan, follows it through the restart
digest each env file carries (``SEATPLAN_RESTART_DIGEST``, in the engine's environment once started): a change that
needs no restart (the utilisation of a seat whose KV cache is pinned, read by vLLM's start-up check only) is written
to the host without restarting the engine, and a change that needs one restarts it; ``diff`` and the rollout of
``plan --current`` say the same. Through the real ansible-playbook in script mode with the stand-in engine.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, render_args, run_seatplan, starts, stop_engines
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_plan
from seatplan.documents.plan import seat_launch
from seatplan.engine.change import seat_change
from seatplan.plan.current import from_env_files

pytestmark = [pytest.mark.ansible, pytest.mark.slow]
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=30")


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)



def vllm_named(tmp_path: Path) -> str:
    """The stand-in engine behind a `vllm serve` launcher (a script named vllm), so that the env files read back as a
    vLLM command does (diff and plan --current read them through engine.launch)."""
    shim = tmp_path / "bin" / "vllm"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nshift\nexec {shlex.join(shlex.split(fake_launcher()))} \"$@\"\n")
    shim.chmod(0o755)
    return f"{shim} serve"


def edited(plan: Path, target: Path, seat: str, **launch: object) -> Path:
    """The plan with fields of one seat's launch changed (a utilisation inside ``kv``, or a flag of its own)."""
    document = json.loads(plan.read_text())
    entry = next(item for item in document["seats"] if item["name"] == seat)
    for key, value in launch.items():
        if key == "gpu_memory_utilization":
            entry["launch"]["kv"]["gpu_memory_utilization"] = value
        else:
            entry["launch"][key] = value
    target.write_text(json.dumps(document, indent=2) + "\n")
    return target


def test_apply_diff_and_plan_agree_on_what_restarts(rollout, capsys, monkeypatch, rng):
    tmp_path = rollout
    ports = {"alpha": free_port(), "beta": free_port()}
    plan = build_plan_file(cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="64GiB"), tmp_path / "plan.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, vllm_named(tmp_path)))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *FAST_HEALTH)
    assert code == 0 and starts(tmp_path) == ["alpha start", "beta start"], out + err
    rendered = tmp_path / "rendered"

    # alpha's KV cache is pinned: a new utilisation is read by vLLM's start-up check only. Every consumer says no restart
    old = read_plan(plan).seat("alpha")
    util = round(rng.uniform(0.05, 0.95), 3)
    while util == old.launch.gpu_memory_utilization:  # type: ignore[union-attr]
        util = round(rng.uniform(0.05, 0.95), 3)
    quiet = edited(plan, tmp_path / "plan-util.json", "alpha", gpu_memory_utilization=util)
    assert not seat_change(seat_launch(old), seat_launch(read_plan(quiet).seat("alpha"))).restart
    code, out, err = run_seatplan(capsys, monkeypatch, "diff", str(quiet), "--against", str(rendered), "--json")
    assert "seats" in json.loads(out), out + err
    seats = {item["seat"]: item for item in json.loads(out)["seats"]}
    assert seats["alpha"]["status"] == "changed" and not seats["alpha"]["restarts"] and not seats["beta"]["restarts"]
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, quiet, "util"), *FAST_HEALTH)
    assert code == 0, out + err
    assert starts(tmp_path) == ["alpha start", "beta start"]  # written, not restarted
    host_env = (tmp_path / "host" / "env" / "alpha.env").read_text()
    assert f"--gpu-memory-utilization {util}" in host_env or f"--gpu-memory-utilization {util:g}" in host_env
    # plan --current reads what runs back from the env files: no restart of alpha either
    current = from_env_files(rendered, load_fleet(tmp_path / "fleet.yaml").fleet)
    assert not seat_change(current.launches["alpha"], seat_launch(read_plan(quiet).seat("alpha"))).restart

    # a change that does restart (alpha's batch limit): diff, the model and apply agree again
    loud = edited(quiet, tmp_path / "plan-seqs.json", "alpha", max_num_seqs=old.launch.max_num_seqs + 1)  # type: ignore[union-attr]
    code, out, _ = run_seatplan(capsys, monkeypatch, "diff", str(loud), "--against", str(rendered), "--json")
    seats = {item["seat"]: item for item in json.loads(out)["seats"]}
    assert seats["alpha"]["restarts"] and not seats["beta"]["restarts"]
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, loud, "seqs"), *FAST_HEALTH)
    assert code == 0 and starts(tmp_path) == ["alpha start", "beta start", "alpha start"], out + err
