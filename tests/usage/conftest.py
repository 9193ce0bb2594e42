"""A throwaway PostgreSQL cluster for the usage tests, and databases holding LiteLLM's spend-log table.

The cluster is Debian's PostgreSQL (``scripts/install-test-deps.sh``) started with ``initdb`` + ``pg_ctl`` in a
temporary directory on a free loopback port (``pg_cluster.py``), and removed after the session.
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

import psycopg
import pytest

from kits.parts import free_port, require, require_binary
from kits.pg_cluster import INITDB_CANDIDATES, running_cluster, spendlogs_ddl


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    initdb = require_binary("initdb", *INITDB_CANDIDATES)
    if os.geteuid() == 0:
        require(_has_user("postgres"), "the postgres system user (created by Debian's postgresql package)")
        require_binary("runuser")
    base = Path(tempfile.mkdtemp(prefix="seatplan-pg-"))
    try:
        with running_cluster(base, free_port(), initdb) as dsn:
            yield dsn
    except subprocess.CalledProcessError as failure:
        pytest.fail(f"PostgreSQL did not start: {failure.stderr or failure.stdout}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


_database_numbers = itertools.count()


@pytest.fixture
def new_spend_database(postgres_dsn: str) -> Callable[[], str]:
    """Makes a fresh database with ``LiteLLM_SpendLogs`` exactly as LiteLLM's migrations leave it; returns its DSN."""
    def make() -> str:
        name = f"spend_{os.getpid()}_{next(_database_numbers)}"
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        dsn = postgres_dsn.rsplit("/", 1)[0] + f"/{name}"
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(spendlogs_ddl())
        return dsn

    return make
