"""Shared test helpers.

Tests that need a real part (vLLM, PostgreSQL, Prometheus, ansible-playbook, Chromium) call
:func:`require`: on a developer machine without the part they skip with the reason; under CI
(``CI`` set) a missing part is a failure, so a green CI run always means the real part ran.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
MODEL_FIXTURES = FIXTURES / "models"
FORMAT_FIXTURES = FIXTURES / "formats"
REPO_ROOT = Path(__file__).resolve().parent.parent


# Secrets the tests hand seatplan (a database password, an API key). No artefact a test leaves, and no captured
# output, may contain them: no_secret_in_any_artefact scans every file under the session's temporary directory at
# the end. A file that holds a secret as an input on purpose is named *.secret and skipped.
TEST_SECRETS = ("S3cr3t-pw-7f2c-seatplan", "sk-seatplan-test-9a41d0c7")
_leaks: list[str] = []


def require(condition: bool, what: str) -> None:
    if condition:
        return
    message = f"needs {what}; run scripts/install-test-deps.sh"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_binary(name: str, *candidates: str) -> str:
    """Path to an executable by name or one of ``candidates`` (globs allowed)."""
    found = shutil.which(name)
    if not found:
        for pattern in candidates:
            matches = sorted(Path("/").glob(pattern.lstrip("/")))
            if matches:
                found = str(matches[-1])
                break
    require(found is not None, f"the {name} binary")
    return found  # type: ignore[return-value]


def stop_process(process: subprocess.Popen, grace_s: float = 20) -> None:
    """End a server a test started, by its own handle: terminate, then kill if it lingers."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def model_fixtures() -> Path:
    return MODEL_FIXTURES


@pytest.fixture
def format_fixtures() -> Path:
    return FORMAT_FIXTURES


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Captured stdout, stderr and logs of every test phase must not carry a test secret."""
    text = "".join(content for _, content in report.sections)
    for secret in TEST_SECRETS:
        if secret in text:
            _leaks.append(f"{report.nodeid} ({report.when}): captured output")


def files_holding_secrets(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink() or path.name.endswith(".secret"):
            continue
        try:
            with path.open("rb") as stream:
                data = stream.read()
        except OSError:
            continue
        found.extend(f"{path}: {secret[:4]}..." for secret in TEST_SECRETS if secret.encode() in data)
    return found


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_artefact(tmp_path_factory: pytest.TempPathFactory):
    """At the end of the session: every file any test left under the session's temporary directory (reports, plans,
    logs, rendered files, databases) and all captured output are free of the test secrets."""
    yield
    leaks = files_holding_secrets(tmp_path_factory.getbasetemp()) + _leaks
    tally = sys.modules.get("fuzz.targets")
    if tally is not None:
        tally.TALLY[("secrets scan", "secrets found")] += len(leaks)
    if leaks:
        pytest.fail("test secrets found in artefacts:\n" + "\n".join(leaks), pytrace=False)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The reliability figures of this run (docs/reliability.md): inputs per reader and how each ended."""
    targets = sys.modules.get("fuzz.targets")
    if targets is None or not targets.TALLY:
        return
    import json

    terminalreporter.section("reliability figures")
    by_reader: dict[str, dict[str, int]] = {}
    for (reader, outcome), count in sorted(targets.TALLY.items()):
        by_reader.setdefault(reader, {})[outcome] = count
    for reader, outcomes in by_reader.items():
        terminalreporter.write_line(f"{reader:40} " + ", ".join(f"{outcome} {count:,}" for outcome, count in outcomes.items()))
    if os.environ.get("SEATPLAN_RELIABILITY_JSON"):
        Path(os.environ["SEATPLAN_RELIABILITY_JSON"]).write_text(json.dumps(by_reader, indent=2) + "\n")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> CliResult:
    """``seatplan ARGS`` through the real entry point (``seatplan.cli.main``), captured in-process."""
    from seatplan.cli import main  # at call time: the seatplan under test, as the test set it up

    monkeypatch.setattr(sys, "argv", ["seatplan", *args])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)
