"""``seatplan upgrade-check`` on a plan of real model configs, and ``seatplan verify``'s CLI contract
(errors exit 2 naming the fix; an engine that is not there exits 1; ``--json`` prints one document)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.parts import free_port
from kits.paths import MODEL_FIXTURES

GEMMA_27B = MODEL_FIXTURES / "google--gemma-3-27b-it"
QWEN3_8B = MODEL_FIXTURES / "Qwen--Qwen3-8B"


@pytest.fixture
def planned(tmp_path: Path, capsys, monkeypatch) -> Path:
    """A two-GPU plan: Gemma 3 (sliding windows, a cap) and Qwen3-8B raised to 131,072 tokens with YaRN."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(textwrap.dedent(f"""
        hosts:
          - name: box
            address: 127.0.0.1
            gpus:
              - {{index: 0, name: H100, total_bytes: 80GiB}}
              - {{index: 1, name: H100, total_bytes: 80GiB}}
        seats:
          - {{name: gemma, model: {GEMMA_27B}, port: {free_port()}, max_model_len: 32768, max_new_tokens: 4096}}
          - {{name: qwen, model: {QWEN3_8B}, port: {free_port()}, max_model_len: 131072, allow_yarn: true}}
        """))
    plan = tmp_path / "plan.json"
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(plan), "--json")
    assert result.exit_code == 0, result.stderr
    return plan


def changes(capsys, monkeypatch, plan: Path, version: str) -> dict[tuple[str, str], dict]:
    result = run_cli(capsys, monkeypatch, "upgrade-check", str(plan), "--to", version, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["plan_version"] == "0.32" and report["to_version"] == version
    return {(change["seat"], change["what"]): change for change in report["changes"]}


def test_moving_to_0_20_changes_the_kv_size_figure_of_the_sliding_window_seat(planned, capsys, monkeypatch):
    found = changes(capsys, monkeypatch, planned, "0.20")
    size = found[("gemma", "kv_cache_size_tokens")]
    assert size["after"] < size["now"]  # 0.21 started counting per full-length request: a different figure
    assert ("gemma", "num_gpu_blocks") not in found  # the pinned KV holds the same blocks
    # full attention only: Qwen's figures stay; only its YaRN context is derived as before 0.30
    assert [what for seat, what in found if seat == "qwen"] == ["derived_max_model_len"]
    assert found[("*", "explicit_max_tokens_clamped_to_context")]["after"].endswith("refused with HTTP 400")


def test_moving_to_0_29_derives_the_yarn_context_again(planned, capsys, monkeypatch):
    found = changes(capsys, monkeypatch, planned, "0.29")
    assert found[("qwen", "derived_max_model_len")]["now"] == 40960
    assert found[("qwen", "derived_max_model_len")]["after"] == 131072


def test_moving_to_0_11_0_needs_the_old_rope_key_and_keeps_the_bytes_flag(planned, capsys, monkeypatch):
    found = changes(capsys, monkeypatch, planned, "0.11.0")
    assert found[("qwen", "hf_overrides_rope_key")]["after"] == "rope_scaling"
    assert not any(what == "flag" for _, what in found)


def test_moving_below_0_10_2_loses_the_kv_bytes_flag_for_every_seat(planned, capsys, monkeypatch):
    found = changes(capsys, monkeypatch, planned, "0.10.1")
    for seat in ("gemma", "qwen"):
        assert found[(seat, "flag")]["after"] == "--kv-cache-memory-bytes needs vLLM 0.10.2 or later, not 0.10.1"
    assert ("*", "kv_bytes_flag") in found


def test_the_same_version_changes_nothing(planned, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "upgrade-check", str(planned), "--to", "0.32.0", "--json")
    report = json.loads(result.stdout)
    assert report["changes"] == [] and report["unchanged_seats"] == ["gemma", "qwen"]


def test_upgrade_check_refuses_an_unmodelled_version(planned, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "upgrade-check", str(planned), "--to", "0.40")
    assert result.exit_code == 2
    assert "--to" in result.stderr and "outside the range" in result.stderr


def test_verify_without_running_engines_fails_every_seat_as_unreachable(planned, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "verify", str(planned), "--json", "--timeout", "5")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [(check["seat"], check["check"], check["ok"]) for check in report["checks"]] == [
        ("gemma", "reachable", False), ("qwen", "reachable", False)]
    assert report["checks"][0]["expected"].startswith("http://127.0.0.1:")
    assert set(report["checks"][0]) == {"seat", "check", "expected", "seen", "ok"}


def test_verify_wants_the_gateway_key_variable_set(planned, capsys, monkeypatch):
    monkeypatch.delenv("SEATPLAN_NO_SUCH_KEY", raising=False)
    result = run_cli(capsys, monkeypatch, "verify", str(planned), "--gateway", "http://127.0.0.1:9", "--key-env", "SEATPLAN_NO_SUCH_KEY")
    assert result.exit_code == 2
    assert "SEATPLAN_NO_SUCH_KEY" in result.stderr and "fix:" in result.stderr


def test_verify_names_a_missing_fleet_file(planned, capsys, monkeypatch):
    (planned.parent / "fleet.yaml").unlink()
    monkeypatch.chdir(planned.parent.parent)
    result = run_cli(capsys, monkeypatch, "verify", str(planned))
    assert result.exit_code == 2
    assert "inputs.fleet_path" in result.stderr and "--fleet" in result.stderr


def test_verify_refuses_another_fleets_file(planned, capsys, monkeypatch):
    """A plan checked with a fleet file that lacks the plan's hosts: a located error naming the plan's own fleet
    file (it asked the plan's host names for addresses, and reported every engine unreachable)."""
    other = planned.parent / "other.yaml"
    other.write_text(f"hosts:\n  - name: elsewhere\n    gpus:\n      - {{index: 0, total_bytes: 80GiB}}\nseats:\n  - {{name: q, model: {QWEN3_8B}, port: 8000}}\n")
    result = run_cli(capsys, monkeypatch, "verify", str(planned), "--fleet", str(other))
    assert result.exit_code == 2 and result.stdout == ""
    assert f"error: {other}: the fleet file names no host box, where the plan runs its seats" in result.stderr
    assert f"fix: pass --fleet the fleet file this plan was made from ({planned.parent / 'fleet.yaml'})" in result.stderr
