"""Database passwords: from the environment or libpq's own files, never from a flag; never printed, written or raised.

Every test here hands seatplan one of kits.leaks.TEST_SECRETS; the session's last check (conftest's
no_secret_in_any_artefact) scans every file the suite left for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kits.hostile import seatplan
from kits.leaks import TEST_SECRETS
from kits.parts import free_port
from kits.paths import FORMAT_FIXTURES
from kits.spend_scenario import SCENARIO, insert_calls
from seatplan.errors import SeatplanError
from seatplan.secrets import read_secret, redact_dsn, scrub
from seatplan.usage.postgres import postgres_source

PASSWORD = TEST_SECRETS[0]


def assert_hidden(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, text


@pytest.mark.parametrize("dsn", [f"postgresql://litellm:{PASSWORD}@127.0.0.1:5432/litellm",
                                 f"postgresql://litellm@127.0.0.1/litellm?password={PASSWORD}",
                                 f"host=127.0.0.1 user=litellm password={PASSWORD}"])
def test_a_password_on_the_command_line_is_refused_without_echoing_it(dsn: str) -> None:
    outcome = seatplan("usage", "--from", dsn, "--json")
    assert outcome.refused and "shell history" in outcome.stderr and "PGPASSWORD" in outcome.stderr
    assert_hidden(outcome.stdout, outcome.stderr)


def test_a_dsn_in_the_environment_that_cannot_connect_is_an_error_without_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEATPLAN_USAGE_DSN", f"postgresql://litellm:{PASSWORD}@127.0.0.1:{free_port()}/litellm")
    outcome = seatplan("usage", "--json")
    assert outcome.refused and "cannot connect" in outcome.stderr
    assert_hidden(outcome.stdout, outcome.stderr)


@pytest.mark.parametrize("dsn", [f"host=127.0.0.1 password {PASSWORD}", f"host=127.0.0.1 port=x password={PASSWORD}",
                                 f"postgresql://litellm:{PASSWORD}@127.0.0.1:notaport/db",
                                 f"postgresql://litellm:{PASSWORD}@[::1/db"])
def test_driver_errors_that_quote_the_connection_string_are_scrubbed(dsn: str) -> None:
    with pytest.raises(SeatplanError) as caught:
        with postgres_source(dsn, redact_dsn(dsn)):
            pass
    assert_hidden(str(caught.value), repr(caught.value), caught.value.where or "")


def test_a_non_url_in_the_environment_is_refused_without_echoing_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEATPLAN_USAGE_DSN", f"host=127.0.0.1 password={PASSWORD}")
    outcome = seatplan("usage", "--json")
    assert outcome.refused
    assert_hidden(outcome.stdout, outcome.stderr)


def test_the_report_names_the_database_with_the_password_hidden(new_spend_database, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The real server (trust authentication here, so the password travels and is ignored)."""

    plain = new_spend_database()
    insert_calls(plain, SCENARIO[:3])
    dsn = plain.replace("seatplan@", f"seatplan:{PASSWORD}@")
    assert PASSWORD in dsn
    monkeypatch.setenv("SEATPLAN_USAGE_DSN", dsn)
    output = tmp_path / "usage.json"
    outcome = seatplan("usage", "-o", str(output), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    document = outcome.json()
    assert document["source"] == redact_dsn(dsn) and "***" in document["source"]
    assert_hidden(outcome.stdout, outcome.stderr, output.read_text())
    human = seatplan("usage")
    assert human.exit_code == 0 and "***" in human.stdout
    assert_hidden(human.stdout, human.stderr)


def test_secrets_come_from_the_environment_or_a_private_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret_file = tmp_path / "key.secret"
    secret_file.write_text(TEST_SECRETS[1] + "\n")
    secret_file.chmod(0o600)
    monkeypatch.delenv("SEATPLAN_TEST_KEY", raising=False)
    assert read_secret("SEATPLAN_TEST_KEY", secret_file) == TEST_SECRETS[1]
    monkeypatch.setenv("SEATPLAN_TEST_KEY", "from-the-environment")
    assert read_secret("SEATPLAN_TEST_KEY", secret_file) == "from-the-environment"
    monkeypatch.delenv("SEATPLAN_TEST_KEY")
    secret_file.chmod(0o644)
    with pytest.raises(SeatplanError) as caught:
        read_secret("SEATPLAN_TEST_KEY", secret_file)
    assert "chmod 600" in caught.value.fix and TEST_SECRETS[1] not in str(caught.value)
    assert scrub(f"Bearer {TEST_SECRETS[1]} failed", TEST_SECRETS[1]) == "Bearer *** failed"


def test_the_spend_log_files_own_keys_never_reach_the_report(tmp_path: Path) -> None:
    """LiteLLM stores hashed keys; the report names keys by alias and team only, never the stored key."""
    rows = FORMAT_FIXTURES.joinpath("litellm_spend_logs.jsonl").read_text().splitlines()[:30]
    stored_keys = {json.loads(row)["api_key"] for row in rows if json.loads(row).get("api_key")}
    path = tmp_path / "spend.jsonl"
    path.write_text("\n".join(rows) + "\n")
    outcome = seatplan("usage", "--from", str(path), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    assert stored_keys and not any(key in outcome.stdout for key in stored_keys)
