"""SQL that reads LiteLLM's ``LiteLLM_SpendLogs`` columns, written once for PostgreSQL and DuckDB.

:func:`normalized_columns` spells each column the report uses as an expression over the source (typed
columns in PostgreSQL, text in a CSV, JSON in JSON Lines):

    request_id, model_group, model, start_ts, end_ts, prompt_tokens, completion_tokens,
    failed, cache_hit, key_alias, team, user_id, user_agent, client_ip, tags_json, readable

Empty strings read as NULL; a key without an alias is named by the start of its hash. PostgreSQL packs
these per row (``postgres.row_columns_sql``); a file is grouped by them in one pass (:func:`spend_groups_sql`).
Nothing here does I/O; the values inlined into the SQL are datetimes and integers formatted here, and
names quoted by :func:`sql_string`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

SourceFormat = Literal["postgresql", "csv", "jsonl", "litellm-api"]

# Columns the figures need; every other LiteLLM column is ignored, and a missing optional one reads as NULL.
TIME_COLUMNS = ("startTime", "endTime")
REQUIRED_COLUMNS = ("request_id", *TIME_COLUMNS, "prompt_tokens", "completion_tokens", "model")
OPTIONAL_COLUMNS = ("model_group", "api_key", "user", "metadata", "cache_hit", "request_tags", "team_id",
                    "requester_ip_address", "status")

REJECT_REASONS = ("unreadable_row", "missing_model", "unreadable_timestamp", "unreadable_tokens",
                  "negative_tokens", "end_before_start")


def sql_string(text: str) -> str:
    """A SQL string literal; both databases read '' as one quote and backslashes literally."""
    return "'" + text.replace("'", "''") + "'"


def sql_timestamp(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Window:
    """Calls are counted when they start in [since, until); either bound may be open."""

    since: datetime | None = None
    until: datetime | None = None

    def contains(self, column: str) -> str:
        bounds = []
        if self.since is not None:
            bounds.append(f"{column} >= {sql_timestamp(self.since)}")
        if self.until is not None:
            bounds.append(f"{column} < {sql_timestamp(self.until)}")
        return " AND ".join(bounds) or "TRUE"

    def overlaps(self, start_column: str, end_column: str) -> str:
        """The request [start, end) shares at least one instant with the window."""
        bounds = [f"{end_column} > {start_column}"]
        if self.since is not None:
            bounds.append(f"{end_column} > {sql_timestamp(self.since)}")
        if self.until is not None:
            bounds.append(f"{start_column} < {sql_timestamp(self.until)}")
        return " AND ".join(bounds)

    def needs(self, start_column: str, end_column: str) -> str:
        """Rows a report can use: calls in the window, requests running in it, and rows without a readable
        start (counted if rejected). Everything else is left out before any per-row work."""
        return (f"({start_column} IS NULL OR ({self.contains(start_column)}) "
                f"OR ({self.overlaps(start_column, end_column)}))")


@dataclass(frozen=True)
class SourceShape:
    """Where the rows come from and which LiteLLM columns it has."""

    source_format: SourceFormat
    from_clause: str
    columns: frozenset[str]
    check_json: bool = True  # see _Reader: False reads faster and fails on the first broken JSON document
    typed_times: bool = False  # the source already types startTime and endTime as TIMESTAMPTZ


METADATA_KEYS = ("status", "user_api_key_alias", "user_api_key_team_alias", "user_api_key_user_id", "user_agent",
                 "requester_ip_address")


def _json_paths(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(sql_string("$." + quote_identifier(name)) for name in names) + "]"


class _Reader:
    """How one source format spells 'this column, as an integer / timestamp / JSON field'.

    In DuckDB every JSON document is parsed once per row: ``json_extract_string`` with a list of paths
    returns all the fields at once (``source_fields`` for a JSON Lines row, ``metadata_fields`` for the
    metadata column). It fails the query on a broken document; with ``shape.check_json`` a ``json_valid``
    test first turns one into NULL instead. That test doubles the cost of reading the JSON, so a file is
    read without it first, and again with it only when the first read failed.
    """

    def __init__(self, shape: SourceShape) -> None:
        self.shape = shape
        self.is_postgres = shape.source_format == "postgresql"
        self.is_jsonl = shape.source_format == "jsonl"
        self.source_columns = REQUIRED_COLUMNS + OPTIONAL_COLUMNS

    def has(self, name: str) -> bool:
        return self.is_jsonl or name in self.shape.columns

    def raw(self, name: str) -> str:
        if self.is_jsonl:
            return f"source_fields[{self.source_columns.index(name) + 1}]"
        return quote_identifier(name) if name in self.shape.columns else "NULL"

    def text(self, name: str) -> str:
        return f"NULLIF({self.raw(name)}, '')"

    def integer(self, name: str) -> str:
        return self.raw(name) if self.is_postgres else f"TRY_CAST({self.raw(name)} AS BIGINT)"

    def timestamp(self, name: str) -> str:
        if self.is_postgres:
            return self.raw(name)
        if self.shape.typed_times:
            return f"CAST({self.raw(name)} AS TIMESTAMP)"
        # Through TIMESTAMPTZ in session zone UTC: PostgreSQL's CSV (no zone), the API's "Z" and an explicit
        # offset all land on UTC wall-clock time; measured as fast as a plain TIMESTAMP cast.
        return f"TRY_CAST(TRY_CAST({self.raw(name)} AS TIMESTAMPTZ) AS TIMESTAMP)"

    def metadata_field(self, key: str) -> str:
        if not self.has("metadata"):
            return "NULL"
        if self.is_postgres:
            return f"NULLIF(\"metadata\" ->> {sql_string(key)}, '')"
        return f"NULLIF(metadata_fields[{METADATA_KEYS.index(key) + 1}], '')"

    def json_text(self, name: str) -> str:
        return f"{self.raw(name)}::text" if self.is_postgres and name in self.shape.columns else self.raw(name)

    def readable(self) -> str:
        if self.is_jsonl:
            return "(source_fields IS NOT NULL AND starts_with(ltrim(line), '{'))"
        return "TRUE"

    def from_clause(self) -> str:
        if self.is_postgres:
            return self.shape.from_clause
        source = self.shape.from_clause
        if self.is_jsonl:
            source = f"(SELECT line, {self._json_fields('line', self.source_columns)} AS source_fields FROM {source}) AS jsonl_fields"
        if not self.has("metadata"):
            return source
        metadata = self.raw("metadata")
        return f"(SELECT *, {self._json_fields(metadata, METADATA_KEYS)} AS metadata_fields FROM {source}) AS with_metadata"

    def _json_fields(self, document: str, names: tuple[str, ...]) -> str:
        fields = f"json_extract_string({document}, {_json_paths(names)})"
        return f"CASE WHEN json_valid({document}) THEN {fields} END" if self.shape.check_json else fields


def status_text(shape: SourceShape) -> str:
    """The row's status as written: LiteLLM's status column, else the one in its metadata."""
    read = _Reader(shape)
    return f"COALESCE({read.text('status')}, {read.metadata_field('status')})"


def cache_hit_text(shape: SourceShape) -> str:
    return _Reader(shape).text("cache_hit")


def request_tags_column(shape: SourceShape) -> str:
    """``request_tags`` as the source holds it (jsonb in PostgreSQL), or NULL where the source has none."""
    return _Reader(shape).raw("request_tags")


def normalized_columns(shape: SourceShape) -> dict[str, str]:
    """The SQL expression of each ``spend_rows`` column read straight from the source (no seat, no verdict)."""
    read = _Reader(shape)
    status = f"lower({status_text(shape)})"
    # Rows older than LiteLLM's status column (2025-05) have NULL status and were successes; a source
    # without the column at all cannot tell, so errors stay unknown there.
    status_unknown = "FALSE" if read.has("status") else "NULL"
    key_hash = read.text("api_key")
    return {
        "readable": read.readable(),
        "request_id": read.raw("request_id"),
        "model_group": read.text("model_group"),
        "model": read.text("model"),
        "start_ts": read.timestamp("startTime"),
        "end_ts": read.timestamp("endTime"),
        "prompt_tokens": read.integer("prompt_tokens"),
        "completion_tokens": read.integer("completion_tokens"),
        "failed": f"CASE {status} WHEN 'failure' THEN TRUE WHEN 'success' THEN FALSE ELSE {status_unknown} END",
        "cache_hit": f"CASE lower({cache_hit_text(shape)}) WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END",
        "key_alias": f"COALESCE({read.metadata_field('user_api_key_alias')}, 'key ' || substr({key_hash}, 1, 12), '(no key)')",
        "team": f"COALESCE({read.metadata_field('user_api_key_team_alias')}, {read.text('team_id')})",
        "user_id": f"COALESCE({read.text('user')}, {read.metadata_field('user_api_key_user_id')})",
        "user_agent": read.metadata_field("user_agent"),
        "client_ip": f"COALESCE({read.text('requester_ip_address')}, {read.metadata_field('requester_ip_address')})",
        "tags_json": read.json_text("request_tags"),
    }


MODEL_COLUMNS = ("model", "model_group", "failed", "cache_hit")
"""A row's model fields, in the order ``rows.ModelFields`` takes them."""
CLIENT_COLUMNS = ("key_alias", "team", "user_id", "user_agent", "client_ip", "tags_json")
"""A row's client fields, in the order ``rows.ClientFields`` takes them."""
GROUP_COLUMNS = (*MODEL_COLUMNS, "readable", *CLIENT_COLUMNS, "named_request_id")
"""The strings :func:`spend_groups_sql` groups by."""

