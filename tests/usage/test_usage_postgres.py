"""Every figure from a real PostgreSQL holding LiteLLM's table, against answers worked out by hand (scenario.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seatplan.errors import SeatplanError
from seatplan.usage.queries import Window
from seatplan.usage.sources import open_source

from .pg_cluster import SPENDLOGS_SQL
from .helpers import figures, usage_report
from .scenario import CHAT_MODEL, EMBED_MODEL, SCENARIO, SINCE, UNTIL, export_csv, export_jsonl, insert_calls

pytestmark = pytest.mark.postgres
WINDOW = Window(since=SINCE, until=UNTIL)


@pytest.fixture
def scenario_dsn(new_spend_database) -> str:
    dsn = new_spend_database()
    insert_calls(dsn, SCENARIO)
    return dsn


def test_chat_seat_figures_match_the_hand_worked_answers(scenario_dsn: str) -> None:
    chat = usage_report(scenario_dsn, WINDOW).models[CHAT_MODEL]
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
    import psycopg

    with open_source(scenario_dsn, {}) as source:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            source.connection.execute('DELETE FROM "LiteLLM_SpendLogs"')


def test_csv_and_jsonl_exports_give_the_same_figures(scenario_dsn: str, tmp_path: Path) -> None:
    from_postgres = figures(usage_report(scenario_dsn, WINDOW))
    csv = export_csv(scenario_dsn, tmp_path / "spend.csv")
    jsonl = export_jsonl(scenario_dsn, tmp_path / "spend.jsonl")
    assert figures(usage_report(csv, WINDOW)) == from_postgres
    assert figures(usage_report(jsonl, WINDOW)) == from_postgres


def test_litellm_samples_agree_across_postgres_csv_and_jsonl(new_spend_database, format_fixtures: Path) -> None:
    import psycopg

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
