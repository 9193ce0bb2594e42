"""SQL that turns ``LiteLLM_SpendLogs`` rows into figures, written once for PostgreSQL and DuckDB.

Only the first step differs between sources: :func:`normalized_rows_sql` reads LiteLLM's columns
(typed in PostgreSQL, text in a CSV, JSON in JSON Lines) into one shape, ``spend_rows``:

    request_id, seat, model_group, model, start_ts, end_ts, prompt_tokens, completion_tokens,
    failed, cache_hit, key_alias, team, user_id, user_agent, client_ip, tags_json, reject_reason, accepted

(``accepted`` is ``reject_reason IS NULL``)
``seat`` is the name the report files the row under: the served name of the fleet seat whose
``served_model_name`` (or name) equals the row's ``model`` or ``model_group``, else ``model``, else
``model_group``. Every figure query after it is plain SQL both databases run unchanged, so a CSV export and the live
table give the same numbers by construction. Nothing here does I/O; the values inlined into the
SQL are datetimes and integers formatted here, and names quoted by :func:`sql_string`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

SourceFormat = Literal["postgresql", "csv", "jsonl"]

# Columns the figures need; every other LiteLLM column is ignored, and a missing optional one reads as NULL.
REQUIRED_COLUMNS = ("request_id", "startTime", "endTime", "prompt_tokens", "completion_tokens", "model")
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


@dataclass(frozen=True)
class SourceShape:
    """Where the rows come from and which LiteLLM columns it has."""

    source_format: SourceFormat
    from_clause: str
    columns: frozenset[str]


METADATA_KEYS = ("status", "user_api_key_alias", "user_api_key_team_alias", "user_api_key_user_id", "user_agent",
                 "requester_ip_address")


def _json_paths(names: tuple[str, ...]) -> str:
    return "[" + ", ".join(sql_string("$." + quote_identifier(name)) for name in names) + "]"


class _Reader:
    """How one source format spells 'this column, as an integer / timestamp / JSON field'.

    In DuckDB every JSON document is parsed once per row: ``json_extract_string`` with a list of paths
    returns all the fields at once (``source_fields`` for a JSON Lines row, ``metadata_fields`` for the
    metadata column); ``json_valid`` first turns a broken document into NULL instead of failing the run.
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
        text = self.raw(name)
        # PostgreSQL's CSV has no zone and the API writes "Z", both read right as plain TIMESTAMP; only an
        # explicit offset after the date ("+02:00", "-05:00") takes the slower zone-aware cast (session zone UTC).
        return (f"CASE WHEN regexp_matches(substr({text}, 11), '[+-]') "
                f"THEN TRY_CAST(TRY_CAST({text} AS TIMESTAMPTZ) AS TIMESTAMP) ELSE TRY_CAST({text} AS TIMESTAMP) END")

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
            source = (f"(SELECT line, CASE WHEN json_valid(line) THEN json_extract_string(line, {_json_paths(self.source_columns)}) "
                      f"END AS source_fields "
                      f"FROM {source}) AS jsonl_fields")
        if not self.has("metadata"):
            return source
        metadata = self.raw("metadata")
        return (f"(SELECT *, CASE WHEN json_valid({metadata}) THEN json_extract_string({metadata}, {_json_paths(METADATA_KEYS)}) "
                f"END AS metadata_fields "
                f"FROM {source}) AS with_metadata")


def _seat_case(column: str, seat_by_name: Mapping[str, str]) -> str:
    if not seat_by_name:
        return "NULL"
    branches = " ".join(f"WHEN {sql_string(name)} THEN {sql_string(seat)}" for name, seat in sorted(seat_by_name.items()))
    return f"CASE {column} {branches} END"