MISSING_NUMBER = -(2**63)  # what an unreadable time or token count reads as (rows.MISSING)


def spend_groups_sql(shape: SourceShape, window: Window, request_id_from_tokens: int | None) -> str:
    """One pass over a file: rows grouped by their strings, with each group's times and tokens as lists.

    A row keeps its request id (and so has a group of its own) only where a report may name it: a row
    that will be rejected, or a reply of at least ``request_id_from_tokens`` completion tokens, the lowest
    any runaway threshold can be (None: every row). Rows that neither start in the window nor run in it
    are left out here; rows without a readable start are kept, to be counted if rejected.
    """
    columns = normalized_columns(shape)
    read = _Reader(shape)
    named = "TRUE" if request_id_from_tokens is None else f"""(readable IS NOT TRUE
            OR (model IS NULL AND model_group IS NULL) OR start_ts IS NULL OR end_ts IS NULL
            OR prompt_tokens IS NULL OR completion_tokens IS NULL OR prompt_tokens < 0 OR completion_tokens < 0
            OR end_ts < start_ts OR completion_tokens >= {int(request_id_from_tokens)})"""
    selected = ",\n            ".join(f"{expression} AS {name}" for name, expression in columns.items())
    numbers = ", ".join(f"list(COALESCE({expression}, CAST({MISSING_NUMBER} AS BIGINT))) AS {name}" for expression, name in (
        ("epoch_us(start_ts)", "start_us"), ("epoch_us(end_ts)", "end_us"), ("prompt_tokens", "prompt_tokens"),
        ("completion_tokens", "completion_tokens")))
    return f"""
    SELECT {', '.join(GROUP_COLUMNS[:-1])}, CASE WHEN {named} THEN request_id END AS named_request_id, {numbers}
    FROM (
        SELECT
            {selected}
        FROM {read.from_clause()}
    ) AS litellm_rows
    WHERE {window.needs('start_ts', 'end_ts')}
    GROUP BY ALL"""


def row_values_sql(shape: SourceShape, names: Sequence[str]) -> str:
    """The named ``normalized_columns`` of every row, in the source's order (a few looked-up lines)."""
    columns = normalized_columns(shape)
    return f"SELECT {', '.join(f'{columns[name]} AS {name}' for name in names)} FROM {_Reader(shape).from_clause()}"


def missing_required(columns: Collection[str]) -> list[str]:
    present = set(columns)
    return [name for name in REQUIRED_COLUMNS if name not in present]
