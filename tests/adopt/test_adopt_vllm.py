"""``seatplan adopt`` end to end with real parts: two vLLM 0.32 CPU engines started by hand from env files (as
an operator would, before seatplan), and a hand-written LiteLLM config for them.

1. adopt reads the LiteLLM config, the env files and the engines (``/v1/models``, ``/version``, ``/metrics``);
   the real LiteLLM proxy runs in front of them from that same config;
   what it cannot tell on a CPU box (the device, the memory budget, which "GPU" each engine has) is TODO and
   ``plan`` refuses the file, naming the line; filled in, the plan keeps the layout (0 moves), ``verify``
   passes against the hand-started engines (to the KV block) and through the gateway, ``render`` and ``diff`` agree.
2. The round trip: the engines are restarted from the env files ``render`` wrote; adopting that deployment
   gives a fleet that replans to 0 moves and renders byte-identical env files.

One engine (gemma) runs without ``--served-model-name``, so vLLM serves it under its absolute ``--model`` path
(vLLM 0.32 vllm/entrypoints/launchers/api_server/app_state.py:49-52) and the gateway routes that path: adopt keeps
the name its clients ask for, and plan, render, the real LiteLLM proxy and verify carry it as is.

Four engine boots in all, shared by the module's tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kits.parts import free_port, require
from kits.serving_stack import litellm_installed, litellm_venv, start_from_env_file, start_litellm
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv
from seatplan.documents.fleet_file import todo_problems

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3000)]

SEATS = {  # seat → (tiny model, max_model_len, KV pin in bytes, output cap)
    "dense": (QWEN3_DENSE, 1024, 48 * 2**20, 24),
    "gemma": (GEMMA3_TEXT, 1024, 256 * 2**20, 16),
}
SERVED_AS_PATH = {"gemma"}  # started without --served-model-name: served under its --model path
KEY_VARIABLE = "SEATPLAN_TEST_GATEWAY_KEY"
# no 8-character run of it in a model path: verify hides such runs in what servers answer (secrets.scrub), names included
GATEWAY_KEY = "sk-gw-7Q4dZ1xV9kR2mB6n"


def launcher() -> str:
    """The engines' launcher, read when a test runs (the vLLM virtualenv may still be installing at collection)."""
    return f"{vllm_python()} -m vllm.entrypoints.openai.api_server"


def seatplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from seatplan.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=600, env={**os.environ, KEY_VARIABLE: GATEWAY_KEY})


def handwritten_env(seat: str, model_dir: Path, port: int) -> str:
    """An operator's own env file: their variable names, their flag order, ``--flag=value`` and a bind address."""
    _, length, kv, cap = SEATS[seat]
    served = "" if seat in SERVED_AS_PATH else f"--served-model-name {seat} "
    command = (f"{launcher()} --model {model_dir} {served}--host 127.0.0.1 --port={port} --dtype bfloat16 "
               f"--max-model-len {length} --kv-cache-memory-bytes {kv} --enforce-eager --max-num-seqs 4 "
               f"--max-num-batched-tokens 1024 --override-generation-config '{{\\\"max_new_tokens\\\": {cap}}}'")
    return f"# {seat}: started by hand on the CPU box\nexport VLLM_LOGGING_LEVEL=INFO\nVLLM_LINE=\"{command}\"\n"


def fill_todos(fleet: Path) -> str:
    """What the operator fills in after adopt: a CPU box, its memory budget, both engines on it."""
    text = fleet.read_text()
    text = text.replace("device: TODO", "device: cpu").replace("gpus: TODO", "gpus:\n      - {index: 0, total_bytes: 16GiB}")
    text = text.replace("total_bytes: TODO", "total_bytes: 16GiB")
    for seat in SEATS:
        text = text.replace(f"{seat}: TODO", f"{seat}: 0")
    assert todo_problems(yaml.safe_load(text)) == [], text
    fleet.write_text(text)
    return text


