"""The operator's four-GPU box (examples/adopt/gateway-box: two engines and the gateway in compose beside a PostgreSQL,
a third engine under systemd, the gateway's own LiteLLM config) adopted, planned and rendered as a user would
(issue 44's check): the rendered gateway config keeps every section and every extra, routes every seat, sends no
route where the gateway's container cannot reach, and holds no key in clear; the same on random operator configs
(random sections, extras, aliases, comments) for that box."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import yaml

from kits.gateway_configs import random_gateway_config
from kits.rollout import run_seatplan
from seatplan.secrets import secret_shaped

BOX = Path(__file__).parents[2] / "examples" / "adopt" / "gateway-box"
MODELS = Path(__file__).parents[2] / "examples" / "demo" / "models"
# what the box's engines serve, and how its gateway (in compose, extra_hosts host-gateway) reaches them today
SERVED = {"Qwen/Qwen3-8B": "http://vllm-qwen:8000/v1", "llama-3b": "http://vllm-llama:8000/v1", "coder": "http://host.docker.internal:8002/v1"}
SECRET = "sk-madeUpExampleKey00000000"  # systemd/coder.env's made-up engine key
OWNED = ("model", "api_base", "api_key")


def adopt_plan_render(box: Path, tmp_path: Path, capsys, monkeypatch) -> tuple[dict, dict, str]:
    """adopt the box, fill what adopt cannot tell (the vLLM version; the models as local copies of their configs: no
    Hub here), plan and render; the plan, the rendered gateway config and every rendered file's text."""
    fleet = tmp_path / "fleet.yaml"
    code, _, err = run_seatplan(capsys, monkeypatch, "adopt", "--litellm-config", str(box / "litellm" / "config.yaml"),
                                "--compose", f"gpu-box={box / 'compose.yaml'}", "--systemd", f"gpu-box={box / 'systemd'}",
                                "--nvidia-smi", f"gpu-box={box / 'nvidia-smi.csv'}", "--timeout", "0.5", "-o", str(fleet))
    assert code == 0, err
    text = fleet.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"')
    for hub_id in ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-8B", "meta-llama/Llama-3.2-3B-Instruct"):
        text = text.replace(f"model: {hub_id}", f"model: {MODELS / hub_id.replace('/', '--')}")
    fleet.write_text(text)
    code, _, err = run_seatplan(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json"))
    assert code == 0, err
    out = tmp_path / "rendered"
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "-o", str(out))
    assert code == 0, err
    plan = yaml.safe_load((tmp_path / "plan.json").read_text())
    files = "".join(path.read_text() for path in sorted(out.rglob("*")) if path.is_file())
    return plan, yaml.safe_load((out / "litellm" / "config.yaml").read_text()), files + err


def check_gateway(live: dict, rendered: dict, plan: dict, services: set[str]) -> None:
    assert {key: value for key, value in rendered.items() if key != "model_list"} == {key: value for key, value in live.items() if key != "model_list"}
    seats = {seat["served_model_name"]: seat for seat in plan["seats"]}
    before = live["model_list"]
    after = rendered["model_list"]
    assert len(after) >= len(before)
    for old, new in zip(before, after, strict=False):
        served = old["litellm_params"]["model"].split("/", 1)[1]
        if served not in seats or "api_base" not in old["litellm_params"]:
            assert new == old  # the operator's own entry, whole
            continue
        assert new["model_name"] == old["model_name"]
        assert {key: value for key, value in new.items() if key != "litellm_params"} == {key: value for key, value in old.items() if key != "litellm_params"}
        kept = {key: value for key, value in old["litellm_params"].items() if key not in OWNED}
        assert {key: value for key, value in new["litellm_params"].items() if key not in OWNED} == kept
    routed = {entry["litellm_params"]["model"] for entry in after}
    assert {f"hosted_vllm/{served}" for served in seats} <= routed  # every seat routed
    for entry in after:
        params = entry["litellm_params"]
        served = params["model"].split("/", 1)[1]
        if served in seats:
            host = params["api_base"].split("//", 1)[1].rsplit(":", 1)[0]
            assert host == "host.docker.internal" or host in services, params["api_base"]  # never localhost from a container
            assert params["api_key"] == f"os.environ/{seats[served]['env_from_host']['VLLM_API_KEY']}"  # one reference per engine
    assert not [value for value in _strings(rendered) if secret_shaped(value)]  # no key in clear


def _strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


def test_the_shipped_box_keeps_every_section_and_extra_and_routes_every_seat_where_the_gateway_reaches(tmp_path, capsys, monkeypatch):
    plan, rendered, files = adopt_plan_render(BOX, tmp_path, capsys, monkeypatch)
    live = yaml.safe_load((BOX / "litellm" / "config.yaml").read_text())
    check_gateway(live, rendered, plan, set(yaml.safe_load((BOX / "compose.yaml").read_text())["services"]))
    assert {seat["name"] for seat in plan["seats"]} == {"vllm-qwen", "vllm-llama", "coder"}  # gpt-4o-mini is OpenAI's, no seat
    assert rendered["general_settings"]["database_url"] == "os.environ/DATABASE_URL"
    assert SECRET not in files
    text = (tmp_path / "rendered" / "litellm" / "config.yaml").read_text()
    assert "# the spend logs `seatplan usage` reads" in text and "# enforced here for the cheap tier" in text  # comments kept


@pytest.mark.parametrize("draw", range(3))
def test_random_operator_configs_for_the_box(tmp_path, capsys, monkeypatch, rng: random.Random, draw):
    box = tmp_path / "box"
    shutil.copytree(BOX, box)
    case = random_gateway_config(rng, list(SERVED), foreign_servers=False)
    document = case.data
    for position, served in case.seat_entries.items():
        document["model_list"][position]["litellm_params"]["api_base"] = SERVED[served]
    for served in set(SERVED) - set(case.seat_entries.values()):  # every engine has its route today
        document["model_list"].append({"model_name": served, "litellm_params": {"model": f"openai/{served}", "api_base": SERVED[served]}})
    (box / "litellm" / "config.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    plan, rendered, files = adopt_plan_render(box, tmp_path / "run", capsys, monkeypatch)
    check_gateway(document, rendered, plan, set(yaml.safe_load((box / "compose.yaml").read_text())["services"]))
    assert SECRET not in files
