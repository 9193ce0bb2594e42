"""Benchmark `seatplan usage` on 10 million generated spend-log rows, from PostgreSQL and from a CSV export.

    .venv/bin/python benchmarks/bench_usage.py [--rows 10000000] [--cache DIR] [--only postgresql|csv|duckdb ...]

Generates (once, kept in the cache dir, default /var/tmp/seatplan-bench-usage) a PostgreSQL cluster holding
``LiteLLM_SpendLogs`` exactly as LiteLLM's migrations create it, filled server-side with ``generate_series``
(four seats, 200 keys, a week of traffic, nine ~260k-token runaway replies from two keys of one team, a few
impossible rows), and the CSV PostgreSQL's ``COPY ... CSV HEADER`` makes of it. Then times, as child
processes with their peak RSS, after one warm-up run each: ``seatplan usage`` on each source, and a hand-written
DuckDB query of the same figures on the CSV (which does not replay the requests against KV blocks, as
``seatplan usage`` now does for every seat). Target: under 15 s and 2 GB each on 2 cores. Prints the figures
and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the test kits (tests/kits/)

import psycopg  # noqa: E402

from kits.pg_cluster import find_initdb, running_cluster, spendlogs_ddl  # noqa: E402

SECONDS_PER_WEEK = 7 * 24 * 3600

GENERATE_SQL = """
INSERT INTO "LiteLLM_SpendLogs" ("request_id", "call_type", "api_key", "spend", "total_tokens", "prompt_tokens",
    "completion_tokens", "startTime", "endTime", "completionStartTime", "model", "model_id", "model_group",
    "custom_llm_provider", "api_base", "user", "metadata", "cache_hit", "cache_key", "request_tags", "team_id",
    "end_user", "requester_ip_address", "status", "request_duration_ms", "created_at", "updated_at")
SELECT 'chatcmpl-' || md5(g::text),
    CASE WHEN seat = 3 THEN 'aembedding' ELSE 'acompletion' END,
    md5(alias) || md5(alias || '#'), 0.0, prompt + completion, prompt, completion,
    start_ts, end_ts, start_ts,
    (ARRAY['Qwen/Qwen3-30B-A3B-Instruct-2507', 'Qwen/Qwen3-32B', 'Qwen/Qwen3-8B', 'Qwen/Qwen3-Embedding-8B'])[seat + 1], '',
    (ARRAY['qwen3-30b-a3b', 'qwen3-32b', 'qwen3-8b', 'qwen3-embed-8b'])[seat + 1],
    'hosted_vllm', 'http://10.20.0.11:8000/v1', 'user-' || key_number,
    jsonb_build_object('status', status, 'user_agent', user_agent, 'user_api_key_alias', alias,
        'user_api_key_team_alias', team, 'user_api_key_team_id', 'team-id-' || team, 'user_api_key_user_id', 'user-' || key_number,
        'requester_ip_address', ip, 'error_information', CASE WHEN status = 'failure' THEN '{{"error_code": "400"}}'::jsonb END),
    CASE WHEN g % 50 = 0 THEN 'True' ELSE 'False' END, 'Cache OFF',
    jsonb_build_array('User-Agent: ' || split_part(user_agent, '/', 1), 'User-Agent: ' || user_agent)
        || CASE WHEN key_number % 10 = 0 THEN '["rag:answer"]'::jsonb ELSE '[]'::jsonb END,
    'team-id-' || team, '', ip, status, (extract(epoch FROM end_ts - start_ts) * 1000)::int, end_ts, end_ts
