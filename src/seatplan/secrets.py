"""Secrets (database passwords, API keys): read from the environment or a file, never from a flag, never printed.

A flag's value lands in shell history and in ``ps`` output, so a command refuses a secret given that way and
says where to put it instead. Every message that may quote a connection string or a server's answer goes
through :func:`scrub` with the secrets in play, so an exception (a driver echoing the DSN back) cannot carry one.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from urllib.parse import quote, unquote

from seatplan.errors import SeatplanError
from seatplan.fileio import check_input_file

HIDDEN = "***"
MAX_SECRET_FILE_BYTES = 64 << 10
# Any run of this many characters of a secret is hidden: a server that quotes part of a key (cut by its own
# truncation or by a proxy's) gives away no more than 7 of its characters.
PARTIAL_MIN_CHARS = 8
_ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What says "secret" in an environment variable, the one rule adopt (which writes a reference instead) and the fleet
# loader's warning (docs/fleet.md, "Secrets") follow: its name (*PASS*, *PWD*, *SECRET*, *TOKEN*, *KEY*,
# *CREDENTIAL*, *PRIVATE*, an AUTH word, a *_DSN or connection string: HF_TOKEN, VLLM_API_KEY, PGPASS, PGPASSWORD,
# MYSQL_PWD, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AZURE_CLIENT_SECRET, GOOGLE_APPLICATION_CREDENTIALS,
# AZURE_STORAGE_CONNECTION_STRING, SENTRY_DSN) or its value's shape, whatever its name (a Hugging Face token, an
# OpenAI-style key, a GitHub, Slack, AWS or Google key, a JWT, a PEM block, a URL with a password: DATABASE_URL,
# REDIS_URL or MONGODB_URI carrying one).
_SECRET_NAME = re.compile(r"PASS|PWD|SECRET|TOKEN|KEY|CREDENTIAL|PRIVATE|(?:^|_)AUTH(?:$|_)|AUTHORIZATION|(?:^|_)DSN$"
                          r"|CONNECTION_STRING", re.IGNORECASE)
# The shell's own working folders, which *PWD* would otherwise take for MYSQL_PWD's kind.
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
_SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{6,}|sk-[A-Za-z0-9_-]{6,}|ghp_[A-Za-z0-9]{8,}|github_pat_[A-Za-z0-9_]{8,}"
                           r"|xox[abp]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}"
                           r"|eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # a JWT: base64url header.payload.signature
                           r"|[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@.*)$", re.DOTALL)
# A PEM block anywhere in a value (a key pasted into a multi-line variable), BEGIN line or body.
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE|KEY)[A-Z0-9 ]*-----")
# A name that says token but a value that is a switch or a small count is a setting, not a credential
# (HF_HUB_DISABLE_TOKEN=1, MAX_TOKENS=4096); longer digit strings may be keys and stay secret.
_SETTING_VALUE = re.compile(r"^(\d{1,6}|true|false|yes|no|on|off)?$", re.IGNORECASE)


def secret_shaped(word: str) -> bool:
    """A word shaped like a credential whatever names it (``hf_…``, ``sk-…``, a JWT, a PEM block, a URL with a password)."""
    return bool(_SECRET_VALUE.match(word.strip()) or _PEM.search(word))


def looks_secret(name: str, value: str) -> bool:
    """Whether an environment variable given by value is a credential: the one rule of seatplan's."""
    if secret_shaped(value):
        return True
    return (bool(_SECRET_NAME.search(name)) and name.upper() not in _NOT_SECRET_NAMES
            and not _SETTING_VALUE.match(value.strip()))


def check_environment_name(name: str, where: str) -> None:
    """A flag that names the variable holding a secret must hold a variable's name: a key pasted there instead
    would land in shell history and in rendered files, so it is refused without being quoted."""
    if not _ENVIRONMENT_NAME.fullmatch(name):
        raise SeatplanError(f"{where} takes the name of an environment variable (letters, digits and _), not this value",
                            where=where, fix=f"export the key as a variable (export LITELLM_MASTER_KEY=...) and pass {where} LITELLM_MASTER_KEY")


def read_secret(environment_name: str, file_path: str | Path | None = None) -> str | None:
    """The secret in ``$environment_name``, else the first line of ``file_path`` (which must not be world-readable).

    Surrounding whitespace is stripped (a file saved with CRLF ends its line in CR, which would otherwise travel in
    an HTTP header and come back whole in the client's error); a secret with a control character or a character
    outside printable ASCII inside it is refused, without quoting it (no HTTP header or password field takes it)."""
    value = os.environ.get(environment_name, "").strip()
    if value:
        return check_secret_text(value, f"${environment_name}")
    if file_path is None:
        return None
    path = Path(file_path).expanduser()
    check_input_file(path, "secret file")
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
    # Lines end at LF only: splitlines() would also cut at a CR, U+2028 or U+0085 inside the key and send its first
    # half; a CR before the LF (CRLF) is stripped, any other control character is refused.
    first = text.strip().split("\n", 1)[0].strip()
    return check_secret_text(first, str(path)) if first else None


