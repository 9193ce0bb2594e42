"""Secrets (database passwords, API keys): read from the environment or a file, never from a flag, never printed.

A flag's value lands in shell history and in ``ps`` output, so a command refuses a secret given that way and
says where to put it instead. Every message that may quote a connection string or a server's answer goes
through :func:`scrub` with the secrets in play, so an exception (a driver echoing the DSN back) cannot carry one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from seatplan.errors import SeatplanError

HIDDEN = "***"
MAX_SECRET_FILE_BYTES = 64 << 10
_ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_environment_name(name: str, where: str) -> None:
    """A flag that names the variable holding a secret must hold a variable's name: a key pasted there instead
    would land in shell history and in rendered files, so it is refused without being quoted."""
    if not _ENVIRONMENT_NAME.fullmatch(name):
        raise SeatplanError(f"{where} takes the name of an environment variable (letters, digits and _), not this value",
                            where=where, fix=f"export the key as a variable (export LITELLM_MASTER_KEY=...) and pass {where} LITELLM_MASTER_KEY")


def read_secret(environment_name: str, file_path: str | Path | None = None) -> str | None:
    """The secret in ``$environment_name``, else the first line of ``file_path`` (which must not be world-readable)."""
    value = os.environ.get(environment_name)
    if value:
        return value
    if file_path is None:
        return None
    path = Path(file_path).expanduser()
    try:
        if path.stat().st_mode & 0o004:
            raise SeatplanError("the secret file is readable by every user", where=str(path), fix=f"chmod 600 {path}")
        with path.open("rb") as stream:
            text = stream.read(MAX_SECRET_FILE_BYTES).decode("utf-8")
    except OSError as problem:
        raise SeatplanError(f"cannot read the secret file ({problem.strerror})", where=str(path),
                            fix=f"create it with the secret on one line (chmod 600), or set {environment_name}") from None
    except UnicodeDecodeError:
        raise SeatplanError("the secret file is not UTF-8 text", where=str(path), fix="write the secret on one line") from None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first or None


# user:PASSWORD@ in a URL, anywhere in a text (a driver quotes the URL it could not parse); password=VALUE or, as
# a mistyped key/value string has it, password VALUE.
_URL_PASSWORD = re.compile(r"(\w+://[^:/@?\s\"']*:)([^@\s\"']*)@")
_KEY_PASSWORD = re.compile(r"((?:^|[\s?&])password(?:\s*=\s*|\s+))('(?:[^'\\]|\\.)*'|[^&\s]+)")


def dsn_password(dsn: str) -> str | None:
    """The password a PostgreSQL connection string carries (``user:PASSWORD@``, ``password=PASSWORD``), if any."""
    for pattern in (_URL_PASSWORD, _KEY_PASSWORD):
        match = pattern.search(dsn)
        if match and match.group(2):
            return unquote(match.group(2).strip("'"))
    return None


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every given secret (as written, and URL-encoded) replaced by ***."""
    from urllib.parse import quote

    for secret in secrets:
        if secret and len(secret) >= 3:
            for spelling in {secret, quote(secret, safe="")}:
                text = text.replace(spelling, HIDDEN)
    return text


def redact_dsn(text: str) -> str:
    """A connection string (or a message quoting one) as it may be printed: every password in it replaced by ***."""
    hidden = _KEY_PASSWORD.sub(lambda match: match.group(1) + HIDDEN, _URL_PASSWORD.sub(lambda match: match.group(1) + HIDDEN + "@", text))
    return scrub(hidden, dsn_password(text))