def normalized_rows_sql(shape: SourceShape, seat_by_name: Mapping[str, str], request_id_from_tokens: int | None = None) -> str:
    """SELECT producing ``spend_rows`` from a source; ``seat_by_name`` maps LiteLLM names to served names.

    With ``request_id_from_tokens``, ``request_id`` is kept only where a report can name it (rejected rows,
    and replies of at least that many completion tokens, the lowest any runaway threshold can be) and is
    NULL elsewhere: ids are unique strings, the widest column by far of a table a file is loaded into.
    """
    read = _Reader(shape)
    status = f"lower(COALESCE({read.text('status')}, {read.metadata_field('status')}))"
    # Rows older than LiteLLM's status column (2025-05) have NULL status and were successes; a source
    # without the column at all cannot tell, so errors stay unknown there.
    status_unknown = "FALSE" if read.has("status") else "NULL"
    key_hash = read.text("api_key")
    base = f"""
    SELECT
        {read.readable()} AS readable,
        {read.raw('request_id')} AS request_id,
        {read.text('model_group')} AS model_group,
        {read.text('model')} AS model,
        {read.timestamp('startTime')} AS start_ts,
        {read.timestamp('endTime')} AS end_ts,
        {read.integer('prompt_tokens')} AS prompt_tokens,
        {read.integer('completion_tokens')} AS completion_tokens,
        CASE {status} WHEN 'failure' THEN TRUE WHEN 'success' THEN FALSE ELSE {status_unknown} END AS failed,
        CASE lower({read.text('cache_hit')}) WHEN 'true' THEN TRUE WHEN 'false' THEN FALSE END AS cache_hit,
        COALESCE({read.metadata_field('user_api_key_alias')}, 'key ' || substr({key_hash}, 1, 12), '(no key)') AS key_alias,
        COALESCE({read.metadata_field('user_api_key_team_alias')}, {read.text('team_id')}) AS team,
        COALESCE({read.text('user')}, {read.metadata_field('user_api_key_user_id')}) AS user_id,
        {read.metadata_field('user_agent')} AS user_agent,
        COALESCE({read.text('requester_ip_address')}, {read.metadata_field('requester_ip_address')}) AS client_ip,
        {read.json_text('request_tags')} AS tags_json
    FROM {read.from_clause()}"""
    reject_reason = """CASE
            WHEN NOT readable THEN 'unreadable_row'
            WHEN model_group IS NULL AND model IS NULL THEN 'missing_model'
            WHEN start_ts IS NULL OR end_ts IS NULL THEN 'unreadable_timestamp'
            WHEN prompt_tokens IS NULL OR completion_tokens IS NULL THEN 'unreadable_tokens'
            WHEN prompt_tokens < 0 OR completion_tokens < 0 THEN 'negative_tokens'
            WHEN end_ts < start_ts THEN 'end_before_start'
        END"""
    # "reject_reason IS NULL" spelled as a plain conjunction: PostgreSQL estimates each term from the table's
    # statistics (it cannot see through a CASE, guesses 0.5 % of rows, and plans aggregations for a few
    # hundred rows that then spill to disk).
    accepted = """(readable IS NOT FALSE AND (model_group IS NOT NULL OR model IS NOT NULL)
            AND start_ts IS NOT NULL AND end_ts IS NOT NULL AND prompt_tokens IS NOT NULL AND completion_tokens IS NOT NULL
            AND prompt_tokens >= 0 AND completion_tokens >= 0 AND end_ts >= start_ts)"""
    request_id = "request_id" if request_id_from_tokens is None else (
        f"CASE WHEN {reject_reason} IS NOT NULL OR completion_tokens >= {int(request_id_from_tokens)} THEN request_id END")
    return f"""
    SELECT
        {request_id} AS request_id,
        COALESCE({_seat_case('model', seat_by_name)}, {_seat_case('model_group', seat_by_name)},
                 model, model_group) AS seat,
        model_group, model, start_ts, end_ts, prompt_tokens, completion_tokens, failed, cache_hit,
        key_alias, team, user_id, user_agent, client_ip, tags_json,
        {reject_reason} AS reject_reason,
        {accepted} AS accepted
    FROM ({base}
    ) AS litellm_rows"""


