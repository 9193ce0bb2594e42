"""A fixed seat's health URL from its compose ``healthcheck``, as the GPU host reaches it."""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from seatplan.adopt.readers.compose_ports import read_ports

# The programs whose healthcheck fetches a URL; anything else (a script, nc, grpc_health_probe) tells no URL.
HTTP_FETCHERS = ("curl", "wget")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def healthcheck_url(service: dict, where: str) -> tuple[str | None, str, str]:
    """A fixed service's health URL as the GPU host reaches it, from its compose ``healthcheck``: (URL, where it came
    from, why none). Only a curl or wget of one http(s) URL on the container's loopback, at a published port (or on
    the host's network) is read; the caller checks the URL by the fleet loader's own rule, never trusting it."""
    check = service.get("healthcheck")
    if not isinstance(check, dict) or check.get("disable") in (True, "true"):
        return None, "", ""
    words, why = _healthcheck_words(check.get("test"))
    if words is None:
        return None, "", why
    shown = " ".join(words)[:120]
    if not words or words[0].rsplit("/", 1)[-1] not in HTTP_FETCHERS:
        return None, "", f"its healthcheck runs {shown!r}, not curl or wget of a URL"
    urls = [word for word in words[1:] if word.lower().startswith(("http://", "https://"))]
    if len(urls) != 1:
        return None, "", f"its healthcheck {shown!r} fetches {'no http(s) URL' if not urls else 'more than one URL'}"
    return _host_side(urls[0], service, f"{where}: healthcheck {shown!r}")


def _healthcheck_words(test: Any) -> tuple[list[str] | None, str]:
    """The command of a compose healthcheck ``test`` (the Compose Specification, services.healthcheck.test: a string is
    CMD-SHELL followed by it; a list starts with NONE, CMD (then the words) or CMD-SHELL (then one shell line)), as
    words up to the first shell operator."""
    if isinstance(test, str):
        return _shell_command(test)
    if not isinstance(test, list) or not test or not all(isinstance(word, str) for word in test):
        return None, "" if test is None else "its healthcheck test is neither a string nor a list of strings"
    if test[0] == "NONE":
        return None, ""
    if test[0] == "CMD":
        return [word.replace("$$", "$") for word in test[1:]], ""  # compose writes a literal $ as $$
    if test[0] == "CMD-SHELL":
        return _shell_command(" ".join(test[1:]))
    return None, f"its healthcheck test starts with {test[0][:40]!r}, not NONE, CMD or CMD-SHELL"


def _shell_command(line: str) -> tuple[list[str] | None, str]:
    """The first command of a shell line (``curl -f URL || exit 1`` → curl -f URL), as sh would split its words."""
    lexer = shlex.shlex(line.replace("$$", "$"), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as problem:
        return None, f"its healthcheck cannot be read as shell words ({problem})"
    operators = [position for position, word in enumerate(words) if word and set(word) <= set(lexer.punctuation_chars)]
    return words[: operators[0]] if operators else words, ""


def _host_side(url: str, service: dict, note: str) -> tuple[str | None, str, str]:
    """The URL as the GPU host reaches it: a loopback URL inside the container is the published port on the host."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None, "", f"its healthcheck URL {url[:80]!r} is no URL"
    if parts.username is not None or parts.password is not None:
        return None, "", "its healthcheck URL carries a user or password, which a fleet file does not hold"
    if service.get("network_mode") == "host":
        return url, f"{note} (network_mode: host)", ""
    if (parts.hostname or "") not in LOOPBACK:
        return None, "", f"its healthcheck reaches {str(parts.hostname)[:60]!r} from inside the container, which the GPU host may not"
    published = _published(service.get("ports"), where_of(note)).get(port)
    if published is None:
        return None, "", f"its healthcheck asks container port {port}, which it does not publish, so the GPU host cannot reach it"
    address, host_port = published
    host = address or str(parts.hostname)  # published on every address: the container's own loopback name serves the host too
    netloc = f"[{host}]:{host_port}" if ":" in host else f"{host}:{host_port}"
    return urlunsplit(parts._replace(netloc=netloc)), f"{note}: container port {port} published on {host_port}", ""


def where_of(note: str) -> str:
    return note.split(": ", 1)[0]


def _published(ports: Any, where: str) -> dict[int, tuple[str | None, int]]:
    """Each TCP container port published on a known host port → the address it is bound to (None: every one) and that port."""
    found: dict[int, tuple[str | None, int]] = {}
    for mapping in read_ports(ports, where):
        if mapping.protocol == "tcp" and mapping.host is not None:  # an HTTP health check is TCP
            found.setdefault(mapping.container, (mapping.address, mapping.host))
    return found
