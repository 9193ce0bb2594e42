"""One diagnose document: ``-o`` writes what ``--json`` prints; ``plan --observed`` and ``report`` read that one file."""

from __future__ import annotations

import json
from pathlib import Path

from kits.cli import run_cli
from kits.paths import FORMAT_FIXTURES
from seatplan.documents.io import read_observed
from seatplan.report.inputs import read_inputs

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fleet.yaml"


def test_the_written_document_is_the_printed_one_and_plan_and_report_read_it(capsys, monkeypatch, tmp_path):
    document = tmp_path / "diagnose.json"
    made = run_cli(capsys, monkeypatch, "diagnose", "--nvidia-smi", str(FORMAT_FIXTURES / "nvidia_smi_query_gpu.csv"),
                   "-o", str(document), "--json")
    assert made.exit_code == 0, made.stderr
    assert document.read_text() == made.stdout  # byte for byte
    printed = json.loads(made.stdout)
    assert printed["kind"] == "seatplan.diagnose" and printed["observed"]["gpus"]
    assert read_observed(document).gpus == printed["observed"]["gpus"]

    plan = tmp_path / "plan.json"
    planned = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--observed", str(document), "-o", str(plan), "--json")
    assert planned.exit_code == 0, planned.stderr
    assert json.loads(planned.stdout)["inputs"]["observed_path"] == str(document)
    # report needs the one file: the observed plateaus come with the diagnose document.
    inputs = read_inputs(plan, diagnose_path=document)
    assert inputs.diagnose is not None and inputs.observed is not None
    assert [gpu["plateau_used_mib"] for gpu in inputs.observed.gpus] == [gpu.plateau_used_mib for gpu in inputs.diagnose.gpus]


def test_a_document_without_observations_is_refused_with_its_fix(capsys, monkeypatch, tmp_path):
    document = tmp_path / "diagnose.json"
    document.write_text(json.dumps({"kind": "seatplan.diagnose", "version": 1, "gpus": []}))
    refused = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--observed", str(document), "--json")
    assert refused.exit_code == 2 and "carries no observations" in refused.stderr and "fix:" in refused.stderr
