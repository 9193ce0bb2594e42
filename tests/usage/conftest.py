"""A throwaway PostgreSQL cluster for the usage tests, and databases holding LiteLLM's spend-log table.

The cluster is Debian's PostgreSQL (``scripts/install-test-deps.sh``) started with ``initdb`` + ``pg_ctl`` in a
temporary directory on a free loopback port. initdb refuses to run as root, so as root the cluster runs
as the ``postgres`` system user the Debian package creates.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import FORMAT_FIXTURES, free_port, require, require_binary

SPENDLOGS_SQL = FORMAT_FIXTURES / "litellm_spendlogs.sql"


def spendlogs_ddl() -> str:
    """The CREATE TABLE / ALTER / CREATE INDEX part of the fixture, without its 20 sample rows."""
    text = SPENDLOGS_SQL.read_text(encoding="utf-8")
    return text[: text.index("\nINSERT INTO")]


def _server_user() -> tuple[list[str], int | None]:
    """The command prefix that runs PostgreSQL's tools as a user initdb accepts, and that user's uid."""
    if os.geteuid() != 0:
        return [], None
    try:
        postgres = pwd.getpwnam("postgres")
    except KeyError:
        require(False, "the postgres system user (created by Debian's postgresql package)")
        raise
    runuser = require_binary("runuser")
    return [runuser, "-u", "postgres", "--"], postgres.pw_uid


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    initdb = require_binary("initdb", "/usr/lib/postgresql/*/bin/initdb")
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    prefix, uid = _server_user()
    base = Path(tempfile.mkdtemp(prefix="seatplan-pg-"))
    if uid is not None:
        os.chown(base, uid, -1)
    data, port = base / "data", free_port()
    run = lambda *args: subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)  # noqa: E731
    try:
        run(initdb, "-D", str(data), "-U", "seatplan", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        run(pg_ctl, "-D", str(data), "-l", str(base / "server.log"), "-o", options, "-w", "-t", "60", "start")
    except subprocess.CalledProcessError as failure:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {failure.stderr or failure.stdout}")
    try:
        yield f"postgresql://seatplan@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


_database_numbers = itertools.count()


@pytest.fixture
def new_spend_database(postgres_dsn: str) -> Callable[[], str]:
    """Makes a fresh database with ``LiteLLM_SpendLogs`` exactly as LiteLLM's migrations leave it; returns its DSN."""
    import psycopg

    def make() -> str:
        name = f"spend_{os.getpid()}_{next(_database_numbers)}"
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        dsn = postgres_dsn.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(spendlogs_ddl())
        return dsn

    return make
