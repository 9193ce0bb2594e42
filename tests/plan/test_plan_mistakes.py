"""The mistakes a newcomer makes with `seatplan plan`, through the real entry point: another file where the fleet
file goes (a document seatplan wrote, a compose file, a LiteLLM config), a folder as -o, a fleet file moved away
from its models. Each is one located error naming what the file is and what to do, exit 2, nothing written."""

from __future__ import annotations

import json
import shutil

import pytest

from kits.cli import run_cli
from kits.paths import REPO_ROOT

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
