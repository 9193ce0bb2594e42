"""Spend-log rows from LiteLLM's own API: ``seatplan usage --from https://gateway.example/``.

``GET /spend/logs/v2`` (LiteLLM ``proxy/spend_tracking/spend_management_endpoints.py``, ``ui_view_spend_logs``)
answers ``{"data": [...], "total", "page", "page_size", "total_pages", "total_is_capped"}``: the rows of
``"startTime"`` between ``start_date`` and ``end_date`` (both inclusive, ``YYYY-MM-DD HH:MM:SS`` UTC), sorted by
``sort_by``, ``page_size`` at most 1000, paged by ``LIMIT``/``OFFSET``. Since 1.93 the *count* stops at
``SPEND_LOGS_PAGINATION_COUNT_CAP`` = 10,000 rows (``total_is_capped`` true, ``total`` 10,000); the pages
themselves are not capped. ``startTime`` is the only sort key, so ``OFFSET`` paging over rows that tie on it may
repeat one row and skip another. So a window that one page does not hold (or whose count is capped) is split in
two, down to one second, and a window is read until a page comes back empty; its rows must then number its
``total``, or it is read again in halves (rows arrived while it was read). Only a second holding more rows than
a page is paged by ``OFFSET``; when that skips rows it is paged again in other orders (``endTime``,
``total_tokens``, …) until its rows number its count, and refused if none gives them all. Windows share their boundary second (the
API's times are whole seconds) and a row read twice there is kept once, by ``request_id``.

The rows go to a JSON Lines file in a private temporary folder, which the file reader reads (``sources.py``):
the same rows give the same figures as the database and the export readers by construction. The window asked
for starts ``LEAD`` (6 hours) before ``--since``: a request running into the window is in its in-flight
figures, as the database reader counts it; one that started longer before is not seen through the API.

The key comes from an environment variable (``LITELLM_MASTER_KEY`` by default) or a file, never a flag. Every page
goes through seatplan's bounded client (``bounded_http.BoundedClient``, as diagnose's ``--prometheus`` does): one
deadline from connect to the last byte (``--timeout``, ``API_TIMEOUT_S`` unless given), ``MAX_PAGE_BYTES`` at most,
no redirect followed, JSON of bounded depth.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import httpx2

from seatplan.bounded_http import AnswerTooLarge, BoundedClient
from seatplan.errors import SeatplanError
from seatplan.jsontext import JsonTooDeep, loads_bounded
from seatplan.secrets import check_environment_name, read_secret
from seatplan.usage.queries import SourceFormat, Window
from seatplan.usage.rows import SpendLogSource, SpendRows

GATEWAY_KEY_ENV = "LITELLM_MASTER_KEY"  # where a gateway's key is by default (--key-env)
ENDPOINT = "/spend/logs/v2"
# How the fetched rows are read: the export reader of usage/sources.py, handed in (it dispatches here).
ExportReader = Callable[[Path, int | None], AbstractContextManager[SpendLogSource]]
PAGE_SIZE_ROWS = 1000  # the endpoint's page_size limit (le=1000)
COUNT_CAP_ROWS = 10_000  # SPEND_LOGS_PAGINATION_COUNT_CAP
LEAD = timedelta(hours=6)
EARLIEST = datetime(2000, 1, 1)  # an open window's start: before any LiteLLM row
ONE_SECOND = timedelta(seconds=1)
MAX_PAGE_BYTES = 256 << 20  # 1000 rows with their metadata are a few MB
# One page request, connect to last byte (usage --timeout): LiteLLM pages 1000 rows of one window out of
# PostgreSQL in well under a second; 120 s let a server that drips its headers hold a run for minutes (issue 48).
API_TIMEOUT_S = 30.0
API_TIME = "%Y-%m-%d %H:%M:%S"


def is_api_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def check_base_url(url: str) -> str:
    """The gateway's base URL without a trailing slash; credentials, a query or a fragment are refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SeatplanError(f"{url!r} is not an http(s) URL of a LiteLLM gateway", where="--from",
                            fix="pass the gateway's base URL, for example --from https://gateway.example/")
    if parts.username or parts.password:
        raise SeatplanError("a key or password in --from would land in shell history and in the process list",
                            where="--from", fix=f"pass the URL without it and export the key as {GATEWAY_KEY_ENV} (or --key-file FILE)")
    if parts.query or parts.fragment:
        raise SeatplanError("the gateway URL carries a query or fragment", where=f"--from {url}",
                            fix="pass only the base URL, for example https://gateway.example/")
    return url.rstrip("/")


