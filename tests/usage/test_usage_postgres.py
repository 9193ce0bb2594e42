"""Every figure from a real PostgreSQL holding LiteLLM's table, against answers worked out by hand (scenario.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psycopg
import pytest

import seatplan.usage.postgres as postgres
from kits.pg_cluster import SPENDLOGS_SQL
from kits.spend_scenario import CHAT_MODEL, EMBED_MODEL, SCENARIO, SINCE, UNTIL, Call, export_csv, export_jsonl, insert_calls
from kits.usage import figures, usage_report
from seatplan.errors import SeatplanError
from seatplan.usage.postgres import COLUMNS, INT8_ELEMENT, TID_ELEMENT, RowColumns, page_ranges
from seatplan.usage.queries import Window
from seatplan.usage.sources import open_source

pytestmark = pytest.mark.postgres
WINDOW = Window(since=SINCE, until=UNTIL)


@pytest.fixture
def scenario_dsn(new_spend_database) -> str:
    dsn = new_spend_database()
    insert_calls(dsn, SCENARIO)
    return dsn


def test_chat_seat_figures_match_the_hand_worked_answers(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn, WINDOW)
    assert report.reader == "PostgreSQL"
    chat = report.models[CHAT_MODEL]
    assert chat.model_names == [CHAT_MODEL, "qwen3-30b-a3b"]
    assert (chat.calls, chat.errors, chat.cache_hits, chat.rejected_rows) == (9, 1, 1, 2)
    assert (chat.prompt_tokens_p50, chat.prompt_tokens_p90, chat.prompt_tokens_p99, chat.prompt_tokens_max) == (2000, 8000, 8000, 8000)
    assert (chat.completion_tokens_p50, chat.completion_tokens_p90, chat.completion_tokens_p99, chat.completion_tokens_max) == (
        2000, 260000, 260000, 260000)
    assert chat.runaway_threshold_tokens == 64000  # 32 x the median completion (2000)
    assert chat.peak_inflight_tokens == 272000
    assert chat.peak_inflight_tokens_without_runaways == 15000
    assert (chat.peak_inflight_requests, chat.peak_inflight_requests_without_runaways) == (2, 2)


def test_runaways_are_grouped_by_key_with_the_largest_examples(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn, WINDOW)
    chat = report.models[CHAT_MODEL]
    assert chat.runaway_count == 2
    summary = [(group.key_alias, group.team, group.user, group.count, group.max_completion_tokens, group.example_request_ids)
               for group in chat.runaways]
    assert summary == [
        ("ci-evals", "ml-research", "ci-bot", 1, 260000, ["R1-runaway"]),
        ("ci-evals-2", "ml-research", "ci-bot", 1, 259000, ["R2-runaway-open"]),
    ]
    assert chat.runaways[0].request_tags == ["User-Agent: python-httpx", "User-Agent: python-httpx/0.28.1", "eval:nightly"]
    assert [group.key_alias for group in report.runaways_by_key] == ["ci-evals", "ci-evals-2"]


def test_embedding_seat_and_overall_figures(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn, WINDOW)
    embed = report.models[EMBED_MODEL]
    assert (embed.calls, embed.errors, embed.cache_hits) == (2, 0, 0)
    assert (embed.prompt_tokens_p50, embed.prompt_tokens_p90, embed.prompt_tokens_max) == (300, 500, 500)
    assert (embed.peak_inflight_tokens, embed.peak_inflight_requests, embed.runaway_count) == (800, 2, 0)
    overall = report.overall
    assert overall.calls == 11
    assert (overall.prompt_tokens_p50, overall.prompt_tokens_p90, overall.prompt_tokens_p99) == (2000, 6000, 8000)
    # 272000 when the chat runaway overlaps E; 4 requests at 1250 s (Z, A, H, I) holding 15800 tokens.
    assert (overall.peak_inflight_tokens, overall.peak_inflight_requests) == (272000, 4)
    assert (overall.peak_inflight_tokens_without_runaways, overall.peak_inflight_requests_without_runaways) == (15800, 4)
    assert overall.runaway_count == 2


def test_impossible_rows_are_counted_with_examples_and_left_out(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn, WINDOW)
    assert report.rejected_rows == 3
    assert report.rejected_by_reason == {"end_before_start": 1, "missing_model": 1, "negative_tokens": 1}
    assert report.rejected_example_request_ids == {
        "end_before_start": ["J-end-before-start"], "missing_model": ["L-no-model"], "negative_tokens": ["K-negative"]}


def test_shared_keys_are_found_by_user_agent_and_by_request_tags(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn, WINDOW)
    assert report.shared_keys == ["svc-rag", "openwebui"]
    by_alias = {key.key_alias: key for key in report.keys}
    assert by_alias["openwebui"].user_agents == ["Mozilla/5.0 (X11; Linux x86_64)", "OpenAI/Python 1.109.1"]
    assert by_alias["svc-rag"].request_tag_sets == [["rag:answer"], ["rag:embed"]]
    assert by_alias["svc-rag"].seats == [CHAT_MODEL, EMBED_MODEL]
    assert not by_alias["ci-evals"].shared and by_alias["ci-evals"].runaway_count == 1
    assert not by_alias["alice-laptop"].shared and by_alias["alice-laptop"].calls == 3


def test_without_a_window_every_row_counts(scenario_dsn: str) -> None:
    report = usage_report(scenario_dsn)
    chat = report.models[CHAT_MODEL]
    assert chat.calls == 11  # Z and "late" too
    assert chat.peak_inflight_tokens == 272000
    assert report.rejected_by_reason["end_before_start"] == 2  # M, outside the window, now counts


def test_operator_threshold_is_inclusive(scenario_dsn: str) -> None:
    chat = usage_report(scenario_dsn, WINDOW, runaway_tokens=5000).models[CHAT_MODEL]
    assert chat.runaway_threshold_tokens == 5000
    assert chat.runaway_count == 3  # B's 5000-token reply is at the threshold
    assert {group.key_alias for group in chat.runaways} == {"ci-evals", "ci-evals-2", "openwebui"}


def test_fleet_maps_litellm_names_to_served_names(scenario_dsn: str, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "hosts: [{name: gpu-node-01, gpus: [{index: 0, total_bytes: 80GiB}, {index: 1, total_bytes: 80GiB}]}]\n"
        "seats:\n"
        f"  - {{name: chat, model: Qwen/Qwen3-8B, served_model_name: {CHAT_MODEL}, max_model_len: 256K, port: 8000}}\n"
        "  - {name: embed, model: Qwen/Qwen3-8B, served_model_name: qwen3-embed, port: 8001}\n"
        "  - {name: idle, model: Qwen/Qwen3-8B, port: 8002}\n"
    )
    report = usage_report(scenario_dsn, WINDOW, fleet=fleet)
    assert sorted(report.models) == [CHAT_MODEL, "idle", "qwen3-embed"]
    assert (report.models[CHAT_MODEL].seat, report.models[CHAT_MODEL].max_model_len) == ("chat", 262144)
    assert report.models["qwen3-embed"].seat == "embed"
    assert report.models["qwen3-embed"].model_names == [EMBED_MODEL, "qwen3-embed"]
    assert (report.models["idle"].calls, report.models["idle"].peak_inflight_tokens) == (0, 0)
    assert report.unmapped_models == []


def test_session_is_read_only(scenario_dsn: str) -> None:
    with open_source(scenario_dsn) as source:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            source.connection.execute('DELETE FROM "LiteLLM_SpendLogs"')


def test_csv_and_jsonl_exports_give_the_same_figures(scenario_dsn: str, tmp_path: Path) -> None:
    from_postgres = figures(usage_report(scenario_dsn, WINDOW))
    csv = export_csv(scenario_dsn, tmp_path / "spend.csv")
    jsonl = export_jsonl(scenario_dsn, tmp_path / "spend.jsonl")
    assert figures(usage_report(csv, WINDOW)) == from_postgres
    assert figures(usage_report(jsonl, WINDOW)) == from_postgres


def test_litellm_samples_agree_across_postgres_csv_and_jsonl(new_spend_database, format_fixtures: Path) -> None:
    dsn = new_spend_database()
    inserts = SPENDLOGS_SQL.read_text(encoding="utf-8")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(inserts[inserts.index("\nINSERT INTO"):])
    from_postgres = usage_report(dsn)
    chat = from_postgres.models["Qwen/Qwen3-30B-A3B-Instruct-2507"]
    assert (chat.calls, chat.errors, chat.runaway_count) == (17, 3, 3)
    assert [(group.key_alias, group.team, group.count) for group in chat.runaways] == [("ci-evals", "ml-research", 3)]
    assert from_postgres.shared_keys == ["svc-rag-backend"]
    assert figures(usage_report(format_fixtures / "litellm_spend_logs.csv")) == figures(from_postgres)
    assert figures(usage_report(format_fixtures / "litellm_spend_logs.jsonl")) == figures(from_postgres)


def test_missing_table_and_bad_dsn_are_user_errors(new_spend_database, postgres_dsn: str) -> None:
    with pytest.raises(SeatplanError, match="no \"LiteLLM_SpendLogs\" table"):
        usage_report(postgres_dsn)
    with pytest.raises(SeatplanError, match="cannot connect") as raised:
        usage_report("postgresql://seatplan:secret@127.0.0.1:1/none")
    assert "secret" not in str(raised.value)


def _busy_table(new_spend_database) -> str:
    """The scenario plus 3000 more calls from many clients: the table spans dozens of heap pages."""
    dsn = new_spend_database()
    filler = [Call(f"fill-{number}", 1000 + number * 7 % 30000, 1000 + number * 7 % 30000 + number % 50, number % 900,
                   number % 300, key_alias=f"key-{number % 40}", user_agent=f"agent/{number % 3}", ip=f"10.0.1.{number % 5}")
              for number in range(3000)]
    insert_calls(dsn, list(SCENARIO) + filler)
    return dsn


def test_page_ranges_on_two_connections_read_exactly_the_table(new_spend_database, tmp_path: Path, monkeypatch) -> None:
    """One heap page per range, so both connections read many ranges; the report equals the CSV export's."""
    dsn = _busy_table(new_spend_database)
    whole = figures(usage_report(dsn, WINDOW))
    monkeypatch.setattr(postgres, "PAGES_PER_RANGE", 1)
    opened: list[str] = []
    real_helper = postgres._snapshot_connection
    monkeypatch.setattr(postgres, "_snapshot_connection", lambda *args: opened.append("helper") or real_helper(*args))
    in_ranges = figures(usage_report(dsn, WINDOW))
    assert opened == ["helper"]
    assert in_ranges == whole
    assert figures(usage_report(export_csv(dsn, tmp_path / "spend.csv"), WINDOW)) == whole
    assert whole["models"][CHAT_MODEL]["calls"] > 3000


