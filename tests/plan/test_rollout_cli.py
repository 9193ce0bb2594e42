"""The rollout through the real entry point: ``plan --json`` and ``-o`` carry it, the screen says it in one line,
``explain PLAN --rollout`` shows each start's check, and a rollout no order of which fits exits 3 with nothing
written, naming the start and its shortfall."""

from __future__ import annotations

import json
from pathlib import Path

from kits.cli import run_cli
from kits.plan import QWEN3_8B, GiB, one_host, write_fleet
from seatplan.documents.plan import Plan


def fleet_text(total_bytes: int, fixed_cap_bytes: int, current: str) -> str:
    return one_host(1, str(total_bytes)) + f"""policy: {{boot_margin_bytes: 1GiB, creep_allowance_bytes: 0}}
seats:
  - {{name: side, engine: fixed, memory_cap_bytes: {fixed_cap_bytes}}}
  - {{name: chat, model: {QWEN3_8B}, port: 8001, max_model_len: 4096}}
current_layout: {current}
"""


def test_a_trade_is_planned_said_and_explained(tmp_path: Path, capsys, monkeypatch):
    # A trade of GPUs: 70 GiB on GPU 0 (10 free) for chat (about 21 GiB) and a 20 GiB seat on GPU 1 (about 39 free):
    # neither side can arrive while the other runs, so one seat is down while the others start; the fewest is big
    fleet = write_fleet(tmp_path, one_host(2, "80GiB") + f"""seats:
  - {{name: big, engine: fixed, memory_cap_bytes: 70GiB, pin: 1}}
  - {{name: chat, model: {QWEN3_8B}, port: 8001, max_model_len: 4096, pin: 0}}
  - {{name: side, engine: fixed, memory_cap_bytes: 20GiB, pin: 0}}
current_layout: {{big: 0, chat: 1, side: 1}}
""")
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json", "-o", str(tmp_path / "plan.json"))
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    rollout = document["rollout"]
    steps = [(step["action"], step["seat"], step["gpus"]) for step in rollout["steps"]]
    assert steps[-1] == ("start", "big", ["box:1"]) and len(steps) == 6
    assert sorted(steps) == sorted([("stop", "big", ["box:0"]), ("start", "big", ["box:1"]), ("stop", "chat", ["box:1"]),
                                    ("start", "chat", ["box:0"]), ("stop", "side", ["box:1"]), ("start", "side", ["box:0"])])
    stopped = next(number for number, step in enumerate(steps, start=1) if step[:2] == ("stop", "big"))
    assert rollout["down"] == [{"seat": "big", "from_step": stopped, "to_step": 6}] and rollout["proven"]
    starts = [step for step in rollout["steps"] if step["action"] == "start"]
    assert all(check["passes"] for step in starts for check in step["checks"])
    assert Plan.model_validate_json((tmp_path / "plan.json").read_text()).rollout == Plan.model_validate(document).rollout
    screen = run_cli(capsys, monkeypatch, "plan", str(fleet), env={"COLUMNS": "200"})
    assert f"rollout: 6 steps; big down during steps {stopped}–6" in screen.stdout
    explained = run_cli(capsys, monkeypatch, "explain", str(tmp_path / "plan.json"), "--rollout", env={"COLUMNS": "200"})
    assert explained.exit_code == 0, explained.stderr
    assert "requested = ceil(" in explained.stdout and "fixed seat, no vLLM check" in explained.stdout
    as_json = run_cli(capsys, monkeypatch, "explain", str(tmp_path / "plan.json"), "--rollout", "--json")
    assert json.loads(as_json.stdout) == rollout
    both = run_cli(capsys, monkeypatch, "explain", str(tmp_path / "plan.json"), "chat", "--rollout")
    assert both.exit_code == 2 and "name a seat, or pass --rollout" in both.stderr


def test_no_order_at_all_exits_3_naming_the_start_and_writes_nothing(tmp_path: Path, capsys, monkeypatch):
    total = 48 * GiB
    probe = write_fleet(tmp_path, fleet_text(total, GiB, "{side: 0}"), "probe.yaml")
    first = run_cli(capsys, monkeypatch, "plan", str(probe), "--json")
    assert first.exit_code == 0, first.stderr
    chat = next(seat for seat in json.loads(first.stdout)["seats"] if seat["name"] == "chat")
    # the fixed seat leaves chat 256 MiB over its footprint: the plan fits, but vLLM's request (what chat allocates
    # after its snapshot plus the 1 GiB margin) is more than is free when chat starts beside it
    fleet = write_fleet(tmp_path, fleet_text(total, total - chat["footprint_bytes"] - GiB // 4, "{side: 0}"))
    target = tmp_path / "plan.json"
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(target), env={"COLUMNS": "200"})
    assert result.exit_code == 3, result.stderr
    assert not target.exists()
    assert "the rollout does not fit" in result.stderr and "chat cannot start on GPU box:0 beside side" in result.stderr
    as_json = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json")
    assert as_json.exit_code == 3
    fails = json.loads(as_json.stdout)["rollout"]["fails"]
    check = fails["checks"][0]
    assert fails["seat"] == "chat" and fails["short_by_bytes"] == -check["request_margin_bytes"] > 0
    assert check["free_bytes"] == total - (total - chat["footprint_bytes"] - GiB // 4)