def api_key(variable: str, key_file: Path | None) -> str:
    """The key for the spend API: ``$variable``, else the first line of ``key_file``."""
    check_environment_name(variable, "--key-env")
    key = read_secret(variable, key_file)
    if not key:
        source = f"${variable}" + (f" and {key_file}" if key_file else "")
        raise SeatplanError(f"{source} hold no LiteLLM key, and /spend/logs/v2 needs one", where="--key-env",
                            fix=f"export {variable}=sk-... (a key that may read spend logs), or pass --key-file FILE (chmod 600)")
    return key


@dataclass
class ApiReadStats:
    pages: int = 0
    windows: int = 0
    rows: int = 0
    split_windows: int = 0  # windows halved because one page did not hold them (or their count was capped)
    reread_windows: int = 0  # windows read again in halves because their rows did not add up to their total
    unverified_seconds: list[str] = field(default_factory=list)  # one-second windows past the count cap: paged, not counted


@dataclass(frozen=True)
class _Page:
    rows: list[dict[str, Any]]
    total: int
    capped: bool


def api_window(window: Window, now: datetime) -> tuple[datetime, datetime]:
    """Whole seconds covering the report's window, ``LEAD`` earlier at the start; an open end is now."""
    start = (window.since - LEAD) if window.since is not None else EARLIEST
    end = window.until if window.until is not None else now
    return start.replace(microsecond=0), _ceil_second(end)


def _ceil_second(moment: datetime) -> datetime:
    return moment if moment.microsecond == 0 else moment.replace(microsecond=0) + ONE_SECOND


def download_rows(base_url: str, key: str, window: Window, sink: IO[str], now: datetime | None = None,
                  timeout_s: float = API_TIMEOUT_S) -> ApiReadStats:
    """Write every row of ``window`` (see :func:`api_window`) to ``sink``, one JSON object per line: each page
    through the bounded transport (one deadline per request, ``MAX_PAGE_BYTES`` at most, no redirect followed, so
    the key never goes to another host)."""
    start, end = api_window(window, now or datetime.now(UTC).replace(tzinfo=None))
    stats = ApiReadStats()
    boundary_ids: dict[str, set[str]] = {}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    with BoundedClient(base_url, timeout_s, secrets=(key,), headers=headers, cap_bytes=MAX_PAGE_BYTES) as client:
        reader = _Reader(client, base_url, key, stats)
        pending = [(start, end)]
        while pending:
            low, high = pending.pop()
            first = reader.page(low, high, 1)
            # More rows than one page holds (or a count past the cap): halve the window rather than page it, as
            # OFFSET paging over rows that tie on startTime (the only sort key) may repeat one row and skip another.
            if (first.capped or first.total > len(first.rows)) and high - low > ONE_SECOND:
                stats.split_windows += 1
                pending += _halves(low, high)
                continue
            rows = list(_all_pages(reader, low, high, first))
            if not first.capped and len(rows) != first.total and high - low > ONE_SECOND:
                stats.reread_windows += 1  # rows arrived or left while it was read
                pending += _halves(low, high)
                continue
            if first.capped:
                stats.unverified_seconds.append(low.strftime(API_TIME))
                rows = _other_orders(reader, low, high, rows, None)
            elif len(rows) < first.total:
                rows = _other_orders(reader, low, high, rows, first.total)
            stats.windows += 1
            for row in _new_rows(rows, low, high, boundary_ids):
                sink.write(json.dumps(row, separators=(",", ":")) + "\n")
                stats.rows += 1
    return stats


def _halves(low: datetime, high: datetime) -> list[tuple[datetime, datetime]]:
    middle = low + timedelta(seconds=math.floor((high - low).total_seconds() / 2))
    return [(middle, high), (low, middle)]  # popped from the end: the earlier half first


# Orders to page one crowded second by again, when OFFSET paging by startTime skipped rows that tie on it: each
# breaks the ties differently (the endpoint's valid_sort_fields).
OTHER_ORDERS = (("startTime", "desc"), ("endTime", "asc"), ("endTime", "desc"), ("request_duration_ms", "asc"),
                ("total_tokens", "asc"), ("total_tokens", "desc"), ("model", "asc"), ("spend", "asc"))