def test_helper_connection_reads_the_same_snapshot(new_spend_database, monkeypatch) -> None:
    """A row committed after the read began is in no page range of this report, whichever connection reads it."""
    dsn = _busy_table(new_spend_database)
    before = usage_report(dsn, WINDOW).models[CHAT_MODEL].calls
    monkeypatch.setattr(postgres, "PAGES_PER_RANGE", 1)
    real_helper = postgres._snapshot_connection

    def helper_after_a_new_row(*args):
        insert_calls(dsn, [Call("after-the-snapshot", 1500, 1600, 10, 10)])
        return real_helper(*args)

    monkeypatch.setattr(postgres, "_snapshot_connection", helper_after_a_new_row)
    assert usage_report(dsn, WINDOW).models[CHAT_MODEL].calls == before
    monkeypatch.undo()
    with psycopg.connect(dsn) as connection:
        assert connection.execute("SELECT count(*) FROM \"LiteLLM_SpendLogs\" WHERE request_id = 'after-the-snapshot'").fetchone() == (1,)
    assert usage_report(dsn, WINDOW).models[CHAT_MODEL].calls == before + 1


def test_one_connection_when_the_server_cannot_share_a_snapshot(new_spend_database, monkeypatch) -> None:
    dsn = _busy_table(new_spend_database)
    whole = figures(usage_report(dsn, WINDOW))
    monkeypatch.setattr(postgres, "PAGES_PER_RANGE", 1)
    monkeypatch.setattr(postgres.PostgresSource, "_export_snapshot", lambda self: None)
    monkeypatch.setattr(postgres, "_snapshot_connection", lambda *args: pytest.fail("no helper without a snapshot"))
    assert figures(usage_report(dsn, WINDOW)) == whole


