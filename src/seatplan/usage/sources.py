"""Where spend-log rows come from: LiteLLM's PostgreSQL database, or a CSV / JSON Lines export read by DuckDB.

Both sources answer the same SQL (``queries.py``). PostgreSQL runs every figure query itself in a
read-only session, so only small results (histograms, per-seat peaks, runaway rows through a server-side
cursor) cross the wire. A file is parsed once by DuckDB into a compressed on-disk table in a temporary
directory, so a file of tens of millions of rows is neither parsed again per figure nor held in memory.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from seatplan.errors import SeatplanError
from seatplan.usage.queries import (
    FigureQuery,
    SourceFormat,
    SourceShape,
    missing_required,
    normalized_rows_sql,
    quote_identifier,
    sql_string,
    statement,
)

DSN_ENVIRONMENT = ("SEATPLAN_USAGE_DSN", "DATABASE_URL")
SPEND_LOGS_TABLE = "LiteLLM_SpendLogs"
STREAM_BATCH_ROWS = 10_000
DUCKDB_MEMORY_LIMIT = "1GB"
MAX_LINE_BYTES = 16 * 1024 * 1024
SOURCE_FIX = ("pass --from postgresql://USER@HOST/DB (LiteLLM's database), a CSV made with "
              "\\copy (SELECT * FROM \"LiteLLM_SpendLogs\") TO 'x.csv' CSV HEADER, or a JSON Lines / JSON export of /spend/logs")


class SpendLogSource(Protocol):
    source_format: SourceFormat
    description: str

    def fetch_all(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> list[tuple[Any, ...]]: ...

    def stream(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> Iterator[tuple[Any, ...]]: ...

    def unreadable_lines(self) -> int: ...


def is_dsn(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


def redact_dsn(dsn: str) -> str:
    """The DSN as it may be printed: the password (in the URL or as a parameter) replaced by ***."""
    hidden = re.sub(r"^(\w+://[^:/@?]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password=)[^&\s]*", r"\1***", hidden)


def resolve_source(source: str | None) -> str:
    if source:
        return source
    for name in DSN_ENVIRONMENT:
        if os.environ.get(name):
            return os.environ[name]
    raise SeatplanError(
        "no spend logs given",
        where="--from",
        fix=f"pass --from with a DSN or a file, or set {' or '.join(DSN_ENVIRONMENT)} to LiteLLM's database URL",
    )


@contextmanager
def open_source(source: str, seat_by_name: Mapping[str, str], request_id_from_tokens: int | None = None) -> Iterator[SpendLogSource]:
    """``request_id_from_tokens``: see :func:`normalized_rows_sql`; a file's rows are loaded without the other ids."""
    if is_dsn(source):
        with _postgres_source(source, seat_by_name) as opened:
            yield opened
    else:
        with _file_source(Path(source), seat_by_name, request_id_from_tokens) as opened:
            yield opened


# ----------------------------------------------------------------------------------------- PostgreSQL


