"""verify against hostile servers on 127.0.0.1: it ends (exit 1, failed checks), never hangs, never raises, never
prints a raw control character and never shows the gateway key, in any spelling.

The servers are stand-ins written with raw sockets: no real vLLM engine or LiteLLM gateway drips header bytes,
sends ``102 Processing`` forever, nests JSON 200,000 deep or quotes a key back on demand. Every run is a
run of the real entry point: in-process where the server answers (a hang there is cut off by this module's
timeout mark and counted as a failure), in a child process (``python -m seatplan.cli verify``) where the hang is
the subject; the conftest scan of captured output fails the session on a leaked key.
"""

from __future__ import annotations

import json
import random
import re
import socket
import threading
import unicodedata
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rich.table import Table

from kits.cli import CliResult, run_cli, run_process
from kits.hostile_http import Answer, HostileServer, drip_headers, everywhere, processing_forever, respond
from kits.leaks import TEST_SECRETS
from kits.paths import MODEL_FIXTURES
from kits.plan import one_host, write_fleet
from seatplan.bounded_http import BoundedClient
from seatplan.output import console, printable
from seatplan.secrets import HIDDEN, PARTIAL_MIN_CHARS, scrub, spellings

QWEN3_8B = MODEL_FIXTURES / "Qwen--Qwen3-8B"
SERVED = "qwen"
TIMEOUT_S = 0.5
# verify's requests per engine (at most 23) and gateway (1 + 2 per seat), each within TIMEOUT_S, plus start-up
RUN_LIMIT_S = 26 * TIMEOUT_S + 60
KEY = TEST_SECRETS[1]
# verify runs in-process here: a run that hangs fails its test at this limit instead of stalling the suite
pytestmark = pytest.mark.timeout(120)

def metrics_text(blocks: str = "4096", extra: str = "", max_tokens_sum: str = "0") -> str:
    return (f'vllm:cache_config_info{{block_size="16",engine="0",num_gpu_blocks="{blocks}"}} 1.0\n{extra}'
            f'vllm:request_params_max_tokens_count{{model_name="{SERVED}"}} 0\n'
            f'vllm:request_params_max_tokens_sum{{model_name="{SERVED}"}} {max_tokens_sum}\n')


def engine(overrides: dict[str, Callable[[socket.socket], None]]) -> Answer:
    """An engine that answers like vLLM except on the paths in ``overrides``."""
    usual = {
        "/version": lambda c: respond(c, 200, '{"version": "0.32.0"}'),
        "/v1/models": lambda c: respond(c, 200, json.dumps({"data": [{"id": SERVED, "max_model_len": 8192}]})),
        "/metrics": lambda c: respond(c, 200, metrics_text(), "text/plain"),
        "/v1/chat/completions": lambda c: respond(c, 200, '{"usage": {"completion_tokens": 1, "prompt_tokens": 9}}'),
        "/v1/completions": lambda c: respond(c, 200, '{"usage": {"completion_tokens": 1, "prompt_tokens": 9}}'),
    }

    def answer(path: str, connection: socket.socket, stop: threading.Event) -> None:
        (overrides.get(path) or usual[path])(connection)
    return answer


def deep_json(depth: int) -> Callable[[socket.socket, threading.Event], None]:
    def write(connection: socket.socket, stop: threading.Event) -> None:
        respond(connection, 200, "[" * depth + "]" * depth)
    return write


@pytest.fixture
def plan(tmp_path, capsys, monkeypatch) -> Callable[[int], Path]:
    def make(port: int, served: str = SERVED) -> Path:
        host = one_host(gpus=1).replace("  - name: box\n", "  - name: box\n    address: 127.0.0.1\n")
        fleet = write_fleet(tmp_path, host + f"seats:\n  - {{name: {SERVED}, model: {QWEN3_8B}, port: {port}, served_model_name: {served},"
                                             " max_model_len: 8192, max_new_tokens: 1024}\n")
        path = tmp_path / "plan.json"
        result = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(path), "--json")
        assert result.exit_code == 0, result.stderr
        return path
    return make


def verify(cli: Callable[..., CliResult], plan_path: Path, *args: str, key: str | None = None,
           timeout_s: float = TIMEOUT_S) -> CliResult:
    """``seatplan verify PLAN --timeout T ARGS`` in-process, the gateway key (if any) in SEATPLAN_TEST_GATEWAY_KEY."""
    return cli("verify", str(plan_path), "--timeout", f"{timeout_s:g}", *args, env={"SEATPLAN_TEST_GATEWAY_KEY": key or ""})


