"""Replans start from what runs (issue 18): ``plan --current PLAN|DIR``, the default move cost, and a one-seat
edit on the demo fleet that leaves every other seat's command line and env file byte for byte as it was."""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from kits.documents import command_of
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.plan import Plan
from seatplan.plan.current import read_current
from seatplan.plan.planner import build_plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fleet.yaml"
GiB = 1 << 30


def demo_fleet(directory: Path) -> dict:
    """The demo fleet as a dict, its model paths made absolute so an edited copy can live anywhere."""
    document = yaml.safe_load(DEMO.read_text())
    for seat in document["seats"]:
        if "model" in seat and not Path(seat["model"]).is_absolute():
            seat["model"] = str(DEMO.parent / seat["model"])
    return document


def save(document: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def one_seat_edit(document: dict, plan: Plan, rng: random.Random) -> tuple[dict, str]:
    """A copy with one random vLLM seat's context shrunk or its KV pin raised by 1 GiB, and that seat's name."""
    edited = yaml.safe_load(yaml.safe_dump(document))
    seat = rng.choice([seat for seat in edited["seats"] if seat.get("engine", "vllm") == "vllm"])
    planned = plan.seat(seat["name"])
    if rng.random() < 0.5 and planned.max_model_len and planned.max_model_len > 4096:
        seat["max_model_len"] = max(2048, planned.max_model_len // 2 // 1024 * 1024)
    else:
        seat["kv_cache_memory_bytes"] = planned.kv_cache_memory_bytes + GiB
    return edited, seat["name"]


def test_a_one_seat_edit_replanned_from_what_runs_restarts_that_seat_alone(tmp_path, rng):
    document = demo_fleet(tmp_path)
    document.pop("current_layout", None)  # what runs comes from --current only
    before = build_plan(load_fleet(save(document, tmp_path / "fleet.yaml")))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(before.model_dump_json())
    edited, name = one_seat_edit(document, before, rng)
    after = build_plan(load_fleet(save(edited, tmp_path / "edited.yaml")), current=read_current(plan_path, load_fleet(tmp_path / "edited.yaml").fleet))
    assert after.inputs.current_from == str(plan_path)
    moved = {seat.name for seat in after.seats if seat.gpus != before.seat(seat.name).gpus}
    assert after.restarts is not None and set(after.restarts) == {name} | moved
    for seat in after.seats:
        if seat.name != name and seat.name not in moved:
            assert command_of(seat) == command_of(before.seat(seat.name)), seat.name
    # untouched seats keep byte-identical env files
    settings = RenderSettings(plan_path=str(plan_path))
    old, new = render_files(before, settings), render_files(after, settings)
    changed = {path for path in old.keys() | new.keys() if path.startswith("env/") and old.get(path) != new.get(path)}
    assert changed == {f"env/{seat}.env" for seat in after.restarts}
    # a move is taken only when it buys the default 1 GiB of worst-case spare per move, or the fleet needs it
    if after.moves:
        stay = [point for point in after.frontier if point.moves == 0]
        assert not stay or after.worst_case_spare_bytes - stay[0].worst_case_spare_bytes >= after.moves * GiB


def test_current_from_a_rendered_directory_reads_the_plan_it_was_rendered_from_else_its_env_files(tmp_path, capsys, monkeypatch):
    document = demo_fleet(tmp_path)
    fleet_path = save(document, tmp_path / "fleet.yaml")
    plan_path = tmp_path / "plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(fleet_path), "-o", str(plan_path)).exit_code == 0
    rollout = tmp_path / "rollout"
    assert run_cli(capsys, monkeypatch, "render", str(plan_path), "-o", str(rollout)).exit_code == 0
    fleet = load_fleet(fleet_path).fleet
    from_dir, from_plan = read_current(rollout, fleet), read_current(plan_path, fleet)
    assert from_dir.gpus == from_plan.gpus and from_dir.launches == from_plan.launches
    assert str(plan_path) in from_dir.source
    # the plan file changed since the render (a replan saved over it): the env files are what runs
    shutil.copy(plan_path, tmp_path / "old.json")
    plan_path.write_text(plan_path.read_text().replace('"qwen3-8b"', '"qwen3-8b"', 1) + "\n")
    from_env = read_current(rollout, fleet)
    engines = {seat.name for seat in fleet.seats if seat.engine == "vllm"}  # the fixed seat has no env file
    assert "env files" in from_env.source
    assert from_env.gpus == {name: gpus for name, gpus in from_plan.gpus.items() if name in engines}
    # each engine's launch read back from its env file is the plan's, field for field, environment included
    assert from_env.launches == {name: launch for name, launch in from_plan.launches.items() if name in engines}
    # replanned from it: the headline counts moves and restarts against what runs
    result = run_cli(capsys, monkeypatch, "plan", str(fleet_path), "--current", str(rollout))
    assert result.exit_code == 0 and "with 0 moves, proven optimal" in " ".join(result.stdout.split()) and "0 restart(s))" in result.stdout


RENDER_WAYS = ([], ["--bind", "127.0.0.2"], ["--bind", "::1"], ["--launcher", "python3 -m vllm.entrypoints.openai.api_server"],
               ["--bind", "127.0.0.1", "--restart", "systemd"], ["--restart", "script", "--restart-script", "/usr/local/bin/restart-seat"])


def replanned_from(capsys, monkeypatch, fleet_path: Path, rendered: Path) -> Plan:
    result = run_cli(capsys, monkeypatch, "plan", str(fleet_path), "--current", str(rendered), "--json")
    assert result.exit_code == 0, result.stderr
    plan = Plan.model_validate_json(result.stdout)
    assert "its env files" in (plan.inputs.current_from or "")
    return plan


@pytest.mark.parametrize("way", RENDER_WAYS, ids=lambda way: " ".join(way) or "defaults")
def test_an_unchanged_fleet_replanned_from_its_rendered_directory_changes_nothing(tmp_path, capsys, monkeypatch, way):
    """issue 51: what runs is read back from the env files into launches and compared on what vLLM runs, never on the
    launcher or --host. After `render --bind 127.0.0.2` and the plan moved away, the replan of the unchanged demo fleet
    had 7 restarts and an 8-step rollout (0 without --bind, but a `restart speech` step for the fixed seat even then)."""
    fleet_path = save(demo_fleet(tmp_path), tmp_path / "fleet.yaml")
    plan_path, rendered = tmp_path / "plan.json", tmp_path / "rendered"
    assert run_cli(capsys, monkeypatch, "plan", str(fleet_path), "-o", str(plan_path)).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(plan_path), "-o", str(rendered), *way).exit_code == 0
    plan_path.rename(tmp_path / "moved.json")
    replanned = replanned_from(capsys, monkeypatch, fleet_path, rendered)
    assert replanned.restarts == [] and replanned.moves == 0
    assert replanned.rollout is not None and replanned.rollout.steps == []


def test_a_new_secret_reference_or_env_file_restarts_that_seat_in_plan_and_diff(tmp_path, capsys, monkeypatch, rng):
    """issue 43's item 7: a new `VLLM_API_KEY: {from_host_env: ...}` on a seat made `plan` say nothing changes while
    `diff` said the seat restarts. The one change model restarts it in both, and no value is ever shown."""
    document = demo_fleet(tmp_path)
    fleet_path = save(document, tmp_path / "fleet.yaml")
    plan_path, rendered = tmp_path / "plan.json", tmp_path / "rendered"
    assert run_cli(capsys, monkeypatch, "plan", str(fleet_path), "-o", str(plan_path)).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(plan_path), "-o", str(rendered), "--bind", "127.0.0.2").exit_code == 0
    seat = rng.choice([seat for seat in document["seats"] if seat.get("engine", "vllm") == "vllm"])
    if rng.random() < 0.5:
        seat["env"] = {"VLLM_API_KEY": {"from_host_env": "ENGINE_KEY_FOR_TEST"}}
        said = ("VLLM_API_KEY", None, "from the host's ENGINE_KEY_FOR_TEST")
    else:
        seat["env_files"] = ["/etc/seatplan/secrets/engine.env"]
        said = ("env_files", None, "/etc/seatplan/secrets/engine.env")
    edited = save(document, tmp_path / "edited.yaml")
    plan_path.rename(tmp_path / "moved.json")
    replanned = replanned_from(capsys, monkeypatch, edited, rendered)
    assert replanned.restarts == [seat["name"]]
    assert replanned.rollout is not None and [(step.action, step.seat) for step in replanned.rollout.steps] == [("restart", seat["name"])]
    new_plan = tmp_path / "new.json"
    new_plan.write_text(replanned.model_dump_json())
    diffed = run_cli(capsys, monkeypatch, "diff", str(new_plan), "--against", str(rendered), "--json")
    report = json.loads(diffed.stdout)
    changed = {item["seat"]: item for item in report["seats"] if item["status"] != "unchanged"}
    assert list(changed) == [seat["name"]] and changed[seat["name"]]["restarts"], diffed.stdout
    assert [(change["what"], change["old"], change["new"]) for change in changed[seat["name"]]["changes"]] == [said]


