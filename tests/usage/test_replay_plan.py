"""The KV replay end to end: read from PostgreSQL and from a CSV export to the same hand-worked figures, then
read by ``seatplan plan --usage`` at the seat's planned KV and shown by ``plan`` and ``explain``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from kits.spend_scenario import CHAT_MODEL, EMBED_MODEL, SCENARIO, SINCE, T0, UNTIL, Call, insert_calls, write_csv
from kits.usage import figures, usage_report
from seatplan.documents.fleet import Policy
from seatplan.documents.usage import KvReplay
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings
from seatplan.plan.kv_replay import replay_check
from seatplan.usage.queries import Window

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
QWEN3_8B_BYTES_PER_BLOCK = 36 * 8 * 128 * 2 * 2 * 16  # layers x KV heads x head size x (K, V) x bf16 x 16 tokens
GiB = 1 << 30

# Three qwen3-8b requests, prompts only, 2000 tokens: (2000 + 15) / 16 = 125.94 blocks each.
# A [0, 100) s alone: 125 blocks; with B [10, 50): 251; with C [20, 30) too: 377, the peak.
STACKED = (
    Call("A", 0, 100, 2000, 0, model="qwen3-8b", model_group="qwen3-8b"),
    Call("B", 10, 50, 2000, 0, model="qwen3-8b", model_group="qwen3-8b"),
    Call("C", 20, 30, 2000, 0, model="qwen3-8b", model_group="qwen3-8b"),
)


WIDE = {"COLUMNS": "250"}  # wide enough that the tables' cells are not wrapped


def check_scenario_replay(report) -> None:
    """The hand-worked timeline of scenario.py, in 16-token blocks (no fleet: vLLM's default block)."""
    chat = report.models[CHAT_MODEL].kv_replay
    # The runaway R1 (2000 + 260000 tokens) ends at 9000 s: (262000 + 15) / 16 = 16375.9 blocks.
    assert (chat.peak_blocks, chat.peak_at, chat.requests) == (16375, T0.replace(hour=2, minute=30), 9)
    assert chat.waited_requests[0] == 8  # the calls of the window that were ever in flight (not Z, F, late)
    assert chat.block_size_tokens == 16 and "no --fleet" in chat.block_rule
    embed = report.models[EMBED_MODEL].kv_replay
    # H (500 tokens) on [1200, 1300) s: 32.19 blocks; I (300) on [1250, 1260): 19.69 more, 51 together.
    assert embed.peak_blocks == 51
    assert (embed.minutes_above[0], embed.minutes_above[50], embed.minutes_above[51]) == (round(100 / 60, 6), round(10 / 60, 6), 0.0)
    assert (embed.waited_requests[0], embed.waited_requests[50]) == (2, 1)
    assert report.overall.kv_replay is None


def test_scenario_replay_from_a_csv_export(tmp_path: Path) -> None:
    check_scenario_replay(usage_report(write_csv(SCENARIO, tmp_path / "spend.csv"), Window(since=SINCE, until=UNTIL)))


def test_scenario_replay_from_postgresql_matches_the_csv(new_spend_database, tmp_path: Path) -> None:
    dsn = new_spend_database()
    insert_calls(dsn, SCENARIO)
    window = Window(since=SINCE, until=UNTIL)
    from_postgres = usage_report(dsn, window)
    check_scenario_replay(from_postgres)
    from_csv = usage_report(write_csv(SCENARIO, tmp_path / "spend.csv"), window)
    assert figures(from_postgres) == figures(from_csv)


def fleet_file(directory: Path, kv_pin: str) -> Path:
    path = directory / "fleet.yaml"
    path.write_text(textwrap.dedent(f"""\
        hosts:
          - name: box
            gpus:
              - {{index: 0, name: H100, total_bytes: 80GiB}}
        seats:
          - name: qwen3-8b
            model: {MODELS / "Qwen--Qwen3-8B"}
            port: 8000
            max_model_len: 4096
            kv_cache_memory_bytes: {kv_pin}
        """), encoding="utf-8")
    return path


def test_plan_reads_the_replay_at_the_planned_kv_and_proposes_the_smallest(cli, tmp_path: Path) -> None:
    # 300 blocks pinned: 299 usable beside the null block. The load is 377 >= 299 + 1 only while C runs
    # (10 s), and only C started above it. The smallest KV: 377 + 1 blocks, 1 GiB once rounded to 0.5 GiB.
    fleet = fleet_file(tmp_path, str(300 * QWEN3_8B_BYTES_PER_BLOCK))
    spend = write_csv(STACKED, tmp_path / "spend.csv")
    usage = tmp_path / "usage.json"
    made = cli("usage", "--from", str(spend), "--fleet", str(fleet), "-o", str(usage), "--json", env=WIDE)
    assert made.exit_code == 0, made.stderr
    replay = json.loads(made.stdout)["models"]["qwen3-8b"]["kv_replay"]
    assert (replay["peak_blocks"], replay["block_size_tokens"], replay["level_step_blocks"]) == (377, 16, 1)
    assert replay["block_rule"].startswith("model facts: 1 KV group(s) (full_attention)")
    planned = cli("plan", str(fleet), "--usage", str(usage), "-o", str(tmp_path / "plan.json"), "--json", env=WIDE)
    assert planned.exit_code == 0, planned.stderr
    seat = json.loads(planned.stdout)["seats"][0]
    line = next(line for line in seat["explanation"] if line["rule"] == "kv_replay")
    assert {name: line["inputs"][name] for name in ("num_blocks", "usable_blocks", "peak_blocks", "minutes_above",
                                                   "waited_requests", "exact", "smallest_kv_bytes", "smallest_kv_bytes_rounded")} == {
        "num_blocks": 300, "usable_blocks": 299, "peak_blocks": 377, "minutes_above": round(10 / 60, 6),
        "waited_requests": 1, "exact": True, "smallest_kv_bytes": 378 * QWEN3_8B_BYTES_PER_BLOCK, "smallest_kv_bytes_rounded": GiB}
    assert any("would have waited" in warning and "1.00 GiB of KV would have held it" in warning for warning in seat["warnings"])
    table = cli("plan", str(fleet), "--usage", str(usage), env=WIDE)
    assert "replayed against each KV cache" in table.stdout and "377" in table.stdout
    explained = cli("explain", str(tmp_path / "plan.json"), "qwen3-8b", env=WIDE)
    assert "kv_replay: 299 usable blocks < peak 377" in explained.stdout
    assert "0.17 min above the budget, 1 request(s) would have waited" in explained.stdout


def test_a_kv_that_holds_the_peak_says_so_and_a_level_between_breakpoints_is_a_bound(cli, tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, "1GiB")  # 455 blocks: holds the 377
    usage = tmp_path / "usage.json"
    assert cli("usage", "--from", str(write_csv(STACKED, tmp_path / "spend.csv")), "--fleet", str(fleet), "-o", str(usage), env=WIDE).exit_code == 0
    planned = json.loads(cli("plan", str(fleet), "--usage", str(usage), "--json", env=WIDE).stdout)["seats"][0]
    line = next(line for line in planned["explanation"] if line["rule"] == "kv_replay")
    assert line["result"].startswith("holds the window: peak 377 of 454 usable blocks")
    assert (planned["kv_replay"]["minutes_above"], planned["kv_replay"]["waited_requests"]) == (0.0, 0)


    # A curve with 100-block steps, read at 299 usable blocks: the level below (200) bounds it from above.
    document = json.loads(usage.read_text())["models"]["qwen3-8b"]["kv_replay"]
    coarse = KvReplay.model_validate(document | {"level_step_blocks": 100, "levels_blocks": [0, 100, 200, 300, 400],
                                                 "minutes_above": [2.0, 1.5, 1.0, 0.5, 0.0], "waited_requests": [3, 3, 2, 1, 0]})
    facts = load_model_facts(MODELS / "Qwen--Qwen3-8B", EngineSettings(vllm_version="0.32"))
    checked = replay_check("qwen3-8b", coarse, facts, facts.capacity(300 * QWEN3_8B_BYTES_PER_BLOCK, 4096), GiB, Policy())
    assert checked.reading is not None
    assert (checked.reading.minutes_above, checked.reading.waited_requests, checked.reading.exact) == (1.0, 2, False)
    assert "at most (read at the curve's level 200)" in checked.lines[0].result


def test_a_replay_that_counted_other_blocks_is_not_read(tmp_path: Path) -> None:
    # Without --fleet the usage stage assumes 16-token blocks; Qwen3-Next runs 544-token ones.

    report = usage_report(write_csv(STACKED, tmp_path / "spend.csv"))
    facts = load_model_facts(MODELS / "Qwen--Qwen3-Next-80B-A3B-Thinking", EngineSettings(vllm_version="0.32"))
    checked = replay_check("next", report.models["qwen3-8b"].kv_replay, facts, facts.capacity(8 * GiB, 4096), GiB, Policy())
    assert checked.lines[0].result == "not comparable" and checked.reading is None
    assert "run `seatplan usage --fleet`" in checked.warnings[0]
    # gpt-oss has 16-token blocks too, but two groups (one a sliding window): one group counts too few.
    facts = load_model_facts(MODELS / "openai--gpt-oss-20b", EngineSettings(vllm_version="0.32"))
    checked = replay_check("gpt-oss", report.models["qwen3-8b"].kv_replay, facts, facts.capacity(8 * GiB, 4096), GiB, Policy())
    assert checked.lines[0].result == "not comparable" and "in 2 group(s)" in checked.lines[0].note


def test_usage_table_shows_the_replay_peak(cli, tmp_path: Path) -> None:
    shown = cli("usage", "--from", str(write_csv(STACKED, tmp_path / "spend.csv")), env=WIDE)
    assert shown.exit_code == 0, shown.stderr
    assert "377 x 16 tokens" in shown.stdout


def test_the_shipped_replay_example_is_this_scenario(tmp_path: Path) -> None:
    """examples/replay/ (docs/usage.md's KV replay example, run by tests/docs/test_doc_examples.py) holds these
    three calls and the 300-block pin: regenerated here byte for byte, so the page and this test tell one story."""
    shipped = Path(__file__).resolve().parents[2] / "examples" / "replay"
    assert write_csv(STACKED, tmp_path / "spend.csv").read_bytes() == (shipped / "spend-logs.csv").read_bytes()
    assert f"kv_cache_memory_bytes: {300 * QWEN3_8B_BYTES_PER_BLOCK}\n" in (shipped / "fleet.yaml").read_text()
