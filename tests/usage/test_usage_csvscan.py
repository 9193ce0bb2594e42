"""The compiled reader of plain CSV exports (``csvscan.py``, ``_csvscan.c``) held to DuckDB's reading.

DuckDB defines what a file means; the fast reader must give the very same report wherever it takes a
file, and hand anything it does not take to DuckDB. The files here are written the way PostgreSQL's
``COPY ... CSV HEADER`` writes them, with hostile text in every field the report reads, and lines that
break the dialect written byte by byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kits.parts import require
from kits.spend_scenario import SCENARIO, write_csv
from kits.usage import figures, usage_report
from seatplan.usage import csvscan
from seatplan.usage.queries import CLIENT_COLUMNS, METADATA_KEYS, MODEL_COLUMNS, SourceShape, Window, normalized_columns
from seatplan.usage.rows import MISSING
from seatplan.usage.seat_map import SeatMap
from seatplan.usage.sources import DuckDBFileSource, _csv_from_clause, _csv_header, open_source
from seatplan.usage.summary import collect_usage
from seatplan.usage.sweep import default_runaway_rule, lowest_runaway_threshold_tokens

COLUMNS = ("request_id", "api_key", "prompt_tokens", "completion_tokens", "startTime", "endTime", "model", "model_group",
           "user", "metadata", "cache_hit", "request_tags", "team_id", "requester_ip_address", "messages", "status")
RULE = default_runaway_rule(None)


@pytest.fixture(autouse=True)
def compiled_reader() -> None:
    """The install builds the reader wherever a C compiler is (the test set-up installs one): without it
    every CSV is read by DuckDB, and these tests skip on a developer machine and fail under CI."""
    require(csvscan.available(), "seatplan's compiled CSV reader (a C compiler when pip installs seatplan)")


def csv_field(value: str | None) -> str:
    """PostgreSQL's CSV text for one value: NULL empty, an empty string quoted, quotes where needed."""
    if value is None:
        return ""
    if value == "" or any(character in value for character in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def write_rows(path: Path, rows: list[dict[str, str | None]], columns: tuple[str, ...] = COLUMNS) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(",".join(columns) + "\n")
        for row in rows:
            out.write(",".join(csv_field(row.get(name)) for name in columns) + "\n")
    return path


@contextmanager
def scanner_of(path: Path) -> Iterator[csvscan.CsvScanner]:
    scanner = csvscan.open_scanner(path, _csv_header(path))
    assert scanner is not None
    try:
        yield scanner
    finally:
        scanner.close()


def report_and_reader(path: Path, fast: bool, window: Window = Window()) -> tuple[dict, str]:
    with open_source(str(path), lowest_runaway_threshold_tokens(RULE, []), fast_csv=fast) as source:
        report = collect_usage(source, window, SeatMap(), RULE)
        return figures(report), source.reader


def assert_same_as_duckdb(path: Path, window: Window = Window()) -> str:
    fast, reader = report_and_reader(path, True, window)
    slow, slow_reader = report_and_reader(path, False, window)
    assert slow_reader == "duckdb"
    assert fast == slow
    return reader


# ------------------------------------------------------------------------------------------ values

texts = st.text(alphabet=st.sampled_from('ab,"\n\r\\{}[]: é€😀\t'), max_size=8)
names = st.one_of(st.none(), st.just(""), st.sampled_from(["qwen3-8b", "Qwen/Qwen3-8B", "a,b", 'say "hi"', "é"]), texts)
plain_times = st.one_of(st.none(), st.just(""), st.builds(
    lambda second, fraction, zone, separator: f"2026-11-2{second % 3} 1{second % 4}:0{second % 7}:{second % 60:02d}{fraction}{zone}".replace(" ", separator, 1),
    st.integers(0, 10_000), st.sampled_from(["", ".5", ".123", ".123456"]),
    st.sampled_from(["", "Z", "+00", "+01", "-03:30", "+05:45"]), st.sampled_from([" ", "T"])))
times = st.one_of(plain_times, st.sampled_from([
    "yesterday", "2026-02-30 00:00:00", "2026-11-22 24:00:00", "2026-11-22 16:31:33.1234567", "2026-11-22",
    " 2026-11-22 10:00:00", "2026-11-22 10:00:00+0100"]))
plain_counts = st.one_of(st.none(), st.just(""), st.integers(-5, 300_000).map(str))
counts = st.one_of(plain_counts, st.sampled_from(["12.0", " 5", "+5", "1e3", "99999999999999999999", "-", "007"]))
# PostgreSQL's jsonb writes numbers without exponents; Python's 1e-05 has one (two digits are taken).
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(-1e50, 1e50).map(lambda x: round(x, 6)),
                    texts, st.sampled_from(["key-1", "team-a", "curl/8.5.0", "10.0.0.1"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from([*METADATA_KEYS, "other", "é"]), inner, max_size=3)),
    max_leaves=6)