@dataclass(frozen=True)
class FigureQuery:
    """A figure's SQL over ``spend_rows``: its own common table expressions and the final SELECT."""

    select: str
    ctes: tuple[str, ...] = ()
    needs_thresholds: bool = False
    # PostgreSQL underestimates the groups of these aggregations over millions of rows and picks sorts that
    # spill to disk; planning them with sorting discouraged gives (parallel) hash aggregation, 1.5-2x faster.
    prefer_hashing: bool = False


def statement(rows_sql: str, query: FigureQuery, thresholds: Mapping[str, int] | None = None) -> str:
    """The full SQL: ``spend_rows``, ``thresholds(seat, runaway_threshold_tokens)`` if needed, then the query."""
    # NOT MATERIALIZED: PostgreSQL would otherwise store every row once a query reads spend_rows twice.
    parts = [f"spend_rows AS NOT MATERIALIZED ({rows_sql})"]
    if query.needs_thresholds:
        if not thresholds:
            raise ValueError("this query needs at least one seat threshold")
        values = ", ".join(f"({sql_string(seat)}, CAST({int(tokens)} AS BIGINT))" for seat, tokens in sorted(thresholds.items()))
        parts.append(f"thresholds(seat, runaway_threshold_tokens) AS (VALUES {values})")
    parts.extend(query.ctes)
    return "WITH " + ",\n".join(parts) + "\n" + query.select


def counts_query(window: Window) -> FigureQuery:
    """Calls, errors, cache hits and rejected rows per (seat, model_group, model); rows start in the window.

    Rows that started before the window but were still running in it get a row of zeros, so every
    name the in-flight sweep can report is known before thresholds are set.
    """
    counted = f"(start_ts IS NULL OR ({window.contains('start_ts')}))"
    call = f"accepted AND {window.contains('start_ts')}"
    return FigureQuery(f"""
    SELECT seat, model_group, model,
        count(*) FILTER (WHERE {call}) AS calls,
        count(*) FILTER (WHERE {call} AND failed) AS errors,
        count(failed) FILTER (WHERE {call}) AS calls_with_status,
        count(*) FILTER (WHERE {call} AND cache_hit) AS cache_hits,
        count(cache_hit) FILTER (WHERE {call}) AS calls_with_cache_flag,
        count(*) FILTER (WHERE NOT accepted AND {counted}) AS rejected_rows,
        min(start_ts) FILTER (WHERE accepted) AS first_start,
        max(end_ts) FILTER (WHERE accepted) AS last_end
    FROM spend_rows
    WHERE seat IS NOT NULL AND ({counted} OR ({window.overlaps('start_ts', 'end_ts')}))
    GROUP BY seat, model_group, model""")


def rejected_query(window: Window, examples_per_reason: int) -> FigureQuery:
    """Rejected rows by reason with a few example request ids; rows without a readable start always count."""
    return FigureQuery(f"""
    SELECT reject_reason, rejected_rows, request_id FROM (
        SELECT reject_reason, request_id,
            count(*) OVER (PARTITION BY reject_reason) AS rejected_rows,
            row_number() OVER (PARTITION BY reject_reason ORDER BY start_ts NULLS LAST, request_id) AS pick
        FROM spend_rows
        WHERE NOT accepted AND (start_ts IS NULL OR ({window.contains('start_ts')}))
    ) AS rejected
    WHERE pick <= {int(examples_per_reason)}
    ORDER BY reject_reason, pick""")


def histograms_query(window: Window) -> FigureQuery:
    """(seat, is_prompt, tokens, calls): the token histograms the percentiles are read from."""
    return FigureQuery(f"""
    SELECT seat, GROUPING(completion_tokens) AS is_prompt, COALESCE(prompt_tokens, completion_tokens) AS tokens,
        count(*) AS calls
    FROM spend_rows
    WHERE accepted AND {window.contains('start_ts')}
    GROUP BY GROUPING SETS ((seat, prompt_tokens), (seat, completion_tokens))""")


