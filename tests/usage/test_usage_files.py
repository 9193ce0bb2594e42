"""CSV / JSON Lines / JSON exports: broken lines and cells are counted, older schemas still read, user errors worded."""

from __future__ import annotations

import csv
import gzip
import json
import shutil
from pathlib import Path

import pytest

from kits.spend_scenario import CHAT_MODEL, SCENARIO, SINCE, UNTIL, spend_log_row, write_csv
from kits.usage import figures, usage_report
from seatplan.errors import SeatplanError
from seatplan.usage.queries import Window

WINDOW = Window(since=SINCE, until=UNTIL)


@pytest.fixture
def scenario_csv(tmp_path: Path) -> Path:
    return write_csv(SCENARIO, tmp_path / "spend.csv")


def test_csv_written_without_a_server_gives_the_hand_worked_figures(scenario_csv: Path) -> None:
    chat = usage_report(scenario_csv, WINDOW).models[CHAT_MODEL]
    assert (chat.calls, chat.peak_inflight_tokens, chat.peak_inflight_tokens_without_runaways, chat.runaway_count) == (
        9, 272000, 15000, 2)


def test_broken_csv_lines_and_cells_are_counted_not_fatal(scenario_csv: Path) -> None:
    with scenario_csv.open(newline="", encoding="utf-8") as stream:
        header, *rows = list(csv.reader(stream))
    bad_time = dict(zip(header, rows[1])) | {"request_id": "bad-time", "startTime": "yesterday"}
    bad_tokens = dict(zip(header, rows[2])) | {"request_id": "bad-tokens", "prompt_tokens": "lots"}
    with scenario_csv.open("a", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerows([[row[name] for name in header] for row in (bad_time, bad_tokens)])
        stream.write("just,three,fields\n")
    report = usage_report(scenario_csv, WINDOW)
    assert report.rejected_by_reason == {"end_before_start": 1, "missing_model": 1, "negative_tokens": 1,
                                         "unreadable_row": 1, "unreadable_timestamp": 1, "unreadable_tokens": 1}
    assert report.rejected_example_request_ids["unreadable_tokens"] == ["bad-tokens"]
    assert report.models[CHAT_MODEL].calls == 9


@pytest.mark.parametrize("written", ["yesterday", '""', "2026-13-45 25:00:00"])
def test_a_time_that_does_not_parse_is_one_rejected_row(scenario_csv: Path, written: str) -> None:
    """The fast read types the times as it parses them; one that does not parse (the only fault in the file)
    sends it through the careful read, where that row is rejected and the rest read as before."""
    reference = usage_report(scenario_csv, WINDOW)
    text = scenario_csv.read_text(encoding="utf-8")
    header, first, *rest = text.splitlines(keepends=True)
    names = header.strip().split(",")
    start, request_id = (next(csv.reader([first]))[names.index(name)] for name in ("startTime", "request_id"))
    scenario_csv.write_text(header + first.replace(start, written, 1) + "".join(rest),
                            encoding="utf-8")
    report = usage_report(scenario_csv, WINDOW)
    assert report.rejected_by_reason == reference.rejected_by_reason | {
        "unreadable_timestamp": reference.rejected_by_reason.get("unreadable_timestamp", 0) + 1}
    assert request_id in report.rejected_example_request_ids["unreadable_timestamp"]


def test_broken_metadata_json_reads_as_no_metadata(scenario_csv: Path) -> None:
    """The fast read trusts each JSON document; a broken one sends the file through the careful second read,
    where that row counts with its key named by its hash, as a row without metadata would."""
    reference = usage_report(scenario_csv, WINDOW)
    with scenario_csv.open(newline="", encoding="utf-8") as stream:
        header, *rows = list(csv.reader(stream))
    row_c = dict(zip(header, next(row for row in rows if row[header.index("request_id")] == "C")))
    broken = row_c | {"request_id": "broken-metadata", "metadata": '{"user_api_key_alias": "x"'}
    with scenario_csv.open("a", newline="", encoding="utf-8") as stream:
        csv.writer(stream, lineterminator="\n").writerow([broken[name] for name in header])
    report = usage_report(scenario_csv, WINDOW)
    assert report.rejected_by_reason == reference.rejected_by_reason
    added = {key.key_alias for key in report.keys} - {key.key_alias for key in reference.keys}
    assert added == {"key " + broken["api_key"][:12]}
    assert report.models[CHAT_MODEL].calls == reference.models[CHAT_MODEL].calls + 1


def test_jsonl_broken_and_blank_lines(scenario_csv: Path, tmp_path: Path) -> None:
    reference = figures(usage_report(scenario_csv, WINDOW))

    def api_line(call) -> str:
        row = spend_log_row(call)
        return json.dumps({name: value.isoformat() + "Z" if hasattr(value, "isoformat") else value for name, value in row.items()})

    jsonl = tmp_path / "spend.jsonl"
    jsonl.write_text("\n".join([api_line(call) for call in SCENARIO] + ["", "{not json", "[1, 2]", "  "]) + "\n", encoding="utf-8")
    report = usage_report(jsonl, WINDOW)
    assert report.rejected_by_reason.pop("unreadable_row") == 2
    assert report.rejected_example_request_ids.pop("unreadable_row") == [None, None]
    report.rejected_rows -= 2
    assert figures(report) == reference

    array = tmp_path / "spend_logs.json"
    array.write_text("[" + ",\n".join(api_line(call) for call in SCENARIO) + "]", encoding="utf-8")
    assert figures(usage_report(array, WINDOW)) == reference


def test_gzipped_csv_reads_the_same(scenario_csv: Path, tmp_path: Path) -> None:
    packed = tmp_path / "spend.csv.gz"
    with scenario_csv.open("rb") as plain, gzip.open(packed, "wb") as out:
        shutil.copyfileobj(plain, out)
    assert figures(usage_report(packed, WINDOW)) == figures(usage_report(scenario_csv, WINDOW))


def test_older_schema_without_status_and_tags(tmp_path: Path) -> None:
    older = write_csv(SCENARIO, tmp_path / "old.csv", drop_columns=("status", "request_tags", "cache_hit", "metadata"))
    report = usage_report(older, WINDOW)
    chat = report.models[CHAT_MODEL]
    assert (chat.calls, chat.errors, chat.cache_hits) == (9, None, None)
    assert chat.runaways[0].key_alias.startswith("key ")  # no alias without metadata: the key hash stands in
    assert chat.peak_inflight_tokens == 272000


def test_missing_required_column_names_the_file_and_column(tmp_path: Path) -> None:
    broken = write_csv(SCENARIO, tmp_path / "no_end.csv", drop_columns=("endTime",))
    with pytest.raises(SeatplanError, match="no column endTime") as raised:
        usage_report(broken)
    assert raised.value.where == f"{broken}:1"


def test_unknown_file_kind_and_missing_file(tmp_path: Path) -> None:
    odd = tmp_path / "spend.parquet"
    odd.write_bytes(b"PAR1")
    with pytest.raises(SeatplanError, match="cannot tell the format"):
        usage_report(odd)
    with pytest.raises(SeatplanError, match="no such file"):
        usage_report(tmp_path / "absent.csv")
