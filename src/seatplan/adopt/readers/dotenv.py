"""``KEY=value`` files as systemd's ``EnvironmentFile=``, Compose's ``env_file:``/``.env`` and sh read them.

One reader for all three, taking what each writes: ``export KEY=value`` (sh), ``'…'`` literal, ``"…"`` with
``\\"``, ``\\\\``, ``\\$`` and ``\\n`` escapes, an unquoted value up to a `` #`` comment (Compose), a line ending
in ``\\`` continued on the next (systemd), ``#`` and ``;`` comment lines (systemd), and CRLF line ends (a file
saved on Windows). A line that is none of these is a problem, named by its line, never a silent guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "$": "$", "`": "`"}


@dataclass
class EnvText:
    values: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # key → the line it was set on (the last one wins)
    literal: set[str] = field(default_factory=set)  # keys whose value was single-quoted (compose interpolates no such value)
    problems: list[str] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with CR dropped and ``\\``-continued ones joined, each with the number of its first line."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.split("\n"), start=1):  # only "\n" ends a line for sh, systemd and Compose
        line = raw.removesuffix("\r")
        if pending is not None:
            line = pending[1] + line.lstrip()
            number = pending[0]
            pending = None
        if line.endswith("\\") and not line.endswith("\\\\") and line.count("'") % 2 == 0:
            pending = (number, line[:-1])
            continue
        joined.append((number, line))
    if pending is not None:
        joined.append(pending)
    return joined


def read_env_text(text: str, source: str) -> EnvText:
    found = EnvText()
    for number, line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        stripped = stripped.removeprefix("export ").lstrip()
        key, equals, rest = stripped.partition("=")
        key = key.strip()
        if not equals or not KEY.fullmatch(key):
            # the line itself is not shown: a file named by mistake (/etc/shadow) must not be printed line by line
            found.problems.append(f"{source}:{number}: not a KEY=value line (expected KEY=value, export KEY=value, "
                                  "or a # comment): left out")
            continue
        value, why = _value(rest.lstrip())
        if why:
            found.problems.append(f"{source}:{number}: {key}: {why}: left out")
            continue
        found.values[key], found.lines[key] = value, number
        if rest.lstrip().startswith("'"):
            found.literal.add(key)
        else:
            found.literal.discard(key)
    return found


def _value(text: str) -> tuple[str, str]:
    if text.startswith("'"):
        end = text.find("'", 1)
        return (text[1:end], "") if end > 0 else ("", "an unclosed single quote")
    if text.startswith('"'):
        characters: list[str] = []
        position = 1
        while position < len(text) and text[position] != '"':
            if text[position] == "\\" and position + 1 < len(text) and text[position + 1] in _ESCAPES:
                position += 1
                characters.append(_ESCAPES[text[position]])
            else:
                characters.append(text[position])
            position += 1
        return ("".join(characters), "") if position < len(text) else ("", "an unclosed double quote")
    comment = re.search(r"\s#", text)
    return (text[: comment.start()] if comment else text).rstrip(), ""
