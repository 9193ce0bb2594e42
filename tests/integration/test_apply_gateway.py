"""The gateway rolled out by `seatplan apply`, end to end: a real vLLM CPU engine (tiny random-weight Qwen3) that
takes an API key, the real LiteLLM proxy in front of it, the real ansible-playbook.

- the first rollout merges the operator's own config (sections seatplan does not own, a hosted model, the seat's
  entry with its own extras and a stale route), writes it, restarts the gateway on it and sends a one-token completion
  for the served model through it, with the master key read from the environment and never printed; the proxy's own
  `/model/info` then shows the seat routed to its engine with every extra kept, and the hosted model kept (issue 44,
  item 5);
- a config that routes the gateway where the engine does not listen (the fleet's gateway_reaches: 127.0.0.2, the engine
  bound to 127.0.0.1; its completions fail) is put back: the previous config is restored, the gateway restarted on it,
  and apply stops naming the smoke step;
- a good change (a new output cap: the engine restarts, the gateway's entry keeps its own max_tokens, none) is rolled
  back to before its tag (`rollback --before cap8`): the engine's env file comes back, and a completion through the gateway passes again.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import httpx
import pytest

from kits.parts import free_port, require
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, kill_recorded_group, localhost_inventory, render_args, run_seatplan, stop_engines
from kits.serving_stack import litellm_installed, litellm_venv
from kits.tiny_models import QWEN3_DENSE, tiny_model_dir

pytestmark = [pytest.mark.vllm, pytest.mark.ansible, pytest.mark.slow]

MASTER_KEY = "sk-seatplan-gateway-e2e-4d1c7f09"
ENGINE_KEY = "engine-key-7a3b91c2e05d"

# The gateway's config as the operator runs it before seatplan: the seat's entry routes where the engine ran before
OPERATOR_CONFIG = """\
# the lab gateway, edited by hand
model_list:
  - model_name: tiny-qwen
    litellm_params:
      model: openai/tiny-qwen
      api_base: http://127.0.0.1:9/v1  # where it ran before
      api_key: os.environ/ENGINE_KEY
      rpm: 30
      timeout: 60
      tags: [lab]
    model_info:
      id: tiny-qwen-operator
  - model_name: hosted-mini  # not a seat
    litellm_params:
      model: openai/gpt-4o-mini
      api_key: os.environ/OPENAI_API_KEY
litellm_settings:
  drop_params: true
router_settings:
  num_retries: 1
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


