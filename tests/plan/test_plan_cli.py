"""The plan stage's commands through the real entry point: the demo fleet end to end, explain, fit, schema, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.plan import LLAMA_8B, GiB, MiB, one_host, write_fleet
from seatplan.cli import main
from seatplan.documents.plan import Plan

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fleet.yaml"


@pytest.fixture(scope="module")
def demo_plan_file(tmp_path_factory) -> Path:
    """The demo planned once through the CLI (-o), shared by the tests that read it."""
    target = tmp_path_factory.mktemp("demo") / "plan.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.argv", ["seatplan", "plan", str(DEMO), "-o", str(target), "--json"])
        try:
            main()
        except SystemExit as stop:
            assert stop.code in (0, None)
    return target


def test_demo_fleet_fits_with_a_proven_optimum(capsys, monkeypatch, demo_plan_file):
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)  # exactly one JSON document
    assert document["infeasible"] is None and document["optimal"] is True
    assert document["method"] == "exhaustive" and document["bound_bytes"] == document["worst_case_spare_bytes"]
    gpus = {f"{gpu['host']}:{gpu['index']}": gpu for gpu in document["gpus"]}
    assert gpus["gpu-box:3"]["seats"] == []  # keep clear
    open_spares = [gpu["spare_bytes"] for label, gpu in gpus.items() if label != "gpu-box:3"]
    assert document["worst_case_spare_bytes"] == min(open_spares) >= gpus["gpu-box:0"]["headroom_bytes"] == GiB
    seats = {seat["name"]: seat for seat in document["seats"]}
    assert len(seats) == 8 and all(seat["gpus"] for seat in seats.values())
    assert seats["speech"]["gpus"] == ["gpu-box:0"] and seats["speech"]["footprint_bytes"] == 6 * GiB
    assert seats["qwen3-32b"]["kv_cache_memory_bytes"] == 22 * GiB
    assert seats["qwen3-4b"]["launch"]["max_new_tokens"] == 32768
    for seat in seats.values():
        if seat["engine"] == "vllm":
            assert seat["launch"]["kv"] == {"mode": "pinned", "kv_cache_memory_bytes": seat["kv_cache_memory_bytes"],
                                            "gpu_memory_utilization": seat["launch"]["kv"]["gpu_memory_utilization"]}
            assert seat["kv_cache_memory_bytes"] % (512 * MiB) == 0
    # the saved plan is the same document, but for the time the search took
    saved = Plan.model_validate_json(demo_plan_file.read_text()).model_dump(exclude={"solve_seconds"})
    assert saved == Plan.model_validate(document).model_dump(exclude={"solve_seconds"})


def test_demo_tables_show_the_headline(capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO))
    assert result.exit_code == 0, result.stderr
    assert "proven optimal" in result.stdout and "worst-case spare" in result.stdout
    assert "--kv-cache-memory-bytes 23622320128" in result.stdout  # the qwen3-32b pin, 22 GiB


def test_explain_shows_every_rule_with_its_numbers(capsys, monkeypatch, demo_plan_file):
    result = run_cli(capsys, monkeypatch, "explain", str(demo_plan_file), "qwen3-32b")
    assert result.exit_code == 0, result.stderr
    for rule in ("context:", "yarn:", "kv_bytes:", "kv_capacity:", "output_cap:", "footprint:", "gpu_memory_utilization:"):
        assert rule in result.stdout
    assert "operator pin" in result.stdout and "23,622,320,128" in result.stdout
    as_json = run_cli(capsys, monkeypatch, "explain", str(demo_plan_file), "qwen3-32b", "--json")
    entry = json.loads(as_json.stdout)
    assert entry["name"] == "qwen3-32b" and entry["explanation"][0]["rule"] == "context"
    missing = run_cli(capsys, monkeypatch, "explain", str(demo_plan_file), "qwen3-23b")
    assert missing.exit_code == 2 and "did you mean qwen3-32b?" in missing.stderr


def test_fit_gives_the_longest_context_beside_the_weights(capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "fit", str(LLAMA_8B), "--gpu-memory", "24GiB", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    # a 24 GiB GPU gets vLLM's small-GPU defaults (256 seqs, 2048 batched tokens)
    non_kv = sum(part["bytes"] for part in report["footprint_parts"])
    assert report["kv_budget_bytes"] == 24 * GiB - non_kv
    # full attention, 2 MiB blocks: one block is the null block, the rest hold 16 tokens each
    blocks = report["kv_budget_bytes"] // (2 * MiB)
    assert report["largest_max_model_len"] == min(131072, (blocks - 1) * 16)
    assert report["published_context"] == 131072
    assert report["published_max_concurrency"] == pytest.approx(blocks / 8192, abs=0.005)
    assert 0 < report["largest_max_model_len_with_factor"] < report["largest_max_model_len"]
    table = run_cli(capsys, monkeypatch, "fit", str(LLAMA_8B), "--gpu-memory", "24GiB")
    assert "the longest context is" in table.stdout


def test_schema_is_one_json_document(capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "schema")
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False
    assert {"hosts", "seats", "policy", "current_layout"} <= set(schema["properties"])
    assert "max_model_len" in schema["$defs"]["SeatSpec"]["properties"]


def test_bad_fleet_exits_2_with_line_and_suggestion(capsys, monkeypatch, tmp_path):
    path = write_fleet(tmp_path, one_host() + f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    kv_factr: 1.1\n")
    result = run_cli(capsys, monkeypatch, "plan", str(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{path}:9: seats[0].kv_factr: unknown key; did you mean kv_factor?" in result.stderr
    assert "Traceback" not in result.stderr


def test_infeasible_fleet_exits_non_zero_and_writes_no_plan(capsys, monkeypatch, tmp_path):
    path = write_fleet(tmp_path, one_host(1, "24GiB") + f"seats:\n  - {{name: long, model: {LLAMA_8B}, port: 8000, max_model_len: 131072}}\n")
    target = tmp_path / "plan.json"
    result = run_cli(capsys, monkeypatch, "plan", str(path), "-o", str(target), "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["infeasible"]["seats"][0]["name"] == "long"
    assert not target.exists()


def test_demo_with_the_usage_stage_output_flags_the_runaways(capsys, monkeypatch, tmp_path):
    usage_file = tmp_path / "usage.json"
    spend_logs = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "litellm_spend_logs.csv"
    made = run_cli(capsys, monkeypatch, "usage", "--from", str(spend_logs), "--fleet", str(DEMO), "-o", str(usage_file), "--json")
    assert made.exit_code == 0, made.stderr
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--usage", str(usage_file), "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["inputs"]["usage_path"] == str(usage_file)
    busy = next(seat for seat in document["seats"] if seat["name"] == "qwen3-30b-a3b")
    assert any("runaway replies from ci-evals" in warning and "the cap 32,768 stops them" in warning for warning in busy["warnings"])
    assert any(line["rule"] == "inflight" for line in busy["explanation"])


def test_observed_file_from_the_observe_stage_replaces_estimates(capsys, monkeypatch, tmp_path):
    observed = tmp_path / "observed.json"
    observed.write_text(json.dumps({"kind": "seatplan.observed", "version": 1, "generated_at": "2026-11-30T10:00:00Z",
        "seats": {"qwen3-8b": {"footprint_bytes": 25 * GiB, "source": "beszel", "samples": 2016}}, "gpus": []}))
    result = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--observed", str(observed), "--json")
    assert result.exit_code == 0, result.stderr
    seat = next(seat for seat in json.loads(result.stdout)["seats"] if seat["name"] == "qwen3-8b")
    assert seat["footprint_basis"] == "observed" and seat["footprint_bytes"] == 25 * GiB
    observed.write_text('{"seats": {"qwen3-8b": ')
    broken = run_cli(capsys, monkeypatch, "plan", str(DEMO), "--observed", str(observed))
    assert broken.exit_code == 2 and f"{observed}:1: the observations file is not JSON" in broken.stderr
