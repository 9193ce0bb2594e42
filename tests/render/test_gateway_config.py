"""The gateway's config merged, not replaced (issue 44, item 1): on random operator configs (random sections, entries
routed elsewhere, seats' entries with random extras, comments, two indentation styles), the rendered config holds
every section and every other entry as it was, each seat entry's extras, only the seats' routes changed, every
comment where the YAML is block style, and nothing in clear; a second merge changes nothing."""

from __future__ import annotations

import copy
import hashlib
import random

import pytest
import yaml

from kits.gateway_configs import COMMENT, random_gateway_config
from kits.render import QWEN3_8B, load_ansible_yaml
from kits.rollout import build_plan_file, run_seatplan
from seatplan.engine.command import FROM_HOST_KEY
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError
from seatplan.render.gateway_config import PROVIDER, SeatRoute, merge_config


def random_routes(rng: random.Random, served: list[str]) -> list[SeatRoute]:
    hosts = ["host.docker.internal", "10.1.0.7", "vllm-" + str(rng.randrange(100)), "localhost", "fd00::5"]
    routes = []
    for position, name in enumerate(served):
        host = rng.choice(hosts)
        port = 8000 + position
        base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        routes.append(SeatRoute(seat=f"seat{position}", served=name, api_base=base + "/v1",
                                api_key=f"os.environ/KEY{rng.randrange(3)}" if rng.random() < 0.6 else None,
                                max_tokens=rng.choice([None, 256, 4096]), port=port))
    return routes


def expected(data: dict, seat_entries: dict[int, str], routes: list[SeatRoute]) -> dict:
    """What the merge must give, worked out from the case: each seat entry's owned keys set, everything else as it was."""
    by_served = {route.served: route for route in routes}
    result = copy.deepcopy(data)
    for position, served in seat_entries.items():
        params = result["model_list"][position]["litellm_params"]
        route = by_served[served]
        params["model"] = f"{PROVIDER}/{served}"
        params["api_base"] = route.api_base
        if route.api_key is not None:
            params["api_key"] = route.api_key
    for route in routes:
        if route.served not in seat_entries.values():
            params = {"model": route.model, "api_base": route.api_base, **({"api_key": route.api_key} if route.api_key else {}),
                      **({"max_tokens": route.max_tokens} if route.max_tokens is not None else {})}
            result["model_list"].append({"model_name": route.served, "litellm_params": params})
    return result


@pytest.mark.parametrize("flow_list", [False, True])
def test_random_configs_keep_everything_but_the_seats_routes(rng, flow_list):
    for _ in range(60):
        served = [rng.choice(["Qwen/Qwen3-8B", "coder", "llama-3b", "/models/gemma", "org/m-" + str(rng.randrange(99))]) + f"-{index}"
                  for index in range(rng.randint(1, 5))]
        case = random_gateway_config(rng, served, flow_list=flow_list)
        routes = random_routes(rng, served)
        merged = merge_config(case.text, "config.yaml", routes)
        document = yaml.safe_load(merged.text)
        assert document == expected(case.data, case.seat_entries, routes), case.text
        assert merged.sections == [key for key in case.data if key != "model_list"]
        statuses = {entry.model_name: entry.status for entry in merged.entries}
        assert sum(entry.status == "added" for entry in merged.entries) == len({route.served for route in routes} - set(case.seat_entries.values()))
        assert all(entry.status == "kept" for position, entry in enumerate(merged.entries[:len(case.data["model_list"])])
                   if position not in case.seat_entries), statuses
        if case.block_style:
            assert merged.comments_kept and not merged.warnings, case.text
            assert COMMENT.findall(merged.text) == case.comments, merged.text
        again = merge_config(merged.text, "config.yaml", routes)
        assert again.text == merged.text and all(entry.status in ("unchanged", "kept") for entry in again.entries)


def test_a_provider_prefix_change_is_reported_with_its_reason():
    text = "model_list:\n  - model_name: q\n    litellm_params:\n      model: openai/Qwen/Qwen3-8B\n      api_base: http://localhost:8000/v1\n"
    merged = merge_config(text, "c.yaml", [SeatRoute("q", "Qwen/Qwen3-8B", "http://host.docker.internal:8000/v1", None, None, 8000)])
    changes = {change.what: change for change in merged.entries[0].changes}
    assert (changes["provider"].old, changes["provider"].new) == ("openai/", "hosted_vllm/") and "vLLM" in changes["provider"].why
    assert changes["api_base"].old == "http://localhost:8000/v1" and changes["api_base"].new == "http://host.docker.internal:8000/v1"


@pytest.mark.parametrize(("line", "where"), [
    ("      api_key: sk-live-abcdef0123456789", 5),
    ("  master_key: sk-1234567890abcdef", 7),
    ("  database_url: postgresql://litellm:hunter2pass@db:5432/litellm", 7),
])
def test_a_key_in_clear_is_refused_naming_its_line_never_the_value(line, where):
    body = ["model_list:", "  - model_name: q", "    litellm_params:", "      model: openai/q", "      api_key: os.environ/Q", "general_settings:",
            "  master_key: os.environ/LITELLM_MASTER_KEY"]
    if line.startswith("      api_key"):
        body[4] = line
    else:
        body[6] = line
    with pytest.raises(SeatplanError) as raised:
        merge_config("\n".join(body) + "\n", "config.yaml", [])
    secret = line.split(": ", 1)[1]
    assert raised.value.where == f"config.yaml:{where}" and secret not in str(raised.value) + (raised.value.fix or "")
    assert "os.environ/" in (raised.value.fix or "")


