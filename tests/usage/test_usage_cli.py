"""`seatplan usage` as a user runs it: one JSON document with --json, tables otherwise, worded errors, -o file."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from kits.spend_scenario import CHAT_MODEL, SCENARIO, insert_calls, write_csv
from seatplan.documents.io import read_usage
from seatplan.usage.cli import resolve_window

WINDOW_FLAGS = ["--since", "2026-11-23T00:16:40", "--until", "2026-11-23T10:00:00Z"]


@pytest.fixture
def scenario_csv(tmp_path: Path) -> Path:
    return write_csv(SCENARIO, tmp_path / "spend.csv")


def test_json_output_is_one_document_with_the_contract_fields(cli, scenario_csv: Path, tmp_path: Path) -> None:
    output = tmp_path / "usage.json"
    finished = cli("usage", "--from", str(scenario_csv), *WINDOW_FLAGS, "-o", str(output), "--json")
    assert finished.exit_code == 0, finished.stderr
    document = json.loads(finished.stdout)
    assert json.loads(output.read_text()) == document
    chat = document["models"][CHAT_MODEL]
    assert {name: chat[name] for name in ("calls", "prompt_tokens_p99", "completion_tokens_p99", "peak_inflight_tokens",
                                          "peak_inflight_tokens_without_runaways", "peak_inflight_requests", "rejected_rows")} == {
        "calls": 9, "prompt_tokens_p99": 8000, "completion_tokens_p99": 260000, "peak_inflight_tokens": 272000,
        "peak_inflight_tokens_without_runaways": 15000, "peak_inflight_requests": 2, "rejected_rows": 2}
    assert chat["runaways"][0] | {"request_tags": [], "example_request_ids": []} == {
        "key_alias": "ci-evals", "team": "ml-research", "user": "ci-bot", "count": 1, "max_completion_tokens": 260000,
        "total_completion_tokens": 260000, "request_tags": [], "example_request_ids": []}
    assert document["rejected_rows"] == 3
    # the window also names the first and last call it counts (issue 21: the title shows real instants)
    assert {key: document["window"][key] for key in ("since", "until")} == {"since": "2026-11-23T00:16:40", "until": "2026-11-23T10:00:00"}
    assert "2026-11-23T00:16:40" <= document["window"]["first_request_at"] <= document["window"]["last_request_at"] < "2026-11-23T10:00:00"
    assert document["window"]["days_counted_back_from"] is None


def test_plan_stage_reads_the_usage_document(cli, scenario_csv: Path, tmp_path: Path) -> None:
    output = tmp_path / "usage.json"
    assert cli("usage", "--from", str(scenario_csv), "-o", str(output), "--json").exit_code == 0
    summary = read_usage(output)
    assert summary.models[CHAT_MODEL].peak_inflight_tokens == 272000
    assert summary.models[CHAT_MODEL].runaways[0].key_alias == "ci-evals"


def test_tables_for_people(cli, scenario_csv: Path) -> None:
    finished = cli("usage", "--from", str(scenario_csv), *WINDOW_FLAGS)
    assert finished.exit_code == 0, finished.stderr
    assert "Usage by seat" in finished.stdout
    assert "Runaway replies by key" in finished.stdout and "ci-evals" in finished.stdout
    assert "Keys shared by several clients" in finished.stdout
    assert "rejected rows: 3" in finished.stdout


def test_user_errors_exit_2_without_a_traceback(cli, tmp_path: Path) -> None:
    empty = tmp_path / "spend-logs.csv"
    empty.write_text("")
    written = tmp_path / "usage.json"  # what `seatplan usage -o` wrote, given back to --from
    written.write_text('{\n  "kind": "seatplan.usage",\n  "version": 1\n}\n')
    for args, message in (
        (["--from", str(tmp_path / "absent.csv")], "no such file"),
        (["--from", str(tmp_path)], f"error: {tmp_path}: is a folder, not a spend-log export"),
        (["--from", str(empty)], f"error: {empty}: the file is empty"),
        ([str(empty)], f"the spend logs go after --from, not on their own ({empty})\nfix: write --from {empty}"),
        (["--from", str(written)], f"error: {written}: this is a usage report (seatplan.usage, written by `seatplan usage -o usage.json`"),
        (["--from", str(tmp_path / "absent.csv"), "-o", str(tmp_path)], f"error: -o {tmp_path}: is a folder, not the usage report to write"),
        (["--from", "x.csv", "--days", "7", "--since", "2026-11-01"], "--days and --since"),
        (["--from", "x.csv", "--since", "last tuesday"], "cannot read 'last tuesday'"),
        (["--from", "postgresql://nobody@127.0.0.1:1/litellm"], "cannot connect to PostgreSQL"),
        (["--from", "postgresql://nobody:hunter2@127.0.0.1:1/litellm"], "a password in --from"),
    ):
        finished = cli("usage", *args)
        assert finished.exit_code == 2, (args, finished.stderr)
        assert message in finished.stderr and "Traceback" not in finished.stderr
        assert "hunter2" not in finished.stderr


def test_no_source_says_where_to_get_one(cli) -> None:
    env = {"SEATPLAN_USAGE_DSN": "", "DATABASE_URL": ""}
    finished = cli("usage", "--json", env=env)
    assert finished.exit_code == 2 and "SEATPLAN_USAGE_DSN" in finished.stderr
    said = json.loads(finished.stdout)  # under --json the error is also one JSON object on stdout (issue 32)
    assert said["where"] == "--from" and "SEATPLAN_USAGE_DSN" in said["fix"]


@pytest.mark.postgres
def test_dsn_from_the_environment(cli, new_spend_database) -> None:
    dsn = new_spend_database()
    insert_calls(dsn, SCENARIO)
    finished = cli("usage", *WINDOW_FLAGS, "--json", env={"SEATPLAN_USAGE_DSN": dsn})
    assert finished.exit_code == 0, finished.stderr
    document = json.loads(finished.stdout)
    assert document["source_format"] == "postgresql"
    assert document["models"][CHAT_MODEL]["peak_inflight_tokens"] == 272000


def test_days_counts_back_from_until() -> None:
    window = resolve_window(None, "2026-11-30T12:00:00+01:00", 7, now=datetime(2030, 1, 1))
    assert (window.since, window.until) == (datetime(2026, 11, 23, 11), datetime(2026, 11, 30, 11))
    assert resolve_window(None, None, 1.5, now=datetime(2026, 11, 30)).since == datetime(2026, 11, 28, 12)
