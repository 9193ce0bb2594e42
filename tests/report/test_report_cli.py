"""`seatplan report` given the wrong files, through the real entry point: each document is refused naming what it
is (the same words as every other reader of seatplan's documents), exit 2, no page written."""

from __future__ import annotations

import json

from kits.cli import run_cli
from kits.documents import plan_document, planned_gpu, planned_seat


def test_another_document_as_the_plan_or_the_usage_is_named(capsys, monkeypatch, tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"kind": "seatplan.usage", "version": 1}))
    plan = tmp_path / "plan.json"
    plan.write_text(plan_document([planned_seat("a", ["h:0"], 1 << 30)], [planned_gpu("h", 0, 1 << 30, 1 << 30, ["a"])]).model_dump_json())
    page = tmp_path / "report.html"
    for args, said in (((str(usage),), f"error: {usage}: this is a usage report (seatplan.usage, written by `seatplan usage -o usage.json`"),
                       ((str(plan), "--usage", str(plan)), f"error: {plan}: this is a plan (seatplan.plan, written by `seatplan plan FLEET -o plan.json`"),
                       ((str(plan), "--diagnose", str(usage)), f"error: {usage}: this is a usage report")):
        result = run_cli(capsys, monkeypatch, "report", *args, "-o", str(page))
        assert result.exit_code == 2 and said in result.stderr and "\nfix: " in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not page.exists()


def test_a_folder_as_the_plan_or_the_output(capsys, monkeypatch, tmp_path):
    result = run_cli(capsys, monkeypatch, "report", str(tmp_path), "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 2 and f"error: {tmp_path}: cannot read the plan" in result.stderr
    result = run_cli(capsys, monkeypatch, "report", str(tmp_path / "plan.json"), "-o", str(tmp_path))
    assert result.exit_code == 2 and f"error: -o {tmp_path}: is a folder, not the HTML file to write" in result.stderr