metadata_objects = st.dictionaries(st.sampled_from([*METADATA_KEYS, "litellm_call_id", "usage_object", "spend_logs_metadata"]),
                                   json_values, max_size=7)
plain_metadata = st.one_of(st.none(), st.just("{}"), st.builds(
    lambda document, indent, ascii_only: json.dumps(document, indent=indent, ensure_ascii=ascii_only),
    metadata_objects, st.sampled_from([None, 1]), st.booleans()))
metadata = st.one_of(plain_metadata, st.just(""), st.sampled_from([
    '{"a": tru}', '{"user_api_key_alias": "x"',
    '{"user\\u005fapi_key_alias": "escaped"}', '{"user_api_key_alias": "\\ud83d"}', "[1, 2]", '"text"',
    '{"n": 1e400}', '{"n": 01}', '{"user_agent": "a"} x', '{"s": "tab\there"}']))
tags = st.one_of(st.none(), st.just(""), st.lists(texts, max_size=3).map(json.dumps), st.just("[]"))


def spend_rows(times: st.SearchStrategy, counts: st.SearchStrategy, metadata: st.SearchStrategy) -> st.SearchStrategy:
    return st.fixed_dictionaries({
        "request_id": texts, "api_key": st.sampled_from(["k" * 64, "0123456789abcdef" * 4, "", None]),
        "prompt_tokens": counts, "completion_tokens": counts, "startTime": times, "endTime": times, "model": names,
        "model_group": names, "user": names, "metadata": metadata,
        "cache_hit": st.sampled_from(["True", "False", "", None, "true"]), "request_tags": tags,
        "team_id": names, "requester_ip_address": names, "messages": st.one_of(st.none(), texts, st.just("{}")),
        "status": st.sampled_from(["success", "failure", "SUCCESS", "", None]),
    })


# Hostile text everywhere, in the forms PostgreSQL writes: the fast reader takes these.
plain_rows = spend_rows(plain_times, plain_counts, plain_metadata)
# Anything at all: most files with one of these go to DuckDB.
rows = spend_rows(times, counts, metadata)
windows = st.sampled_from([Window(), Window(since=datetime(2026, 11, 21, 12)), Window(until=datetime(2026, 11, 22, 13)),
                           Window(since=datetime(2026, 11, 21, 11), until=datetime(2026, 11, 22, 12, 30))])


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(plain_rows, min_size=1, max_size=12), st.lists(rows, max_size=2), st.randoms(use_true_random=False), windows)
def test_any_file_reads_to_duckdbs_report(tmp_path: Path, plain: list[dict], odd: list[dict], shuffle: Any,
                                          window: Window) -> None:
    """Whatever is in the fields, the report is DuckDB's: the fast reader reads to the same figures, or
    hands the file to DuckDB."""
    drawn = plain + odd
    shuffle.shuffle(drawn)
    event(assert_same_as_duckdb(write_rows(tmp_path / "drawn.csv", drawn), window))


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(plain_rows, min_size=1, max_size=12))
def test_a_file_as_postgresql_writes_it_is_read_fast(tmp_path: Path, drawn: list[dict[str, str | None]]) -> None:
    assert assert_same_as_duckdb(write_rows(tmp_path / "plain.csv", drawn)) == "fast"


