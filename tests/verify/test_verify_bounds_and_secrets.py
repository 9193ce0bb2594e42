"""verify's live probes are bounded, and its gateway key stays secret.

A stand-in server (tests/kits/standin_server.py; no real engine hangs or floods on demand) hangs, trickles an
endless body, floods, or echoes the key it was sent. verify runs as a subprocess (`python -m seatplan.cli verify`):
it must end with failed checks (exit 1), never hang, and send a bounded number of requests. The key comes from
`--key-env` or `--key-file` and is never in verify's output, even when the gateway quotes it back.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kits.cli import CliResult, run_cli, run_process
from kits.leaks import TEST_SECRETS
from kits.paths import MODEL_FIXTURES
from kits.plan import one_host, write_fleet
from kits.standin_server import StandIn

QWEN3_8B = MODEL_FIXTURES / "Qwen--Qwen3-8B"
API_KEY = TEST_SECRETS[1]
TIMEOUT_S = 0.5
# verify's own bound per engine: /version, /v1/models, /metrics, a completion (and its text fallback), and two cap
# probes of up to 3 tries × (2 /metrics + 1 completion); through the gateway /v1/models and a completion per seat.
MAX_ENGINE_REQUESTS = 5 + 2 * 3 * 3
# the slowest legal run: every request used its whole timeout, plus the interpreter's start
WALL_BUDGET_S = (MAX_ENGINE_REQUESTS + 2) * TIMEOUT_S + 20


def plan_for(tmp_path: Path, port: int, capsys, monkeypatch) -> Path:
    """One seat on an 80 GiB GPU of a host reached at 127.0.0.1:PORT."""
    host = one_host(gpus=1).replace("  - name: box\n", "  - name: box\n    address: 127.0.0.1\n")
    fleet = write_fleet(tmp_path, host + f"seats:\n  - {{name: qwen, model: {QWEN3_8B}, port: {port}, max_model_len: 8192, max_new_tokens: 1024}}\n")
    plan = tmp_path / "plan.json"
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(plan), "--json")
    assert result.exit_code == 0, result.stderr
    return plan


def verify(plan: Path, *args: str, env: dict[str, str] | None = None) -> tuple[CliResult, float]:
    """In a child process: a verify that hangs is killed at twice the wall budget, and fails the test."""
    started = time.monotonic()
    done = run_process("verify", str(plan), "--timeout", str(TIMEOUT_S), *args, env=env, timeout_s=WALL_BUDGET_S * 2)
    return done, time.monotonic() - started


@pytest.mark.parametrize("mode", ["hang", "trickle", "flood"])
def test_a_hanging_trickling_or_flooding_engine_and_gateway_end_in_failed_checks(tmp_path, capsys, monkeypatch, mode):
    with StandIn(mode) as server:
        plan = plan_for(tmp_path, server.port, capsys, monkeypatch)
        done, elapsed = verify(plan, "--gateway", f"http://127.0.0.1:{server.port}", "--key-env", "", "--json")
    assert done.exit_code == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False and not any(check["ok"] for check in report["checks"])
    assert elapsed < WALL_BUDGET_S
    assert 1 <= sum(server.requests.values()) <= MAX_ENGINE_REQUESTS + 2
    if mode != "flood":  # an engine that never finishes /version is unreachable: nothing more is asked of it
        assert server.requests["/version"] == 1


def test_the_gateway_key_from_a_file_is_sent_and_never_printed(tmp_path, capsys, monkeypatch):
    key_file = tmp_path / "gateway-key.secret"
    key_file.write_text(API_KEY + "\n")
    key_file.chmod(0o600)
    with StandIn("echo") as server:  # answers 401 quoting the Authorization header it got
        plan = plan_for(tmp_path, server.port, capsys, monkeypatch)
        gateway = f"http://127.0.0.1:{server.port}"
        for output in ([], ["--json"]):
            done, _ = verify(plan, "--gateway", gateway, "--key-env", "SEATPLAN_UNSET_KEY", "--key-file", str(key_file), *output,
                             env={"SEATPLAN_UNSET_KEY": ""})
            assert done.exit_code == 1, done.stderr
            assert API_KEY not in done.stdout + done.stderr
            assert "***" in done.stdout  # the gateway's 401 body, with the key masked
    assert f"Bearer {API_KEY}" in server.authorization


def test_the_gateway_key_from_the_environment_wins_over_the_file(tmp_path, capsys, monkeypatch):
    key_file = tmp_path / "other-key.secret"
    key_file.write_text("sk-from-the-file\n")
    key_file.chmod(0o600)
    with StandIn("echo") as server:
        plan = plan_for(tmp_path, server.port, capsys, monkeypatch)
        done, _ = verify(plan, "--gateway", f"http://127.0.0.1:{server.port}", "--key-env", "SEATPLAN_GATEWAY_KEY",
                         "--key-file", str(key_file), env={"SEATPLAN_GATEWAY_KEY": API_KEY})
    assert API_KEY not in done.stdout + done.stderr
    assert f"Bearer {API_KEY}" in server.authorization and "Bearer sk-from-the-file" not in server.authorization


def test_a_world_readable_key_file_is_refused_without_quoting_it(tmp_path, capsys, monkeypatch):
    key_file = tmp_path / "open-key.secret"
    key_file.write_text(API_KEY + "\n")
    key_file.chmod(0o644)
    plan = plan_for(tmp_path, 9, capsys, monkeypatch)
    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    result = run_cli(capsys, monkeypatch, "verify", str(plan), "--gateway", "http://127.0.0.1:9", "--key-file", str(key_file))
    assert result.exit_code == 2
    assert f"chmod 600 {key_file}" in result.stderr and API_KEY not in result.stdout + result.stderr


def test_no_key_anywhere_is_a_located_error(tmp_path, capsys, monkeypatch):
    plan = plan_for(tmp_path, 9, capsys, monkeypatch)
    monkeypatch.delenv("SEATPLAN_NO_SUCH_KEY", raising=False)
    result = run_cli(capsys, monkeypatch, "verify", str(plan), "--gateway", "http://127.0.0.1:9", "--key-env", "SEATPLAN_NO_SUCH_KEY",
                     "--key-file", str(tmp_path / "missing.secret"))
    assert result.exit_code == 2
    assert "missing.secret" in result.stderr and "fix:" in result.stderr