class PostgresSource:
    source_format: SourceFormat = "postgresql"

    def __init__(self, connection: Any, dsn: str, rows_sql: str) -> None:
        self.connection = connection
        self.description = redact_dsn(dsn)
        self.rows_sql = rows_sql

    def fetch_all(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> list[tuple[Any, ...]]:
        with self._errors(), self._planned(query), self.connection.cursor() as cursor:
            cursor.execute(statement(self.rows_sql, query, thresholds))
            return cursor.fetchall()

    def stream(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> Iterator[tuple[Any, ...]]:
        # A named cursor lives on the server: rows arrive STREAM_BATCH_ROWS at a time, never all at once.
        with self._errors(), self._planned(query), self.connection.cursor(name="seatplan_usage_stream") as cursor:
            cursor.itersize = STREAM_BATCH_ROWS
            cursor.execute(statement(self.rows_sql, query, thresholds))
            yield from cursor

    @contextmanager
    def _planned(self, query: FigureQuery) -> Iterator[None]:
        if not query.prefer_hashing:
            yield
            return
        from psycopg.pq import TransactionStatus

        self.connection.execute("SET enable_sort = off")
        try:
            yield
        finally:
            # After a failed query the transaction refuses every command; the error itself must surface.
            if self.connection.info.transaction_status != TransactionStatus.INERROR:
                self.connection.execute("RESET enable_sort")

    def unreadable_lines(self) -> int:
        return 0

    @contextmanager
    def _errors(self) -> Iterator[None]:
        import psycopg

        try:
            yield
        except psycopg.Error as problem:
            raise SeatplanError(
                f"PostgreSQL refused the usage query: {str(problem).strip().splitlines()[0]}",
                where=self.description,
                fix="check that the DSN points at LiteLLM's database and the role may SELECT from \"LiteLLM_SpendLogs\"",
            ) from None


@contextmanager
def _postgres_source(dsn: str, seat_by_name: Mapping[str, str]) -> Iterator[PostgresSource]:
    import psycopg

    try:
        connection = psycopg.connect(dsn, connect_timeout=10, application_name="seatplan-usage")
    except psycopg.Error as problem:
        raise SeatplanError(
            f"cannot connect to PostgreSQL: {str(problem).strip().splitlines()[-1] if str(problem).strip() else problem}",
            where=redact_dsn(dsn),
            fix="check host, port, user, password and database in the DSN (the role needs only SELECT)",
        ) from None
    try:
        connection.read_only = True
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = on")
            # The in-flight sweep sorts every start and end; enough memory keeps that sort off disk.
            cursor.execute("SET work_mem = '256MB'")
            # Compiling these one-off queries costs more than it saves.
            cursor.execute("SET jit = off")
            columns = _postgres_columns(cursor, dsn)
        shape = SourceShape("postgresql", quote_identifier(SPEND_LOGS_TABLE), frozenset(columns))
        yield PostgresSource(connection, dsn, normalized_rows_sql(shape, seat_by_name))
    finally:
        connection.close()


def _postgres_columns(cursor: Any, dsn: str) -> list[str]:
    cursor.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = ANY (current_schemas(false))",
        (SPEND_LOGS_TABLE,),
    )
    columns = [row[0] for row in cursor.fetchall()]
    if not columns:
        raise SeatplanError(
            f'no "{SPEND_LOGS_TABLE}" table in this database',
            where=redact_dsn(dsn),
            fix="point the DSN at the database LiteLLM's proxy writes to (its DATABASE_URL)",
        )
    missing = missing_required(columns)
    if missing:
        raise SeatplanError(
            f'"{SPEND_LOGS_TABLE}" has no column {", ".join(missing)}',
            where=redact_dsn(dsn),
            fix="this does not look like LiteLLM's spend-log table; check the database",
        )
    return columns


# ----------------------------------------------------------------------------------------- files


class DuckDBFileSource:
    def __init__(self, connection: Any, path: Path, source_format: SourceFormat) -> None:
        self.connection = connection
        self.description = str(path)
        self.source_format = source_format
        self.rows_sql = "SELECT * FROM usage_rows"

    def fetch_all(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> list[tuple[Any, ...]]:
        return self.connection.execute(statement(self.rows_sql, query, thresholds)).fetchall()

    def stream(self, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> Iterator[tuple[Any, ...]]:
        result = self.connection.execute(statement(self.rows_sql, query, thresholds))
        while batch := result.fetchmany(STREAM_BATCH_ROWS):
            yield from batch

    def unreadable_lines(self) -> int:
        """CSV lines DuckDB could not split into the header's columns (it keeps them in ``reject_errors``)."""
        import duckdb

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
    import gzip

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


def _csv_from_clause(path: Path, columns: list[str], keep_rejects: bool) -> str:
    # Text in, typed by TRY_CAST later: a bad cell becomes a rejected row instead of a failed run.
    # PostgreSQL's CSV dialect, stated rather than sniffed: a few odd lines must not change how the rest read.
    column_types = "{" + ", ".join(f"{sql_string(name)}: 'VARCHAR'" for name in columns) + "}"
    return (f"read_csv({sql_string(str(path))}, header = true, auto_detect = false, columns = {column_types}, "
            f"delim = ',', quote = '\"', escape = '\"', allow_quoted_nulls = false, "
            f"max_line_size = {MAX_LINE_BYTES}{_rejects_option(keep_rejects)})")


def _json_lines_from_clause(path: Path, keep_rejects: bool) -> str:
    if _first_character(path) == "[":
        # GET /spend/logs answers one JSON array; each element is one row.
        return f"(SELECT CAST(json AS VARCHAR) AS line FROM read_json_objects({sql_string(str(path))}, format = 'array')) AS jsonl"
    # One row per line, parsed later, so a broken line is counted rather than failing the whole file.
    return (f"(SELECT line FROM read_csv({sql_string(str(path))}, columns = {{'line': 'VARCHAR'}}, header = false, "
            f"delim = e'\\x1e', quote = '', escape = '', auto_detect = false, max_line_size = {MAX_LINE_BYTES}, "
            f"{_rejects_option(keep_rejects)}) WHERE trim(line) <> '') AS jsonl")


@contextmanager
def _file_source(path: Path, seat_by_name: Mapping[str, str], request_id_from_tokens: int | None) -> Iterator[DuckDBFileSource]:
    import duckdb

    if not path.is_file():
        raise SeatplanError("no such file", where=str(path), fix=SOURCE_FIX)
    source_format = detect_file_format(path)
    workdir = Path(tempfile.mkdtemp(prefix="seatplan-usage-"))
    connection = duckdb.connect(str(workdir / "usage.duckdb"))
    try:
        connection.execute("SET TimeZone = 'UTC'")
        connection.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
        connection.execute(f"SET temp_directory = {sql_string(str(workdir / 'spill'))}")
        connection.execute("SET preserve_insertion_order = false")
        connection.execute("SET enable_progress_bar = false")
        columns = _csv_header(path) if source_format == "csv" else []
        try:
            _load_rows(connection, path, source_format, columns, seat_by_name, request_id_from_tokens, keep_rejects=False)
        except duckdb.InvalidInputException:
            # Lines that do not split into the header's columns: read again, counting them instead.
            _load_rows(connection, path, source_format, columns, seat_by_name, request_id_from_tokens, keep_rejects=True)
        yield DuckDBFileSource(connection, path, source_format)
    finally:
        connection.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _load_rows(connection: Any, path: Path, source_format: SourceFormat, columns: list[str],
               seat_by_name: Mapping[str, str], request_id_from_tokens: int | None, *, keep_rejects: bool) -> None:
    import duckdb

    if source_format == "csv":
        from_clause = _csv_from_clause(path, columns, keep_rejects)
    else:
        from_clause = _json_lines_from_clause(path, keep_rejects)
    shape = SourceShape(source_format, from_clause, frozenset(columns))
    try:
        connection.execute(f"CREATE OR REPLACE TABLE usage_rows AS {normalized_rows_sql(shape, seat_by_name, request_id_from_tokens)}")
    except duckdb.InvalidInputException:
        if keep_rejects:
            raise SeatplanError("DuckDB cannot read the file even line by line", where=str(path), fix=SOURCE_FIX) from None
        raise
    except duckdb.Error as problem:
        raise SeatplanError(f"cannot read the file: {str(problem).splitlines()[0]}", where=str(path), fix=SOURCE_FIX) from None


def _csv_header(path: Path) -> list[str]:
    """The header row, read here rather than sniffed by DuckDB, which gives up on a file with odd lines."""
    import csv

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
