"""The rendered LiteLLM config, loaded by the real LiteLLM proxy (its own virtualenv, no database).

The proxy reads the master key from the variable the config names (never from the file), lists every
seat's served name, and refuses a request without the key. Completions through the same kind of config
are exercised by the verify stage's end-to-end test (test_verify_real.py).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from kits.parts import free_port, require
from kits.rollout import build_plan_file, cpu_fleet
from kits.serving_stack import litellm_installed, litellm_venv, running, start_litellm
from seatplan.documents.plan import Plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

QWEN3_8B_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "Qwen--Qwen3-8B"
KEY_VARIABLE = "SEATPLAN_TEST_GATEWAY_KEY"


@pytest.mark.timeout(900)
def test_the_real_proxy_serves_the_rendered_model_list(tmp_path):
    require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
    seats = {"alpha": (QWEN3_8B_CONFIG, free_port()), "beta": (QWEN3_8B_CONFIG, free_port())}
    plan = Plan.model_validate_json(build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB", caps={"beta": 64}), tmp_path / "plan.json").read_text())
    text = render_files(plan, RenderSettings(gateway_key_env=KEY_VARIABLE), ["litellm"])["litellm/config.yaml"]
    key = "sk-seatplan-test-0123456789"
    assert key not in text
    with running({}) as servers:
        servers["litellm"] = start_litellm(yaml.safe_load(text), free_port(), {KEY_VARIABLE: key}, tmp_path)
        with httpx.Client(base_url=servers["litellm"].base_url, timeout=30, trust_env=False) as client:
            listed = client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).raise_for_status().json()
            assert sorted(model["id"] for model in listed["data"]) == ["alpha", "beta"]
            refused = client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})
            assert refused.status_code >= 400 and key not in refused.text  # (this LiteLLM answers 401, or 500 without any key)
            info = client.get("/model/info", headers={"Authorization": f"Bearer {key}"}).raise_for_status().json()["data"]
    params = {entry["model_name"]: entry["litellm_params"] for entry in info}
    assert params["beta"]["max_tokens"] == 64 and params["alpha"]["max_tokens"] == 16
    assert params["alpha"]["api_base"] == f"http://127.0.0.1:{seats['alpha'][1]}/v1"
