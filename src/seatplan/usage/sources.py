"""Where spend-log rows come from: LiteLLM's PostgreSQL database (``postgres.py``), or a CSV / JSON Lines
export read here by DuckDB.

Either source reads its rows once per report and hands them over as :class:`rows.SpendRows` (numbers per
row, strings once per distinct value); every figure is then computed the same way for both (``rows.py``,
``loads.py``), so a CSV export and the live table give the same report by construction.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from seatplan.documents.io import kind_said
from seatplan.errors import SeatplanError
from seatplan.fileio import check_input_file
from seatplan.secrets import dsn_password, redact_dsn
from seatplan.usage import csvscan
from seatplan.usage.api import API_TIMEOUT_S, GATEWAY_KEY_ENV, api_source
from seatplan.usage.csvscan import CsvScanner, Stopped
from seatplan.usage.queries import (
    CLIENT_COLUMNS,
    GROUP_COLUMNS,
    MODEL_COLUMNS,
    REQUIRED_COLUMNS,
    TIME_COLUMNS,
    SourceFormat,
    SourceShape,
    Window,
    missing_required,
    row_values_sql,
    spend_groups_sql,
    sql_string,
)
from seatplan.usage.rows import ClientFields, ModelFields, SpendLogSource, SpendRows, needed_rows, rows_by_key

DSN_ENVIRONMENT = ("SEATPLAN_USAGE_DSN", "DATABASE_URL")
DUCKDB_MEMORY_LIMIT = "1GB"
MAX_LINE_BYTES = 16 * 1024 * 1024
SOURCE_FIX = ("pass --from https://GATEWAY/ (LiteLLM's /spend/logs/v2), postgresql://USER@HOST/DB (LiteLLM's database), a CSV made with "
              "\\copy (SELECT * FROM \"LiteLLM_SpendLogs\") TO 'x.csv' CSV HEADER, or a JSON Lines / JSON export of /spend/logs")


def is_dsn(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


def resolve_source(source: str | None) -> str:
    """The spend-log source: ``--from`` (a file, or a DSN without a password), else the DSN in the environment."""
    if source:
        if source.startswith(("http://", "https://")):
            return source  # a gateway: its URL is checked where it is read (api.check_base_url)
        if dsn_password(source):
            raise SeatplanError(
                "a password in --from would land in shell history and in the process list",
                where=f"--from {redact_dsn(source)}",
                fix=f"put the whole DSN in ${DSN_ENVIRONMENT[0]}, or keep the password in $PGPASSWORD or ~/.pgpass "
                    "(libpq reads both) and pass --from without it",
            )
        return source
    for name in DSN_ENVIRONMENT:
        if os.environ.get(name):
            if not is_dsn(os.environ[name]):
                raise SeatplanError(f"${name} is not a postgresql:// URL: {redact_dsn(os.environ[name])}", where=f"${name}",
                                    fix="set it to postgresql://USER:PASSWORD@HOST:PORT/DATABASE (LiteLLM's DATABASE_URL)")
            return os.environ[name]
    raise SeatplanError(
        "no spend logs given",
        where="--from",
        fix=f"pass --from with a DSN or a file, or set {' or '.join(DSN_ENVIRONMENT)} to LiteLLM's database URL",
    )


@contextmanager
def open_source(source: str, request_id_from_tokens: int | None = None, fast_csv: bool = True,
                key_env: str = GATEWAY_KEY_ENV, key_file: Path | None = None, timeout_s: float = API_TIMEOUT_S) -> Iterator[SpendLogSource]:
    """``request_id_from_tokens``: the lowest any runaway threshold can be; a file keeps other rows' ids only
    where they are rejected (see :func:`queries.spend_groups_sql`). ``fast_csv``: try the compiled reader of
    plain CSV exports first (``csvscan.py``); False reads every file with DuckDB. ``key_env`` / ``key_file``:
    where the key of an ``http(s)://`` gateway is (``api.py``); ``timeout_s``: each request to it, connect to last byte."""
    if source.startswith(("http://", "https://")):
        # the fetched rows are a JSON Lines export, read by DuckDB like any other
        with api_source(source, key_env, key_file, request_id_from_tokens, lambda path, ids: _file_source(path, ids, False),
                        timeout_s) as fetched:
            yield fetched
    elif is_dsn(source):
        # psycopg takes 0.1-0.2 s to load, a fifth of reading a CSV export: only a database source needs it.
        from seatplan.usage.postgres import postgres_source  # noqa: PLC0415

        with postgres_source(source, redact_dsn(source)) as opened:
            yield opened
    else:
        with _file_source(Path(source), request_id_from_tokens, fast_csv) as opened:
            yield opened


