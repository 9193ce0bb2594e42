"""Start and stop a private PostgreSQL cluster (Debian's binaries) on a loopback port.

Used by the test fixture and by ``benchmarks/bench_usage.py``, with the DDL of ``LiteLLM_SpendLogs``. initdb refuses to run as root, so as root
the cluster runs as the ``postgres`` system user the Debian package creates, in a directory it owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kits.paths import FORMAT_FIXTURES

INITDB_CANDIDATES = ("/usr/lib/postgresql/*/bin/initdb",)
SPENDLOGS_SQL = FORMAT_FIXTURES / "litellm_spendlogs.sql"


def spendlogs_ddl() -> str:
    """The CREATE TABLE / ALTER / CREATE INDEX part of the LiteLLM fixture, without its 20 sample rows."""
    text = SPENDLOGS_SQL.read_text(encoding="utf-8")
    return text[: text.index("\nINSERT INTO")]


def find_initdb() -> str | None:
    found = shutil.which("initdb")
    if found:
        return found
    matches = sorted(match for pattern in INITDB_CANDIDATES for match in glob.glob(pattern))
    return matches[-1] if matches else None


def server_user() -> tuple[list[str], int | None]:
    """The command prefix running PostgreSQL's tools as a user initdb accepts, and that user's uid."""
    if os.geteuid() != 0:
        return [], None
    uid = pwd.getpwnam("postgres").pw_uid  # KeyError: Debian's postgresql package is not installed
    return ["runuser", "-u", "postgres", "--"], uid


@contextmanager
def running_cluster(base: Path, port: int, initdb: str, settings: dict[str, str] | None = None) -> Iterator[str]:
    """A cluster in ``base/data`` (created on first use, kept afterwards); yields a DSN for user ``seatplan``."""
    pg_ctl = str(Path(initdb).with_name("pg_ctl"))
    prefix, uid = server_user()
    base.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        os.chown(base, uid, -1)
    data = base / "data"

    def run(*args: str) -> None:
        subprocess.run([*prefix, *args], check=True, capture_output=True, text=True)

    if not (data / "PG_VERSION").exists():
        run(initdb, "-D", str(data), "-U", "seatplan", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
    options = {"listen_addresses": "127.0.0.1", "fsync": "off", "full_page_writes": "off", **(settings or {})}
    option_text = f"-p {port} -k {base} " + " ".join(f"-c {name}={value}" for name, value in options.items())
    run(pg_ctl, "-D", str(data), "-l", str(base / "server.log"), "-o", option_text, "-w", "-t", "120", "start")
    try:
        yield f"postgresql://seatplan@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