def verify_process(plan_path: Path, *args: str) -> CliResult:
    """The same in a child process, which the test's own timeout kills if verify hangs."""
    return run_process("verify", str(plan_path), "--timeout", f"{TIMEOUT_S:g}", *args, timeout_s=RUN_LIMIT_S)


def assert_failed_cleanly(done: CliResult) -> dict:
    """Exit 1 with a strict JSON report of failed checks, no traceback, no raw control character."""
    assert done.exit_code == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not any(ord(character) < 0x20 and character not in "\n" for character in done.stdout + done.stderr)
    report = json.loads(done.stdout, parse_constant=lambda constant: pytest.fail(f"non-strict JSON: {constant}"))
    assert report["ok"] is False
    return report


@pytest.mark.parametrize("write", [drip_headers, processing_forever], ids=["header-drip", "102-flood"])
def test_a_server_that_never_finishes_its_headers_is_cut_off_at_the_deadline(plan, write):
    with HostileServer(everywhere(write)) as server:
        done = verify_process(plan(server.port), "--gateway", server.url, "--key-env", "", "--json")
    report = assert_failed_cleanly(done)
    reachable = next(check for check in report["checks"] if check["check"] == "reachable")
    assert "ReadTimeout" in reachable["seen"] and f"within {TIMEOUT_S:g} s" in reachable["seen"]
    assert server.paths.count("/version") == 1  # unreachable: nothing more is asked of it


def test_json_nested_200000_deep_is_a_failed_check(cli, plan, rng):
    with HostileServer(everywhere(deep_json(rng.randint(1_000, 200_000)))) as server:
        done = verify(cli, plan(server.port), "--gateway", server.url, "--key-env", "", "--json")
    report = assert_failed_cleanly(done)
    assert not any(check["ok"] for check in report["checks"])
    assert any("nests deeper" in str(check["seen"]) for check in report["checks"])


HUGE = ["1e400", "-1e400", "1e308", "12.5", "-3", "true", '"12"', "null"]


@pytest.mark.parametrize("number", HUGE)
def test_numbers_beyond_a_double_or_no_count_fail_their_check(cli, plan, number):
    """``1e400`` in a model list, in token counts and in num_gpu_blocks; ``+Inf`` in the histogram's sum."""
    overrides = {
        "/v1/models": lambda c: respond(c, 200, f'{{"data": [{{"id": "{SERVED}", "max_model_len": {number}}}]}}'),
        "/metrics": lambda c: respond(c, 200, metrics_text(blocks=number.strip('"'), max_tokens_sum="+Inf"), "text/plain"),
        "/v1/chat/completions": lambda c: respond(c, 200, f'{{"usage": {{"completion_tokens": {number}, "prompt_tokens": {number}}}}}'),
    }
    with HostileServer(engine(overrides)) as server:
        report = assert_failed_cleanly(verify(cli, plan(server.port), "--json"))
    failed = {check["check"] for check in report["checks"] if not check["ok"]}
    assert {"max_model_len", "num_gpu_blocks", "completion", "output_cap_default"} <= failed


def test_two_cache_config_samples_that_disagree_fail_verify(cli, plan, rng):
    blocks = rng.randint(1, 10**6)
    second = f'vllm:cache_config_info{{block_size="16",engine="1",num_gpu_blocks="{blocks + rng.randint(1, 99)}"}} 1.0\n'
    overrides = {"/metrics": lambda c: respond(c, 200, metrics_text(blocks=str(blocks), extra=second), "text/plain")}
    with HostileServer(engine(overrides)) as server:
        report = assert_failed_cleanly(verify(cli, plan(server.port), "--json"))
    check = next(check for check in report["checks"] if check["check"] == "num_gpu_blocks")
    assert not check["ok"] and "disagree on num_gpu_blocks" in check["seen"]


def test_a_7_mb_version_string_is_cut_before_it_is_shown(cli, plan, rng):
    size = rng.randint(1 << 20, 7 << 20)
    overrides = {"/version": lambda c: respond(c, 200, json.dumps({"version": "0.32." + "9" * size}))}
    with HostileServer(engine(overrides)) as server:
        plan_path = plan(server.port)
        # 7 MB may take longer than the other runs' half second on a loaded machine: the subject is the cut
        shown = verify(cli, plan_path, "--json", timeout_s=30)
        table = verify(cli, plan_path, timeout_s=30)
    assert_failed_cleanly(shown)
    version = next(check for check in json.loads(shown.stdout)["checks"] if check["check"] == "version")
    assert len(version["seen"]) < 400 and f"{size + 5 - 300:,} more characters" in version["seen"]
    assert table.exit_code == 1 and len(table.stdout) < 20_000, table.stderr