def _all_pages(reader: _Reader, low: datetime, high: datetime, first: _Page,
               order: tuple[str, str] = ("startTime", "asc"), kept: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Pages until one comes back empty (a gateway or a proxy in front of it may send fewer rows than asked),
    or one holds no row this paging has not seen (a server that ignores ``page`` must not loop forever); the
    rows not in ``kept`` yet, which it adds them to."""
    page, number = first, 1
    kept = set() if kept is None else kept
    paged: set[str] = set()
    while page.rows:
        ids = [row["request_id"] for row in page.rows]
        if number > 1 and paged.issuperset(ids):
            return
        paged.update(ids)
        for row in page.rows:
            if row["request_id"] not in kept:
                kept.add(row["request_id"])
                yield row
        number += 1
        page = reader.page(low, high, number, order)


def _other_orders(reader: _Reader, low: datetime, high: datetime, rows: list[dict[str, Any]],
                  total: int | None) -> list[dict[str, Any]]:
    """The rows of one second that holds more than a page, read again in other orders until they number its
    count; refused when no order gives them all (the figures would miss calls). A second past the count cap
    (``total`` None) is read in every order and the union kept."""
    seen = {row["request_id"] for row in rows}
    for order in OTHER_ORDERS:
        rows += _all_pages(reader, low, high, reader.page(low, high, 1, order), order, seen)
        if total is not None and len(rows) >= total:
            return rows
    if total is None:
        return rows
    raise SeatplanError(f"the gateway gave {len(rows)} of the {total} rows that start at {low.strftime(API_TIME)} UTC, in "
                        f"{len(OTHER_ORDERS) + 1} orders (OFFSET pages over rows with the same startTime)",
                        where=f"{reader.base_url}{ENDPOINT}",
                        fix="read that window from the database (--from postgresql://…) or an export of LiteLLM_SpendLogs")


def _second_of(row: dict[str, Any]) -> str:
    """The row's ``startTime`` to the second, in the API's own format (``2026-11-23T08:14:03...``)."""
    start = row.get("startTime")
    return start[:19].replace("T", " ") if isinstance(start, str) else ""


def _new_rows(rows: list[dict[str, Any]], low: datetime, high: datetime,
              boundary_ids: dict[str, set[str]]) -> Iterator[dict[str, Any]]:
    """The rows not already written: a window shares its first and last second with its neighbours, so a row
    of those seconds is remembered by ``request_id`` and kept once."""
    edges = {low.strftime(API_TIME), high.strftime(API_TIME)}
    for row in rows:
        second = _second_of(row)
        if second in edges:
            seen = boundary_ids.setdefault(second, set())
            if row["request_id"] in seen:
                continue
            seen.add(row["request_id"])
        yield row


@dataclass
class _Reader:
    client: BoundedClient
    base_url: str
    key: str
    stats: ApiReadStats

    def page(self, low: datetime, high: datetime, number: int, order: tuple[str, str] = ("startTime", "asc")) -> _Page:
        params = {"start_date": low.strftime(API_TIME), "end_date": high.strftime(API_TIME), "page": str(number),
                  "page_size": str(PAGE_SIZE_ROWS), "sort_by": order[0], "sort_order": order[1]}
        where = f"{self.base_url}{ENDPOINT}?start_date={params['start_date']}&end_date={params['end_date']}&page={number}"
        self.stats.pages += 1
        try:
            response = self.client.fetch("GET", ENDPOINT, params=params)
        except AnswerTooLarge:
            raise SeatplanError(f"a page of the spend logs is over {MAX_PAGE_BYTES >> 20} MiB", where=where,
                                fix="check that --from is a LiteLLM gateway") from None
        except httpx2.HTTPError as problem:
            raise SeatplanError(f"cannot read the spend logs: {self.client.problem(problem)}", where=where,
                                fix="check the gateway URL and that it is up (curl BASE/health/liveliness)") from None
        if response.status_code != 200:
            raise _status_error(response.status_code, self.client.shown(response.content[:300].decode("utf-8", "replace")), where)
        return _parse_page(response.content, where)


def _status_error(status: int, text: str, where: str) -> SeatplanError:
    if status in (401, 403):
        return SeatplanError(f"the gateway refused the key (HTTP {status}): {text}", where=where,
                             fix=f"export {GATEWAY_KEY_ENV} (or the variable --key-env names) as a key allowed to read spend logs "
                                 "(the master key, or an admin / internal_user_viewer key)")
    if status == 404:
        return SeatplanError("the gateway has no /spend/logs/v2 (HTTP 404)", where=where,
                             fix="--from takes the LiteLLM proxy's base URL; older LiteLLM releases lack the v2 route: "
                                 "export the table instead (see docs/usage.md)")
    return SeatplanError(f"the gateway answered HTTP {status}: {text}", where=where,
                         fix="check the gateway's log; LiteLLM needs its database to serve spend logs")


def _parse_page(body: bytes, where: str) -> _Page:
    try:
        document = loads_bounded(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, JsonTooDeep, ValueError) as problem:
        raise SeatplanError(f"the spend logs page is not JSON ({type(problem).__name__})", where=where,
                            fix="check that --from is a LiteLLM gateway") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise SeatplanError("the spend logs page has no 'data' list", where=where,
                            fix="check that --from is a LiteLLM gateway (GET /spend/logs/v2)")
    total = document.get("total")
    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
        raise SeatplanError(f"the spend logs page has no row count ('total': {total!r})", where=where,
                            fix="check that --from is a LiteLLM gateway (GET /spend/logs/v2)")
    rows = document["data"]
    for number, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("request_id"), str):
            raise SeatplanError(f"row {number} of the page has no request_id", where=f"{where}: data[{number}]",
                                fix="check that --from is a LiteLLM gateway (GET /spend/logs/v2)")
    # Before 1.93 the count was exact and the flag absent.
    capped = document.get("total_is_capped") is True
    return _Page(rows, total, capped)


class ApiSpendLogSource:
    """The rows of one report's window, fetched page by page and read by the file reader."""

    source_format: SourceFormat = "litellm-api"

    def __init__(self, base_url: str, key: str, request_id_from_tokens: int | None, workdir: Path, stack: ExitStack,
                 read_export: ExportReader, timeout_s: float = API_TIMEOUT_S) -> None:
        self.base_url, self.key, self.timeout_s = base_url, key, timeout_s
        self.read_export = read_export
        self.description = base_url + ENDPOINT
        self.request_id_from_tokens = request_id_from_tokens
        self.workdir, self.stack = workdir, stack
        self.stats = ApiReadStats()
        self._rows: SpendLogSource | None = None

    def read(self, window: Window) -> SpendRows:
        path = self.workdir / f"rows-{self.stats.pages}.jsonl"
        with path.open("w", encoding="utf-8") as sink:
            self.stats = download_rows(self.base_url, self.key, window, sink, timeout_s=self.timeout_s)
        self._rows = self.stack.enter_context(self.read_export(path, self.request_id_from_tokens))
        return self._rows.read(window)

    def _read(self) -> SpendLogSource:
        if self._rows is None:
            raise RuntimeError("read() first")
        return self._rows

    def request_ids(self, positions: Any) -> list[str | None]:
        return self._read().request_ids(positions)

    def unreadable_lines(self) -> int:
        return self._read().unreadable_lines()

    def reader_note(self) -> str:
        stats = self.stats
        note = (f"LiteLLM's {ENDPOINT}: {stats.rows:,} rows in {stats.pages:,} pages over {stats.windows:,} windows "
                f"({stats.split_windows:,} halved to fit one page, {stats.reread_windows:,} read again); "
                "rows read by DuckDB")
        if stats.unverified_seconds:
            note += (f"; {len(stats.unverified_seconds)} second(s) held over the {COUNT_CAP_ROWS:,}-row count cap, paged to the "
                     f"end in {len(OTHER_ORDERS) + 1} orders but not matched to a count (first {stats.unverified_seconds[0]} UTC)")
        return note


@contextmanager
def api_source(url: str, key_env: str, key_file: Path | None, request_id_from_tokens: int | None,
               read_export: ExportReader, timeout_s: float = API_TIMEOUT_S) -> Iterator[ApiSpendLogSource]:
    base_url = check_base_url(url)
    key = api_key(key_env, key_file)
    workdir = Path(tempfile.mkdtemp(prefix="seatplan-usage-api-"))  # mode 0700: the rows name users and keys
    try:
        with ExitStack() as stack:
            yield ApiSpendLogSource(base_url, key, request_id_from_tokens, workdir, stack, read_export, timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