# ----------------------------------------------------------------------------------------- files


class DuckDBFileSource:
    """A CSV or JSON Lines export, read in one DuckDB pass per scan.

    The pass groups the rows by their strings (model fields, client fields, and the request id of a row
    that may need naming) and keeps each group's numbers as lists, so the strings of ten million rows
    are never held, and the numbers come back as plain arrays (:class:`SpendRows`).
    """

    def __init__(self, connection: Any, path: Path, source_format: SourceFormat, columns: list[str],
                 request_id_from_tokens: int | None, workdir: Path, scanner: CsvScanner | None = None) -> None:
        self.connection = connection
        self.path = path
        self.description = str(path)
        self.source_format = source_format
        self.columns = columns
        self.request_id_from_tokens = request_id_from_tokens
        self.workdir = workdir
        self.scanner = scanner
        self.reader = "duckdb"  # or "fast": which reader read the file (see csvscan.py)
        self.fast_reader_stopped: Stopped | None = None
        self._group_of_row: Any = None
        self._group_request_ids: list[str | None] = []
        self._line_offset: Any = None

    def read(self, window: Window) -> SpendRows:
        if self.scanner is not None:
            try:
                return self._read_scanned(window)
            except Stopped as stopped:
                self.fast_reader_stopped = stopped
        self.reader = "duckdb"
        try:
            return self._read_groups(window, careful=False)
        except (duckdb.InvalidInputException, duckdb.ConversionException):
            # Lines that do not split into the header's columns, a time that does not parse, or a broken
            # JSON document: read again, counting such lines, such times as unreadable and such documents
            # as empty instead.
            return self._read_groups(window, careful=True)

    def request_ids(self, positions: Any) -> list[str | None]:
        if self.reader == "fast":
            try:
                return [request_id for (request_id,) in self._line_values(self._line_offset[positions], ("request_id",))]
            except Stopped as stopped:
                raise SeatplanError(f"cannot read request ids back: {stopped}", where=str(self.path),
                                    fix="check that the file did not change while it was read, and run again") from None
        return [self._group_request_ids[group] for group in self._group_of_row[positions].tolist()]

    def _read_scanned(self, window: Window) -> SpendRows:
        """The fast reader's numbers and hashes; what each hash means is read by DuckDB from one of its lines."""
        assert self.scanner is not None
        scanned = self.scanner.scan()
        numbers = [scanned.start_us, scanned.end_us, scanned.prompt_tokens, scanned.completion_tokens,
                   scanned.key, scanned.line_offset]
        needed = needed_rows(scanned.start_us, scanned.end_us, window)
        if needed is not None:
            numbers = [values[needed] for values in numbers]
        del scanned
        start_us, end_us, prompt_tokens, completion_tokens, key, self._line_offset = numbers
        self.reader = "fast"
        return rows_by_key(start_us, end_us, prompt_tokens, completion_tokens, key, lambda picked: self._line_values(
            self._line_offset[picked], (*MODEL_COLUMNS, *CLIENT_COLUMNS)))

    def _line_values(self, offsets: Any, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
        """The named columns of the lines at these offsets, as the DuckDB read of the whole file gives them:
        the lines, under the file's header, are a small CSV of their own. Raises Stopped where DuckDB does
        not read them one for one (never seen: the reader takes only lines DuckDB reads)."""
        assert self.scanner is not None
        lines_path = self.workdir / "lines.csv"
        with lines_path.open("wb") as stream:
            stream.write(self.scanner.header())
            stream.writelines(self.scanner.lines(offsets))
        # Times as text, typed by TRY_CAST as the careful read does: an empty quoted time (a rejected row)
        # must not fail the lookup. The fast reader took only lines whose every other cell DuckDB reads.
        shape = SourceShape("csv", _csv_from_clause(lines_path, self.columns, careful=False, typed_times=False),
                            frozenset(self.columns), check_json=False, typed_times=False)
        self.connection.execute("SET preserve_insertion_order = true")
        try:
            values = self.connection.execute(row_values_sql(shape, names)).fetchall()
        except duckdb.Error as problem:
            raise Stopped(f"DuckDB cannot read these lines: {str(problem).splitlines()[0]}", int(offsets[0])) from None
        finally:
            self.connection.execute("SET preserve_insertion_order = false")
        if len(values) != len(offsets):
            raise Stopped(f"DuckDB read {len(values)} rows from {len(offsets)} lines", int(offsets[0]) if len(offsets) else 0)
        return values

    def _read_groups(self, window: Window, *, careful: bool) -> SpendRows:
        if self.source_format == "csv":
            from_clause = _csv_from_clause(self.path, self.columns, careful)
        else:
            from_clause = _json_lines_from_clause(self.path, careful)
        # The careful second read also checks each JSON document before reading it, and reads times as text.
        shape = SourceShape(self.source_format, from_clause, frozenset(self.columns), check_json=careful,
                            typed_times=self.source_format == "csv" and not careful)
        try:
            self.connection.execute(f"CREATE OR REPLACE TEMP TABLE spend_groups AS {spend_groups_sql(shape, window, self.request_id_from_tokens)}")
            # Read back in table order, one column at a time: the lists' elements line up across columns.
            self.connection.execute("SET preserve_insertion_order = true")
            groups = self.connection.execute(
                f"SELECT {', '.join(GROUP_COLUMNS)}, len(start_us) FROM spend_groups ORDER BY rowid").fetchall()
            numbers = {name: self.connection.execute(f"SELECT unnest({name}) AS value FROM spend_groups").fetchnumpy()["value"]
                       for name in ("start_us", "end_us", "prompt_tokens", "completion_tokens")}
            self.connection.execute("SET preserve_insertion_order = false")
            self.connection.execute("DROP TABLE spend_groups")
        except (duckdb.InvalidInputException, duckdb.ConversionException):
            if careful:
                raise SeatplanError("DuckDB cannot read the file even line by line", where=str(self.path), fix=SOURCE_FIX) from None
            raise
        except duckdb.Error as problem:
            raise SeatplanError(f"cannot read the file: {str(problem).splitlines()[0]}", where=str(self.path), fix=SOURCE_FIX) from None
        models: dict[ModelFields, int] = {}
        clients: dict[ClientFields, int] = {}
        model_of_group = np.zeros(len(groups), dtype=np.int32)
        client_of_group = np.zeros(len(groups), dtype=np.int32)
        request_ids: list[str | None] = []
        for group, (model, model_group, failed, cache_hit, readable, *client, request_id, _) in enumerate(groups):
            model_of_group[group] = models.setdefault(ModelFields(model, model_group, failed, cache_hit, bool(readable)), len(models))
            client_of_group[group] = clients.setdefault(ClientFields(*client), len(clients))
            request_ids.append(request_id)
        group_of_row = np.repeat(np.arange(len(groups), dtype=np.int32), [size for *_, size in groups])
        self._group_of_row, self._group_request_ids = group_of_row, request_ids
        return SpendRows(
            start_us=np.asarray(numbers["start_us"], dtype=np.int64), end_us=np.asarray(numbers["end_us"], dtype=np.int64),
            prompt_tokens=np.asarray(numbers["prompt_tokens"], dtype=np.int64),
            completion_tokens=np.asarray(numbers["completion_tokens"], dtype=np.int64),
            model_index=model_of_group[group_of_row], client_index=client_of_group[group_of_row],
            models=list(models), clients=list(clients),
        )

    def reader_note(self) -> str:
        if self.reader == "fast":
            return "seatplan's compiled CSV reader"
        stopped = self.fast_reader_stopped
        if stopped is not None:
            return f"DuckDB, as the compiled CSV reader stopped at the line at byte {stopped.line_offset}: {stopped.reason}"
        if self.source_format == "csv" and not csvscan.available():
            return f"DuckDB (seatplan's compiled CSV reader is {csvscan.unavailable_reason() or 'not installed'})"
        return "DuckDB"

    def unreadable_lines(self) -> int:
        """CSV lines DuckDB could not split into the header's columns (it keeps them in ``reject_errors``)."""
        if self.reader == "fast":
            return 0  # the fast reader takes a file only where every line splits
        try:
            return self.connection.execute("SELECT count(DISTINCT line) FROM reject_errors").fetchone()[0]
        except duckdb.CatalogException:
            return 0


def detect_file_format(path: Path) -> SourceFormat:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    raise SeatplanError(f"cannot tell the format of {path.name}", where=str(path), fix="name the file *.csv, *.jsonl or *.json")


def _open_text(path: Path) -> Any:
    check_input_file(path, "spend-log export")
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return path.open(encoding="utf-8", errors="replace", newline="")


def _first_character(path: Path) -> str:
    with _open_text(path) as stream:
        while chunk := stream.read(4096):
            if chunk.strip():
                return chunk.strip()[0]
    return ""


def _rejects_option(keep_rejects: bool) -> str:
    # DuckDB's reject store costs over a second per file, so it is only switched on for a file that needs it.
    return ", ignore_errors = true, store_rejects = true" if keep_rejects else ""


def _csv_from_clause(path: Path, columns: list[str], careful: bool, typed_times: bool | None = None) -> str:
    # The fast read types the two times as the reader parses them, a third of the cost of casting text
    # later; one cell that does not parse fails it, and the careful read takes text in, typed by TRY_CAST
    # later, so a bad cell becomes a rejected row instead of a failed run.
    # PostgreSQL's CSV dialect, stated rather than sniffed: a few odd lines must not change how the rest read.
    typed_times = not careful if typed_times is None else typed_times
    typed = {name: "TIMESTAMPTZ" for name in TIME_COLUMNS} if typed_times else {}
    column_types = "{" + ", ".join(f"{sql_string(name)}: '{typed.get(name, 'VARCHAR')}'" for name in columns) + "}"
    return (f"read_csv({sql_string(str(path))}, header = true, auto_detect = false, columns = {column_types}, "
            f"delim = ',', quote = '\"', escape = '\"', allow_quoted_nulls = false, "
            f"max_line_size = {MAX_LINE_BYTES}{_rejects_option(careful)})")


def _json_lines_from_clause(path: Path, keep_rejects: bool) -> str:
    if _first_character(path) == "[":
        # GET /spend/logs answers one JSON array; each element is one row.
        return f"(SELECT CAST(json AS VARCHAR) AS line FROM read_json_objects({sql_string(str(path))}, format = 'array')) AS jsonl"
    # One row per line, parsed later, so a broken line is counted rather than failing the whole file.
    return (f"(SELECT line FROM read_csv({sql_string(str(path))}, columns = {{'line': 'VARCHAR'}}, header = false, "
            f"delim = e'\\x1e', quote = '', escape = '', auto_detect = false, max_line_size = {MAX_LINE_BYTES}"
            f"{_rejects_option(keep_rejects)}) WHERE trim(line) <> '') AS jsonl")


@contextmanager
def _file_source(path: Path, request_id_from_tokens: int | None, fast_csv: bool) -> Iterator[DuckDBFileSource]:
    if path.is_dir():
        raise SeatplanError("is a folder, not a spend-log export", where=str(path), fix=SOURCE_FIX)
    check_input_file(path, "spend-log export")
    if not path.is_file():
        raise SeatplanError("no such file" if not path.exists() else "not a regular file", where=str(path), fix=SOURCE_FIX)
    source_format = detect_file_format(path)
    workdir = Path(tempfile.mkdtemp(prefix="seatplan-usage-"))
    connection = duckdb.connect()
    try:
        connection.execute("SET TimeZone = 'UTC'")
        connection.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        connection.execute(f"SET temp_directory = {sql_string(str(workdir / 'spill'))}")
        connection.execute("SET preserve_insertion_order = false")
        connection.execute("SET enable_progress_bar = false")
        columns = _csv_header(path) if source_format == "csv" else []
        scanner = csvscan.open_scanner(path, columns) if source_format == "csv" and fast_csv else None
        try:
            yield DuckDBFileSource(connection, path, source_format, columns, request_id_from_tokens, workdir, scanner)
        finally:
            if scanner is not None:
                scanner.close()
    finally:
        connection.close()
        shutil.rmtree(workdir, ignore_errors=True)


RECORDS_LOOKED_AT = 1000


def require_records(source: str) -> None:
    """Refuse a file with no spend-log record at all (a header alone, nothing, or JSON of other keys).

    An empty window of a real export is a report with no calls; a file with nothing to read is a mistake
    (the wrong file, an export that failed), and must not pass for a quiet week. A DSN or a missing file is
    left to :func:`open_source`.
    """
    path = Path(source)
    if is_dsn(source) or not path.is_file():
        return
    source_format = detect_file_format(path)
    _refuse_empty_or_seatplan_document(path)
    if source_format == "csv":
        _csv_header(path)
    with _open_text(path) as stream:
        if source_format == "csv":
            rows = csv.reader(stream)
            next(rows, None)
            if not any(any(cell.strip() for cell in row) for row in itertools.islice(rows, 1)):
                raise SeatplanError("the CSV has a header but no rows", where=str(path), fix=SOURCE_FIX)
            return
        keys_seen: set[str] = set()
        for line in itertools.islice((line for line in stream if line.strip()), RECORDS_LOOKED_AT):
            if line.lstrip().startswith("["):
                if line.strip().replace(" ", "") in ("[]", "[]\n"):
                    break
                return  # one JSON array: DuckDB reads its elements
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a broken line is counted as an unreadable row later
            if isinstance(record, dict):
                if not missing_required(record.keys()):
                    return
                keys_seen.update(record.keys())
    found = f"records with keys {', '.join(sorted(keys_seen)[:8])}" if keys_seen else "no JSON record"
    raise SeatplanError(f"no LiteLLM spend-log record in the first {RECORDS_LOOKED_AT} lines ({found})", where=str(path),
                        fix="expected one JSON object per line with " + ", ".join(REQUIRED_COLUMNS) + "; " + SOURCE_FIX)


_SEATPLAN_KIND = re.compile(r'^\{\s*"kind"\s*:\s*"(seatplan\.[a-z]+)"')


def _refuse_empty_or_seatplan_document(path: Path) -> None:
    """An empty file, or a document seatplan wrote (usage.json given back to --from): named for what it is."""
    with _open_text(path) as stream:
        start = stream.read(4096)
    if not start.strip():
        raise SeatplanError("the file is empty", where=str(path), fix=SOURCE_FIX)
    written = _SEATPLAN_KIND.match(start.lstrip())
    if written:
        raise SeatplanError(f"this is {kind_said(written.group(1))}, not a spend-log export", where=str(path), fix=SOURCE_FIX)


def _csv_header(path: Path) -> list[str]:
    """The header row, read here rather than sniffed by DuckDB, which gives up on a file with odd lines."""
    try:
        with _open_text(path) as stream:
            header = next(csv.reader(stream), [])
    except (OSError, UnicodeDecodeError, csv.Error) as problem:
        raise SeatplanError(f"cannot read the CSV header: {problem}", where=f"{path}:1", fix=SOURCE_FIX) from None
    missing = missing_required(header)
    if missing:
        raise SeatplanError(
            f"the CSV has no column {', '.join(missing)}",
            where=f"{path}:1",
            fix="export every column of \"LiteLLM_SpendLogs\" with its header (SELECT * ... CSV HEADER)",
        )
    return header
