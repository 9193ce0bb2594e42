"""The fixtures and hooks every test shares; the helpers tests import live in ``tests/kits/``.

At the end of the session no file a test left and no captured output may carry a test secret
(``kits.leaks.TEST_SECRETS``); the fuzz runs' reliability figures are printed under the summary. A test that
draws at random takes the ``rng`` fixture: a fresh seed each run, printed when the test fails, and
``SEATPLAN_TEST_SEED=N`` replays that draw.

Under pytest-xdist each worker runs the session fixtures and tallies its own figures; the workers hand their tally to
the controller (``workeroutput``), which prints the sum. ``SEATPLAN_TALLY_CARRY=FILE`` carries the figures from one
pytest run to the next (``scripts/test.sh`` runs the suite as two: the xdist part, then the real-engine part), so the
last run prints the whole tally. Every test under ``tests/integration/`` is marked ``integration``.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

import kits.tally
from kits.cli import CliResult, run_cli
from kits.leaks import TEST_SECRETS, files_holding_secrets
from kits.night import NightDocuments, make_documents
from kits.paths import FORMAT_FIXTURES, MODEL_FIXTURES

# Captured output of a test phase that carried a test secret (pytest_runtest_logreport), reported at the session's end.
_leaks: list[str] = []
# How many of _leaks the session fixture has reported: a leak in a phase after its teardown (the last test's own
# teardown, or a report a worker forwards to the xdist controller) is reported by pytest_sessionfinish instead.
_leaks_reported = 0
# The reliability figures xdist workers handed back (pytest_testnodedown), summed on the controller.
_worker_tally: Counter[tuple[str, str]] = Counter()
INTEGRATION = Path(__file__).parent / "integration"
MODULE_SECONDS = Path(__file__).parent / "module_seconds.json"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``-m integration``: the tests under tests/integration/ (real engines, LiteLLM), which scripts/test.sh runs apart.

    The modules tests/module_seconds.json knows to be slow run first, longest first (the others after them, in their
    own order): the engine part hands whole modules to its workers (``--dist loadfile --no-loadscope-reorder``), and
    a long module handed out last kept one worker busy alone at the end of the run.
    """
    for item in items:
        if item.path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.integration)
    seconds = module_seconds()
    items.sort(key=lambda item: -seconds.get(item.path.relative_to(config.rootpath).as_posix(), 0))


def module_seconds() -> dict[str, float]:
    """tests/module_seconds.json's modules and their seconds (its ``_about`` left out)."""
    table = json.loads(MODULE_SECONDS.read_text())
    return {module: float(value) for module, value in table.items() if not module.startswith("_")}


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
    global _leaks_reported
    yield
    _leaks_reported = len(_leaks)
    leaks = files_holding_secrets(tmp_path_factory.getbasetemp()) + _leaks
    tally = sys.modules.get("kits.fuzz_targets")
    if tally is not None:
        tally.TALLY[("secrets scan", "secrets found")] += len(leaks)
    if leaks:
        pytest.fail("test secrets found in artefacts:\n" + "\n".join(leaks), pytrace=False)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _own_tally() -> Counter[tuple[str, str]]:
    targets = sys.modules.get("kits.fuzz_targets")
    return Counter(targets.TALLY) if targets is not None else Counter()


@pytest.hookimpl(trylast=True)  # after the runner's teardown of the session fixtures (a run stopped by -x tears them down here)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A worker hands its figures to the controller; the process that reports fails the run on a leak found after
    the session fixture's scan."""
    if _is_worker(session.config):
        session.config.workeroutput["seatplan_tally"] = [[reader, outcome, count] for (reader, outcome), count in _own_tally().items()]  # type: ignore[attr-defined]
        return
    if len(_leaks) > _leaks_reported:
        session.config.stash[_LATE_LEAKS] = _leaks[_leaks_reported:]
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LATE_LEAKS = pytest.StashKey[list[str]]()


def pytest_testnodedown(node, error) -> None:
    """On the xdist controller: add up what each worker tallied (a worker that crashed hands back nothing)."""
    for reader, outcome, count in getattr(node, "workeroutput", {}).get("seatplan_tally", []):
        _worker_tally[(reader, outcome)] += count


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The reliability figures of this run (docs/reliability.md): inputs per reader and how each ended."""
    if _is_worker(config):
        return
    late = config.stash.get(_LATE_LEAKS, [])
    if late:
        terminalreporter.section("test secrets found in captured output")
        for line in late:
            terminalreporter.write_line(line)
    tally = _own_tally()
    tally.update(_worker_tally)  # update, not +: a figure of 0 (no secret found) is a figure to print
    carry = os.environ.get("SEATPLAN_TALLY_CARRY")
    if carry:
        tally.update(kits.tally.read(Path(carry)))
        kits.tally.write(Path(carry), tally)
    if not tally:
        return
    terminalreporter.section("reliability figures")
    for line in kits.tally.lines(tally):
        terminalreporter.write_line(line)
    kits.tally.keep_json(tally)


@pytest.fixture(scope="session")
def night(tmp_path_factory: pytest.TempPathFactory) -> NightDocuments:
    """The walkthrough's week run through usage, diagnose and plan once per session (``kits.night``)."""
    return make_documents(tmp_path_factory.mktemp("night"))
