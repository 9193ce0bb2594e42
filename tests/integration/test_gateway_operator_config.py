"""The operator's own LiteLLM config, as `seatplan render --gateway-config` merges it, loaded by the real LiteLLM proxy
(issue 44, item 5; its own virtualenv, no database, on 127.0.0.1).

The operator's config has the sections seatplan does not own (litellm_settings, router_settings, general_settings with
the master key by reference), a seat's entry with its own extras (model_info, a max_tokens the operator enforces at the
gateway, rpm, tags, timeout) and a stale route, and a model that is no seat (a hosted API). Render merges it for a
plan, then again for a plan in which that seat moved to another port, over the first merge (the config as it would then
run). The real proxy starts on the merged text, comments and all, and its own `/model/info` shows: every extra of the
seat's entry kept, the unmanaged entry kept, every seat routed to its engine's URL with the one key reference the
engine reads its key from (the env file's VLLM_API_KEY from the host's ENGINE_KEY, the gateway's
`os.environ/ENGINE_KEY`), and no key in clear anywhere.

Only LiteLLM runs here: no engine answers behind it, since what is checked is the proxy's reading of the merged config
(completions through a rendered gateway are exercised by test_apply_gateway.py with a real vLLM CPU engine).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from kits.parts import free_port, require
from kits.rollout import build_plan_file, cpu_fleet, run_seatplan
from kits.serving_stack import litellm_installed, litellm_venv, running, start_litellm

QWEN3_8B_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "Qwen--Qwen3-8B"
MASTER_KEY = "sk-seatplan-operator-config-51c0e2"
ENGINE_KEY = "engine-key-operator-9d2a44"

# The operator's config as it runs: seatplan's seats `coder` and `chat` (coder's entry has the operator's extras and a
# route to where the engine ran before; chat has none yet) and a hosted model that is no seat
OPERATOR_CONFIG = """\
# The team gateway (edited by hand; seatplan keeps everything but the seats' routes)
model_list:
  - model_name: coder  # the coding seat
    litellm_params:
      model: openai/coder
      api_base: http://10.0.0.9:8000/v1  # where it ran before
      api_key: os.environ/ENGINE_KEY
      max_tokens: 512  # enforced at the gateway
      rpm: 60
      timeout: 90
      tags: [team-a, coding]
    model_info:
      id: coder-operator
      description: the coding seat, capped at the gateway
  - model_name: hosted-mini  # not a seat: a hosted API
    litellm_params:
      model: openai/gpt-4o-mini
      api_key: os.environ/OPENAI_API_KEY
litellm_settings:
  drop_params: true
  request_timeout: 120
router_settings:
  num_retries: 2
  routing_strategy: simple-shuffle
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


def render(capsys, monkeypatch, plan: Path, live: Path, out: Path) -> str:
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(out), "--target", "env", "--target", "litellm",
                                "--gateway-config", str(live), "--gateway-url", "http://127.0.0.1:4000", "--engine-key-env", "ENGINE_KEY")
    assert code == 0, err
    return (out / "litellm" / "config.yaml").read_text()


@pytest.mark.timeout(900)
def test_the_real_proxy_loads_the_operators_config_as_render_merges_it(tmp_path, capsys, monkeypatch):
    require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
    ports = {"coder": free_port(), "chat": free_port()}
    live = tmp_path / "gateway" / "config.yaml"
    live.parent.mkdir()
    live.write_text(OPERATOR_CONFIG)
    first = build_plan_file(cpu_fleet(tmp_path, {seat: (QWEN3_8B_CONFIG, port) for seat, port in ports.items()}, kv="256MiB", total="64GiB"),
                            tmp_path / "plan.json")
    live.write_text(render(capsys, monkeypatch, first, live, tmp_path / "rendered-1"))  # apply would deploy it so
    moved = free_port()
    while moved in ports.values():
        moved = free_port()
    ports["coder"] = moved  # the coder seat moves to another port: its route must follow, its extras stay
    second = build_plan_file(cpu_fleet(tmp_path, {seat: (QWEN3_8B_CONFIG, port) for seat, port in ports.items()}, kv="256MiB", total="64GiB",
                                       name="fleet-moved.yaml"), tmp_path / "plan-moved.json")
    text = render(capsys, monkeypatch, second, live, tmp_path / "rendered-2")

    # the text: the operator's comments and sections kept, no key in clear, one key reference per engine
    for comment in ("# The team gateway", "# enforced at the gateway", "# not a seat: a hosted API"):
        assert comment in text
    merged = yaml.safe_load(text)
    operator = yaml.safe_load(OPERATOR_CONFIG)
    for section in ("litellm_settings", "router_settings", "general_settings"):
        assert merged[section] == operator[section], section
    assert MASTER_KEY not in text and ENGINE_KEY not in text
    for seat in ports:
        env_text = (tmp_path / "rendered-2" / "env" / f"{seat}.env").read_text()
        assert re.search(r"^SEATPLAN_ENV_FROM_HOST='?VLLM_API_KEY=ENGINE_KEY'?$", env_text, re.M), env_text
        assert ENGINE_KEY not in env_text

    with running({}) as servers:
        servers["litellm"] = start_litellm(text, free_port(), {"LITELLM_MASTER_KEY": MASTER_KEY, "ENGINE_KEY": ENGINE_KEY,
                                                               "OPENAI_API_KEY": "sk-unused-hosted-0000"}, tmp_path)
        with httpx.Client(base_url=servers["litellm"].base_url, timeout=30, trust_env=False) as client:
            headers = {"Authorization": f"Bearer {MASTER_KEY}"}
            listed = client.get("/v1/models", headers=headers).raise_for_status().json()
            info = client.get("/model/info", headers=headers).raise_for_status().json()["data"]
            refused = client.get("/model/info", headers={"Authorization": "Bearer sk-wrong"})
    assert sorted(model["id"] for model in listed["data"]) == ["chat", "coder", "hosted-mini"]
    assert refused.status_code >= 400 and MASTER_KEY not in refused.text
    by_name = {entry["model_name"]: entry for entry in info}
    # every seat routed to its engine, by the plan's provider prefix and the engine's URL
    for seat, port in ports.items():
        params = by_name[seat]["litellm_params"]
        assert params["model"] == f"hosted_vllm/{seat}" and params["api_base"] == f"http://127.0.0.1:{port}/v1", params
    # the moved seat's own extras, as the proxy read them
    coder = by_name["coder"]
    assert coder["litellm_params"]["max_tokens"] == 512
    assert coder["litellm_params"]["rpm"] == 60 and coder["litellm_params"]["timeout"] == 90
    assert coder["litellm_params"]["tags"] == ["team-a", "coding"]
    assert coder["model_info"]["id"] == "coder-operator" and coder["model_info"]["description"] == "the coding seat, capped at the gateway"
    # the unmanaged entry as the operator wrote it
    assert by_name["hosted-mini"]["litellm_params"]["model"] == "openai/gpt-4o-mini" and "api_base" not in {
        key for key, value in by_name["hosted-mini"]["litellm_params"].items() if value}
    # the key reference: the merged entries name the variable the engines read theirs from; the proxy shows no value
    for seat in ports:
        assert merged["model_list"][[entry["model_name"] for entry in merged["model_list"]].index(seat)]["litellm_params"]["api_key"] == "os.environ/ENGINE_KEY"
    assert ENGINE_KEY not in str(info) and MASTER_KEY not in str(info)