FROM (
    SELECT g, seat, key_number, start_ts, prompt, completion, status,
        CASE WHEN g % 1000003 = 0 THEN start_ts - interval '1 second'
             ELSE start_ts + make_interval(secs => CASE WHEN runaway THEN 3300 + random() * 600 ELSE 0.2 + power(random(), 3) * 120 END)
        END AS end_ts,
        CASE WHEN runaway THEN CASE WHEN (g / {runaway_stride}) % 2 = 0 THEN 'ci-evals' ELSE 'ci-evals-2' END ELSE 'key-' || key_number END AS alias,
        CASE WHEN runaway THEN 'ml-research' ELSE 'team-' || (key_number / 20) END AS team,
        (ARRAY['OpenAI/Python 1.109.1', 'python-httpx/0.28.1', 'Mozilla/5.0 (X11; Linux x86_64)', 'litellm/1.110.2',
               'curl/8.5.0'])[1 + CASE WHEN key_number < 10 THEN g % 5 ELSE key_number % 5 END] AS user_agent,
        '10.0.' || key_number || '.' || CASE WHEN key_number < 10 THEN g % 3 ELSE 1 END AS ip
    FROM (
        SELECT g, g % 4 AS seat, (g * 7919) % 200 AS key_number, runaway,
            TIMESTAMP '2026-11-16 00:00:00' + make_interval(secs => (g - 1) * {spacing_s} + random() * 5) AS start_ts,
            (power(random(), 2) * 16000)::int AS prompt,
            CASE WHEN runaway THEN 259000 + (random() * 2000)::int WHEN g % 4 = 3 THEN 0
                 ELSE (power(random(), 3) * 4000)::int END AS completion,
            CASE WHEN g % 97 = 0 THEN 'failure' ELSE 'success' END AS status
        FROM (SELECT g, g % {runaway_stride} = 16 AND g / {runaway_stride} < 9 AS runaway FROM generate_series(CAST(1 AS BIGINT), {rows}) AS g) AS numbered
    ) AS drawn
) AS rows_to_write
"""

# Nine runaways: rows 16, 16 + stride, ... (stride a multiple of 4, so all on the first seat), from two keys of one team.
# A hand-written DuckDB query of the same figures, straight off the CSV (no rejected-row accounting, no
# shared-key analysis): what an operator would type into duckdb themselves.
HAND_WRITTEN_DUCKDB = """
import duckdb, sys
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
con.execute("SET enable_progress_bar = false")
con.execute(f"CREATE TEMP VIEW logs AS SELECT request_id, model, \\"startTime\\" AS s, \\"endTime\\" AS e, prompt_tokens AS p, "
            f"completion_tokens AS c, metadata->>'user_api_key_alias' AS key_alias, metadata->>'user_api_key_team_alias' AS team "
            f"FROM read_csv('{sys.argv[1]}', header = true) WHERE \\"endTime\\" >= \\"startTime\\" AND prompt_tokens >= 0 AND completion_tokens >= 0")
con.execute("CREATE TEMP TABLE req AS SELECT * FROM logs")
print(con.execute('''SELECT model, count(*), quantile_disc(p, [0.5, 0.9, 0.99]), max(p), quantile_disc(c, [0.5, 0.9, 0.99]), max(c)
                     FROM req GROUP BY model''').fetchall())
print(con.execute('''WITH th AS (SELECT model, greatest(16384, 32 * quantile_disc(c, 0.5)) AS t FROM req GROUP BY model),
    ev AS (SELECT r.model, s AS t, p + c AS d, 1 AS n, CASE WHEN c >= th.t THEN 0 ELSE p + c END AS d2 FROM req r JOIN th USING (model)
           UNION ALL SELECT r.model, e, -(p + c), -1, CASE WHEN c >= th.t THEN 0 ELSE -(p + c) END FROM req r JOIN th USING (model)),
    net AS (SELECT model, t, sum(d) AS d, sum(n) AS n, sum(d2) AS d2 FROM ev GROUP BY model, t),
    run AS (SELECT model, sum(d) OVER w AS tokens, sum(n) OVER w AS requests, sum(d2) OVER w AS tokens2 FROM net
            WINDOW w AS (PARTITION BY model ORDER BY t ROWS UNBOUNDED PRECEDING))
    SELECT model, max(tokens), max(requests), max(tokens2) FROM run GROUP BY model''').fetchall())
print(con.execute('''WITH th AS (SELECT model, greatest(16384, 32 * quantile_disc(c, 0.5)) AS t FROM req GROUP BY model)
    SELECT r.model, key_alias, team, count(*), max(c) FROM req r JOIN th USING (model) WHERE c >= th.t GROUP BY ALL''').fetchall())
"""

SEATPLAN_USAGE = [sys.executable, "-m", "seatplan.cli", "usage"]


def ratio(wall_s: float, hand_wall_s: float | None) -> str:
    return f"{wall_s / hand_wall_s:.2f}x" if hand_wall_s else "-"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timed_child(command: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS of that one child in MiB, its stdout), measured with wait4 on the child."""
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{command[:3]} failed:\n{stderr.read().decode()[-3000:]}")
        return wall_s, usage.ru_maxrss / 1024, stdout.read().decode()


