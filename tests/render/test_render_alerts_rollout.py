"""The alert rules rolled out by the rendered playbook: the real ansible-playbook, the real promtool and a real
Prometheus server on 127.0.0.1 that reloads them (the engines are the stand-in of tests/integration/fake_engine.py,
which only answers /health: the subject here is the rules, not the engines)."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime

import httpx
import pytest

from kits.parts import free_port, require, require_binary, stop_process
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, localhost_inventory, render_args, run_seatplan, stop_engines

pytestmark = [pytest.mark.ansible, pytest.mark.prometheus, pytest.mark.timeout(600)]


@pytest.fixture
def prometheus(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    binary = require_binary("prometheus")
    rules = tmp_path / "prometheus" / "seatplan.rules.yaml"
    rules.parent.mkdir()
    config = tmp_path / "prometheus" / "prometheus.yml"
    config.write_text(f"global:\n  evaluation_interval: 1m\nrule_files:\n  - {rules}\n")
    port = free_port()
    server = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'prometheus' / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
                              stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus" / "log").open("w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2, trust_env=False).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    try:
        yield url, rules
    finally:
        stop_process(server)
        stop_engines(tmp_path)


def loaded_rules(url: str) -> dict[str, str]:
    """alert name → expression of every rule Prometheus has loaded in the seatplan group."""
    groups = httpx.get(f"{url}/api/v1/rules", timeout=10, trust_env=False).raise_for_status().json()["data"]["groups"]
    return {rule["name"] + ":" + rule["query"]: rule["query"] for group in groups if group["name"] == "seatplan" for rule in group["rules"]}


@pytest.mark.slow
def test_apply_checks_installs_and_reloads_the_rules_a_failed_reload_puts_them_back_and_rollback_restores_them(prometheus, tmp_path, capsys, monkeypatch):
    url, rules = prometheus
    seats = {"alpha": (QWEN3_8B, free_port())}
    plan1 = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB"), tmp_path / "plan1.json")
    promtool = require_binary("promtool", "/usr/bin/promtool")
    alert_flags = ["--prometheus-rules", str(rules), "--prometheus-url", url, "--promtool", promtool]
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan1, fake_launcher()), *alert_flags)[0] == 0

    # 1. the first rollout: no rules before, so no backup; Prometheus lists them after the reload
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan1, "first"))
    assert code == 0, json.loads(out)["output"][-4000:] if out else err
    assert rules.read_text() == (tmp_path / "rendered" / "prometheus" / "seatplan.rules.yaml").read_text()
    first_rules, first_loaded = rules.read_text(), loaded_rules(url)
    assert first_loaded and not list(rules.parent.glob("*.bak-*")) and not list(rules.parent.glob("*.seatplan-new"))

    # 2. another KV pin: other block counts in the rules; the old rules are backed up under the tag
    plan2 = build_plan_file(cpu_fleet(tmp_path, seats, kv="512MiB", total="64GiB", name="fleet2.yaml"), tmp_path / "plan2.json")
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan2, "kv512"))
    assert code == 0, json.loads(out)["output"][-4000:] if out else err
    today = datetime.now(UTC).strftime("%Y%m%d")
    assert (rules.parent / f"seatplan.rules.yaml.bak-{today}-kv512").read_text() == first_rules
    second_rules, second_loaded = rules.read_text(), loaded_rules(url)
    assert second_rules != first_rules and second_loaded != first_loaded

    # 3. the reload fails (Prometheus unreachable): the rules in place are put back and apply stops naming the step
    dead = f"http://127.0.0.1:{free_port()}"
    plan3 = build_plan_file(cpu_fleet(tmp_path, seats, kv="768MiB", total="64GiB", name="fleet3.yaml"), tmp_path / "plan3.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan3, fake_launcher()), "--prometheus-rules", str(rules), "--prometheus-url", dead,
                        "--promtool", promtool)[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan3, "broken"))
    output = json.loads(out)["output"]
    assert code == 1 and "seatplan-alerts-failed: the step 'alerts: Prometheus reloads (POST /-/reload)' failed" in output, output[-3000:]
    assert rules.read_text() == second_rules and loaded_rules(url) == second_loaded
    assert not list(rules.parent.glob("*.seatplan-new"))

    # 4. --no-alerts leaves them alone
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan3, "quiet", "--no-alerts"))
    assert code == 0, json.loads(out)["output"][-3000:]
    assert rules.read_text() == second_rules

    # 5. rollback to before the release of step 2 (it and every later one undone): the rules of the first rollout are back, and loaded
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan2, fake_launcher()), *alert_flags)[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "kv512", "--inventory", str(localhost_inventory(tmp_path)),
                                  "-e", "seatplan_run_verify=false", "--json")
    assert code == 0, json.loads(out)["output"][-3000:] if out else err
    assert rules.read_text() == first_rules and loaded_rules(url) == first_loaded
