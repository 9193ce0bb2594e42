"""An env file render writes reads the same under sh, systemd's ``EnvironmentFile=`` and Compose's ``env_file``.

sh is the real bash; systemd and Compose are faithful ports of their parsers (tests/kits/env_readers.py names the
source lines): neither systemd as PID 1 nor a Docker engine runs on the test machine. Values are drawn at random
over printable text with the characters each reader treats as syntax weighted up (a trailing backslash, ``\\$``,
quotes, ``#``, spaces, ``${...}``), one file per draw holding many keys, so a value that runs into the next line
(Compose's ``\\'``) shows as the next key read wrong.
"""

from __future__ import annotations

import subprocess

import pytest

from kits.env_readers import compose_env_file, systemd_env_file
from seatplan.encode import env_assignment
from seatplan.engine.command import shell_line
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError

SYNTAX = ["\\", "$", "'", '"', "#", " ", "`", "{", "}", "=", ";", "\\$", "${HOME}", "$HOME", "\\\\", " #", "\\n", "é", "中", "🙂"]
PLAIN = "abcxyzABC019_-./:@%+,"
HOST_ENVIRONMENT = {"HOME": "/root", "PATH": "/usr/bin"}  # what Compose could interpolate, were a `$` left bare


def draw_value(rng) -> str:
    pieces = [rng.choice(SYNTAX) if rng.random() < 0.4 else rng.choice(PLAIN) for _ in range(rng.randrange(0, 14))]
    if rng.random() < 0.3:
        pieces.append("\\")  # the value the issue names: a trailing backslash
    return "".join(pieces)


def bash_reads(text: str, keys: list[str], tmp_path) -> dict[str, str]:
    path = tmp_path / "seat.env"
    path.write_text(text, encoding="utf-8")
    script = "set -a; . \"$1\"; set +a; shift; for key in \"$@\"; do printf '%s\\0' \"${!key}\"; done"
    done = subprocess.run(["bash", "-c", script, "bash", str(path), *keys], capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30, check=True)
    return dict(zip(keys, done.stdout.decode("utf-8").split("\0")[:-1], strict=True))


def refusal_is_due(value: str) -> bool:
    return "'" in value or (value.endswith("\\") and "`" in value)


@pytest.mark.parametrize("draw", range(12))
def test_every_value_reads_the_same_under_sh_systemd_and_compose(draw, rng, tmp_path):
    lines, expected = ["# Written by `seatplan render`; a comment ending in a backslash \\"], {}
    for index in range(40):
        value, key = draw_value(rng), f"K{index}"
        try:
            lines.append(env_assignment(key, value))
        except SeatplanError as problem:
            assert refusal_is_due(value), f"{value!r} refused: {problem.message}"
            continue
        assert not refusal_is_due(value), f"{value!r} written as {lines[-1]!r}"
        expected[key] = value
    # the engine's command line goes in the same file (single-quoted, double quotes inside)
    args = [draw_value(rng).replace("'", "").replace("`", "") for _ in range(6)]
    lines.append(env_assignment("SEATPLAN_COMMAND", shell_line(["vllm", "serve", *args])))
    text = "\n".join(lines) + "\n"
    assert {key: systemd_env_file(text)[key] for key in expected} == expected, text
    assert {key: compose_env_file(text, HOST_ENVIRONMENT)[key] for key in expected} == expected, text
    assert bash_reads(text, list(expected), tmp_path) == expected, text
    assert {key: parse_env(text)[key] for key in expected} == expected  # seatplan's own reader (diff, plan --current)
    command = {"systemd": systemd_env_file(text), "compose": compose_env_file(text, HOST_ENVIRONMENT), "sh": bash_reads(text, ["SEATPLAN_COMMAND"], tmp_path)}
    assert len({reader["SEATPLAN_COMMAND"] for reader in command.values()}) == 1, command


def test_a_trailing_backslash_no_longer_runs_into_the_next_line():
    """The issue's case: single quotes around `C:\\` make compose-go read `\\'` as an escaped quote."""
    text = env_assignment("A", "C:\\dir\\") + "\n" + env_assignment("B", "b") + "\n"
    assert text == 'A="C:\\\\dir\\\\"\nB=b\n'
    assert compose_env_file(text) == systemd_env_file(text) == {"A": "C:\\dir\\", "B": "b"}
    # what the old writer gave, read by Compose: A swallows the newline and B
    old = "A='C:\\dir\\'\nB=b\n"
    with pytest.raises(ValueError, match="unterminated"):
        compose_env_file(old)
    assert systemd_env_file(old) == {"A": "C:\\dir\\", "B": "b"}


def test_dollar_quotes_and_hash_stay_literal_for_both():
    for value in ["$HOME", "${HOME}", "a#b", 'say "hi"', "\\$x", "x\\$\\"]:
        text = env_assignment("V", value) + "\n"
        assert systemd_env_file(text)["V"] == compose_env_file(text, HOST_ENVIRONMENT)["V"] == value, text
