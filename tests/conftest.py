"""The fixtures and hooks every test shares; the helpers tests import live in ``tests/kits/``.

At the end of the session no file a test left and no captured output may carry a test secret
(``kits.leaks.TEST_SECRETS``); the fuzz runs' reliability figures are printed under the summary. A test that
draws at random takes the ``rng`` fixture: a fresh seed each run, printed when the test fails, and
``SEATPLAN_TEST_SEED=N`` replays that draw.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from kits.cli import CliResult, run_cli
from kits.leaks import TEST_SECRETS, files_holding_secrets
from kits.night import NightDocuments, make_documents
from kits.paths import FORMAT_FIXTURES, MODEL_FIXTURES

# Captured output of a test phase that carried a test secret (pytest_runtest_logreport), reported at the session's end.
_leaks: list[str] = []


@pytest.fixture
def model_fixtures() -> Path:
    return MODEL_FIXTURES


@pytest.fixture
def format_fixtures() -> Path:
    return FORMAT_FIXTURES


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    """``cli("plan", FLEET, env={"COLUMNS": "80"})``: seatplan through its real entry point, in-process."""
    return partial(run_cli, capsys, monkeypatch)


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> random.Random:
    """A draw over the whole range each run (so the suite meets shapes nobody chose), replayable from its seed."""
    seed = int(os.environ.get("SEATPLAN_TEST_SEED") or random.SystemRandom().randrange(2**32))
    request.node.user_properties.append(("random seed", seed))
    return random.Random(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test that drew at random names its seed under the failure."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for key, value in item.user_properties:
            if key == "random seed":
                report.sections.append(("random seed", f"{value}: rerun with SEATPLAN_TEST_SEED={value}"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Captured stdout, stderr and logs of every test phase must not carry a test secret."""
    text = "".join(content for _, content in report.sections)
    for secret in TEST_SECRETS:
        if secret in text:
            _leaks.append(f"{report.nodeid} ({report.when}): captured output")


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_artefact(tmp_path_factory: pytest.TempPathFactory):
    """At the end of the session: every file any test left under the session's temporary directory (reports, plans,
    logs, rendered files, databases) and all captured output are free of the test secrets."""
    yield
    leaks = files_holding_secrets(tmp_path_factory.getbasetemp()) + _leaks
    tally = sys.modules.get("kits.fuzz_targets")
    if tally is not None:
        tally.TALLY[("secrets scan", "secrets found")] += len(leaks)
    if leaks:
        pytest.fail("test secrets found in artefacts:\n" + "\n".join(leaks), pytrace=False)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The reliability figures of this run (docs/reliability.md): inputs per reader and how each ended."""
    targets = sys.modules.get("kits.fuzz_targets")
    if targets is None or not targets.TALLY:
        return
    terminalreporter.section("reliability figures")
    by_reader: dict[str, dict[str, int]] = {}
    for (reader, outcome), count in sorted(targets.TALLY.items()):
        by_reader.setdefault(reader, {})[outcome] = count
    for reader, outcomes in by_reader.items():
        terminalreporter.write_line(f"{reader:40} " + ", ".join(f"{outcome} {count:,}" for outcome, count in outcomes.items()))
    if os.environ.get("SEATPLAN_RELIABILITY_JSON"):
        Path(os.environ["SEATPLAN_RELIABILITY_JSON"]).write_text(json.dumps(by_reader, indent=2) + "\n")


@pytest.fixture(scope="session")
def night(tmp_path_factory: pytest.TempPathFactory) -> NightDocuments:
    """The walkthrough's week run through usage, diagnose and plan once per session (``kits.night``)."""
    return make_documents(tmp_path_factory.mktemp("night"))