def plan_and_render(work: Path, fleet: Path, name: str) -> dict:
    planned = seatplan("plan", str(fleet), "-o", str(work / f"{name}.json"), "--json")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((work / f"{name}.json").read_text())
    rendered = seatplan("render", str(work / f"{name}.json"), "-o", str(work / f"{name}-rollout"), "--launcher", launcher(),
                        "--bind", "127.0.0.1")
    assert rendered.returncode == 0, rendered.stderr
    return plan


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    work = tmp_path_factory.mktemp("adopt")
    model_dirs = {seat: tiny_model_dir(spec, vllm_python()) for seat, (spec, _, _, _) in SEATS.items()}
    ports = {seat: free_port() for seat in SEATS}
    handmade = work / "handmade"
    handmade.mkdir()
    for seat in SEATS:
        (handmade / f"{seat}.env").write_text(handwritten_env(seat, model_dirs[seat], ports[seat]))
    served = {seat: str(model_dirs[seat]) if seat in SERVED_AS_PATH else seat for seat in SEATS}
    config = {"model_list": [
        {"model_name": served[seat], "litellm_params": {"model": f"hosted_vllm/{served[seat]}", "api_base": f"http://127.0.0.1:{ports[seat]}/v1",
                                                        "api_key": "os.environ/VLLM_KEY"}} for seat in SEATS],
              "general_settings": {"master_key": f"os.environ/{KEY_VARIABLE}"}}
    litellm = work / "litellm.yaml"
    litellm.write_text(yaml.safe_dump(config, sort_keys=False))
    servers = {}
    try:
        for seat in SEATS:
            servers[seat] = start_from_env_file(handmade / f"{seat}.env", "VLLM_LINE", ports[seat], work)
        if litellm_installed():  # the real proxy in front, from the same hand-written config
            servers["litellm"] = start_litellm(config, free_port(), {KEY_VARIABLE: GATEWAY_KEY, "VLLM_KEY": "none"}, work)
        yield work, handmade, litellm, ports, servers, served
    finally:
        for server in servers.values():
            server.stop()


