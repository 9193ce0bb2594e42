"""The live-box check of issue 43 on real parts: two vLLM 0.32 CPU engines started by hand on 127.0.0.1 from the
operator's own env files, adopted with ``seatplan adopt``, then the real ``ansible-playbook`` in script mode.

1. ``apply --check`` reads what runs: both seats "runs from another starter" (their ``started_by``), nothing changed;
2. the first apply cuts over both (each is a ``restart`` step of the rollout, checked): no hand-started PID is left,
   each seat's port is held by the engine seatplan's launcher started, and the playbook's closing ``verify`` passes;
3. a killed engine is brought back by re-applying the same plan (verify passes again);
4. a stray process answering on a seat's port stops the apply in its first play, named by PID and command line,
   within the playbook's own bounded checks, before anything is stopped; the other engine runs on.

Runs under the heavy lock (scripts/test.sh runs the vllm-marked tests serially).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kits.parts import free_port, require, stop_process
from kits.rollout import ansible_installed, apply_args, kill_recorded_group, render_args, run_seatplan, stop_engines
from kits.serving_stack import start_from_env_file
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv
from seatplan.render import hostcheck

pytestmark = [pytest.mark.vllm, pytest.mark.ansible, pytest.mark.timeout(2400)]

SEATS = {"dense": (QWEN3_DENSE, 48 * 2**20), "gemma": (GEMMA3_TEXT, 256 * 2**20)}  # seat → (tiny model, KV pin)


def handwritten_env(seat: str, model_dir: Path, port: int) -> str:
    _, kv = SEATS[seat]
    command = (f"{vllm_python()} -m vllm.entrypoints.openai.api_server --model {model_dir} --served-model-name {seat} --host 127.0.0.1 "
               f"--port={port} --dtype bfloat16 --max-model-len 1024 --kv-cache-memory-bytes {kv} --enforce-eager --max-num-seqs 4 "
               "--max-num-batched-tokens 1024")
    return f"# {seat}: started by hand\nVLLM_LINE=\"{command}\"\n"


def adopted_fleet(work: Path, handmade: Path, litellm: Path, pids: dict[str, int]) -> Path:
    """adopt, then what the operator fills in: a CPU box, its budget, both engines on it, and how each was started
    (an env file alone does not say: adopt asks for started_by by hand)."""
    fleet = work / "fleet.yaml"
    done = run([sys.executable, "-c", "from seatplan.cli import main; main()", "adopt", "--litellm-config", str(litellm), "--env-dir", str(handmade),
                "-o", str(fleet)])
    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(fleet.read_text().replace("device: TODO", "device: cpu").replace("total_bytes: TODO", "total_bytes: 16GiB"))
    document["hosts"][0]["gpus"] = [{"index": 0, "total_bytes": "16GiB"}]
    document["hosts"][0] |= {"name": "cpu-box", "address": "127.0.0.1"}  # the inventory's name for this machine
    document["current_layout"] = dict.fromkeys(SEATS, 0)
    for seat in document["seats"]:
        seat["started_by"] = {"stop_command": ["kill", "-TERM", str(pids[seat["name"]])]}
    fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    return fleet


def run(words: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(words, capture_output=True, text=True, timeout=600)


def recorded_pid(work: Path, seat: str) -> int:
    return int((work / "host" / "run" / f"{seat}.pid").read_text().split()[0])


def table(out: str) -> dict[str, str]:
    return {line.split()[1]: state for line in out.splitlines() for state in hostcheck.STATES if f"  {state}  " in line}


def test_an_adopted_box_is_cut_over_revived_and_guarded_by_apply(tmp_path, capsys, monkeypatch):
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "1")
    work = tmp_path
    ports = {seat: free_port() for seat in SEATS}
    handmade = work / "handmade"
    handmade.mkdir()
    for seat, (spec, _) in SEATS.items():
        (handmade / f"{seat}.env").write_text(handwritten_env(seat, tiny_model_dir(spec, vllm_python()), ports[seat]))
    litellm = work / "litellm.yaml"
    litellm.write_text(yaml.safe_dump({"model_list": [{"model_name": seat, "litellm_params": {"model": f"hosted_vllm/{seat}",
                                                                                            "api_base": f"http://127.0.0.1:{ports[seat]}/v1"}} for seat in SEATS]}))
    servers = {}
    stray = None
    try:
        for seat in SEATS:
            servers[seat] = start_from_env_file(handmade / f"{seat}.env", "VLLM_LINE", ports[seat], work)
        hand = {seat: server.process.pid for seat, server in servers.items()}
        fleet = adopted_fleet(work, handmade, litellm, hand)
        plan = work / "plan.json"
        planned = run([sys.executable, "-c", "from seatplan.cli import main; main()", "plan", str(fleet), "-o", str(plan)])
        assert planned.returncode == 0, planned.stderr
        steps = [(step["action"], step["seat"]) for step in json.loads(plan.read_text())["rollout"]["steps"]]
        assert sorted(steps) == [("restart", "dense"), ("restart", "gemma")]  # both cut over, neither moves
        launcher = f"{vllm_python()} -m vllm.entrypoints.openai.api_server"
        assert run_seatplan(capsys, monkeypatch, *render_args(work, plan, launcher))[0] == 0
        health = ("-e", "seatplan_health_timeout_s=600", "--no-gateway")

        # 1. what runs, read only
        check = [word for word in apply_args(work, plan, "look", verify=True) if word != "--json"]
        code, out, err = run_seatplan(capsys, monkeypatch, *check, "--check", *health)
        assert code == 0 and table(out) == dict.fromkeys(SEATS, "runs from another starter"), out + err
        assert all(server.process.poll() is None for server in servers.values())

        # 2. the first apply cuts over both; verify (the playbook's last play) passes
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(work, plan, "first", verify=True), *health)
        assert code == 0, (json.loads(out)["output"][-6000:] if out else err)
        for seat, server in servers.items():
            assert server.process.wait(timeout=120) is not None  # the hand-started engine is gone
            pid = recorded_pid(work, seat)
            assert pid != hand[seat] and hostcheck.owns_port(pid, ports[seat])
            assert hostcheck.environ_value(pid, "SEATPLAN_SEAT") == seat
        code, out, err = run_seatplan(capsys, monkeypatch, *check, "--check", *health)
        assert code == 0 and table(out) == dict.fromkeys(SEATS, "runs as planned"), out + err

        # 3. a killed engine comes back with the same plan
        survivor = recorded_pid(work, "gemma")
        kill_recorded_group(work / "state" / "dense.pid")
        for _ in range(300):
            if not hostcheck.listening_inodes(ports["dense"]):
                break
            time.sleep(0.1)
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(work, plan, "revive", verify=True), *health)
        assert code == 0, (json.loads(out)["output"][-6000:] if out else err)
        assert hostcheck.owns_port(recorded_pid(work, "dense"), ports["dense"]) and recorded_pid(work, "gemma") == survivor

        # 4. a stray answering on dense's port: refused before anything stops, named
        kill_recorded_group(work / "state" / "dense.pid")
        for _ in range(300):
            if not hostcheck.listening_inodes(ports["dense"]):
                break
            time.sleep(0.1)
        stray = subprocess.Popen([sys.executable, "-m", "http.server", str(ports["dense"]), "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(300):
            if hostcheck.listening_inodes(ports["dense"]):
                break
            time.sleep(0.05)
        code, out, err = run_seatplan(capsys, monkeypatch, *check, "--check", *health)
        assert code == 1 and table(out)["dense"] == "port held by a stranger", out + err  # dense is seatplan's now: started_by is history
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(work, plan, "stray", verify=True), *health)
        said = " ".join(err.split())
        assert code == 2, out + err
        assert f"seat dense: port {ports['dense']} is held by PID {stray.pid} ({sys.executable} -m http.server {ports['dense']}" in said
        assert recorded_pid(work, "gemma") == survivor and hostcheck.owns_port(survivor, ports["gemma"])
    finally:
        if stray is not None:
            stop_process(stray)
        for server in servers.values():
            server.stop()
        stop_engines(work)
        for seat in SEATS:
            pid_file = work / "host" / "run" / f"{seat}.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