ESCAPES = ["\x1b[2J\x1b]0;owned\x07", "\x9b31m", "\u202e", "\x1b[31m[bold]x[/]"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_control_characters_from_a_server_reach_the_terminal_escaped(cli, plan, escape):
    version = json.dumps({"version": f"0.32.0{escape}"})
    models = json.dumps({"data": [{"id": f"{SERVED}{escape}", "max_model_len": 8192}]})
    overrides = {"/version": lambda c: respond(c, 200, version), "/v1/models": lambda c: respond(c, 200, models)}
    with HostileServer(engine(overrides)) as server:
        done = verify(cli, plan(server.port))
    assert done.exit_code == 1 and "Traceback" not in done.stderr
    assert not any(character in done.stdout + done.stderr for character in "\x1b\x9b\u202e\x07")
    assert printable(escape).split("[")[0] in done.stdout


def echo_forms(key: str, rng: random.Random) -> dict[str, str]:
    """The ways a gateway's error body may quote the key it was sent."""
    return {"raw": f"invalid key Bearer {key}", "json-slash": json.dumps({"key": key}).replace("/", "\\/"),
            "json-unicode": json.dumps({"key": key}, ensure_ascii=True), "url": f"key={quote(key, safe='')}",
            "cut": "x" * (300 - rng.randint(1, len(key) - 1) - len("HTTP 401 from /v1/models: ")) + key,
            "half": f"key starts {key[: len(key) // 2 + PARTIAL_MIN_CHARS // 2]}"}


def random_key(rng: random.Random) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
    return "sk-" + "".join(rng.choice(alphabet) for _ in range(rng.randint(16, 64)))


# The test secret (the conftest scan fails the session if it is anywhere whole); keys drawn at random, where no
# run of 8 of their characters may show (the test secret holds the word "seatplan", which verify's title shows).
KEYS: dict[str, Callable[[random.Random], str]] = {
    "test-secret": lambda rng: KEY, "random": random_key, "with-slashes": lambda rng: f"sk/{random_key(rng)}/x\"y\\z"}


@pytest.mark.parametrize("key_name", sorted(KEYS))
@pytest.mark.parametrize("form", sorted(echo_forms(KEY, random.Random(0))))
def test_a_gateway_that_quotes_the_key_back_never_shows_it(cli, plan, form, key_name, rng):
    key = KEYS[key_name](rng)
    echoed = echo_forms(key, rng)[form]
    with HostileServer(lambda path, c, stop: respond(c, 401, echoed)) as server:
        plan_path = plan(server.port)
        for output in (["--json"], []):
            done = verify(cli, plan_path, "--gateway", server.url, "--key-env", "SEATPLAN_TEST_GATEWAY_KEY", *output, key=key)
            assert done.exit_code == 1 and "Traceback" not in done.stderr, done.stderr
            shown = done.stdout + done.stderr
            # a key that starts one or two characters before the cut shows as "*" or "**" before the ellipsis
            assert key not in shown and ("***" in shown or form == "cut")
            if key != KEY:
                assert not any(key[start:start + PARTIAL_MIN_CHARS] in shown for start in range(len(key) - PARTIAL_MIN_CHARS + 1))
    assert any(f"Bearer {key}" in head for head in server.heads)


def test_a_served_name_sharing_8_characters_with_the_key_is_still_served(cli, plan, rng):
    """The key is masked in what verify prints, not in what it compares: a served name that shares a run of
    8 characters with the gateway key (here "seatplan") is found on the engine and the gateway, and the key's
    run is still masked where the name is printed."""
    served = f"seatplan-{rng.randrange(10**6)}"
    models = json.dumps({"data": [{"id": served, "max_model_len": 8192}]})
    with HostileServer(engine({"/v1/models": lambda c: respond(c, 200, models)})) as server:
        done = verify(cli, plan(server.port, served), "--gateway", server.url, "--key-env", "SEATPLAN_TEST_GATEWAY_KEY",
                      "--json", key=KEY)
    report = json.loads(done.stdout)
    checks = {check["check"]: check for check in report["checks"]}
    assert checks["max_model_len"]["ok"] and checks["gateway_lists"]["ok"], report["checks"]
    assert "seatplan" not in checks["gateway_lists"]["seen"]  # the key's run, masked where the name is shown


@pytest.mark.parametrize("bad", ["\r", "\x1b", "\t", "é", "\u2028", "\x00"])
def test_a_key_with_a_control_or_non_ascii_character_is_refused_without_quoting_it(cli, plan, tmp_path, bad, rng):
    key_file = tmp_path / "gateway-key.secret"
    position = rng.randint(1, len(KEY) - 1)
    broken = KEY[:position] + bad + KEY[position:]
    key_file.write_bytes(broken.encode())
    key_file.chmod(0o600)
    done = verify(cli, plan(9), "--gateway", "http://127.0.0.1:9", "--key-env", "SEATPLAN_TEST_UNSET", "--key-file", str(key_file))
    assert done.exit_code == 2 and "error:" in done.stderr and "fix:" in done.stderr, done.stderr
    assert f"character {position + 1}" in done.stderr
    assert KEY[:PARTIAL_MIN_CHARS] not in done.stderr + done.stdout


def test_a_key_read_from_a_crlf_file_is_stripped_and_sent_whole(cli, plan, tmp_path):
    key_file = tmp_path / "gateway-key.secret"
    key_file.write_bytes(f"  {KEY}\r\n".encode())
    key_file.chmod(0o600)
    with HostileServer(lambda path, c, stop: respond(c, 401, "no")) as server:
        done = verify(cli, plan(server.port), "--gateway", server.url, "--key-env", "SEATPLAN_TEST_UNSET", "--key-file", str(key_file))
    assert done.exit_code == 1, done.stderr
    assert any(f"Authorization: Bearer {KEY}\r\n" in head for head in server.heads)


@pytest.mark.parametrize("value", ["0", "nan", "inf", "-1", "abc", "1e400", "99999"])
def test_a_bad_timeout_is_an_error_with_a_fix(value, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "verify", "plan.json", "--timeout", value)
    assert result.exit_code == 2 and "error:" in result.stderr and "fix: pass --timeout" in result.stderr
    assert "Usage:" not in result.stderr


@pytest.mark.parametrize("to", ["0.32; touch F", "0.32 ", "0.32\n", "v0.32.0rc1", "0.32.0+cpu", "٠.٣٢", "0.32/../x"])
def test_upgrade_check_takes_a_version_alone(to, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "upgrade-check", "plan.json", "--to", to)
    assert result.exit_code == 2 and "--to takes a version alone" in result.stderr and "fix:" in result.stderr


# --- Hypothesis over the scrubber and the terminal escaper ---

# Printable ASCII keys (what read_secret accepts) without "*", the mask itself: a key holding "***" could be
# rebuilt from the mask and its neighbours, which says nothing about a leak.
SECRET_TEXT = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="*"), min_size=PARTIAL_MIN_CHARS, max_size=80)