LOADS = ("{e}tokens_delta", "{e}requests_delta", "{e}tokens_delta * {e}ordinary", "{e}requests_delta * {e}ordinary")
"""The four in-flight loads, in this order everywhere: tokens, requests, and both for ordinary (non-runaway) replies."""


def _each_load(template: str, events_alias: str = "") -> str:
    """``template`` once per load: ``{i}`` its number, ``{load}`` its expression over ``events`` (or its alias)."""
    prefix = f"{events_alias}." if events_alias else ""
    return ", ".join(template.format(i=index, load=load.format(e=prefix)) for index, load in enumerate(LOADS))


def _events_cte(window: Window, bucket_seconds: float) -> str:
    """Each request as two events, +tokens at its start and -tokens at its end, with its time bucket.

    A request open at ``since`` enters at ``since``; ends at or after ``until`` are kept, as they come after
    every start in the window and only lower the load. NOT MATERIALIZED: read twice, it is cheaper to scan
    the rows again than to store twice as many events. The pair comes from two ``unnest`` calls in one
    select list, which both databases zip row by row; DuckDB runs that several times faster than a
    ``LATERAL (VALUES ...)`` join, PostgreSQL about as fast.
    """
    start = "r.start_ts" if window.since is None else f"GREATEST(r.start_ts, {sql_timestamp(window.since)})"
    return f"""events AS NOT MATERIALIZED (
        SELECT seat, at_ts, is_start,
            (2 * is_start - 1) * request_tokens AS tokens_delta,
            2 * is_start - 1 AS requests_delta,
            ordinary,
            CAST(floor(date_part('epoch', at_ts) / {float(bucket_seconds)!r}) AS BIGINT) AS bucket
        FROM (
            SELECT r.seat, unnest(ARRAY[{start}, r.end_ts]) AS at_ts, unnest(ARRAY[1, 0]) AS is_start,
                CAST(r.prompt_tokens AS BIGINT) + r.completion_tokens AS request_tokens,
                CASE WHEN r.completion_tokens >= t.runaway_threshold_tokens THEN 0 ELSE 1 END AS ordinary
            FROM spend_rows AS r
            JOIN thresholds AS t ON t.seat = r.seat
            WHERE r.accepted AND {window.overlaps('r.start_ts', 'r.end_ts')}) AS request_events)"""


def peak_bounds_query(window: Window, bucket_seconds: float) -> FigureQuery:
    """First half of the exact peak search, per seat (``is_overall`` 0) and over all seats (1).

    The sweep order is (time, ends before starts): within equal timestamps the load first falls, then
    rises, so no peak hides between events. Instead of sorting every event, time is cut into buckets:
    the load entering a bucket (the sum of all earlier buckets) is a load the track really carried, so
    the highest entering load is a lower bound on the peak ("known"); inside a bucket the load never
    exceeds what entered plus everything that starts in it. Rows: ``is_open`` 0 gives the known peak of
    a track (bucket NULL); ``is_open`` 1 a bucket whose bound beats it, with the load entering it, to be
    swept event by event by :func:`peak_sweep_query`. ``bucket_seconds`` only changes how much is swept,
    never the answer.
    """
    seat_buckets = f"""seat_buckets AS (
        SELECT seat, bucket,
            {_each_load("CAST(COALESCE(sum({load}) FILTER (WHERE is_start = 1), 0) AS BIGINT) AS start_{i}")},
            {_each_load("CAST(sum({load}) AS BIGINT) AS net_{i}")}
        FROM events
        GROUP BY seat, bucket)"""
    bucket_loads = f"""bucket_loads AS (
        SELECT seat, 0 AS is_overall, bucket, {_each_load("start_{i}")}, {_each_load("net_{i}")} FROM seat_buckets
        UNION ALL
        SELECT NULL, 1, bucket, {_each_load("CAST(sum(start_{i}) AS BIGINT)")}, {_each_load("CAST(sum(net_{i}) AS BIGINT)")}
        FROM seat_buckets GROUP BY bucket)"""
    entering = f"""entering AS (
        SELECT seat, is_overall, bucket, {_each_load("start_{i}")}, {_each_load("net_{i}")},
            {_each_load("CAST(COALESCE(sum(net_{i}) OVER earlier, 0) AS BIGINT) AS entering_{i}")}
        FROM bucket_loads
        WINDOW earlier AS (PARTITION BY is_overall, seat ORDER BY bucket ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))"""
    known = f"""known AS (
        SELECT is_overall, seat, {_each_load("GREATEST(max(entering_{i}), CAST(sum(net_{i}) AS BIGINT), 0) AS known_{i}")}
        FROM entering
        GROUP BY is_overall, seat)"""
    select = f"""
    SELECT 0 AS is_open, is_overall, seat, CAST(NULL AS BIGINT) AS bucket, {_each_load("known_{i}")}
    FROM known
    UNION ALL
    SELECT 1, e.is_overall, e.seat, e.bucket, {_each_load("e.entering_{i}")}
    FROM entering AS e
    JOIN known AS k ON k.is_overall = e.is_overall AND k.seat IS NOT DISTINCT FROM e.seat
    WHERE {" OR ".join(f"e.entering_{i} + e.start_{i} > k.known_{i}" for i in range(len(LOADS)))}"""
    return FigureQuery(select, ctes=(_events_cte(window, bucket_seconds), seat_buckets, bucket_loads, entering, known),
                       needs_thresholds=True, prefer_hashing=True)


