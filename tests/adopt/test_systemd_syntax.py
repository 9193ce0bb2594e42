"""The unit reader's lines as systemd reads them (systemd.syntax(7), systemd 252's conf-parser), rule by rule, and
against ``systemd-analyze verify`` itself where the machine has it: random units of continued ExecStart= lines with
comment blocks, blank lines and escaped backslashes, each compared with the command line systemd dumps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from seatplan.adopt.readers.systemd import _exec_words, logical_lines, parse_unit


def _exec_start(tmp_path: Path, text: str) -> list[str]:
    unit = tmp_path / "t.service"
    unit.write_text(text)
    starts = parse_unit(unit).service.get("ExecStart", [])
    return [] if not starts else _exec_words(starts[-1][1], {}, "t")


@pytest.mark.parametrize(("lines", "expected"), [
    # issue 48: a comment inside a continuation is ignored; the line before goes on with what follows it
    (["ExecStart=/usr/bin/vllm serve /m \\", "#  --trust-remote-code --chat-template $$(touch x) \\", "    --port 8006"],
     ["/usr/bin/vllm", "serve", "/m", "--port", "8006"]),
    (["ExecStart=/bin/vllm serve /m \\", "   ; --trust-remote-code", "\t# two comments \\", "  --port 1"],
     ["/bin/vllm", "serve", "/m", "--port", "1"]),
    # a comment's own trailing backslash continues nothing: the next line is a line of its own
    (["# ExecStart=/bin/old \\", "ExecStart=/bin/vllm serve /m"], ["/bin/vllm", "serve", "/m"]),
    # an empty line ends a continuation (systemd: "Missing '='" for the line after)
    (["ExecStart=/bin/vllm serve /m \\", "", "  --trust-remote-code"], ["/bin/vllm", "serve", "/m"]),
    # a doubled backslash at the end is a literal one, not a continuation
    (["ExecStart=/bin/vllm serve /m\\\\", "--trust-remote-code=1"], ["/bin/vllm", "serve", "/m\\"]),
    # the last line of the file may end in a backslash
    (["ExecStart=/bin/vllm serve \\", "  /m \\"], ["/bin/vllm", "serve", "/m"]),
])
def test_the_rules_line_by_line(tmp_path, lines, expected):
    assert _exec_start(tmp_path, "\n".join(["[Service]", *lines]) + "\n") == expected


def test_each_line_is_numbered_where_it_starts():
    assert logical_lines("[Service]\n# c \\\nA=1 \\\n; c\n  2\nB=3") == [(1, "[Service]"), (3, "A=1    2"), (6, "B=3")]


WORDS = ["--port", "8006", "--trust-remote-code", "/m", "-tp", "2", "a=b", "x.y"]


def _random_unit(rng) -> tuple[str, int]:
    """A [Service] section whose ExecStart= runs over several lines, with comment blocks (``#``/``;``, leading blanks,
    trailing backslashes), and another key after; and how many words seatplan must find."""
    lines = ["[Unit]", "Description=t", "[Service]", "Type=simple"]
    if rng.random() < 0.3:
        lines.append(rng.choice(["#", ";", "  #", "\t;"]) + " ExecStart=/bin/false \\")
    line = "ExecStart=/bin/echo"
    for _ in range(rng.randint(0, 6)):
        line += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        lines.append(line + " \\")
        for _ in range(rng.choice([0, 0, 1, 2])):
            lines.append(rng.choice(["", " ", "  ", "\t"]) + rng.choice(["#", ";"]) + " " + " ".join(
                rng.choice(WORDS) for _ in range(rng.randint(0, 3))) + rng.choice(["", " \\", "\\"]))
        line = rng.choice(["", " ", "    "])
    line += " " + rng.choice(WORDS)
    lines.append(line)
    lines.append("Restart=always")
    return "\n".join(lines) + "\n", 0


def _systemd_command_line(unit: Path) -> list[str] | None:
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug"})
    found = re.findall(r"^\s*Command Line: (.*)$", done.stdout + done.stderr, re.M)
    return found[-1].split() if found else None


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_random_units_read_as_systemd_analyze_reads_them(tmp_path, rng):
    for draw in range(6):
        text, _ = _random_unit(rng)
        unit = tmp_path / f"t{draw}.service"
        unit.write_text(text)
        systemd = _systemd_command_line(unit)
        if systemd is None:
            pytest.skip("systemd-analyze verify dumps no command line here")
        starts = parse_unit(unit).service["ExecStart"]
        assert _exec_words(starts[-1][1], {}, "t") == systemd, text