def check_secret_text(secret: str, where: str) -> str:
    """``secret`` when every character is printable ASCII; a :class:`SeatplanError` naming only the position
    and kind of the first bad character otherwise (the secret itself is never quoted)."""
    for position, character in enumerate(secret, start=1):
        if not (" " <= character <= "~"):
            kind = "a control character" if unicodedata.category(character).startswith("C") else "a character outside printable ASCII"
            raise SeatplanError(f"the secret holds {kind} (U+{ord(character):04X}) at character {position}", where=where,
                                fix="write the key again as one line of printable ASCII (no CR, tab or escape), e.g. "
                                    "tr -d '\\r' < FILE > FILE.new")
    return secret


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


def spellings(secret: str) -> set[str]:
    """The ways a secret comes back in a server's answer or a library's message: as written, URL-encoded, and
    JSON-escaped (with and without ``/`` written ``\\/``, with and without non-ASCII as ``\\uXXXX``)."""
    escaped = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return {secret, quote(secret, safe=""), quote(secret)} | escaped | {text.replace("/", "\\/") for text in escaped}


def scrub(text: str, *secrets: str | None) -> str:
    """``text`` with every given secret, in every spelling of :func:`spellings`, replaced by ***; and every run
    of :data:`PARTIAL_MIN_CHARS` or more characters of one (a key cut across a truncation, a quoted half)."""
    hidden = [False] * len(text)
    for secret in secrets:
        if not secret or len(secret) < 3:
            continue
        for spelling in spellings(secret):
            _mark(text, spelling, hidden)
            if len(spelling) > PARTIAL_MIN_CHARS:
                for start in range(len(spelling) - PARTIAL_MIN_CHARS + 1):
                    _mark(text, spelling[start:start + PARTIAL_MIN_CHARS], hidden)
    if not any(hidden):
        return text
    pieces: list[str] = []
    for position, character in enumerate(text):
        if not hidden[position]:
            pieces.append(character)
        elif position == 0 or not hidden[position - 1]:
            pieces.append(HIDDEN)
    return "".join(pieces)


def _mark(text: str, piece: str, hidden: list[bool]) -> None:
    """Mark every (overlapping) occurrence of ``piece`` in ``text``."""
    start = text.find(piece)
    while start >= 0:
        hidden[start:start + len(piece)] = [True] * len(piece)
        start = text.find(piece, start + 1)


def url_secrets(url: str) -> tuple[str, ...]:
    """The password a URL carries (``http://user:PASSWORD@host``), as the secrets to scrub from what its server says."""
    password = dsn_password(url)
    return (password,) if password else ()


# scheme://USERINFO@ of a web URL anywhere in a text: what a server, a library's error ("for url 'http://u:p@…'") or
# an operator's HF_ENDPOINT carries before the host. A web URL's user part may itself be the key
# (https://TOKEN@host), so all of it goes; a database DSN keeps its user, which says which role connects.
_WEB_SCHEME = re.compile(r"(?:https?|wss?)://", re.IGNORECASE)
_WEB_USERINFO = re.compile(r"\b((?:https?|wss?)://)[^/?#\s\"'<>]*@", re.IGNORECASE)


def without_credentials(text: str) -> str:
    """``text`` with every URL's credentials gone: a web URL's whole ``user:password@`` removed, a database DSN's
    password replaced by ***. The one rule for every URL seatplan prints or stores (the CLI's console and JSON
    output, its error lines, and the documents it writes pass through it)."""
    if "@" not in text:
        return text
    return _URL_PASSWORD.sub(_hide_dsn_password, _WEB_USERINFO.sub(r"\1", text))


def _hide_dsn_password(match: re.Match[str]) -> str:
    if _WEB_SCHEME.match(match.group(1)):  # a web URL has no userinfo left: what matched is its host ([::1]) and path
        return match.group(0)
    return match.group(1) + HIDDEN + "@"


def redact_dsn(text: str) -> str:
    """A connection string (or a message quoting one) as it may be printed: every URL's credentials gone
    (:func:`without_credentials`), every ``password=`` value replaced by ***."""
    hidden = _KEY_PASSWORD.sub(lambda match: match.group(1) + HIDDEN, without_credentials(text))
    return scrub(hidden, dsn_password(text))