def peak_sweep_query(window: Window, bucket_seconds: float, buckets: Sequence[int]) -> FigureQuery:
    """Second half: the highest load each of ``buckets`` reaches above what entered it, per seat and overall.

    Rows ``(is_overall, seat, bucket, highest loads)``. The buckets come inlined from the first half's
    answer, so each database filters events while it scans (in parallel in PostgreSQL) and sorts only these.
    """
    wanted = ", ".join(str(int(bucket)) for bucket in sorted(set(buckets)))
    open_events = f"""open_events AS MATERIALIZED (
        SELECT * FROM events WHERE bucket IN ({wanted}))"""
    select = "\n    UNION ALL".join(f"""
    SELECT {is_overall} AS is_overall, {seat} AS seat, bucket, {_each_load("max(prefix_{i})")}
    FROM (SELECT {columns}bucket, {_each_load("sum({load}) OVER inside AS prefix_{i}")}
          FROM open_events
          WINDOW inside AS (PARTITION BY {columns}bucket ORDER BY at_ts, is_start ROWS UNBOUNDED PRECEDING)) AS prefixes
    GROUP BY {columns}bucket""" for is_overall, seat, columns in ((0, "seat", "seat, "), (1, "CAST(NULL AS VARCHAR)", "")))
    return FigureQuery(select, ctes=(_events_cte(window, bucket_seconds), open_events), needs_thresholds=True)


def runaway_rows_query(window: Window) -> FigureQuery:
    return FigureQuery(f"""
    SELECT r.seat, r.request_id, r.completion_tokens, r.key_alias, r.team, r.user_id, r.tags_json
    FROM spend_rows AS r JOIN thresholds AS t ON t.seat = r.seat
    WHERE r.accepted AND {window.contains('r.start_ts')}
      AND r.completion_tokens >= t.runaway_threshold_tokens""", needs_thresholds=True)


def clients_query(window: Window) -> FigureQuery:
    """One row per distinct (key, team, seat, user agent, address, tags) with its call count."""
    return FigureQuery(f"""
    SELECT key_alias, team, seat, user_agent, client_ip, tags_json, count(*) AS calls
    FROM spend_rows
    WHERE accepted AND {window.contains('start_ts')}
    GROUP BY key_alias, team, seat, user_agent, client_ip, tags_json""", prefer_hashing=True)


def missing_required(columns: Sequence[str] | frozenset[str]) -> list[str]:
    present = set(columns)
    return [name for name in REQUIRED_COLUMNS if name not in present]
