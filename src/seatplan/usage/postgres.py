"""LiteLLM's PostgreSQL database, read in one pass over ``LiteLLM_SpendLogs``.

Per-row work is what costs in PostgreSQL, so the table is scanned once and each row crosses the wire as
six fixed-size values: its ``ctid``, the two timestamps, the two token counts, and one 64-bit hash of its
model fields (model, model group, status, cache flag) and client fields (key alias, team, user, user
agent, address, tags) together. The server gathers the rows of a range of pages into one array per value
(``array_agg``, cheaper for it than packing bytes), so the client receives a few dozen large values instead
of millions of rows, and numpy reads their binary form in place.
Two connections take page ranges as they finish the last, in one exported snapshot, using two server cores.
Strings are fetched afterwards only for a handful of rows, by ``ctid`` in that same snapshot: one row per
distinct hash, the rejected rows named as examples, and the runaways.

Hashes only group rows; every name printed is read back from a row, and two different clients would
have to collide on 64 bits to be counted together.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg.adapt import Loader
from psycopg.pq import Format

from seatplan.errors import SeatplanError
from seatplan.secrets import dsn_password, redact_dsn, scrub
from seatplan.usage.queries import (
    CLIENT_COLUMNS,
    MODEL_COLUMNS,
    SourceFormat,
    SourceShape,
    Window,
    cache_hit_text,
    missing_required,
    normalized_columns,
    quote_identifier,
    request_tags_column,
    sql_string,
    status_text,
)
from seatplan.usage.rows import MISSING, SpendRows, rows_by_key

SPEND_LOGS_TABLE = "LiteLLM_SpendLogs"
READ_CONNECTIONS = 2
PAGES_PER_RANGE = 16_384  # 128 MiB of heap; about 2 MiB per array on the benchmark's rows
LOOKUP_BATCH_ROWS = 5_000
MAX_RESERVED_ROWS = 1 << 25  # 1.8 GB of address space for the columns before they grow
TID_RANGE_SCAN_VERSION = 140_000  # server_version_num from which a ctid range reads only its own pages

# PostgreSQL's timestamps count microseconds from 2000-01-01; RequestRows count from 1970-01-01.
POSTGRES_EPOCH_US = 946_684_800 * 1_000_000
INFINITE = np.iinfo(np.int64).max  # +infinity; NULL and -infinity read as rows.MISSING

# array_agg's binary form: a 20-byte header (one dimension, no NULLs), then each element as its length and bytes.
ARRAY_HEADER_BYTES = 20
INT8_ELEMENT = np.dtype([("length", ">i4"), ("value", ">i8")])  # int8 and timestamp (microseconds since 2000)
TID_ELEMENT = np.dtype([("length", ">i4"), ("block", ">u4"), ("offset", ">u2")])
ARRAY_ELEMENTS = {1010: TID_ELEMENT, 1016: INT8_ELEMENT, 1115: INT8_ELEMENT}  # by the OIDs of tid[], int8[], timestamp[]
COLUMNS = ("ctid", "start", "end", "prompt", "completion", "key")


@dataclass(frozen=True)
class TableRows:
    """Every row the window can use, one entry each, as read from the table (not yet judged)."""

    block: np.ndarray
    offset: np.ndarray
    start: np.ndarray  # microseconds since 2000, MISSING / INFINITE as read
    end: np.ndarray
    prompt: np.ndarray
    completion: np.ndarray
    key: np.ndarray  # a hash of the row's model and client fields together


def row_columns_sql(columns: Mapping[str, str], status: str, cache_hit: str, request_tags: str) -> list[str]:
    """The per-row values, in COLUMNS' order, each never NULL so every array element has the same length.

    The key XORs one 64-bit hash per field, each with a seed of its own (NULL hashes to 0): cheaper for the
    server than joining the strings, and the tags are hashed as the jsonb the table holds (printing them as
    text to hash that costs more than everything else in the row). One key for the model and the client
    fields together is one array less to build and send (7 % of the read); the key carries the status and
    cache-hit text as written, whose meaning is then read once per distinct key instead of once per row.
    """
    fields = [columns["model"], columns["model_group"], status, cache_hit,
              *(columns[name] for name in CLIENT_COLUMNS if name != "tags_json")]
    key = " # ".join(f"COALESCE(hashtextextended({expression}, {seed}), 0)" for seed, expression in enumerate(fields))
    key += f" # COALESCE(jsonb_hash_extended(CAST({request_tags} AS jsonb), {len(fields)}), 0)"
    return [
        "ctid",
        f"COALESCE(CAST({columns['start_ts']} AS timestamp), '-infinity')",
        f"COALESCE(CAST({columns['end_ts']} AS timestamp), '-infinity')",
        f"COALESCE(CAST({columns['prompt_tokens']} AS bigint), {MISSING})",
        f"COALESCE(CAST({columns['completion_tokens']} AS bigint), {MISSING})",
        key,
    ]


def page_ranges(pages: int, count: int) -> list[tuple[int, int | None]]:
    """``count`` ranges of heap pages covering the table; the last is open, for pages added while reading."""
    step = max(1, -(-pages // count))
    starts = list(range(0, max(pages, 1), step))
    return [(start, starts[index + 1] if index + 1 < len(starts) else None) for index, start in enumerate(starts)]


def decode_array(data: Any, element: np.dtype) -> np.ndarray:
    """One array_agg value, received in binary, as a view of its elements (valid until the next query)."""
    header = np.frombuffer(data, dtype=">i4", count=2) if len(data) >= 8 else np.zeros(2, dtype=">i4")
    if len(data) == 12 and header[0] == 0:
        return np.zeros(0, dtype=element)  # an empty array has no dimension
    elements = np.frombuffer(data, dtype=element, offset=ARRAY_HEADER_BYTES)
    if header[0] != 1 or header[1] != 0 or (elements["length"] != element.itemsize - 4).any():
        raise SeatplanError("PostgreSQL sent an array seatplan cannot read", where="LiteLLM_SpendLogs",
                            fix="report this with the PostgreSQL version; NULL elements or a second dimension are unexpected")
    return elements


def _array_loader(element: np.dtype) -> type:
    """A psycopg binary loader that hands an array's bytes to numpy instead of building a Python list."""
    class RawArrayLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            return decode_array(data, element)

    return RawArrayLoader


