"""Errors that say what was meant (issue 32, point 7): a fleet file given where a plan is expected, a number written
with a comma, and, under --json, every error as one JSON object on stdout as well as its text on stderr."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.paths import REPO_ROOT

DEMO = REPO_ROOT / "examples" / "demo"


def demo_fleet(directory: Path) -> Path:
    """The demo fleet beside its models, as a newcomer copies it."""
    (directory / "models").symlink_to(DEMO / "models")
    path = directory / "fleet.yaml"
    shutil.copy2(DEMO / "fleet.yaml", path)
    return path


def plan_file(directory: Path, capsys, monkeypatch) -> Path:
    target = directory / "plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(demo_fleet(directory)), "-o", str(target)).exit_code == 0
    return target


def where_a_plan_goes(fleet: Path, plan: Path) -> list[list[str]]:
    return [["render", str(fleet), "-o", str(fleet.parent / "rollout")], ["explain", str(fleet), "qwen3-8b"],
            ["diff", str(plan), "--against", str(fleet)], ["plan", str(fleet), "--current", str(fleet)]]


def test_a_fleet_file_given_where_a_plan_goes_is_named_with_the_command_that_makes_the_plan(tmp_path: Path, capsys, monkeypatch):
    plan = plan_file(tmp_path, capsys, monkeypatch)
    fleet = tmp_path / "fleet.yaml"
    for command in where_a_plan_goes(fleet, plan):
        done = run_cli(capsys, monkeypatch, *command)
        text = " ".join(done.stderr.split())
        assert done.exit_code == 2, (command, done.stderr)
        assert f"error: {fleet}: this is a fleet file (YAML), not a plan" in text, (command, text)
        assert f"fix: make the plan from it first, `seatplan plan {fleet} -o plan.json`, and pass plan.json" in text, command
        assert "not JSON" not in text
    assert not (tmp_path / "rollout").exists()


def test_a_yaml_file_that_is_no_fleet_is_still_said_to_be_no_json(tmp_path: Path, capsys, monkeypatch):
    other = tmp_path / "notes.yaml"
    other.write_text("shopping:\n  - milk\n")
    done = run_cli(capsys, monkeypatch, "explain", str(other), "s")
    assert done.exit_code == 2 and "the plan is not JSON" in done.stderr and "fleet file" not in done.stderr


def _decimal_comma(draw: random.Random) -> tuple[str, str]:
    whole, fraction = draw.randint(1, 9), draw.randint(1, 99)
    return f"{whole},{fraction:02d}", f"{whole}.{fraction:02d}"


@pytest.mark.parametrize("where", ["policy", "seat"])
def test_a_factor_written_with_a_decimal_comma_gets_the_number_as_the_fix(tmp_path: Path, where: str, capsys, monkeypatch, rng: random.Random):
    fleet = demo_fleet(tmp_path)
    written, meant = _decimal_comma(rng)
    text = fleet.read_text()
    text = text.replace("kv_factor: 1.25 ", f"kv_factor: {written} ") if where == "policy" else text.replace("kv_factor: 1.07", f"kv_factor: {written}")
    fleet.write_text(text)
    line = next(number for number, content in enumerate(text.splitlines(), start=1) if f"kv_factor: {written}" in content)
    done = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json")
    assert done.exit_code == 2
    assert f"fix: write {meant} (a decimal point: YAML reads {written} as text)" in done.stderr
    said = json.loads(done.stdout)
    assert said["fix"] == f"write {meant} (a decimal point: YAML reads {written} as text)"
    assert said["where"] == f"{fleet}:{line}" and "kv_factor" in said["error"]


def test_a_port_written_with_a_thousands_separator_gets_the_plain_number(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    fleet = demo_fleet(tmp_path)
    port = rng.randint(1000, 65535)
    written = f"{port // 1000},{port % 1000:03d}"
    fleet.write_text(fleet.read_text().replace("port: 8006", f"port: {written}"))
    done = run_cli(capsys, monkeypatch, "plan", str(fleet))
    assert done.exit_code == 2 and f"fix: write {port} (no thousands separator: YAML reads {written} as text)" in done.stderr


def test_under_json_every_error_is_one_json_object_on_stdout_and_its_text_on_stderr(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    """Errors of every kind: a fleet where a plan goes, a missing file, a bad option value, a missing argument,
    an unknown command; stdout is exactly one JSON object with error, fix and where, stderr the text."""
    plan = plan_file(tmp_path, capsys, monkeypatch)
    fleet = tmp_path / "fleet.yaml"
    cases = [[*command, "--json"] for command in where_a_plan_goes(fleet, plan) if command[0] != "render"]
    cases += [["explain", str(tmp_path / "absent.json"), "s", "--json"], ["plan", str(fleet), "--max-moves", "-1", "--json"],
              ["plan", "--json"], ["explain", str(plan), "no-such-seat", "--json"]]
    for command in rng.sample(cases, len(cases)):
        done = run_cli(capsys, monkeypatch, *command)
        assert done.exit_code == 2, command
        said = json.loads(done.stdout)  # exactly one document: json.loads refuses anything after it
        assert set(said) == {"error", "fix", "where"} and said["error"], command
        assert said["error"] in " ".join(done.stderr.split()) or said["error"].rstrip(".") in done.stderr, (command, done.stderr)
    without = run_cli(capsys, monkeypatch, "explain", str(fleet), "qwen3-8b")
    assert without.exit_code == 2 and without.stdout == ""  # without --json, stdout stays empty
