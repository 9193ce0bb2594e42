"""Release records and rollback by tag with real vLLM CPU engines (issue 43, items 4 and 5): three releases through
the real ansible-playbook (script restarts, engines on 127.0.0.1), a failed fourth, then ``rollback --to first``.

- tiny-qwen's context is drawn anew for each plan (from the run's seed); tiny-gemma stays;
- a failed apply leaves DIR as the release that landed: ``diff`` of that plan against DIR changes nothing, the failed
  plan's diff names tiny-qwen, and ``plan --current DIR`` reads the landed layout;
- ``rollback --to first`` (DIR holding the third plan's render) undoes the failed release, the third and the second
  from the host's records: tiny-qwen serves the first plan's max_model_len and KV again, and ``seatplan verify
  plan1.json`` passes; ``rollback --to nosuch`` exits 2 and changes nothing.
"""

from __future__ import annotations

import json
import shlex

import httpx
import pytest

from kits.parts import free_port, require
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, localhost_inventory, render_args, run_seatplan, stop_engines
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import parse_cache_config_info
from seatplan.documents.fleet_file import load_fleet
from seatplan.plan.current import read_current

pytestmark = [pytest.mark.vllm, pytest.mark.ansible]

KV = "192MiB"  # both tiny models hold one 1,024-token request with room to spare
HEALTH = ("-e", "seatplan_health_timeout_s=300")
CONTEXTS = (256, 384, 512, 640, 768, 896, 1024)  # within max_num_batched_tokens (1,024)


def served(port: int, name: str) -> tuple[int, dict[str, str]]:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, trust_env=False) as client:
        cards = client.get("/v1/models").raise_for_status().json()["data"]
        labels = parse_cache_config_info(client.get("/metrics").raise_for_status().text)
    return int(next(card for card in cards if card["id"] == name)["max_model_len"]), labels


@pytest.mark.timeout(2400)
def test_rollback_to_the_first_tag_restores_the_first_plans_numbers(vllm_python_path, tmp_path, capsys, monkeypatch, rng):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VLLM_NO_USAGE_STATS", "1")
    seats = {"tiny-qwen": (tiny_model_dir(QWEN3_DENSE, vllm_python_path), free_port()), "tiny-gemma": (tiny_model_dir(GEMMA3_TEXT, vllm_python_path), free_port())}
    contexts = rng.sample(CONTEXTS, 3)
    fleets = [cpu_fleet(tmp_path, seats, kv=KV, contexts={"tiny-qwen": context}, name=f"fleet{number}.yaml") for number, context in enumerate(contexts, 1)]
    plans = [build_plan_file(fleet, tmp_path / f"plan{number}.json") for number, fleet in enumerate(fleets, 1)]
    broken_fleet = cpu_fleet(tmp_path, seats, kv=KV, contexts={"tiny-qwen": contexts[2]}, envs={"tiny-qwen": {"SEATPLAN_TEST_BROKEN": "exit"}}, name="fleet4.yaml")
    broken = build_plan_file(broken_fleet, tmp_path / "plan4.json")
    first = {seat["name"]: seat for seat in json.loads(plans[0].read_text())["seats"]}
    launcher = shlex.join([str(vllm_python_path), "-m", "vllm.entrypoints.openai.api_server"])
    rendered, env = tmp_path / "rendered", tmp_path / "host" / "env"
    try:
        assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plans[0], launcher))[0] == 0
        for plan, tag in zip(plans, ("first", "second", "third"), strict=True):
            code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, tag), *HEALTH)
            assert code == 0, json.loads(out)["output"][-6000:] if out else err
            assert served(first["tiny-qwen"]["port"], "tiny-qwen")[0] == contexts[plans.index(plan)]
        after_third = {seat: (env / f"{seat}.env").read_text() for seat in seats}

        # a failed apply: DIR keeps the third release's render
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, broken, "broken"), "-e", "seatplan_health_timeout_s=30")
        assert code == 1 and "tiny-qwen" in json.loads(out)["failed_step"], out + err
        assert run_seatplan(capsys, monkeypatch, "diff", str(plans[2]), "--against", str(rendered))[0] == 0
        code, out, err = run_seatplan(capsys, monkeypatch, "diff", str(broken), "--against", str(rendered), "--json")
        assert code == 1 and [seat["seat"] for seat in json.loads(out)["seats"] if seat["status"] != "unchanged"] == ["tiny-qwen"], out + err
        assert read_current(rendered, load_fleet(broken_fleet).fleet).gpus == read_current(plans[2], load_fleet(broken_fleet).fleet).gpus

        rollback = ("rollback", str(rendered), "--inventory", str(localhost_inventory(tmp_path)), "-e", "seatplan_run_verify=false", *HEALTH, "--json")
        code, out, err = run_seatplan(capsys, monkeypatch, *rollback[:2], "--to", "nosuch", *rollback[2:])
        assert code == 2 and "tags there: broken, first, second, third" in err, out + err
        assert {seat: (env / f"{seat}.env").read_text() for seat in seats} == after_third

        code, out, err = run_seatplan(capsys, monkeypatch, *rollback[:2], "--to", "first", *rollback[2:])
        assert code == 0, json.loads(out)["output"][-6000:] if out else err
        for name, seat in first.items():
            max_model_len, labels = served(seat["port"], name)
            assert max_model_len == seat["max_model_len"]
            assert int(labels["num_gpu_blocks"]) == seat["num_gpu_blocks"] and int(labels["kv_cache_memory_bytes"]) == seat["kv_cache_memory_bytes"]
        code, out, err = run_seatplan(capsys, monkeypatch, "verify", str(plans[0]), "--json")
        assert code == 0 and json.loads(out)["ok"], out + err
        assert not [path for path in (tmp_path / "host").rglob("*") if any(f".{kind}-" in path.name for kind in ("new", "stopped", "cutover"))]
    finally:
        stop_engines(tmp_path)
