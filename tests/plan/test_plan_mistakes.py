"""The mistakes a newcomer makes with `seatplan plan`, through the real entry point: another file where the fleet
file goes (a document seatplan wrote, a compose file, a LiteLLM config), a folder as -o, a fleet file moved away
from its models, another fleet's plan as --current. Each is one located error naming what the file is and what to
do, exit 2, nothing written; another fleet's usage report is used for nothing, and the plan says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.paths import REPO_ROOT
from kits.plan import LLAMA_8B, one_host, write_fleet

DEMO = REPO_ROOT / "examples" / "demo"


def refused(result, *words: str) -> None:
    assert result.exit_code == 2 and result.stdout == "", result.stderr
    assert "Traceback" not in result.stderr and "\nfix: " in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.parametrize("kind,said,command", [
    ("seatplan.usage", "this is a usage report", "seatplan usage -o usage.json"),
    ("seatplan.plan", "this is a plan", "--current"),
    ("seatplan.diagnose", "this is a diagnose document", "plan --observed"),
])
def test_a_document_seatplan_wrote_is_named_for_what_it_is(kind, said, command, capsys, monkeypatch, tmp_path):
    document = tmp_path / "document.json"
    document.write_text(json.dumps({"kind": kind, "version": 1, "hosts_seen": []}, indent=2))
    result = run_cli(capsys, monkeypatch, "plan", str(document))
    refused(result, f"error: {document}: {said}", "not a fleet file", command)
    assert "unknown key" not in result.stderr  # not the list of every key the document has


def test_a_compose_file_or_a_litellm_config_points_to_adopt(capsys, monkeypatch, tmp_path):
    compose = REPO_ROOT / "examples" / "adopt" / "compose.yaml"
    refused(run_cli(capsys, monkeypatch, "plan", str(compose)), "this is a compose file", f"seatplan adopt --compose HOST={compose}")
    litellm = tmp_path / "config.yaml"
    litellm.write_text("model_list:\n  - model_name: a\n    litellm_params: {model: hosted_vllm/a}\n")
    refused(run_cli(capsys, monkeypatch, "plan", str(litellm)), "this is a LiteLLM config", f"seatplan adopt --litellm-config {litellm}")


def test_a_folder_as_output_is_refused_before_planning(capsys, monkeypatch, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    refused(run_cli(capsys, monkeypatch, "plan", str(DEMO / "fleet.yaml"), "-o", str(folder)),
            f"error: -o {folder}: is a folder, not the plan to write", f"-o {folder / 'plan.json'}")
    assert list(folder.iterdir()) == []


def test_a_fleet_file_copied_away_from_its_models_names_the_path_it_tried(capsys, monkeypatch, tmp_path):
    """The demo names its models ``models/Org--Name``, relative to the fleet file. Copied elsewhere, the fleet file
    finds no models/ beside it; a models/ in the working directory must not stand in (and "--" is no Hub id)."""
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(DEMO / "fleet.yaml", moved / "fleet.yaml")
    (tmp_path / "models").symlink_to(DEMO / "models")
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, monkeypatch, "plan", "moved/fleet.yaml")
    refused(result, "moved/fleet.yaml:", "model directory models/Qwen--", f"tried {moved / 'models' / 'Qwen--'}",
            "taken from the fleet file's directory")


def another_fleet(tmp_path: Path) -> Path:
    return write_fleet(tmp_path, one_host(1) + f"seats:\n  - {{name: chat, model: {LLAMA_8B}, port: 9000}}\n", name="other.yaml")


def test_another_fleets_plan_as_current_is_refused(capsys, monkeypatch, tmp_path):
    other_plan = tmp_path / "other-plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(another_fleet(tmp_path)), "-o", str(other_plan), "--json").exit_code == 0
    target = tmp_path / "plan.json"
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO / "fleet.yaml"), "--current", str(other_plan), "-o", str(target))
    refused(result, f"error: --current {other_plan}: what runs there (chat) is none of this fleet's seats")
    assert not target.exists()


def test_another_fleets_usage_report_is_said_to_be_unused(capsys, monkeypatch, tmp_path):
    usage = tmp_path / "usage.json"
    night = REPO_ROOT / "examples" / "night" / "spend-logs.csv"
    assert run_cli(capsys, monkeypatch, "usage", "--from", str(night), "--fleet", str(DEMO / "fleet.yaml"), "-o", str(usage), "--json").exit_code == 0
    served = sorted(name for name, model in json.loads(usage.read_text())["models"].items() if model["calls"])
    result = run_cli(capsys, monkeypatch, "plan", str(another_fleet(tmp_path)), "--usage", str(usage), "--json")
    assert result.exit_code == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    assert f"usage for {', '.join(served)}, which no seat of the fleet serves, was not used" in " ".join(warnings)
    # the fleet the report was made for: every model with calls is some seat's, nothing to say
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO / "fleet.yaml"), "--usage", str(usage), "--json")
    assert not [warning for warning in json.loads(result.stdout)["warnings"] if warning.startswith("usage for")]


def test_an_empty_document_says_it_is_empty(capsys, monkeypatch, tmp_path):
    empty = tmp_path / "usage.json"
    empty.write_text("\n")
    refused(run_cli(capsys, monkeypatch, "plan", str(DEMO / "fleet.yaml"), "--usage", str(empty)), f"error: {empty}: the usage summary is empty")
    refused(run_cli(capsys, monkeypatch, "explain", str(empty), "qwen3-8b"), f"error: {empty}: the plan is empty")
