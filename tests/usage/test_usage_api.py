"""``seatplan usage --from http://gateway/``: LiteLLM's ``/spend/logs/v2``, page by page, against the same rows in
a real PostgreSQL and its CSV export.

The server is a stand-in: LiteLLM's proxy reads its database through Prisma, whose query engines cannot be
fetched here, so the real endpoint cannot run. ``SpendApi`` keeps to the response shape and the query of LiteLLM
1.108.7 (``proxy/spend_tracking/spend_management_endpoints.py``, ``ui_view_spend_logs``): ``start_date`` and
``end_date`` inclusive (``YYYY-MM-DD HH:MM:SS`` or ``YYYY-MM-DD``, UTC), ``sort_by=startTime`` as the only sort
key, ``LIMIT``/``OFFSET`` pages of at most 1000, the count stopped at a cap (``SPEND_LOGS_PAGINATION_COUNT_CAP``,
10,000 in LiteLLM; drawn small here so a few hundred rows reach it) with ``total_is_capped``, and the list
columns (``_SPEND_LOG_LIST_COLUMNS``) with ``metadata`` as an object. It runs that query on the real
PostgreSQL holding the rows. It also clamps ``page_size`` (drawn), as a proxy in front of a gateway may.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from psycopg.rows import dict_row

from kits.cli import run_cli
from kits.parts import free_port
from kits.spend_scenario import BROWSER, EMBED_GROUP, EMBED_MODEL, HTTPX, OPENAI, T0, TEAM_IDS, Call, _api_time, export_csv, insert_calls
from kits.usage import figures, usage_report
from seatplan.errors import SeatplanError
from seatplan.usage import summary
from seatplan.usage.queries import Window
from seatplan.usage.seat_map import SeatMap
from seatplan.usage.sweep import default_runaway_rule

pytestmark = pytest.mark.postgres

KEY = "sk-stand-in-3b7e0c"
LIST_COLUMNS = ("request_id", "call_type", "api_key", "spend", "total_tokens", "prompt_tokens", "completion_tokens",
                "startTime", "endTime", "completionStartTime", "model", "model_id", "model_group", "custom_llm_provider",
                "api_base", "user", "metadata", "cache_hit", "cache_key", "request_tags", "team_id", "organization_id",
                "end_user", "requester_ip_address", "session_id", "status", "mcp_namespaced_tool_name", "agent_id",
                "litellm_call_id", "request_duration_ms")

SORT_FIELDS = ("spend", "total_tokens", "startTime", "endTime", "request_duration_ms", "model")  # valid_sort_fields


class SpendApi(ThreadingHTTPServer):
    """Stand-in for LiteLLM's ``GET /spend/logs/v2`` (see the module docstring)."""

    daemon_threads = True

    def __init__(self, dsn: str, count_cap: int, page_clamp: int, port: int) -> None:
        self.dsn, self.count_cap, self.page_clamp = dsn, count_cap, page_clamp
        self.requests = 0
        with psycopg.connect(dsn) as connection:
            present = {name for (name,) in connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'LiteLLM_SpendLogs'")}
        self.columns = [name for name in LIST_COLUMNS if name in present]
        super().__init__(("127.0.0.1", port), SpendApiHandler)


def parse_date(text: str) -> datetime:
    for layout in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(text.strip(), layout)
        except ValueError:
            continue
    raise ValueError(text)


class SpendApiHandler(BaseHTTPRequestHandler):
    server: SpendApi

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)

        self.server.requests += 1
        url = urlsplit(self.path)
        if url.path != "/spend/logs/v2":
            return self._answer(404, {"detail": "Not Found"})
        if self.headers.get("authorization") != f"Bearer {KEY}":
            return self._answer(401, {"error": {"message": "Authentication Error, Invalid proxy server token passed."}})
        query = {name: values[0] for name, values in parse_qs(url.query).items()}
        page, page_size = int(query.get("page", 1)), int(query.get("page_size", 50))
        sort_by = query.get("sort_by", "startTime")
        if not 1 <= page_size <= 1000 or page < 1 or sort_by not in SORT_FIELDS:
            return self._answer(422, {"detail": "bad page"})
        try:
            start, end = parse_date(query["start_date"]), parse_date(query["end_date"])
        except (KeyError, ValueError):
            return self._answer(400, {"detail": "Start date and end date are required"})
        page_size = min(page_size, self.server.page_clamp)
        direction = "ASC" if query.get("sort_order", "desc").lower() == "asc" else "DESC"
        where = 'WHERE "startTime" >= %s AND "startTime" <= %s'
        names = ", ".join(f'"{name}"' for name in self.server.columns)
        with psycopg.connect(self.server.dsn, row_factory=dict_row) as connection:
            raw_total = connection.execute(f'SELECT count(*) AS n FROM (SELECT 1 FROM "LiteLLM_SpendLogs" {where} LIMIT %s) AS b',
                                           (start, end, self.server.count_cap + 1)).fetchone()["n"]
            rows = connection.execute(f'SELECT {names} FROM "LiteLLM_SpendLogs" {where} ORDER BY "{sort_by}" {direction} '
                                      "LIMIT %s OFFSET %s", (start, end, page_size, (page - 1) * page_size)).fetchall()
        capped = raw_total > self.server.count_cap
        total = self.server.count_cap if capped else raw_total
        data = [{name: _api_time(value) if isinstance(value, datetime) else value for name, value in row.items()} for row in rows]
        self._answer(200, {"data": data, "total": total, "page": page, "page_size": page_size,
                           "total_pages": (total + page_size - 1) // page_size, "total_is_capped": capped})

    def _answer(self, status: int, document: Any) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def serve(dsn: str, count_cap: int, page_clamp: int) -> Iterator[SpendApi]:
    server = SpendApi(dsn, count_cap, page_clamp, free_port())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def same_figures(api: dict[str, Any], reference: dict[str, Any]) -> bool:
    """Equal, but for the last digit of ``kv_replay.minutes_above``: the replay sums its ramps in the order of the
    rows that start at the same instant (``replay._Sweep.of`` sorts ties stably), and the API sends rows by
    ``startTime`` where PostgreSQL sends them as stored (the CSV export read by DuckDB, which does not keep the
    file's order, differs from PostgreSQL there too: seed 596701434). Every other figure is exact."""

    def without_minutes(document: dict[str, Any]) -> tuple[dict[str, Any], list[float]]:
        copy = json.loads(json.dumps(document))
        minutes: list[float] = []
        for usage in [*copy.get("models", {}).values(), copy.get("overall") or {}]:
            replay = usage.get("kv_replay") or {}
            minutes += replay.pop("minutes_above", [])
        return copy, minutes

    (api_rest, api_minutes), (reference_rest, reference_minutes) = without_minutes(api), without_minutes(reference)
    return api_rest == reference_rest and len(api_minutes) == len(reference_minutes) and all(
        abs(a - b) <= 1e-5 for a, b in zip(api_minutes, reference_minutes, strict=True))


def random_calls(rng: random.Random, span_s: int) -> list[Call]:
    """Calls over ``span_s`` seconds: clients, models, failures and cache hits drawn; many share a start second
    (and some a start instant, the ties OFFSET paging mishandles); runaways and long requests among them."""
    clients = [("openwebui", "apps", "owui", BROWSER, "10.0.0.5"), ("alice-laptop", "ml-research", "alice@corp.example", OPENAI, "10.0.0.7"),
               ("ci-evals", "ml-research", "ci-bot", HTTPX, "10.0.0.9"), ("svc-rag", "search", "svc", OPENAI, "10.0.0.11")]
    busy_seconds = [rng.randrange(span_s) for _ in range(rng.randint(1, 5))]
    calls = []
    for number in range(rng.randint(40, 400)):
        if rng.random() < 0.3:
            start_s = float(rng.choice(busy_seconds)) + rng.choice([0.0, 0.25, rng.random()])
        else:
            start_s = round(rng.uniform(0, span_s), 3)
        duration_s = round(rng.expovariate(1 / 30), 3) if rng.random() < 0.95 else rng.uniform(600, 4 * 3600)
        completion = rng.randint(0, 4000) if rng.random() < 0.97 else rng.randint(100_000, 260_000)
        key_alias, team, user, agent, ip = rng.choice(clients)
        embed = rng.random() < 0.15
        calls.append(Call(f"req-{number:05d}", start_s, start_s + duration_s, rng.randint(1, 30_000), 0 if embed else completion,
                          key_alias=key_alias, team=team, user=user, user_agent=agent, ip=ip,
                          tags=(rng.choice(["eval:nightly", "rag:answer"]),) if rng.random() < 0.3 else (),
                          status="failure" if rng.random() < 0.05 else "success", cache_hit=rng.random() < 0.05,
                          **({"model": EMBED_MODEL, "model_group": EMBED_GROUP} if embed else {})))
    assert set(TEAM_IDS) >= {client[1] for client in clients}
    return calls


@pytest.fixture
def drawn(new_spend_database) -> Iterator[tuple[str, Window, SpendApi, random.Random]]:
    seed = int(os.environ.get("SEATPLAN_TEST_SEED") or random.randrange(1 << 32))
    print(f"SEATPLAN_TEST_SEED={seed}")  # shown with a failure: the same rows again
    rng = random.Random(seed)
    span_s = rng.choice([600, 7200, 3 * 86400])
    dsn = new_spend_database()
    insert_calls(dsn, random_calls(rng, span_s))
    since = T0 + timedelta(seconds=rng.uniform(0, span_s / 3))
    window = Window(since=since, until=since + timedelta(seconds=rng.uniform(span_s / 3, span_s)))
    with serve(dsn, count_cap=rng.randint(5, 80), page_clamp=rng.choice([7, 50, 1000])) as server:
        yield dsn, window, server, rng


def test_the_api_gives_the_database_and_csv_figures(drawn, tmp_path: Path, monkeypatch) -> None:
    dsn, window, server, _ = drawn
    monkeypatch.setenv("LITELLM_MASTER_KEY", KEY)
    url = f"http://127.0.0.1:{server.server_port}/"
    from_api = usage_report(url, window)
    from_postgres = figures(usage_report(dsn, window))
    assert same_figures(figures(from_api), from_postgres)
    assert same_figures(figures(usage_report(export_csv(dsn, tmp_path / "spend.csv"), window)), from_postgres)
    assert from_api.source_format == "litellm-api" and "/spend/logs/v2" in from_api.source
    assert "pages" in from_api.reader and server.requests >= 2


def test_an_open_window_reads_every_row(drawn, monkeypatch) -> None:
    dsn, _, server, _ = drawn
    monkeypatch.setenv("SPEND_KEY", KEY)
    from_api = summary.summarize_usage(f"http://127.0.0.1:{server.server_port}", Window(), SeatMap(), default_runaway_rule(None),
                                   key_env="SPEND_KEY")
    assert same_figures(figures(from_api), figures(usage_report(dsn, Window())))


def test_the_cli_reads_the_key_from_a_file_never_from_a_flag(drawn, tmp_path: Path, capsys, monkeypatch) -> None:
    dsn, window, server, _ = drawn
    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    url = f"http://127.0.0.1:{server.server_port}/"
    span = ["--since", window.since.isoformat(), "--until", window.until.isoformat()]
    done = run_cli(capsys, monkeypatch, "usage", "--from", url, "--key-file", str(key_file), *span, "--json")
    assert done.exit_code == 0, done.stderr
    document = json.loads(done.stdout)
    expected = figures(usage_report(dsn, window))
    assert same_figures({name: document[name] for name in expected}, expected)
    refused = run_cli(capsys, monkeypatch, "usage", "--from", url, *span)
    assert refused.exit_code == 2 and "LITELLM_MASTER_KEY" in refused.stderr and "--key-file" in refused.stderr
    pasted = run_cli(capsys, monkeypatch, "usage", "--from", url, "--key-env", KEY, *span)
    assert pasted.exit_code == 2 and KEY not in pasted.stderr + pasted.stdout
    with_credentials = run_cli(capsys, monkeypatch, "usage", "--from", f"http://admin:{KEY}@127.0.0.1:{server.server_port}/", *span)
    assert with_credentials.exit_code == 2 and KEY not in with_credentials.stderr + with_credentials.stdout
    assert "--key-file" in with_credentials.stderr


def test_a_refused_key_and_a_wrong_url_say_what_to_fix(drawn, monkeypatch) -> None:
    _, window, server, _ = drawn
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-wrong-key-1d9")
    with pytest.raises(SeatplanError) as refused:
        usage_report(f"http://127.0.0.1:{server.server_port}/", window)
    assert "HTTP 401" in refused.value.message and "LITELLM_MASTER_KEY" in (refused.value.fix or "")
    assert "sk-wrong-key-1d9" not in str(refused.value) + (refused.value.fix or "")
    monkeypatch.setenv("LITELLM_MASTER_KEY", KEY)
    with pytest.raises(SeatplanError) as missing:
        usage_report(f"http://127.0.0.1:{server.server_port}/v1", window)
    assert "no /spend/logs/v2" in missing.value.message
    with pytest.raises(SeatplanError) as down:
        usage_report(f"http://127.0.0.1:{free_port()}/", window)
    assert "cannot read the spend logs" in down.value.message


HOSTILE_BODIES = [b"<html>login</html>", b"[" * 100_000 + b"]" * 100_000, b'{"data": "x", "total": 1}',
                  b'{"data": [{"no_id": 1}], "total": 1}', b'{"data": [], "total": -3}']


def hostile_handler(body: bytes) -> type[BaseHTTPRequestHandler]:
    """A server whose answer is not LiteLLM's: it must be a located error, never a traceback or a hang."""
    class Hostile(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Hostile


@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_answers_that_are_not_litellms_are_refused(body: bytes, monkeypatch) -> None:
    monkeypatch.setenv("LITELLM_MASTER_KEY", KEY)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), hostile_handler(body))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(SeatplanError) as refused:
            usage_report(f"http://127.0.0.1:{server.server_port}/", Window(since=T0, until=T0 + timedelta(hours=1)))
        assert "/spend/logs/v2" in (refused.value.where or "") and "LiteLLM" in (refused.value.fix or "")
    finally:
        server.shutdown()
        server.server_close()