class RowColumns:
    """The rows of every page range, column by column, appended as ranges arrive in whatever order (no
    figure depends on the rows' order). Each range is copied once, from the received bytes into its place,
    instead of being decoded and then joined; room is reserved for the table's estimated row count, and
    untouched room costs address space only."""

    FIELDS = {"block": np.uint32, "offset": np.uint16, **{name: np.int64 for name in COLUMNS[1:]}}

    def __init__(self, estimated_rows: int) -> None:
        self.count = 0
        self.arrays = {name: np.empty(max(estimated_rows, 1024), dtype=dtype) for name, dtype in self.FIELDS.items()}
        self.appending = threading.Lock()

    def append(self, values: Sequence[np.ndarray | None]) -> None:
        """One range's arrays, in COLUMNS' order (None where the range had no rows)."""
        ctid, *numbers = values
        if ctid is None:
            return
        sources = {"block": ctid["block"], "offset": ctid["offset"]}
        for name, value in zip(COLUMNS[1:], numbers):
            assert value is not None  # a range with rows has every column
            sources[name] = value["value"]
        with self.appending:
            first, last = self.count, self.count + len(ctid)
            if last > len(self.arrays["block"]):
                self.arrays = {name: _grown(array, first, max(2 * len(array), last)) for name, array in self.arrays.items()}
            for name, source in sources.items():
                self.arrays[name][first:last] = source
            self.count = last

    def rows(self) -> TableRows:
        return TableRows(**{name: array[: self.count] for name, array in self.arrays.items()})


def _grown(array: np.ndarray, used: int, size: int) -> np.ndarray:
    bigger = np.empty(size, dtype=array.dtype)
    bigger[:used] = array[:used]
    return bigger