def test_the_scenario_export_is_read_fast_to_the_same_report(tmp_path: Path) -> None:
    path = write_csv(SCENARIO, tmp_path / "spend.csv")
    assert assert_same_as_duckdb(path, Window(since=datetime(2026, 11, 23, 0, 10), until=datetime(2026, 11, 23, 9))) == "fast"
    assert usage_report(path).reader == "seatplan's compiled CSV reader"


# Few values per field: a file holds a row and copies of it that each differ in one field, so every two
# values of a field that DuckDB reads apart must hash apart.
POOLS = {
    "request_id": ["r", "s"], "api_key": ["k" * 64, "k" * 12 + "x" * 52, None, ""],
    "prompt_tokens": ["1", "", None, "-3"], "completion_tokens": ["2", "200000"],
    "startTime": ["2026-11-22 10:00:00", "2026-11-22T10:00:00Z", "2026-11-22 11:00:00+01", "2026-11-22 10:00:00.5",
                  "2026-11-22 08:30:00-01:30", "", None],
    "endTime": ["2026-11-22 10:00:01", "2026-11-22 10:00:01.000001", "2026-11-22 10:00:01+00:00", None],
    "model": ["m", "", None, "M", 'm"', "m,n"], "model_group": ["g", None, ""], "user": ["u", None, ""],
    "metadata": [None, "{}", '{"user_api_key_alias": "a"}', '{"user_api_key_alias":"a"}',
                 '{"user_api_key_alias": "\\u0061"}', '{"user_api_key_alias": null}', '{"user_api_key_alias": ""}',
                 '{"user_api_key_alias": 1}', '{"user_api_key_alias": "1"}', '{"x": {"user_api_key_alias": "a"}}',
                 '{"status": "failure"}', '{"status": "success"}',
                 '{"user_agent": "curl", "requester_ip_address": "1.2.3.4"}', '{"user_api_key_team_alias": "t"}',
                 '{"user_api_key_user_id": "u"}',
                 '{"user_api_key_alias": "b"}', '{"user_api_key_alias": "a", "x": [1, {"y": "z"}]}'],
    "cache_hit": ["True", "true", "False", None, ""], "request_tags": [None, "", "[]", '["a"]', '["a", "b"]', '[ "a" ]'],
    "team_id": ["t", None, ""], "requester_ip_address": ["1.2.3.4", None, ""], "messages": [None, "x", "{}"],
    "status": ["success", "failure", "SUCCESS", "", None],
}


@st.composite
def row_and_variants(draw: st.DrawFn) -> list[dict[str, str | None]]:
    """A drawn row, then for every field every value of its pool in place of the drawn one."""
    base = {name: draw(st.sampled_from(values)) for name, values in POOLS.items()}
    return [base] + [base | {name: value} for name, values in POOLS.items() for value in values]


def fast_read_lines(path: Path, names: tuple[str, ...]) -> tuple[csvscan.ScannedRows, list[tuple]] | None:
    """What the fast reader gives for each line, and DuckDB's reading of ``names`` of the same lines."""
    with open_source(str(path), fast_csv=True) as source:
        assert source.scanner is not None
        try:
            scanned = source.scanner.scan()
        except csvscan.Stopped as stopped:
            event(f"stopped: {stopped.reason}")
            return None
        return scanned, source._line_values(scanned.line_offset, names)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row_and_variants())