def test_adopt_a_handmade_deployment_plans_to_zero_moves_and_verifies(deployment):
    work, handmade, litellm, ports, servers, served = deployment
    fleet = work / "fleet.yaml"
    adopted = seatplan("adopt", "--litellm-config", str(litellm), "--env-dir", str(handmade), "-o", str(fleet), "--json")
    assert adopted.returncode == 0, adopted.stderr
    summary = json.loads(adopted.stdout)
    assert summary["seats"] == 2 and summary["hosts"] == 1
    assert summary["todo"] == ["hosts[0].device", "hosts[0].gpus", "current_layout.dense", "current_layout.gemma"]
    assert summary["warnings"] == [f"seat {seat}: no env or compose file of this seat names its GPUs (CUDA_VISIBLE_DEVICES, device_ids): "
                                   "current_layout is TODO" for seat in SEATS] + [
        f"seat {seat}: started_by left out (an env file alone does not say what starts it: give --systemd DIR with its unit), "
        "so the first apply cannot stop the engine running today: write started_by by hand (docs/fleet.md)" for seat in SEATS]  # as docs/adopt.md shows them
    text = fleet.read_text()
    data = yaml.safe_load(text)
    by_name = {seat["name"]: seat for seat in data["seats"]}
    for seat, (_, length, kv, cap) in SEATS.items():
        assert by_name[seat]["max_model_len"] == length and by_name[seat]["kv_cache_memory_bytes"] == kv
        assert by_name[seat]["max_new_tokens"] == cap and by_name[seat]["port"] == ports[seat]
        assert by_name[seat]["env"] == {"VLLM_LOGGING_LEVEL": "INFO"}
        assert by_name[seat].get("served_model_name", seat) == served[seat]  # what /v1/models says it serves
    assert data["policy"]["vllm_version"] == "0.32.0"
    # every value says where it came from: the engine's own answers for what it runs
    assert f"# GET http://127.0.0.1:{ports['dense']}/v1/models max_model_len" in text
    assert f"# GET http://127.0.0.1:{ports['dense']}/metrics vllm:cache_config_info kv_cache_memory_bytes" in text

    refused = seatplan("plan", str(fleet), "-o", str(work / "refused.json"))
    assert refused.returncode == 2 and not (work / "refused.json").exists()
    todo_line = next(number for number, line in enumerate(text.splitlines(), 1) if "device: TODO" in line)
    assert f"{fleet}:{todo_line}" in refused.stderr and "still TODO" in refused.stderr

    fill_todos(fleet)
    plan = plan_and_render(work, fleet, "plan")
    assert plan["moves"] == 0
    for seat in plan["seats"]:
        _, length, kv, cap = SEATS[seat["name"]]
        assert (seat["max_model_len"], seat["kv_cache_memory_bytes"], seat["max_new_tokens"]) == (length, kv, cap)
    require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
    verified = seatplan("verify", str(work / "plan.json"), "--gateway", servers["litellm"].base_url, "--key-env", KEY_VARIABLE, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] is True
    checked = {(check["seat"], check["check"]) for check in report["checks"]}
    assert {(seat, check) for seat in SEATS for check in ("num_gpu_blocks", "output_cap_default", "gateway_completion")} <= checked
    gateway = yaml.safe_load((work / "plan-rollout" / "litellm" / "config.yaml").read_text())["model_list"]
    assert sorted(entry["model_name"] for entry in gateway) == sorted(served.values())  # the path, as clients ask for it
    assert GATEWAY_KEY not in verified.stdout + verified.stderr
    diffed = seatplan("diff", str(work / "plan.json"), "--against", str(work / "plan-rollout"), "--json")
    assert diffed.returncode == 0 and json.loads(diffed.stdout)["changed"] is False, diffed.stdout + diffed.stderr


def test_adopting_what_seatplan_rendered_round_trips_byte_for_byte(deployment):
    work, _, _, ports, servers, served = deployment
    rollout = work / "plan-rollout"
    assert rollout.is_dir(), "runs after the first test, which rendered the adopted plan"
    for seat in SEATS:  # the deployment seatplan rendered: each engine restarted from its rendered env file
        servers.pop(seat).stop()
        servers[seat] = start_from_env_file(rollout / "env" / f"{seat}.env", "SEATPLAN_COMMAND", ports[seat], work)
    fleet = work / "readopted.yaml"
    adopted = seatplan("adopt", "--env-dir", str(rollout / "env"), "--litellm-config", str(rollout / "litellm" / "config.yaml"),
                       "-o", str(fleet), "--json")
    assert adopted.returncode == 0, adopted.stderr
    # seatplan's own env files say the device, the host and the GPU; only the CPU budget is unknown
    assert json.loads(adopted.stdout)["todo"] == ["hosts[0].gpus[0].total_bytes"]
    assert {seat["name"]: seat.get("served_model_name", seat["name"]) for seat in yaml.safe_load(fleet.read_text())["seats"]} == served
    fill_todos(fleet)
    replanned = plan_and_render(work, fleet, "replan")
    assert replanned["moves"] == 0
    for seat in SEATS:
        assert (work / "replan-rollout" / "env" / f"{seat}.env").read_bytes() == (rollout / "env" / f"{seat}.env").read_bytes()
    diffed = seatplan("diff", str(work / "replan.json"), "--against", str(rollout), "--json")
    assert diffed.returncode == 0 and json.loads(diffed.stdout)["changed"] is False, diffed.stdout
    verified = seatplan("verify", str(work / "replan.json"), "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True, verified.stdout + verified.stderr
    assert os.environ.get("SEATPLAN_SEAT") is None  # nothing leaked into the test process from the env files