class PostgresSource:
    source_format: SourceFormat = "postgresql"

    def __init__(self, connection: Any, dsn: str, description: str, shape: SourceShape) -> None:
        self.connection = connection
        self.columns = normalized_columns(shape)
        self.status_text = status_text(shape)
        self.cache_hit_text = cache_hit_text(shape)
        self.request_tags = request_tags_column(shape)
        self.dsn = dsn
        self.description = description
        self.table = quote_identifier(SPEND_LOGS_TABLE)
        self._block = self._offset = np.zeros(0, dtype=np.int64)  # each row's ctid, to read its strings

    # -- reading

    def read(self, window: Window) -> SpendRows:
        with self._errors():
            table = self._read_rows(window)
            self._block, self._offset = table.block, table.offset
            # The hashes have done their work: only the numbers and the ctids are kept.
            return rows_by_key(to_unix_microseconds(table.start), to_unix_microseconds(table.end), table.prompt,
                               table.completion, table.key,
                               lambda picked: self._lookup(picked, (*MODEL_COLUMNS, *CLIENT_COLUMNS)))

    def request_ids(self, positions: np.ndarray) -> list[str | None]:
        with self._errors():
            return [request_id for (request_id,) in self._lookup(positions, ("request_id",))]

    def unreadable_lines(self) -> int:
        return 0  # a table has no lines to misread

    def reader_note(self) -> str:
        return "PostgreSQL"

    def _read_rows(self, window: Window) -> TableRows:
        wanted = window.needs(self.columns["start_ts"], self.columns["end_ts"])
        values = row_columns_sql(self.columns, self.status_text, self.cache_hit_text, self.request_tags)
        select = f"SELECT {', '.join(f'array_agg({value})' for value in values)} FROM {self.table} WHERE {wanted}"
        if self.connection.info.server_version < TID_RANGE_SCAN_VERSION:
            # Before PostgreSQL 14 a ctid range is a filter on a full scan, so each range would read the
            # whole table: one statement reads it once instead (its arrays are limited to 1 GB each, about
            # 130 million rows).
            statements = [select]
        else:
            pages = self.connection.execute(
                f"SELECT pg_relation_size({sql_string(self.table)}::regclass) / current_setting('block_size')::int").fetchone()[0]
            ranges = page_ranges(int(pages), max(2 * READ_CONNECTIONS, -(-int(pages) // PAGES_PER_RANGE)))
            statements = [select + f" AND ctid >= '({first},0)'::tid" + (f" AND ctid < '({last},0)'::tid" if last is not None else "")
                          for first, last in ranges]
        estimated_rows = self.connection.execute(
            f"SELECT reltuples::bigint FROM pg_class WHERE oid = {sql_string(self.table)}::regclass").fetchone()[0]
        # Room for the estimate, but not more than a few GB of address space on a strict-overcommit host: a
        # window over a long table reads far fewer rows than it holds, and columns grow when they must.
        room = int(estimated_rows * 1.1) if estimated_rows and estimated_rows > 0 else 0
        columns = RowColumns(min(room, MAX_RESERVED_ROWS))
        self._run_in_parallel(statements, columns)
        return columns.rows()

    def _run_in_parallel(self, statements: list[str], columns: RowColumns) -> None:
        """Each statement's arrays appended to ``columns``; READ_CONNECTIONS connections share this transaction's
        snapshot and take the next statement as they finish one, so neither waits while the other still has
        ranges to read."""
        snapshot = self._export_snapshot()
        helpers = [_snapshot_connection(self.dsn, snapshot) for _ in range(READ_CONNECTIONS - 1)] if snapshot else []
        failures: list[BaseException] = []
        next_statement = iter(range(len(statements)))
        taking = threading.Lock()

        def read(connection: Any) -> None:
            try:
                cursor = connection.cursor(binary=True)
                for oid, element in ARRAY_ELEMENTS.items():
                    cursor.adapters.register_loader(oid, _array_loader(element))
                while not failures:
                    with taking:
                        index = next(next_statement, None)
                    if index is None:
                        return
                    columns.append(cursor.execute(statements[index]).fetchone())
            except BaseException as problem:  # noqa: BLE001 - re-raised in the calling thread
                failures.append(problem)

        connections = [self.connection, *helpers]
        try:
            threads = [threading.Thread(target=read, args=(connection,)) for connection in connections]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for helper in helpers:
                helper.close()
        if failures:
            raise failures[0]

    def _export_snapshot(self) -> str | None:
        """This transaction's snapshot for the helper connections; None where the server cannot share one."""
        try:
            return self.connection.execute("SELECT pg_export_snapshot()").fetchone()[0]
        except psycopg.Error:
            # A hot standby cannot export snapshots before PostgreSQL 10, and a failed call aborts the
            # transaction: start a clean one and read everything on this connection alone.
            self.connection.rollback()
            return None

    # -- strings for a few rows

    def _lookup(self, picked: np.ndarray, names: Sequence[str]) -> list[tuple[Any, ...]]:
        """The named columns of the picked rows, in their order, read by ctid in this snapshot."""
        tids = [f"({block},{offset})" for block, offset in zip(self._block[picked].tolist(), self._offset[picked].tolist())]
        expressions = ", ".join(self.columns[name] for name in names)
        found: dict[str, tuple[Any, ...]] = {}
        for first in range(0, len(tids), LOOKUP_BATCH_ROWS):
            batch = tids[first:first + LOOKUP_BATCH_ROWS]
            for tid, *values in self.connection.execute(
                    f"SELECT ctid::text, {expressions} FROM {self.table} WHERE ctid = ANY(%s::tid[])", (batch,)):
                found[tid] = tuple(values)
        missing = [tid for tid in tids if tid not in found]
        if missing:
            raise SeatplanError(f"rows moved while being read (ctid {missing[0]})", where=self.description,
                                fix="run seatplan usage again")
        return [found[tid] for tid in tids]

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as problem:
            raise SeatplanError(
                scrub(f"PostgreSQL refused the usage query: {str(problem).strip().splitlines()[0]}", dsn_password(self.dsn)),
                where=self.description,
                fix="check that the DSN points at LiteLLM's database and the role may SELECT from \"LiteLLM_SpendLogs\"",
            ) from None


def to_unix_microseconds(postgres_times: np.ndarray) -> np.ndarray:
    """PostgreSQL's microseconds since 2000 turned, in place, into microseconds since 1970; NULL and
    +-infinity into rows.MISSING."""
    readable = (postgres_times != MISSING) & (postgres_times != INFINITE)
    np.add(postgres_times, POSTGRES_EPOCH_US, out=postgres_times, where=readable)
    postgres_times[~readable] = MISSING
    return postgres_times


def _configure(connection: Any) -> None:
    connection.execute("SET jit = off")  # compiling these one-off queries costs more than it saves


def _snapshot_connection(dsn: str, snapshot: str) -> Any:
    connection = psycopg.connect(dsn, connect_timeout=10, application_name="seatplan-usage")
    connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    connection.read_only = True
    _configure(connection)
    connection.commit()
    connection.execute(f"SET TRANSACTION SNAPSHOT {sql_string(snapshot)}")
    return connection


@contextmanager
def postgres_source(dsn: str, description: str) -> Iterator[PostgresSource]:
    try:
        connection = psycopg.connect(dsn, connect_timeout=10, application_name="seatplan-usage")
    except psycopg.Error as problem:
        said = str(problem).strip().splitlines()[-1] if str(problem).strip() else str(problem)
        # libpq echoes parts of a connection string it cannot parse: never let the password through.
        raise SeatplanError(
            f"cannot connect to PostgreSQL: {redact_dsn(scrub(said, dsn_password(dsn)))}",
            where=description,
            fix="check host, port, user, password and database in the DSN (the role needs only SELECT)",
        ) from None
    try:
        # One read-only transaction: every read, on every connection, sees the same rows.
        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        connection.read_only = True
        _configure(connection)
        connection.commit()
        columns = _table_columns(connection, description)
        shape = SourceShape("postgresql", quote_identifier(SPEND_LOGS_TABLE), frozenset(columns))
        yield PostgresSource(connection, dsn, description, shape)
    finally:
        connection.close()


def _table_columns(connection: Any, description: str) -> list[str]:
    columns = [row[0] for row in connection.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = ANY (current_schemas(false))",
        (SPEND_LOGS_TABLE,),
    )]
    if not columns:
        raise SeatplanError(
            f'no "{SPEND_LOGS_TABLE}" table in this database',
            where=description,
            fix="point the DSN at the database LiteLLM's proxy writes to (its DATABASE_URL)",
        )
    missing = missing_required(columns)
    if missing:
        raise SeatplanError(
            f'"{SPEND_LOGS_TABLE}" has no column {", ".join(missing)}',
            where=description,
            fix="this does not look like LiteLLM's spend-log table; check the database",
        )
    return columns