def test_rows_with_one_hash_read_alike(tmp_path: Path, drawn: list[dict[str, str | None]]) -> None:
    """The hash may split rows DuckDB reads alike (text written two ways), never join rows it reads apart:
    every field the report takes from a line, as DuckDB reads it, is the same for all lines of one hash."""

    read = fast_read_lines(write_rows(tmp_path / "pooled.csv", drawn), (*MODEL_COLUMNS, *CLIENT_COLUMNS))
    if read is None:
        return
    scanned, fields = read
    read_as: dict[int, tuple] = {}
    for key, values in zip(scanned.key.tolist(), fields):
        assert read_as.setdefault(key, values) == values


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(plain_rows, min_size=1, max_size=12))
def test_times_and_counts_read_as_duckdb_reads_them(tmp_path: Path, drawn: list[dict[str, str | None]]) -> None:
    """Each line's times (zones, fractions, T or space) and token counts (empty, quoted empty, negative) are
    what DuckDB's expressions of the DuckDB path make of the same cells."""


    path = write_rows(tmp_path / "numbers.csv", drawn)
    with scanner_of(path) as scanner:
        scanned = scanner.scan()
    shape = SourceShape("csv", _csv_from_clause(path, list(COLUMNS), careful=True), frozenset(COLUMNS), typed_times=False)
    columns = normalized_columns(shape)
    numbers = [f"epoch_us({columns['start_ts']})", f"epoch_us({columns['end_ts']})", columns["prompt_tokens"],
               columns["completion_tokens"]]
    # The raw cells are selected too: a column read only through a cast is cast by DuckDB's CSV reader
    # itself, which fails on a quoted empty cell instead of reading NULL.
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    values = connection.execute(f"SELECT {', '.join(numbers)}, prompt_tokens, completion_tokens FROM {shape.from_clause}").fetchall()
    expected = [tuple(MISSING if value is None else value for value in row[:4]) for row in values]
    got = list(zip(scanned.start_us.tolist(), scanned.end_us.tolist(), scanned.prompt_tokens.tolist(),
                   scanned.completion_tokens.tolist()))
    assert got == expected


LINE = 'r1,k,10,20,2026-11-22 10:00:00,2026-11-22 10:01:00,m,g,u,"{""user_api_key_alias"": ""a""}",False,[],t,1.2.3.4,{},success\n'


@pytest.mark.parametrize(("broken", "reason"), [
    (LINE.replace("success\n", "success,extra\n"), "a line whose fields do not match the header"),
    (LINE.replace(",success\n", "\n"), "a line whose fields do not match the header"),
    (LINE.replace(",m,", ',m"x,'), "a stray or unclosed quote"),
    (LINE.replace("success\n", '"success\n'), "a stray or unclosed quote"),
    (LINE.replace("\n", "\r\n"), "a stray or unclosed quote"),
    ("\n", "a line whose fields do not match the header"),
    (LINE.replace(",10,", ",10.0,"), "a token count not written as a plain integer"),
    (LINE.replace("10:01:00", "10:01"), "a time not written as PostgreSQL writes one"),
    (LINE.replace('""a""}', '""a"", }'), "metadata that is not a plain JSON object"),
    # Cases where DuckDB's JSON reader decides, not a byte comparison: all left to it.
    (LINE.replace('""user_api_key_alias""', '""user\\u005fapi_key_alias""'), "metadata that is not a plain JSON object"),
    (LINE.replace('""a""}', '""a"", ""user_api_key_alias"": ""b""}'), "metadata that is not a plain JSON object"),
    (LINE.replace('""a""}', '""\\ud83d""}'), "metadata that is not a plain JSON object"),
    (LINE.replace('""a""}', '""\\ude00""}'), "metadata that is not a plain JSON object"),
    (LINE.replace('""a""}', '""a"", ""n"": 1e400}'), "metadata that is not a plain JSON object"),
    (LINE.replace('""a""}', '""a"", ""n"": ' + "[" * 69 + "1" + "]" * 71 + "}"), "metadata that is not a plain JSON object"),
    (LINE.replace(",m,", ",m\udcff,"), "text that is not UTF-8"),
    (LINE.replace("r1,", "r\udcff,"), "text that is not UTF-8"),
])
def test_a_line_outside_the_dialect_stops_the_fast_reader_there(tmp_path: Path, broken: str, reason: str) -> None:
    path = tmp_path / "broken.csv"
    path.write_bytes((",".join(COLUMNS) + "\n" + LINE + broken + LINE).encode("utf-8", "surrogateescape"))
    with scanner_of(path) as scanner, pytest.raises(csvscan.Stopped) as stopped:
        scanner.scan()
    assert (stopped.value.reason, stopped.value.line_offset) == (reason, len(",".join(COLUMNS)) + 1 + len(LINE))


