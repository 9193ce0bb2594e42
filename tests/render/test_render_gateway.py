"""What render writes for the network and the gateway: --bind on every target, engine keys by reference, the
warning for engines open to the network without a key, the gateway and alert settings, and secrets that never
leave the host (issue 29, items 4-6)."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import random
import re
import string
from pathlib import Path

import pytest
import yaml

from kits.render import QWEN3_8B, load_ansible_yaml
from kits.rollout import build_plan_file, run_seatplan
from seatplan.documents.io import read_plan
from seatplan.engine.parse import parse_env
from seatplan.secrets import looks_secret


def fleet_text(seats: list[dict], *, fixed_image: bool = True) -> str:
    """One cuda host, ``seats`` given as extra YAML keys of each vLLM seat, and a fixed seat compose runs."""
    lines = ["hosts:", "  - name: gpu-box", "    gpus:", "      - {index: 0, total_bytes: 95.59GiB}", "      - {index: 1, total_bytes: 95.59GiB}",
             "policy:", "  vllm_version: \"0.32\"", "seats:"]
    if fixed_image:
        lines += ["  - name: speech", "    engine: fixed", "    memory_cap_bytes: 6GiB", "    port: 9000", "    pin: 0", "    image: example/speech:1"]
    for position, extra in enumerate(seats):
        lines += [f"  - name: seat{position}", f"    model: {QWEN3_8B}", f"    port: {8000 + position}", "    max_model_len: 8192"]
        lines += ["    " + line for line in yaml.safe_dump(extra, sort_keys=False).splitlines()] if extra else []
    return "\n".join(lines) + "\n"


def planned(tmp_path: Path, seats: list[dict], name: str = "fleet.yaml") -> Path:
    fleet = tmp_path / name
    fleet.write_text(fleet_text(seats))
    return build_plan_file(fleet, tmp_path / (name + ".plan.json"))


def random_bind(rng: random.Random) -> str:
    kind = rng.choice(["v4", "v6", "loopback", "loopback6"])
    if kind == "v4":
        return str(ipaddress.IPv4Address(rng.randrange(1 << 24, 223 << 24)))
    if kind == "v6":
        return str(ipaddress.IPv6Address((0xfd << 120) | rng.getrandbits(112)))
    return "127.0.0.1" if kind == "loopback" else "::1"


def test_bind_reaches_compose_ports_health_urls_and_fixed_seats(tmp_path, capsys, monkeypatch, rng):
    plan = planned(tmp_path, [{}, {}])
    for draw in range(4):
        bind = random_bind(rng)
        out = tmp_path / f"out{draw}"
        code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(out), "--bind", bind)
        assert code == 0, err
        compose = yaml.safe_load((out / "compose.yaml").read_text())
        published = f"[{bind}]" if ":" in bind else bind
        assert compose["services"]["seat0"]["ports"] == [f"{published}:8000:8000"], bind
        assert compose["services"]["seat1"]["ports"] == [f"{published}:8001:8001"]
        assert compose["services"]["speech"]["ports"] == [f"{published}:9000:9000"]
        env = (out / "env" / "seat0.env").read_text()
        assert parse_env(env)["SEATPLAN_HEALTH_URL"] == f"http://{published}:8000/health"
        assert f"--host {bind}" in env
        seats = load_ansible_yaml((out / "ansible" / "vars.yaml").read_text())["seatplan_seats"]["gpu-box"]
        assert {seat["health_url"] for seat in seats} == {f"http://{published}:{port}/health" for port in (8000, 8001)}
        if ipaddress.ip_address(bind).is_loopback:  # not open to the network, but the gateway reaches gpu-box, not the loopback
            assert err.count("warning") == 1 and "keeps them on the loopback interface, where the gateway does not reach them" in err
        else:
            assert "warning" not in err  # bound to one address: not open to the network


def test_without_bind_every_interface_is_published_and_the_health_url_is_the_hosts(tmp_path, capsys, monkeypatch):
    plan = planned(tmp_path, [{}])
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(tmp_path / "out"), "--bind", "0.0.0.0")
    assert code == 0, err
    compose = yaml.safe_load((tmp_path / "out" / "compose.yaml").read_text())
    assert compose["services"]["seat0"]["ports"] == ["8000:8000"]
    assert parse_env((tmp_path / "out" / "env" / "seat0.env").read_text())["SEATPLAN_HEALTH_URL"] == "http://gpu-box:8000/health"
    assert "listen on every interface without an API key" in err and "--bind 127.0.0.1" in err and "from_host_env" in err


def test_an_engine_key_by_reference_reaches_the_gateway_config_and_silences_the_warning(tmp_path, capsys, monkeypatch):
    plan = planned(tmp_path, [{"env": {"VLLM_API_KEY": {"from_host_env": "SEAT0_ENGINE_KEY"}}}, {}])
    code, out, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(tmp_path / "out"), "--json")
    assert code == 0, err
    params = {entry["model_name"]: entry["litellm_params"] for entry in yaml.safe_load((tmp_path / "out" / "litellm" / "config.yaml").read_text())["model_list"]}
    assert params["seat0"]["api_key"] == "os.environ/SEAT0_ENGINE_KEY" and "api_key" not in params["seat1"]
    assert json.loads(out)["warnings"] == [next(line for line in err.splitlines() if "warning" in line).split("warning: ", 1)[1]]
    assert "seat1 listen" in err.replace("engines ", "") and "seat0" not in err.split("listen")[0]
    # --engine-key-env: every engine without its own reference
    code, out, err = run_seatplan(capsys, monkeypatch, "render", str(plan), "-o", str(tmp_path / "out2"), "--engine-key-env", "ENGINE_KEY", "--json")
    params = {entry["model_name"]: entry["litellm_params"] for entry in yaml.safe_load((tmp_path / "out2" / "litellm" / "config.yaml").read_text())["model_list"]}
    assert params["seat0"]["api_key"] == "os.environ/SEAT0_ENGINE_KEY" and params["seat1"]["api_key"] == "os.environ/ENGINE_KEY"
    assert json.loads(out)["warnings"] == [] and "warning" not in err


@pytest.mark.parametrize(("flags", "named"), [
    (["--gateway-config", "/etc/litellm/config.yaml"], "--gateway-config"),
    (["--gateway-config", "etc/litellm.yaml", "--gateway-url", "http://127.0.0.1:4000"], "--gateway-config"),
    (["--gateway-config", "/etc/../litellm.yaml", "--gateway-url", "http://127.0.0.1:4000"], "--gateway-config"),
    (["--prometheus-rules", "/etc/prometheus/seatplan.rules.yaml"], "--prometheus-rules"),
    (["--prometheus-rules", "/etc/p.yaml", "--prometheus-url", "ftp://x"], "--prometheus-url"),
    (["--gateway-host", "bad host;rm"], "--gateway-host"),
    (["--prometheus-host", "-x"], "--prometheus-host"),
])
def test_gateway_and_alert_settings_are_checked_before_anything_is_written(demo_plan_path, tmp_path, capsys, monkeypatch, flags, named):
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "out"), *flags)
    assert code == 2 and named in err and "fix:" in err, err
    assert not (tmp_path / "out").exists()


def test_the_playbook_rolls_out_the_gateway_and_the_alerts_after_the_engines(demo_plan_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out), "--gateway-config", "/etc/litellm/config.yaml",
                                "--gateway-url", "http://127.0.0.1:4000/", "--gateway-host", "gw-box", "--prometheus-rules", "/etc/prometheus/rules/seatplan.yaml",
                                "--prometheus-url", "http://127.0.0.1:9090", "--bind", "127.0.0.1")
    assert code == 0, err
    playbook = load_ansible_yaml((out / "ansible" / "playbook.yaml").read_text())
    # the engines' steps, the hosts' compose files, then the gateway and the alerts, the release recorded as landed, then verify
    assert [play.get("import_playbook") for play in playbook][-3:] == ["gateway.yaml", None, None]
    assert playbook[-2]["name"] == "seatplan apply: the release recorded on each host as landed"
    assert load_ansible_yaml((out / "ansible" / "rollback.yaml").read_text())[-1]["import_playbook"] == "gateway-rollback.yaml"
    plays = load_ansible_yaml((out / "ansible" / "gateway.yaml").read_text())
    assert [play["hosts"] for play in plays] == ["gw-box", "localhost"]
    variables = load_ansible_yaml((out / "ansible" / "vars.yaml").read_text())
    served = sorted(seat.served_model_name for seat in read_plan(demo_plan_path).seats if seat.engine == "vllm")
    assert variables["seatplan_gateway_models"] == served
    assert variables["seatplan_gateway_url"] == "http://127.0.0.1:4000" and variables["seatplan_gateway_rollout"] is True
    assert variables["seatplan_gateway_config"] == "/etc/litellm/config.yaml" and variables["seatplan_alerts_rollout"] is True
    assert variables["seatplan_gateway_sha1"] == hashlib.sha1((out / "litellm" / "config.yaml").read_bytes()).hexdigest()
    assert variables["seatplan_rules_sha1"] == hashlib.sha1((out / "prometheus" / "seatplan.rules.yaml").read_bytes()).hexdigest()
    smoke = next(task for task in plays[0]["tasks"][0]["block"][-1]["block"] if "completion" in task["name"])
    assert smoke["no_log"] is True and "lookup('env', seatplan_gateway_key_env)" in json.dumps(smoke)
    # without the paths the plays are there but switched off
    code, _, err = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "plain"))
    variables = load_ansible_yaml((tmp_path / "plain" / "ansible" / "vars.yaml").read_text())
    assert variables["seatplan_gateway_rollout"] is False and variables["seatplan_alerts_rollout"] is False


def random_secret(rng: random.Random) -> str:
    prefix = rng.choice(["hf_", "sk-", "", "tok-"])
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(rng.randrange(12, 40)))


def test_a_secret_given_by_reference_appears_in_no_file_and_no_output(tmp_path, capsys, monkeypatch, rng):
    """The values live only in this process's environment (as on the GPU host): every document, rendered file and
    line printed by plan, explain, render, diff and report is searched for them."""
    values = {name: random_secret(rng) for name in ("HF_TOKEN", "ENGINE_KEY", "LITELLM_MASTER_KEY")}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    seats = [{"env": {"HF_TOKEN": {"from_host_env": "HF_TOKEN"}, "VLLM_API_KEY": {"from_host_env": "ENGINE_KEY"}}},
             {"env": {"HF_TOKEN": {"from_host_env": "HF_TOKEN"}}, "env_files": ["/etc/seatplan/secrets/hf.env"]}]
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_text(seats))
    printed = []
    for args in (["plan", str(fleet), "-o", str(tmp_path / "plan.json")], ["plan", str(fleet), "--json"],
                 ["explain", str(tmp_path / "plan.json"), "seat0"],
                 ["render", str(tmp_path / "plan.json"), "-o", str(tmp_path / "rendered"), "--engine-key-env", "ENGINE_KEY"],
                 ["diff", str(tmp_path / "plan.json"), "--against", str(tmp_path / "rendered")],
                 ["report", str(tmp_path / "plan.json"), "-o", str(tmp_path / "report.html")]):
        code, out, err = run_seatplan(capsys, monkeypatch, *args)
        assert code == 0, (args, err)
        printed.append(out + err)
    plan = json.loads((tmp_path / "plan.json").read_text())
    seat0 = next(seat for seat in plan["seats"] if seat["name"] == "seat0")
    assert seat0["env_from_host"] == {"HF_TOKEN": "HF_TOKEN", "VLLM_API_KEY": "ENGINE_KEY"}
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(files) > 8
    for value in values.values():
        assert not [path for path in files if value.encode() in path.read_bytes()], value[:3]
        assert not [text for text in printed if value in text]


@pytest.mark.parametrize(("name", "value", "secret"), [
    ("HF_TOKEN", "hf_abcdefghijklmnop", True), ("HUGGING_FACE_HUB_TOKEN", "abcdefgh12345678", True), ("VLLM_API_KEY", "anything-at-all", True),
    ("OPENAI_KEY", "x1y2z3w4v5", True), ("DB_PASSWORD", "hunter22", True), ("AWS_SECRET_ACCESS_KEY", "AKIAxxxx", True),
    ("CUSTOM", "sk-proj-abcdefgh1234", True), ("WHATEVER", "hf_ABCDEFGHIJKL", True),
    ("UPSTREAM_TOKEN", "123456789012345", True), ("DATABASE_URL", "postgresql://app:pw0rd@db:5432/x", True), ("KEYS_DIR", "/srv/keys", True),
    ("VLLM_LOGGING_LEVEL", "DEBUG", False), ("MONKEY_MODE", "on", False), ("HF_HOME", "/srv/hf", False),
    ("MAX_TOKENS_DEFAULT", "4096", False), ("HF_HUB_DISABLE_TOKEN", "1", False), ("VLLM_USE_TOKEN_BUDGET", "true", False),
])
def test_the_secret_rule(name, value, secret):
    assert looks_secret(name, value) is secret


def test_a_plain_value_that_looks_secret_is_a_warning_naming_its_line_never_the_value(tmp_path, capsys, monkeypatch, rng):
    value = "hf_" + "".join(rng.choice(string.ascii_letters) for _ in range(rng.randrange(10, 30)))
    name = rng.choice(["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MY_API_KEY", "UPSTREAM_SECRET"])
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(fleet_text([{}, {"env": {"VLLM_LOGGING_LEVEL": "INFO", name: value}}]))
    code, out, err = run_seatplan(capsys, monkeypatch, "plan", str(fleet), "--json")
    assert code == 0, err
    warnings = [warning for warning in json.loads(out)["warnings"] if "looks like a secret" in warning]
    line = next(number for number, text in enumerate(fleet.read_text().splitlines(), start=1) if text.strip().startswith(f"{name}:"))
    assert len(warnings) == 1 and re.match(rf"{re.escape(str(fleet))}:{line}: seats\[2\] \(seat1\): env {name} ", warnings[0]), warnings
    assert f"{{from_host_env: {name}}}" in warnings[0] and "env_files" in warnings[0]
    assert value not in "".join(warnings) + err  # (plan.json carries it: it was given by value, which is what the warning is about)
