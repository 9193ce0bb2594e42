"""Spend-log rows with answers worked out by hand, written the way LiteLLM writes them.

Rows go into a real ``LiteLLM_SpendLogs`` table; the CSV is what PostgreSQL's own ``COPY ... CSV HEADER``
makes of that table, and the JSON Lines are the ``GET /spend/logs`` rendering of the same rows (ISO
datetimes with ``Z``, JSON columns as objects), so all three sources carry the same calls.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

T0 = datetime(2026, 11, 23, 0, 0, 0)
SINCE = T0 + timedelta(seconds=1000)
UNTIL = T0 + timedelta(seconds=36000)
CHAT_MODEL, CHAT_GROUP = "Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"
EMBED_MODEL, EMBED_GROUP = "Qwen/Qwen3-Embedding-8B", "qwen3-embed"
BROWSER = "Mozilla/5.0 (X11; Linux x86_64)"
OPENAI = "OpenAI/Python 1.109.1"
HTTPX = "python-httpx/0.28.1"
TEAM_IDS = {"apps": "7c1d0f3e-apps", "ml-research": "a3e4b2c1-ml", "search": "5b6c7d8e-search"}


@dataclass(frozen=True)
class Call:
    request_id: str
    start_s: float
    end_s: float
    prompt_tokens: int
    completion_tokens: int
    key_alias: str = "alice-laptop"
    team: str = "ml-research"
    user: str = "alice@corp.example"
    user_agent: str = OPENAI
    ip: str = "10.0.0.7"
    tags: tuple[str, ...] = ()
    model: str = CHAT_MODEL
    model_group: str = CHAT_GROUP
    status: str = "success"
    cache_hit: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# Timeline of the chat seat inside [SINCE, UNTIL) = [1000 s, 36000 s), tokens in flight:
#   1000 Z (open at the window start, enters at 1000) 5000 + A 10000 = 15000 (2 requests)
#   2000 A ends as B starts: ends first, so 10000 (starts first would have made 20000)
#   4000 C and D start together: 7000 (2 requests)
#   6000 runaway R1 262000; 7000 + E = 272000 (2 requests)  <- peak tokens
#   20000 runaway R2 260000, still running at UNTIL; 30000 + G 900 = 260900 (2 requests)
#   35000 F starts and ends at once (a cache hit): never in flight
# Without runaways the peak is 15000 tokens at 1000 s and 2 requests.
SCENARIO: tuple[Call, ...] = (
    Call("Z-before-window", 0, 1500, 3000, 2000, key_alias="openwebui", team="apps", user="owui", user_agent=BROWSER, ip="10.0.0.5"),
    Call("A", 1000, 2000, 6000, 4000, key_alias="openwebui", team="apps", user="owui", user_agent=BROWSER, ip="10.0.0.5"),
    Call("B", 2000, 3000, 5000, 5000, key_alias="openwebui", team="apps", user="owui", user_agent=OPENAI, ip="10.0.0.5"),
    Call("C", 4000, 4500, 2000, 1000),
    Call("D", 4000, 5000, 3000, 1000),
    Call("R1-runaway", 6000, 9000, 2000, 260000, key_alias="ci-evals", user="ci-bot", user_agent=HTTPX, ip="10.0.0.9", tags=("eval:nightly",)),
    Call("E", 7000, 8000, 8000, 2000),
    Call("R2-runaway-open", 20000, 40000, 1000, 259000, key_alias="ci-evals-2", user="ci-bot", user_agent=HTTPX, ip="10.0.0.9", tags=("eval:nightly",)),
    Call("G-failure", 30000, 30500, 900, 0, key_alias="svc-rag", team="search", user="svc", ip="10.0.0.11", tags=("rag:answer",), status="failure"),
    Call("F-cache-hit", 35000, 35000, 700, 300, key_alias="svc-rag", team="search", user="svc", ip="10.0.0.11", tags=("rag:answer",), cache_hit=True),
    Call("late", 36000, 36100, 100, 100),
    # The embedding seat: H and I overlap, 800 tokens and 2 requests at 1250 s.
    Call("H", 1200, 1300, 500, 0, key_alias="svc-rag", team="search", user="svc", ip="10.0.0.11", tags=("rag:embed",), model=EMBED_MODEL, model_group=EMBED_GROUP),
    Call("I", 1250, 1260, 300, 0, key_alias="svc-rag", team="search", user="svc", ip="10.0.0.11", tags=("rag:embed",), model=EMBED_MODEL, model_group=EMBED_GROUP),
    # Impossible rows: counted, never in a figure. The last one starts after the window and is not counted.
    Call("J-end-before-start", 10000, 9000, 100, 100),
    Call("K-negative", 11000, 11100, -5, 100),
    Call("L-no-model", 12000, 12100, 100, 100, model="", model_group=""),
    Call("M-outside", 50000, 49000, 100, 100),
)


def _moment(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def spend_log_row(call: Call) -> dict[str, Any]:
    """The columns LiteLLM's writer fills for one call (``get_logging_payload``)."""
    key_hash = hashlib.sha256(call.key_alias.encode()).hexdigest()
    product = call.user_agent.split("/")[0]
    failure = call.status == "failure"
    metadata = {
        "status": call.status,
        "user_agent": call.user_agent,
        "user_api_key": key_hash,
        "user_api_key_alias": call.key_alias,
        "user_api_key_team_id": TEAM_IDS[call.team],
        "user_api_key_team_alias": call.team,
        "user_api_key_user_id": call.user,
        "requester_ip_address": call.ip,
        "error_information": {"error_code": "400", "error_class": "BadRequestError"} if failure else None,
        **call.extra,
    }
    return {
        "request_id": call.request_id,
        "call_type": "aembedding" if call.model == EMBED_MODEL else "acompletion",
        "api_key": key_hash,
        "spend": 0.0,
        "total_tokens": call.prompt_tokens + call.completion_tokens,
        "prompt_tokens": call.prompt_tokens,
        "completion_tokens": call.completion_tokens,
        "startTime": _moment(call.start_s),
        "endTime": _moment(call.end_s),
        "completionStartTime": _moment(call.end_s),
        "model": call.model,
        "model_id": "",
        "model_group": call.model_group,
        "custom_llm_provider": "hosted_vllm",
        "api_base": "http://10.20.0.11:8000/v1",
        "user": call.user,
        "metadata": metadata,
        "cache_hit": str(call.cache_hit),
        "cache_key": "Cache OFF",
        "request_tags": ["User-Agent: " + product, "User-Agent: " + call.user_agent, *call.tags],
        "team_id": TEAM_IDS[call.team],
        "end_user": "",
        "requester_ip_address": call.ip,
        "session_id": hashlib.md5(call.request_id.encode()).hexdigest(),
        "status": call.status,
        "organization_id": "",
        "request_duration_ms": int((call.end_s - call.start_s) * 1000),
    }