def test_a_file_the_fast_reader_stops_on_is_read_by_duckdb(tmp_path: Path) -> None:
    path = tmp_path / "broken.csv"
    path.write_text(",".join(COLUMNS) + "\n" + LINE + LINE.replace(",10,", ",10.0,") + LINE, encoding="utf-8")
    with open_source(str(path), fast_csv=True) as source:
        source.read(Window())
        assert source.reader == "duckdb"
        assert source.fast_reader_stopped.reason == "a token count not written as a plain integer"
    assert assert_same_as_duckdb(path) == "duckdb"
    report = usage_report(path)
    assert report.reader == (f"DuckDB, as the compiled CSV reader stopped at the line at byte {len(','.join(COLUMNS)) + 1 + len(LINE)}: "
                             "a token count not written as a plain integer")


@pytest.mark.parametrize(("text", "reader"), [
    (",".join(COLUMNS) + "\n", "fast"),  # a header and no rows
    (",".join(COLUMNS) + "\n" + LINE + LINE.rstrip("\n"), "fast"),  # no newline after the last line
    (",".join(COLUMNS), "duckdb"),  # not even the header's newline
])
def test_files_with_nothing_or_no_last_newline(tmp_path: Path, text: str, reader: str) -> None:
    path = tmp_path / "edge.csv"
    path.write_text(text, encoding="utf-8")
    assert assert_same_as_duckdb(path) == reader


def test_text_that_is_not_utf8_where_duckdb_does_not_read_is_read_fast(tmp_path: Path) -> None:
    """DuckDB checks only the columns it reads; so does the fast reader (``messages`` is not one)."""
    path = tmp_path / "latin1.csv"
    path.write_bytes((",".join(COLUMNS) + "\n" + LINE.replace(",{},", ",caf\udce9,")).encode("utf-8", "surrogateescape"))
    assert assert_same_as_duckdb(path) == "fast"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(rows.map(lambda row: row | {"messages": "line\n" * 3 + str(row["request_id"])}), min_size=1, max_size=40),
       st.integers(2, 8))
def test_parts_read_in_parallel_join_up_whatever_their_guessed_starts(tmp_path: Path, drawn: list[dict], parts: int) -> None:
    """A part starts after the first newline past its share of the bytes, which may sit inside a quoted
    field: the part before then ends elsewhere and the part is read again from there."""
    path = write_rows(tmp_path / "multiline.csv", drawn)
    with scanner_of(path) as scanner:
        try:
            whole = scanner.scan(parts=1)
        except csvscan.Stopped as stopped:
            with pytest.raises(csvscan.Stopped) as also:
                scanner.scan(parts=parts)
            assert (also.value.reason, also.value.line_offset) == (stopped.reason, stopped.line_offset)
            return
        split = scanner.scan(parts=parts)
    for name in ("start_us", "end_us", "prompt_tokens", "completion_tokens", "key", "line_offset"):
        np.testing.assert_array_equal(getattr(split, name), getattr(whole, name))
    assert len(whole.key) == len(drawn)


def test_without_the_compiled_reader_duckdb_reads_every_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_csv(SCENARIO, tmp_path / "spend.csv")
    monkeypatch.setattr(csvscan, "available", lambda: False)
    fast, reader = report_and_reader(path, True)
    assert reader == "duckdb"
    assert "not installed" in usage_report(path).reader
    assert fast == report_and_reader(path, False)[0]


def test_lines_duckdb_cannot_read_back_send_the_file_to_duckdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never seen (the reader takes only lines DuckDB reads), but if the lines of the distinct hashes did not
    read back one for one, the whole file is read by DuckDB rather than reported from half a reading."""

    path = write_csv(SCENARIO, tmp_path / "spend.csv")

    def refuse(self: DuckDBFileSource, offsets: Any, names: tuple[str, ...]) -> list[tuple]:
        raise csvscan.Stopped("DuckDB read 0 rows from 1 lines", int(offsets[0]))

    monkeypatch.setattr(DuckDBFileSource, "_line_values", refuse)
    fast, reader = report_and_reader(path, True)
    assert reader == "duckdb"
    assert fast == report_and_reader(path, False)[0]