def prepare_database(dsn: str, rows: int) -> str:
    database_dsn = dsn.rsplit("/", 1)[0] + f"/spend_{rows}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (f"spend_{rows}",)).fetchone()
        if exists:
            return database_dsn
        admin.execute(f'DROP DATABASE IF EXISTS "spend_{rows}_loading"')
        admin.execute(f'CREATE DATABASE "spend_{rows}_loading"')
    loading_dsn = dsn.rsplit("/", 1)[0] + f"/spend_{rows}_loading"
    ddl = spendlogs_ddl()
    table_ddl = "\n".join(line for line in ddl.splitlines() if not line.startswith("CREATE INDEX"))
    index_ddl = "\n".join(line for line in ddl.splitlines() if line.startswith("CREATE INDEX"))
    started = time.perf_counter()
    with psycopg.connect(loading_dsn, autocommit=True) as connection:
        connection.execute(table_ddl)
        connection.execute("SET maintenance_work_mem = '1GB'")
        connection.execute(GENERATE_SQL.format(rows=rows, spacing_s=SECONDS_PER_WEEK / rows, runaway_stride=rows // 9 // 4 * 4))
        print(f"generated {rows:,} rows in {time.perf_counter() - started:.0f} s", flush=True)
        # Loaded first, indexed after: the same table LiteLLM's migrations leave, built faster.
        connection.execute(index_ddl)
        connection.execute('VACUUM ANALYZE "LiteLLM_SpendLogs"')
        print(f"indexed and vacuumed after {time.perf_counter() - started:.0f} s", flush=True)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "spend_{rows}_loading" RENAME TO "spend_{rows}"')
    return database_dsn


def prepare_csv(dsn: str, path: Path) -> Path:
    if path.exists():
        return path
    partial = path.with_suffix(".partial")
    started = time.perf_counter()
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor, partial.open("wb") as out:
        with cursor.copy('COPY (SELECT * FROM "LiteLLM_SpendLogs") TO STDOUT WITH (FORMAT csv, HEADER)') as copy:
            for block in copy:
                out.write(block)
    partial.rename(path)
    print(f"exported CSV ({path.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--cache", type=Path, default=Path("/var/tmp/seatplan-bench-usage"),
                        help="kept between runs; as root the postgres user must be able to reach it")
    parser.add_argument("--prepare-only", action="store_true", help="generate the database and CSV, time nothing")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per source, after one warm-up run")
    parser.add_argument("--only", choices=("postgresql", "csv", "duckdb"), action="append",
                        help="time only these runs (repeatable); the ratio needs duckdb too")
    arguments = parser.parse_args()
    initdb = find_initdb()
    if initdb is None:
        raise SystemExit("needs PostgreSQL's initdb (scripts/install-test-deps.sh installs Debian's postgresql)")
    arguments.cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, float]] = {}
    with running_cluster(arguments.cache / "pg", free_port(), initdb, {"shared_buffers": "512MB"}) as dsn:
        database_dsn = prepare_database(dsn, arguments.rows)
        csv_path = prepare_csv(database_dsn, arguments.cache / f"spend_{arguments.rows}.csv")
        if arguments.prepare_only:
            return
        runs = {
            "seatplan usage (PostgreSQL)": [*SEATPLAN_USAGE, "--from", database_dsn, "--json"],
            "seatplan usage (CSV)": [*SEATPLAN_USAGE, "--from", str(csv_path), "--json"],
            "hand-written DuckDB query (CSV)": [sys.executable, "-c", HAND_WRITTEN_DUCKDB, str(csv_path)],
        }
        wanted = {"postgresql": "seatplan usage (PostgreSQL)", "csv": "seatplan usage (CSV)",
                  "duckdb": "hand-written DuckDB query (CSV)"}
        if arguments.only:
            runs = {name: command for name, command in runs.items() if name in {wanted[key] for key in arguments.only}}
        for name, command in runs.items():
            # The first run warms the page cache (the table and the file do not both fit in RAM here);
            # the figures are the median and best of the timed runs after it.
            timed_child(command)
            walls, peaks = [], []
            for _ in range(arguments.repeat):
                wall_s, peak_mib, stdout = timed_child(command)
                walls.append(wall_s)
                peaks.append(peak_mib)
            # The machine may be shared: the load average says how much of its 2 cores the runs really had.
            results[name] = {"wall_s": round(statistics.median(walls), 2), "best_wall_s": round(min(walls), 2),
                             "peak_rss_mib": round(max(peaks)), "load_average_1m": os.getloadavg()[0]}
            if "seatplan" in name:
                report = json.loads(stdout)
                results[name]["runaways"] = report["overall"]["runaway_count"]
                results[name]["rejected_rows"] = report["rejected_rows"]
                # The KV replay runs in every report (usage/replay.py): its peaks show it did here too.
                results[name]["kv_replay_peak_blocks"] = {model: usage["kv_replay"]["peak_blocks"]
                                                          for model, usage in report["models"].items() if usage.get("kv_replay")}
            print(name, results[name], flush=True)
    hand = results.get("hand-written DuckDB query (CSV)", {}).get("wall_s")
    print(json.dumps({"rows": arguments.rows, "cores": os.cpu_count(), "results": results}, indent=2))
    print("\n| run | median wall s | best wall s | peak RSS MiB | vs hand-written DuckDB | load avg (1 min) |\n"
          "|---|---:|---:|---:|---:|---:|")
    for name, figures in results.items():
        print(f"| {name} | {figures['wall_s']:.1f} | {figures['best_wall_s']:.1f} | {figures['peak_rss_mib']:.0f} "
              f"| {ratio(figures['wall_s'], hand)} | {figures['load_average_1m']:.1f} |")


if __name__ == "__main__":
    main()