JSON_COLUMNS = ("metadata", "request_tags")


def insert_calls(dsn: str, calls: tuple[Call, ...] | list[Call]) -> None:
    rows = [spend_log_row(call) for call in calls]
    columns = list(rows[0])
    names = ", ".join(f'"{name}"' for name in columns)
    placeholders = ", ".join(["%s"] * len(columns))
    with psycopg.connect(dsn) as connection:
        connection.cursor().executemany(
            f'INSERT INTO "LiteLLM_SpendLogs" ({names}) VALUES ({placeholders})',
            [[Jsonb(row[name]) if name in JSON_COLUMNS else row[name] for name in columns] for row in rows],
        )


def export_csv(dsn: str, path: Path) -> Path:
    """What ``\\copy (SELECT * FROM "LiteLLM_SpendLogs") TO 'x.csv' CSV HEADER`` writes."""
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor, path.open("wb") as out:
        with cursor.copy('COPY (SELECT * FROM "LiteLLM_SpendLogs") TO STDOUT WITH (FORMAT csv, HEADER)') as copy:
            for block in copy:
                out.write(block)
    return path


def _api_time(moment: datetime) -> str:
    """pydantic v2 / FastAPI rendering of LiteLLM's UTC datetimes: ``2026-11-26T08:14:03.512000Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond:06d}" if moment.microsecond else "") + "Z"


def export_jsonl(dsn: str, path: Path) -> Path:
    """The rows as ``GET /spend/logs`` items, one per line, newest first like the API."""
    with psycopg.connect(dsn, row_factory=dict_row) as connection:
        rows = connection.execute('SELECT * FROM "LiteLLM_SpendLogs" ORDER BY "startTime" DESC').fetchall()
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            item = {name: _api_time(value) if isinstance(value, datetime) else value for name, value in row.items()}
            out.write(json.dumps(item) + "\n")
    return path


def _csv_time(moment: datetime) -> str:
    """PostgreSQL's CSV text for TIMESTAMP(3): trailing zeros of the fraction trimmed, no fraction at .000."""
    text = moment.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0")
    return text.rstrip(".")


def write_csv(calls: tuple[Call, ...] | list[Call], path: Path, drop_columns: tuple[str, ...] = ()) -> Path:
    """The rows as PostgreSQL's ``COPY ... CSV HEADER`` writes them, without needing a server."""
    rows = [spend_log_row(call) for call in calls]
    columns = [name for name in rows[0] if name not in drop_columns]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([
                _csv_time(row[name]) if isinstance(row[name], datetime)
                else json.dumps(row[name]) if name in JSON_COLUMNS else row[name]
                for name in columns
            ])
    return path