def gateway_restart_script(directory: Path, config: Path, port: int) -> Path:
    """What `systemctl restart litellm` does on a real gateway host: stop the proxy, start it on the config file."""
    state = directory / "gateway-state"
    state.mkdir(exist_ok=True)
    script = directory / "restart-gateway.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -euo pipefail
        state={shlex.quote(str(state))}
        if [ -f "$state/pid" ]; then
          pid=$(cat "$state/pid"); kill -TERM -- "-$pid" 2>/dev/null || true
          for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
          kill -KILL -- "-$pid" 2>/dev/null || true
        fi
        echo restart >> "$state/restarts.log"
        LITELLM_LOCAL_MODEL_COST_MAP=True setsid {shlex.quote(str(litellm_venv() / "bin" / "litellm"))} --config {shlex.quote(str(config))} \\
          --host 127.0.0.1 --port {port} > "$state/litellm.log" 2>&1 < /dev/null &
        echo $! > "$state/pid"
        """))
    script.chmod(0o755)
    return script


def stop_gateway(directory: Path) -> None:
    pid_file = directory / "gateway-state" / "pid"
    if pid_file.exists():
        kill_recorded_group(pid_file)


def completion(gateway_url: str, model: str) -> httpx.Response:
    return httpx.post(f"{gateway_url}/v1/chat/completions", timeout=120, trust_env=False, headers={"Authorization": f"Bearer {MASTER_KEY}"},
                      json={"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1})


@pytest.mark.timeout(2400)
def test_apply_rolls_out_the_gateway_smoke_tests_it_puts_a_broken_config_back_and_rolls_back(vllm_python_path, tmp_path, capsys, monkeypatch):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
    for name, value in {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "LITELLM_MASTER_KEY": MASTER_KEY,
                        # the engine reads VLLM_API_KEY from the environment it is started in; the gateway reads ENGINE_KEY
                        "VLLM_API_KEY": ENGINE_KEY, "ENGINE_KEY": ENGINE_KEY, "OPENAI_API_KEY": "sk-unused-hosted-0000"}.items():
        monkeypatch.setenv(name, value)
    model = tiny_model_dir(QWEN3_DENSE, vllm_python_path)
    seats = {"tiny-qwen": (model, free_port())}
    plan = build_plan_file(cpu_fleet(tmp_path, seats, kv="192MiB"), tmp_path / "plan.json")
    launcher = shlex.join([str(vllm_python_path), "-m", "vllm.entrypoints.openai.api_server"])
    gateway_port = free_port()
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    config = tmp_path / "gateway" / "config.yaml"
    config.parent.mkdir()
    config.write_text(OPERATOR_CONFIG)
    restart = gateway_restart_script(tmp_path, config, gateway_port)

    def render(plan_path: Path, key_variable: str) -> None:
        code, _, err = run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan_path, launcher), "--gateway-config", str(config), "--gateway-url",
                                    gateway_url, "--gateway-restart", shlex.quote(str(restart)), "--engine-key-env", key_variable)
        assert code == 0, err

    def apply(plan_path: Path, tag: str) -> tuple[int, str]:
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan_path, tag))
        assert MASTER_KEY not in out + err and ENGINE_KEY not in out + err
        return code, json.loads(out)["output"] if out else err

    restarts = tmp_path / "gateway-state" / "restarts.log"
    try:
        # 1. the first rollout: engine, then the gateway on the rendered config, then a completion through it
        render(plan, "ENGINE_KEY")
        code, output = apply(plan, "first")
        assert code == 0, output[-5000:]
        assert "gateway: one-token completion" in output
        assert config.read_text() == (tmp_path / "rendered" / "litellm" / "config.yaml").read_text()
        first_config = config.read_text()
        assert restarts.read_text().splitlines() == ["restart"]
        assert [backup.read_text() for backup in config.parent.glob("*.bak-*")] == [OPERATOR_CONFIG]  # the operator's, kept
        assert completion(gateway_url, "tiny-qwen").status_code == 200
        assert "# the lab gateway, edited by hand" in first_config and MASTER_KEY not in first_config and ENGINE_KEY not in first_config
        info = httpx.get(f"{gateway_url}/model/info", timeout=30, trust_env=False, headers={"Authorization": f"Bearer {MASTER_KEY}"})
        by_name = {entry["model_name"]: entry for entry in info.raise_for_status().json()["data"]}
        assert sorted(by_name) == ["hosted-mini", "tiny-qwen"]
        seat = by_name["tiny-qwen"]
        assert seat["litellm_params"]["api_base"] == f"http://127.0.0.1:{seats['tiny-qwen'][1]}/v1", seat
        assert (seat["litellm_params"]["rpm"], seat["litellm_params"]["timeout"], seat["litellm_params"]["tags"]) == (30, 60, ["lab"])
        assert seat["model_info"]["id"] == "tiny-qwen-operator"
        assert by_name["hosted-mini"]["litellm_params"]["model"] == "openai/gpt-4o-mini"
        assert ENGINE_KEY not in info.text and MASTER_KEY not in info.text

        # 2. the gateway routed where the engine does not listen (gateway_reaches 127.0.0.2, the engine bound to
        #    127.0.0.1): its completion fails, so the config is put back, the gateway restarted on it, and apply stops
        #    naming the smoke step; the engine was not touched
        fleet = tmp_path / "fleet.yaml"
        elsewhere = tmp_path / "fleet-elsewhere.yaml"
        elsewhere.write_text(fleet.read_text().replace("    address: 127.0.0.1\n", "    address: 127.0.0.1\n    gateway_reaches: 127.0.0.2\n"))
        render(build_plan_file(elsewhere, tmp_path / "plan-elsewhere.json"), "ENGINE_KEY")
        assert "http://127.0.0.2:" in (tmp_path / "rendered" / "litellm" / "config.yaml").read_text()
        engine_pid = (tmp_path / "state" / "tiny-qwen.pid").read_text()
        code, output = apply(tmp_path / "plan-elsewhere.json", "elsewhere")
        assert code == 1 and "seatplan-gateway-failed: the step 'gateway: one-token completion for" in output, output[-5000:]
        assert config.read_text() == first_config
        assert restarts.read_text().splitlines() == ["restart"] * 3  # onto the new config, then back onto the old one
        assert (tmp_path / "state" / "tiny-qwen.pid").read_text() == engine_pid
        assert completion(gateway_url, "tiny-qwen").status_code == 200

        # 3. a good change (a new output cap: the engine restarts; the gateway's entry keeps its own keys), rolled back
        capped = build_plan_file(cpu_fleet(tmp_path, seats, kv="192MiB", caps={"tiny-qwen": 8}, name="fleet2.yaml"), tmp_path / "plan2.json")
        render(capped, "ENGINE_KEY")
        code, output = apply(capped, "cap8")
        assert code == 0, output[-5000:]
        assert config.read_text() == first_config  # the entry's own keys (no max_tokens) are the operator's: the engine caps
        code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "cap8", "--inventory",
                                      str(localhost_inventory(tmp_path)), "-e", "seatplan_run_verify=false", "--json")
        assert code == 0, (json.loads(out)["output"] if out else err)[-5000:]
        assert config.read_text() == first_config
        assert completion(gateway_url, "tiny-qwen").status_code == 200
    finally:
        stop_gateway(tmp_path)
        stop_engines(tmp_path)
