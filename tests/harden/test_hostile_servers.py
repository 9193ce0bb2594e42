"""Every command that asks a server, against hostile servers on 127.0.0.1: each ends within its deadline with a
located error, in bounded memory, with no traceback, and never sends the key on.

The families (issue 31): a header drip, a body drip, a ``102 Processing`` flood, an endless body, a 300 MB body and
a redirect to another server that records what it is sent; the commands: ``diagnose --prometheus``, ``diagnose
--vllm-metrics URL``, ``usage --from URL`` and adopt's engine probes (``adopt --engine``); the Hub's own cases are
in tests/facts/test_facts_hub.py (a real Hub-compatible server behind a hostile proxy). Verify's are in
test_hostile_verify.py. Each run is a child process (kits.hostile_http.run_measured): one that has not ended after
60 s is a hang, its peak memory (``ru_maxrss``) is measured. The servers are stand-ins: no real Prometheus,
engine or gateway misbehaves on demand.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from kits.hostile_http import (
    HostileServer,
    Measured,
    drip_body,
    drip_headers,
    endless_body,
    everywhere,
    header_value,
    huge_body,
    processing_forever,
    redirect_to,
    run_measured,
)
from kits.leaks import TEST_SECRETS

KEY = TEST_SECRETS[1]
PASSWORD = TEST_SECRETS[0]
TIMEOUT_S = 2
# The families that send forever and end only by the deadline (a drip every 0.02 s, so a per-read timeout would
# never fire): a deadline of 0.5 s is 25 drips, and each run waits it out rather than TIMEOUT_S. The 300 MB and endless
# bodies keep TIMEOUT_S, so that their size cap, not the deadline, ends them.
ENDLESS_FAMILIES_TIMEOUT_S = 0.5
ENDLESS_FAMILIES = ("header-drip", "body-drip", "102-flood")
# A run's whole memory: the interpreter, seatplan's imports (DuckDB, numpy) and at most one capped answer (the
# spend API's page cap, 256 MiB, is the largest); a 300 MB body or an endless one read whole would pass it.
PEAK_RSS_BYTES = 900 << 20
pytestmark = pytest.mark.timeout(180)

Write = Callable[[socket.socket, threading.Event], None]
FAMILIES: dict[str, Write] = {
    "header-drip": drip_headers,
    "body-drip": drip_body,
    "102-flood": processing_forever,
    "endless-body": endless_body,
    "300-MB-body": huge_body(300_000_000),
}


def diagnose_prometheus(url: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    # the password in the URL is sent to this server (basic auth) and must never be printed
    address = url.replace("http://", f"http://seatplan:{PASSWORD}@")
    return ["diagnose", "--prometheus", address, "--since", "1h", "--timeout", str(timeout_s), "--json"]


def diagnose_vllm_metrics(url: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    return ["diagnose", "--vllm-metrics", url.replace("http://", f"http://seatplan:{PASSWORD}@") + "/metrics",
            "--timeout", str(timeout_s), "--json"]


def usage_from(url: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    return ["usage", "--from", url, "--days", "1", "--timeout", str(timeout_s), "--json"]


def adopt_engine(url: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    return ["adopt", "--engine", url, "--timeout", str(timeout_s), "-o", str(tmp_path / "fleet.yaml")]


COMMANDS = {"diagnose-prometheus": diagnose_prometheus, "diagnose-vllm-metrics": diagnose_vllm_metrics,
            "usage-from": usage_from, "adopt-engine": adopt_engine}
ENV = {"LITELLM_MASTER_KEY": KEY, "COLUMNS": "200"}


def assert_ended_with_a_located_error(done: Measured) -> None:
    assert not done.hung, f"still running after the limit: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.exit_code == 2, (done.exit_code, done.stderr[-2000:])
    assert "error:" in done.stderr and "fix:" in done.stderr, done.stderr[-2000:]
    assert done.peak_rss_bytes < PEAK_RSS_BYTES, f"peak memory {done.peak_rss_bytes >> 20} MiB"
    for secret in (KEY, PASSWORD):
        assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_hostile_server_ends_the_command_with_a_located_error(family, command, tmp_path):
    timeout_s = ENDLESS_FAMILIES_TIMEOUT_S if family in ENDLESS_FAMILIES else TIMEOUT_S
    with HostileServer(everywhere(FAMILIES[family])) as server:
        done = run_measured(*COMMANDS[command](server.url, tmp_path, timeout_s), env=ENV)
    assert_ended_with_a_located_error(done)
    assert not (tmp_path / "fleet.yaml").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_redirect_to_another_server_is_not_followed_and_carries_no_key(command, tmp_path):
    with HostileServer(lambda path, connection, stop: None) as elsewhere, \
            HostileServer(everywhere(redirect_to(elsewhere.url + "/collect"))) as server:
        done = run_measured(*COMMANDS[command](server.url, tmp_path), env=ENV)
    assert_ended_with_a_located_error(done)
    assert server.heads, "the command asked nothing"
    assert elsewhere.heads == []  # nothing at all is sent on, so no header carrying a key
    assert "redirect" in done.stderr or "307" in done.stderr


def test_the_key_and_the_url_password_do_reach_the_server_they_are_for(tmp_path):
    """The same runs against a server that answers 401: what they send there is the key (so the tests above, which
    find no key elsewhere, are not passing because no key was sent at all)."""
    with HostileServer(everywhere(lambda connection, stop: connection.sendall(
            b"HTTP/1.1 401 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))) as server:
        usage = run_measured(*usage_from(server.url, tmp_path), env=ENV)
        prometheus = run_measured(*diagnose_prometheus(server.url, tmp_path), env=ENV)
    assert_ended_with_a_located_error(usage)
    assert_ended_with_a_located_error(prometheus)
    authorizations = [header_value(head, "authorization") or "" for head in server.heads]
    assert f"Bearer {KEY}" in authorizations
    assert any(value.startswith("Basic ") for value in authorizations)


def test_forty_dead_engines_take_one_timeout_not_forty(tmp_path, rng):
    """adopt asks its engines in parallel, the whole run within --timeout: asked one after another, 40 engines that
    never finish their headers would take 40 × the timeout (120 s here), past the hang limit."""
    count = rng.randint(30, 40)
    timeout_s = 3
    with HostileServer(everywhere(drip_headers)) as server:
        engines = [word for index in range(count) for word in ("--engine", f"{server.url}/engine-{index}")]
        done = run_measured("adopt", *engines, "--timeout", str(timeout_s), "-o", str(tmp_path / "fleet.yaml"), env=ENV)
    assert_ended_with_a_located_error(done)
    assert len({path.split("/")[1] for path in server.paths}) == count  # every engine was asked
    for index in range(count):
        assert f"/engine-{index} (--engine): not reachable" in done.stderr



@pytest.mark.slow  # 30 s: the default deadline itself
def test_usage_from_ends_at_its_own_default_deadline(tmp_path):
    """Without --timeout (issue 48: the default of 120 s a page kept `usage --from` running past 90 s against each of
    these): the default deadline, connect to last byte, ends each run well inside the hang limit. The three runs
    wait side by side (each waits on its server; none is busy)."""
    families = ["header-drip", "body-drip", "102-flood"]
    with ExitStack() as servers, ThreadPoolExecutor(len(families)) as pool:
        urls = [servers.enter_context(HostileServer(everywhere(FAMILIES[family]))).url for family in families]
        runs = list(pool.map(lambda url: run_measured("usage", "--from", url, "--days", "1", "--json", env=ENV), urls))
    for family, done in zip(families, runs, strict=True):
        assert_ended_with_a_located_error(done)
        assert "took longer than" in done.stderr or "Timeout" in done.stderr, (family, done.stderr[-1000:])
