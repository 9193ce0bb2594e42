"""End to end on the real vLLM CPU engine: render a plan for two tiny random-weight models on a
``device: cpu`` host, roll it out with the rendered playbook through the real ansible-playbook
(restart command: a script that starts the engine from its rendered env file), and check what came up.

- backups are written only for files that existed, dated and tagged;
- the engines came up one at a time, in the plan's boot order (each start records its neighbours' /health);
- each engine serves exactly what the plan says: /v1/models max_model_len and vllm:cache_config_info's
  num_gpu_blocks, block size and KV tokens, with the rendered arguments as started; the playbook's
  closing `seatplan verify` passes;
- the rendered LiteLLM config, loaded by the real LiteLLM proxy in front of the two engines, lists and serves
  both seats: `seatplan verify --gateway` passes every engine and gateway check;
- the same plan again restarts nothing; a changed output cap restarts only that seat; rollback restores it;
- one seat's context shrinks, replanned with ``--current``: ``diff`` shows only that seat (exit 1) and apply
  restarts only it; the other engine keeps its PID and its env file byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from datetime import UTC, datetime

import httpx
import pytest
import yaml

from kits.parts import free_port, require
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, localhost_inventory, render_args, run_seatplan, stop_engines
from kits.serving_stack import litellm_installed, litellm_venv, running, start_litellm
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import parse_cache_config_info

pytestmark = [pytest.mark.vllm, pytest.mark.ansible]

KV = "192MiB"  # both tiny models hold one 1,024-token request with room to spare
GATEWAY_KEY_VARIABLE = "LITELLM_MASTER_KEY"  # what the rendered config names (render's default)
GATEWAY_KEY = "sk-seatplan-apply-e2e-0123456789"


def served(base_url: str, name: str) -> tuple[int, dict[str, str]]:
    with httpx.Client(base_url=base_url, timeout=30, trust_env=False) as client:
        cards = client.get("/v1/models").raise_for_status().json()["data"]
        labels = parse_cache_config_info(client.get("/metrics").raise_for_status().text)
    card = next(card for card in cards if card["id"] == name)
    return int(card["max_model_len"]), labels


@pytest.mark.timeout(2400)
def test_rendered_playbook_rolls_out_two_cpu_engines_one_at_a_time(vllm_python_path, tmp_path, capsys, monkeypatch):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "1")
    models = {"tiny-gemma": tiny_model_dir(GEMMA3_TEXT, vllm_python_path), "tiny-qwen": tiny_model_dir(QWEN3_DENSE, vllm_python_path)}
    seats = {name: (model_dir, free_port()) for name, model_dir in models.items()}
    plan_path = build_plan_file(cpu_fleet(tmp_path, seats, kv=KV), tmp_path / "plan.json")
    plan = {seat["name"]: seat for seat in json.loads(plan_path.read_text())["seats"]}
    launcher = shlex.join([str(vllm_python_path), "-m", "vllm.entrypoints.openai.api_server"])
    host_env, starts = tmp_path / "host" / "env", tmp_path / "state" / "starts.log"
    try:
        assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan_path, launcher))[0] == 0
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan_path, "first", verify=True))
        assert code == 0, json.loads(out)["output"][-6000:] if out else err
        # the playbook ended with `seatplan verify PLAN` on the controller, and it passed
        assert re.search(r"TASK \[seatplan verify\] \*+\nok: \[localhost\]", json.loads(out)["output"])
        order = sorted(plan, key=lambda name: plan[name]["boot_order"])
        # one at a time: the second engine started only once the first answered /health
        assert starts.read_text().splitlines() == [f"{order[0]} start", f"{order[1]} start {order[0]}=200"]
        assert not list(host_env.glob("*.bak-*"))  # nothing was there to back up
        for name, seat in plan.items():
            max_model_len, labels = served(f"http://127.0.0.1:{seat['port']}", name)
            assert max_model_len == seat["max_model_len"] == 1024
            assert int(labels["num_gpu_blocks"]) == seat["num_gpu_blocks"]
            assert int(labels["block_size"]) == seat["block_size"] == 128
            assert int(labels["kv_cache_size_tokens"]) == seat["kv_cache_tokens"]
            assert int(labels["kv_cache_memory_bytes"]) == seat["kv_cache_memory_bytes"]

        # the rendered gateway config in front of the rolled-out engines, and verify through it
        require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
        rendered_gateway = yaml.safe_load((tmp_path / "rendered" / "litellm" / "config.yaml").read_text())
        assert GATEWAY_KEY not in json.dumps(rendered_gateway)
        with running({}) as servers:
            servers["litellm"] = start_litellm(rendered_gateway, free_port(), {GATEWAY_KEY_VARIABLE: GATEWAY_KEY}, tmp_path)
            monkeypatch.setenv(GATEWAY_KEY_VARIABLE, GATEWAY_KEY)
            code, out, err = run_seatplan(capsys, monkeypatch, "verify", str(plan_path), "--gateway", servers["litellm"].base_url,
                                          "--key-env", GATEWAY_KEY_VARIABLE, "--json")
            report = json.loads(out)
            assert code == 0 and report["ok"], out + err
            gateway_checks = {(check["seat"], check["check"]) for check in report["checks"] if check["check"].startswith("gateway")}
            assert set(plan) <= {seat for seat, _ in gateway_checks} and len(gateway_checks) >= 2 * len(plan)
            assert GATEWAY_KEY not in out + err
            monkeypatch.delenv(GATEWAY_KEY_VARIABLE)

        # the same plan again: no file changes, no restart
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan_path, "again"))
        assert code == 0, out + err
        assert len(starts.read_text().splitlines()) == 2 and not list(host_env.glob("*.bak-*"))

        # tiny-qwen's cap changes: only its file is backed up and only it restarts, beside a healthy tiny-gemma
        before = (host_env / "tiny-qwen.env").read_text()
        changed = build_plan_file(cpu_fleet(tmp_path, seats, kv=KV, caps={"tiny-qwen": 8}, name="fleet2.yaml"), tmp_path / "plan2.json")
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, changed, "cap8"))
        assert code == 0, out + err
        today = datetime.now(UTC).strftime("%Y%m%d")
        assert [path.name for path in host_env.glob("*.bak-*")] == [f"tiny-qwen.env.bak-{today}-cap8"]
        assert starts.read_text().splitlines()[2:] == ["tiny-qwen start tiny-gemma=200"]
        reply = httpx.post(f"http://127.0.0.1:{plan['tiny-qwen']['port']}/v1/chat/completions", timeout=60, trust_env=False,
                           json={"model": "tiny-qwen", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 100, "ignore_eos": True})
        assert reply.raise_for_status().json()["usage"]["completion_tokens"] == 8  # the new cap is live (and a ceiling in 0.32)

        # rollback to the release before: the old file is back and the engine stopped, then started from it
        code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--to", "again", "--inventory", str(localhost_inventory(tmp_path)),
                                      "-e", f"seatplan_host_dir={tmp_path / 'host'}", "-e", "seatplan_run_verify=false", "--json")
        assert code == 0, out + err
        assert (host_env / "tiny-qwen.env").read_text() == before
        assert starts.read_text().splitlines()[3:] == ["tiny-qwen stop", "tiny-qwen start tiny-gemma=200"]

        # issue 18: tiny-qwen's context shrinks, replanned from what runs (the first plan, rolled back to):
        # diff shows only tiny-qwen and says apply restarts it; apply restarts only it; tiny-gemma keeps its PID
        shorter = build_plan_file(cpu_fleet(tmp_path, seats, kv=KV, contexts={"tiny-qwen": 512}, name="fleet3.yaml"), tmp_path / "plan3.json",
                                  current=plan_path)
        replanned = json.loads(shorter.read_text())
        assert replanned["restarts"] == ["tiny-qwen"] and replanned["moves"] == 0
        # (against the first plan: what runs after the rollback; rendered/ still holds the cap-8 render)
        code, out, err = run_seatplan(capsys, monkeypatch, "diff", str(shorter), "--against", str(plan_path), "--json")
        report = json.loads(out)
        assert code == 1 and "warning" not in err
        assert {seat["seat"]: (seat["status"], seat["restarts"]) for seat in report["seats"]} == {
            "tiny-qwen": ("changed", True), "tiny-gemma": ("unchanged", False)}
        assert [change["what"] for change in report["seats"][[seat["seat"] for seat in report["seats"]].index("tiny-qwen")]["changes"]] == ["--max-model-len"]
        pids = {name: (tmp_path / "state" / f"{name}.pid").read_text() for name in plan}
        gemma_env = (host_env / "tiny-gemma.env").read_bytes()
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, shorter, "ctx512"))
        assert code == 0, out + err
        assert starts.read_text().splitlines()[5:] == ["tiny-qwen start tiny-gemma=200"]
        assert (tmp_path / "state" / "tiny-gemma.pid").read_text() == pids["tiny-gemma"]
        assert (tmp_path / "state" / "tiny-qwen.pid").read_text() != pids["tiny-qwen"]
        assert (host_env / "tiny-gemma.env").read_bytes() == gemma_env  # byte for byte
        os.kill(int(pids["tiny-gemma"]), 0)  # still running, never restarted
        for _ in range(600):  # the restarted engine answers with its new context
            try:
                if served(f"http://127.0.0.1:{plan['tiny-qwen']['port']}", "tiny-qwen")[0] == 512:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        assert served(f"http://127.0.0.1:{plan['tiny-qwen']['port']}", "tiny-qwen")[0] == 512
        assert served(f"http://127.0.0.1:{plan['tiny-gemma']['port']}", "tiny-gemma")[0] == 1024
    finally:
        stop_engines(tmp_path)