def test_render_reads_the_live_config_where_it_runs_and_apply_is_told_which_one_it_read(tmp_path, capsys, monkeypatch, rng):
    lines = ["hosts:", "  - name: gpu-box", "    gpus:", "      - {index: 0, total_bytes: 95.59GiB}", "policy:", "  vllm_version: \"0.32\"", "seats:"]
    for position in range(2):
        lines += [f"  - name: seat{position}", f"    model: {QWEN3_8B}", f"    port: {8000 + position}", "    max_model_len: 8192"]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("\n".join(lines) + "\n")
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    case = random_gateway_config(rng, ["seat0"])
    live = tmp_path / "gateway" / "config.yaml"
    live.parent.mkdir()
    live.write_text(case.text)
    out = tmp_path / "out"
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(out), "--gateway-config", str(live), "--gateway-url", "http://127.0.0.1:4000")
    assert code == 0, err
    rendered = yaml.safe_load((out / "litellm" / "config.yaml").read_text())
    assert {key: value for key, value in rendered.items() if key != "model_list"} == {key: value for key, value in case.data.items() if key != "model_list"}
    routes = {entry["litellm_params"]["model"]: entry for entry in rendered["model_list"]}
    assert routes["hosted_vllm/seat0"]["litellm_params"]["api_base"] == "http://gpu-box:8000/v1"
    assert routes["hosted_vllm/seat1"]["litellm_params"]["api_base"] == "http://gpu-box:8001/v1"
    assert [entry for entry in rendered["model_list"] if entry["litellm_params"]["model"].removeprefix("hosted_vllm/") not in ("seat0", "seat1")] == [
        entry for position, entry in enumerate(case.data["model_list"]) if position not in case.seat_entries]
    variables = load_ansible_yaml((out / "ansible" / "vars.yaml").read_text())
    assert variables["seatplan_gateway_live_sha1"] == hashlib.sha1(live.read_bytes()).hexdigest()
    assert COMMENT.findall((out / "litellm" / "config.yaml").read_text()) == case.comments

    live.write_text("model_list:\n  - model_name: x\n    litellm_params:\n      model: openai/x\n      api_key: sk-abcdefgh12345678\n")
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(tmp_path / "out2"), "--gateway-config", str(live),
                                "--gateway-url", "http://127.0.0.1:4000")
    assert code == 2 and f"{live}:5" in err and "sk-abcdefgh12345678" not in err and not (tmp_path / "out2").exists()


def test_routes_go_where_the_fleet_says_the_gateway_reaches_and_each_engine_key_is_one_reference(tmp_path, capsys, monkeypatch):
    lines = ["hosts:", "  - name: gpu-box", "    gateway_reaches: host.docker.internal", "    gpus:", "      - {index: 0, total_bytes: 95.59GiB}",
             "policy:", "  vllm_version: \"0.32\"", "seats:"]
    for position in range(3):
        lines += [f"  - name: seat{position}", f"    model: {QWEN3_8B}", f"    port: {8000 + position}", "    max_model_len: 8192"]
    lines += ["    gateway_reaches: {service: vllm-coder, port: 8000}", "    env: {VLLM_API_KEY: {from_host_env: CODER_KEY}}"]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("\n".join(lines) + "\n")
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    out = tmp_path / "out"
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(out), "--engine-key-env", "VLLM_LOCAL_KEY")
    assert code == 0, err
    params = {entry["model_name"]: entry["litellm_params"] for entry in yaml.safe_load((out / "litellm" / "config.yaml").read_text())["model_list"]}
    assert {name: item["api_base"] for name, item in params.items()} == {
        "seat0": "http://host.docker.internal:8000/v1", "seat1": "http://host.docker.internal:8001/v1", "seat2": "http://vllm-coder:8000/v1"}
    assert {name: item["api_key"] for name, item in params.items()} == {
        "seat0": "os.environ/VLLM_LOCAL_KEY", "seat1": "os.environ/VLLM_LOCAL_KEY", "seat2": "os.environ/CODER_KEY"}
    for seat, variable in (("seat0", "VLLM_LOCAL_KEY"), ("seat1", "VLLM_LOCAL_KEY"), ("seat2", "CODER_KEY")):
        env = parse_env((out / "env" / f"{seat}.env").read_text())
        assert env[FROM_HOST_KEY].split() == [f"VLLM_API_KEY={variable}"]  # the engine reads its key from the variable the gateway sends
    assert "warning" not in err

    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(tmp_path / "bound"), "--bind", "127.0.0.1", "--engine-key-env", "K")
    assert code == 0 and "seat0 (http://host.docker.internal:8000), seat1 (http://host.docker.internal:8001), seat2 (http://vllm-coder:8000)" in err
    assert "keeps them on the loopback interface" in err