def spelled(key: str, form: str) -> str:
    return {"raw": key, "json": json.dumps(key)[1:-1], "json-slash": json.dumps(key)[1:-1].replace("/", "\\/"),
            "url": quote(key, safe="")}[form]


@settings(max_examples=300, deadline=None)
@given(key=SECRET_TEXT, form=st.sampled_from(["raw", "json", "json-slash", "url"]), before=st.text(max_size=50),
       after=st.text(max_size=50), cut=st.data())
def test_no_run_of_8_characters_of_a_key_survives_the_scrubber(key, form, before, after, cut):
    spelling = spelled(key, form)
    start = cut.draw(st.integers(0, len(spelling) - PARTIAL_MIN_CHARS))
    end = cut.draw(st.integers(start + PARTIAL_MIN_CHARS, len(spelling)))
    for shown in (before + spelling + after, before + spelling[start:end] + after):
        scrubbed = scrub(shown, key)
        assert not any(spelling[index:index + PARTIAL_MIN_CHARS] in scrubbed for index in range(len(spelling) - PARTIAL_MIN_CHARS + 1))


@settings(max_examples=300, deadline=None)
@given(key=SECRET_TEXT, text=st.text(max_size=200))
def test_the_scrubber_leaves_text_without_the_key_alone(key, text):
    pieces = {spelling[index:index + PARTIAL_MIN_CHARS] for spelling in spellings(key) for index in range(len(spelling) - PARTIAL_MIN_CHARS + 1)}
    if not any(piece in text for piece in pieces):
        assert scrub(text, key) == text
    assert scrub(text + key + text, key).count(HIDDEN) >= 1