def test_before_postgresql_14_the_table_is_read_in_one_statement(new_spend_database, monkeypatch) -> None:
    """Without TID range scans each page range would scan the whole table; older servers get one statement.
    (The server here is newer: its reported version is lowered, and the statements it is sent are checked.)"""


    dsn = _busy_table(new_spend_database)
    whole = figures(usage_report(dsn, WINDOW))
    monkeypatch.setattr(postgres, "PAGES_PER_RANGE", 1)
    monkeypatch.setattr(postgres, "TID_RANGE_SCAN_VERSION", psycopg.connect(dsn).info.server_version + 1)
    sent: list[str] = []
    real_run = postgres.PostgresSource._run_in_parallel
    monkeypatch.setattr(postgres.PostgresSource, "_run_in_parallel",
                        lambda self, statements, columns: sent.extend(statements) or real_run(self, statements, columns))
    assert figures(usage_report(dsn, WINDOW)) == whole
    assert len(sent) == 1 and "ctid >=" not in sent[0]


def test_row_columns_grow_past_the_estimate_and_keep_every_range() -> None:
    """Ranges arrive in any order and may outnumber the table's estimated rows; each row lands once."""
    def page_range(block: int, rows: int) -> list[np.ndarray]:
        ctid = np.zeros(rows, dtype=TID_ELEMENT)
        ctid["length"], ctid["block"], ctid["offset"] = 6, block, np.arange(1, rows + 1)
        numbers = []
        for column in range(len(COLUMNS) - 1):
            value = np.zeros(rows, dtype=INT8_ELEMENT)
            value["length"], value["value"] = 8, block * 1000 + column * 100 + np.arange(rows)
            numbers.append(value)
        return [ctid, *numbers]

    columns = RowColumns(estimated_rows=0)
    sizes = {7: 900, 2: 0, 5: 1500, 1: 3}
    for block, rows in sizes.items():
        columns.append(page_range(block, rows) if rows else [None] * len(COLUMNS))
    table = columns.rows()
    assert len(table.block) == sum(sizes.values())
    assert table.block.dtype == np.uint32 and table.offset.dtype == np.uint16 and table.start.dtype == np.int64
    for block, rows in sizes.items():
        mine = table.block == block
        assert mine.sum() == rows
        assert table.offset[mine].tolist() == list(range(1, rows + 1))
        assert table.key[mine].tolist() == [block * 1000 + 400 + row for row in range(rows)]


def test_page_ranges_cover_every_page() -> None:
    assert page_ranges(0, 4) == [(0, None)]
    assert page_ranges(1, 4) == [(0, None)]
    assert page_ranges(10, 4) == [(0, 3), (3, 6), (6, 9), (9, None)]
    assert page_ranges(8, 4) == [(0, 2), (2, 4), (4, 6), (6, None)]


def test_an_empty_table_and_an_empty_export_give_an_empty_report(new_spend_database, tmp_path: Path) -> None:
    dsn = new_spend_database()
    from_postgres = usage_report(dsn, WINDOW)
    assert (from_postgres.models, from_postgres.rejected_rows, from_postgres.keys) == ({}, 0, [])
    assert from_postgres.overall.calls == 0 and from_postgres.overall.peak_inflight_tokens == 0
    assert figures(usage_report(export_csv(dsn, tmp_path / "empty.csv"), WINDOW)) == figures(from_postgres)
