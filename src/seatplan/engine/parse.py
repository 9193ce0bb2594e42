"""The one reader of an engine's command line and env file: what render diffs, verify and upgrade-check
read back from what ``engine.command`` wrote.

vLLM's own parser (``vllm/engine/arg_utils.py``, argparse) takes ``--flag value`` and ``--flag=value``
alike and lets the last occurrence win; boolean flags take no value (``--enforce-eager``,
``--no-enable-prefix-caching``). Words before the first flag are the launcher and, for ``vllm serve``,
the model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from seatplan.errors import SeatplanError

MODEL_KEY = "model"  # the positional model of `vllm serve MODEL`, under the name --model gives it
_LAUNCHER_WORDS = ("serve",)


def parse_args(args: Sequence[str]) -> dict[str, str | None]:
    """``--flag value`` and ``--flag=value`` pairs; a switch maps to None; the last one wins.

    The positional model of ``vllm serve MODEL`` is returned under ``--model``, as vLLM reads it.
    """
    flags: dict[str, str | None] = {}
    position = 0
    words = list(args)
    while position < len(words):
        word = words[position]
        position += 1
        if not word.startswith("--"):
            if not flags and position >= 2 and words[position - 2] in _LAUNCHER_WORDS:
                flags["--model"] = word
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            flags[name] = value
        elif position < len(words) and not words[position].startswith("--"):
            flags[word] = words[position]
            position += 1
        else:
            flags[word] = None
    return flags


def parse_command_line(line: str) -> dict[str, str | None]:
    """A command written as one shell line (an env file's ``SEATPLAN_COMMAND``) read back into its flags."""
    return parse_args(split_shell_line(line))


def split_shell_line(line: str) -> list[str]:
    """The words of a line ``engine.command.shell_line`` wrote, as sh reads them.

    Bare words, and double-quoted ones in which a backslash escapes ``\\``, ``"``, ``$`` and a backtick
    (POSIX sh, 2.2.3); ``shlex`` keeps the backslash before ``$`` and a backtick, which sh does not.
    """
    words: list[str] = []
    position = 0
    while position < len(line):
        if line[position] == " ":
            position += 1
            continue
        word, position = _word(line, position)
        words.append(word)
    return words


def _word(line: str, position: int) -> tuple[str, int]:
    if line[position] != '"':
        end = line.find(" ", position)
        end = len(line) if end < 0 else end
        return line[position:end], end
    characters: list[str] = []
    position += 1
    while position < len(line) and line[position] != '"':
        if line[position] == "\\" and position + 1 < len(line) and line[position + 1] in '\\"$`':
            position += 1
        characters.append(line[position])
        position += 1
    if position >= len(line):
        raise SeatplanError("the engine command has an unclosed double quote", where="SEATPLAN_COMMAND",
                            fix="render it again with `seatplan render`")
    return "".join(characters), position + 1


def parse_env(text: str) -> dict[str, str]:
    """``KEY=value`` and ``KEY='value'`` lines as ``encode.env_assignment`` writes them; comments skipped."""
    values = {}
    # Only "\n" ends a line for sh, systemd and Compose; str.splitlines would also split at U+0085 or U+2028
    # inside a value.
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip()] = env_value_of(value)
    return values


DOUBLE_QUOTE_ESCAPE = re.compile(r'\\([\\"$`])')


def env_value_of(written: str) -> str:
    """One value as ``encode.env_assignment`` writes it: bare, ``'…'``, or ``"…"`` with ``\\`` ``"`` ``$`` escaped."""
    if len(written) >= 2 and written[0] == written[-1] == "'":
        return written[1:-1]
    if len(written) >= 2 and written[0] == written[-1] == '"':
        return DOUBLE_QUOTE_ESCAPE.sub(r"\1", written[1:-1])
    return written


def int_flag(flags: Mapping[str, str | None], flag: str) -> int | None:
    """A whole-number flag's value; a value that is none is an error naming the flag."""
    value = flags.get(flag)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise SeatplanError(f"{flag} {value!r} is not a whole number", where=f"vllm_args {flag}",
                            fix="re-plan, or fix the seat's extra_args") from None


def yarn_override_factor(hf_overrides: str | Mapping[str, Any] | None) -> float | None:
    """The YaRN factor an ``--hf-overrides`` switches on (under ``rope_parameters`` or ``rope_scaling``)."""
    if isinstance(hf_overrides, str):
        try:
            overrides: Any = json.loads(hf_overrides) if hf_overrides else {}
        except ValueError:
            return None
    else:
        overrides = hf_overrides or {}
    for key in ("rope_parameters", "rope_scaling"):
        rope = overrides.get(key) if isinstance(overrides, dict) else None
        if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn":
            factor = rope.get("factor")
            return float(factor) if isinstance(factor, (int, float)) and factor > 1 else None
    return None