@settings(max_examples=500, deadline=None)
@given(text=st.text(max_size=200), keep_newlines=st.booleans())
def test_the_terminal_escaper_lets_no_control_character_through_and_keeps_the_rest(text, keep_newlines):
    assume("\\" not in text)
    shown = printable(text, keep_newlines=keep_newlines)
    acting = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
    assert not any(unicodedata.category(character) in acting and not (keep_newlines and character == "\n") for character in shown)
    # every escape reads back as the character it stands for: nothing is lost, nothing else is changed
    assert re.sub(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))", lambda match: chr(int("".join(filter(None, match.groups())), 16)), shown) == text


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=0x30FF), max_size=60))
def test_the_console_shows_every_string_it_prints_with_controls_escaped(text):
    """Text, table titles, headers and cells: Rich drops only BEL/BS/VT/FF/CR by itself and lets ESC through."""
    out = console()
    with out.capture() as captured:
        table = Table(title=f"t{text}")
        table.add_column(f"h{text}")
        table.add_row(f"c{text}")
        out.print(table)
        out.print(f"p{text}", markup=False)
    shown = captured.get()
    assert not any(unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp") and character != "\n" for character in shown)


@pytest.mark.parametrize("hostile", ["\x1b[2J", "[/]", "[bold]x", "\x9b31m\u202e"])
def test_an_error_message_quoting_hostile_text_is_printed_escaped(hostile, tmp_path, capsys, monkeypatch):
    """A message that quotes a path or a server's text: its brackets are no markup (``[/]`` raised MarkupError)."""
    missing = tmp_path / f"fleet{hostile}.yaml"
    result = run_cli(capsys, monkeypatch, "plan", str(missing))
    assert result.exit_code == 2 and "error:" in result.stderr and "fix:" in result.stderr
    assert not any(character in result.stderr for character in "\x1b\x9b\u202e")
    assert printable(hostile) in result.stderr


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:9/\x1b[2J", "ftp://127.0.0.1", "127.0.0.1:4000", "http://",
                                 f"http://litellm:{KEY}@127.0.0.1:4000", "http://a\u2028b/"])
def test_a_gateway_url_that_is_no_http_url_is_an_error_with_a_fix(plan, url, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "verify", str(plan(9)), "--gateway", url, "--key-env", "")
    assert result.exit_code == 2 and "error: --gateway:" in result.stderr and "fix:" in result.stderr, result.stderr
    assert not any(character in result.stderr for character in "\x1b\u2028") and KEY not in result.stderr


def test_a_resolver_that_never_answers_is_left_behind_at_the_deadline(monkeypatch):
    """getaddrinfo has no timeout of its own; the request gives up on it at its deadline.

    Stand-in: a resolver that hangs is ``socket.getaddrinfo`` replaced by one that blocks on an event, since the
    machine's own resolver cannot be pointed at a silent DNS server without changing /etc/resolv.conf. The proof is
    not a timing: the request has failed while the resolver is still blocked."""
    released = threading.Event()
    asked: list[str] = []

    def hanging(host, *args, **kwargs):
        asked.append(host)
        released.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "released")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    try:
        with BoundedClient("http://engine.lan:8000", TIMEOUT_S) as client, pytest.raises(httpx2.ConnectTimeout) as failed:
            client.fetch("GET", "/version")
        assert asked == ["engine.lan"] and not released.is_set()
        assert client.problem(failed.value) == f"ConnectTimeout: no complete answer within {TIMEOUT_S:g} s"
    finally:
        released.set()


def test_every_address_a_name_resolves_to_is_tried_in_turn(monkeypatch):
    """A name whose first address refuses (a closed port on 127.0.0.2) is reached on its next (a server on 127.0.0.1)."""
    with HostileServer(engine({})) as server:
        real = socket.getaddrinfo

        def two_addresses(host, port, *args, **kwargs):
            if host != "engine.lan":
                return real(host, port, *args, **kwargs)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in ("127.0.0.2", "127.0.0.1")]

        monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
        with BoundedClient(f"http://engine.lan:{server.port}", 5.0) as client:
            assert client.fetch("GET", "/version").status_code == 200
        assert server.paths == ["/version"]


def test_a_name_that_does_not_resolve_is_a_connect_error_naming_it():
    with BoundedClient("http://no-such-host.invalid:8000", 5.0) as client, pytest.raises(httpx2.ConnectError) as failed:
        client.fetch("GET", "/version")
    assert "no-such-host.invalid" in client.problem(failed.value)
