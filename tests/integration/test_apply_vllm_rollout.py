"""End to end on the real vLLM CPU engine: a rollout with a move, a later step failing its health check, rollback.

Two tiny random-weight models on a ``device: cpu`` host with two memory budgets, rolled out by the rendered
playbook through the real ansible-playbook (restart: a script that starts each engine through the rendered launcher
from its env file, tests/kits/rollout.py). The second plan moves beta from budget 1 to budget 0 and lowers alpha's
output cap, with the steps stop beta, start beta on budget 0, restart alpha. Alpha's new setting is made to exit
before it answers /health, as vLLM does on a setting it refuses (the test script starts a process that exits for
``SEATPLAN_TEST_BROKEN=exit``), so step 3 fails as soon as apply sees the engine gone:

- apply exits 1 naming step 3; beta runs on budget 0 (steps 1 and 2 held);
- the failed step is undone: alpha's env file is the old one and the engine runs its old command (its process's
  argv is the old SEATPLAN_COMMAND, /v1/models and vllm:cache_config_info give the first plan's numbers);
- ``seatplan rollback --before move`` undoes steps 2 and 1: beta back on budget 1 from its old file;
- ``seatplan verify`` passes against the first plan.

The stand-in engine runs the same scenario in seconds (tests/render/test_render_rollout_steps.py), there with a
start that never answers and waits out its health deadline; this test shows it with real engines, whose /health,
numbers and argv are vLLM's own (a start that never answers would wait out the whole 240 s here).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import httpx
import pytest

from kits.parts import free_port, require
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, localhost_inventory, render_args, run_seatplan, stop_engines, with_rollout
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import parse_cache_config_info
from seatplan.engine.parse import parse_env, split_shell_line

pytestmark = [pytest.mark.vllm, pytest.mark.ansible]

KV = "192MiB"
# each real start on two shared cores takes a minute or two
HEALTH = ("-e", "seatplan_health_timeout_s=240")


def served(port: int, name: str) -> tuple[int, dict[str, str]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False) as client:
        cards = client.get("/v1/models").raise_for_status().json()["data"]
        labels = parse_cache_config_info(client.get("/metrics").raise_for_status().text)
    return int(next(card for card in cards if card["id"] == name)["max_model_len"]), labels


def argv_of(pid_file: Path) -> list[str]:
    return Path(f"/proc/{pid_file.read_text().strip()}/cmdline").read_bytes().decode().split("\0")[:-1]


@pytest.mark.timeout(2400)
def test_a_failed_step_is_undone_and_rollback_restores_what_ran(vllm_python_path, tmp_path, capsys, monkeypatch):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "1")
    seats = {"alpha": (tiny_model_dir(QWEN3_DENSE, vllm_python_path), free_port()), "beta": (tiny_model_dir(GEMMA3_TEXT, vllm_python_path), free_port())}
    common = {"kv": KV, "budgets": 2}
    first = build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 1}, **common), tmp_path / "plan.json")  # type: ignore[arg-type]
    moved = with_rollout(build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 0}, caps={"alpha": 8}, name="fleet2.yaml",
                                                   envs={"alpha": {"SEATPLAN_TEST_BROKEN": "exit"}}, **common), tmp_path / "plan2.json"),  # type: ignore[arg-type]
                         [("stop", "beta", ["cpu-box:1"]), ("start", "beta", ["cpu-box:0"]), ("restart", "alpha", ["cpu-box:0"])])
    plan = {seat["name"]: seat for seat in json.loads(first.read_text())["seats"]}
    launcher = shlex.join([str(vllm_python_path), "-m", "vllm.entrypoints.openai.api_server"])
    env, state = tmp_path / "host" / "env", tmp_path / "state"
    try:
        assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, first, launcher))[0] == 0
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, first, "first"), *HEALTH)
        assert code == 0, json.loads(out)["output"][-6000:] if out else err
        old = {seat: (env / f"{seat}.env").read_text() for seat in seats}

        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, moved, "move"), *HEALTH)
        document = json.loads(out)
        assert code == 1 and document["failed_step"] == "step 3/3 (restart alpha on cpu-box:0)", document["output"][-6000:]
        assert "seat alpha: its engine" in document["output"] and "before /health answered 200" in document["output"], document["output"][-6000:]
        assert (state / "starts.log").read_text().splitlines()[2:] == ["beta stop", "beta start alpha=200", "alpha start beta=200", "alpha start beta=200"]
        assert "CPU budget 0" in (env / "beta.env").read_text()  # steps 1 and 2 held
        # step 3 undone: alpha's old file, and the engine runs its old command with the first plan's numbers
        assert (env / "alpha.env").read_text() == old["alpha"]
        assert argv_of(state / "alpha.pid") == split_shell_line(parse_env(old["alpha"])["SEATPLAN_COMMAND"])
        assert '{"max_new_tokens": 16}' in argv_of(state / "alpha.pid")
        max_model_len, labels = served(plan["alpha"]["port"], "alpha")
        assert max_model_len == plan["alpha"]["max_model_len"] and int(labels["num_gpu_blocks"]) == plan["alpha"]["num_gpu_blocks"]

        code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "move", "--inventory", str(localhost_inventory(tmp_path)),
                                      "-e", "seatplan_run_verify=false", *HEALTH, "--json")
        assert code == 0, json.loads(out)["output"][-6000:] if out else err
        assert (state / "starts.log").read_text().splitlines()[6:] == ["beta stop", "beta start alpha=200"]
        assert {seat: (env / f"{seat}.env").read_text() for seat in seats} == old
        assert argv_of(state / "beta.pid") == split_shell_line(parse_env(old["beta"])["SEATPLAN_COMMAND"])
        code, out, err = run_seatplan(capsys, monkeypatch, "verify", str(first), "--json")
        report = json.loads(out)
        assert code == 0 and report["ok"], out + err
    finally:
        stop_engines(tmp_path)