def test_without_a_current_layout_the_headline_counts_no_moves(tmp_path, capsys, monkeypatch):
    document = demo_fleet(tmp_path)
    document.pop("current_layout", None)
    result = run_cli(capsys, monkeypatch, "plan", str(save(document, tmp_path / "fleet.yaml")))
    headline = " ".join(result.stdout.split("GPUs at plateau")[0].split())
    assert result.exit_code == 0 and not re.search(r"\d+ moves?\b", headline) and "no current layout: pass --current" in headline


def test_current_that_is_not_a_plan_or_a_render_is_a_clear_error(tmp_path, capsys, monkeypatch):
    fleet_path = save(demo_fleet(tmp_path), tmp_path / "fleet.yaml")
    (tmp_path / "empty").mkdir()
    for target, said in ((tmp_path / "missing", "no such plan or rendered directory"), (tmp_path / "empty", "not a directory `seatplan render` wrote")):
        result = run_cli(capsys, monkeypatch, "plan", str(fleet_path), "--current", str(target))
        assert result.exit_code == 2 and said in result.stderr and "fix:" in result.stderr


def test_a_current_layout_that_disagrees_with_what_runs_is_warned_with_the_fix(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    """issue 32: after a rollout, `plan FLEET` without --current counted moves from the fleet file's old hand-written
    current_layout, silently. The seats whose current_layout is not where the rollout (--current DIR) or the last
    plan (-o's file) has them are named, with the fix; a current_layout that agrees is not warned of."""
    document = demo_fleet(tmp_path)
    fleet = save(document, tmp_path / "fleet.yaml")
    plan_path = tmp_path / "plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(plan_path)).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(plan_path), "-o", str(tmp_path / "rollout")).exit_code == 0
    placed = {seat.name: seat.gpus for seat in Plan.model_validate_json(plan_path.read_text()).seats if seat.gpus}
    document["current_layout"] = {name: gpus[0] for name, gpus in placed.items()}
    agreeing = save(document, tmp_path / "agreeing.yaml")
    for extra in (["--current", str(tmp_path / "rollout")], ["-o", str(plan_path)]):
        done = run_cli(capsys, monkeypatch, "plan", str(agreeing), *extra, "--json")
        assert done.exit_code == 0 and not any("current_layout disagrees" in warning for warning in Plan.model_validate_json(done.stdout).warnings)
    open_gpus = ["gpu-box:0", "gpu-box:1", "gpu-box:2"]
    stale = sorted(rng.sample(sorted(placed), rng.randint(1, len(placed))))
    for name in stale:
        document["current_layout"][name] = rng.choice([gpu for gpu in open_gpus if gpu != placed[name][0]])
    written = save(document, tmp_path / "stale.yaml")
    for extra, source, fix in ((["--current", str(tmp_path / "rollout")], "rollout", "--current was used. Fix: update current_layout"),
                               (["-o", str(plan_path)], str(plan_path), f"Fix: if that plan was rolled out, plan with --current {plan_path}")):
        done = run_cli(capsys, monkeypatch, "plan", str(written), *extra, "--json")
        assert done.exit_code == 0, done.stderr
        warned = [warning for warning in Plan.model_validate_json(done.stdout).warnings if "current_layout disagrees" in warning]
        known = [name for name in stale if name != "speech" or source != "rollout"]  # a fixed seat has no env file to say where it runs
        assert len(warned) == (1 if known else 0), warned
        if not known:
            continue
        warning = warned[0]
        assert warning.count(" is on ") == len(known), warning
        for name in known:
            assert f"{name} is on {placed[name][0]}, not {document['current_layout'][name]}" in warning
        assert source in warning and fix in warning and str(written) in warning
    # the plan counted moves from the stale current_layout, and against the rollout nothing changes: diff says why
    stale_plan = tmp_path / "stale-plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(written), "-o", str(stale_plan)).exit_code == 0
    counted = Plan.model_validate_json(stale_plan.read_text())
    diffed = run_cli(capsys, monkeypatch, "diff", str(stale_plan), "--against", str(tmp_path / "rollout"))
    said = " ".join(diffed.stderr.split())
    if counted.moves and diffed.exit_code == 0:  # the same layout as the rollout's, counted as moves
        assert f"the plan counts {counted.moves} move(s) from the fleet file's current_layout, yet against {tmp_path / 'rollout'} nothing changes" in said
        assert f"seatplan plan FLEET --current {tmp_path / 'rollout'}" in said
    else:
        assert "current_layout" not in said
