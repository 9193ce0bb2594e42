"""Running seatplan on hostile input in-process, and judging the outcome.

Every reader must end in one of two ways: exit 0 with a result, or exit 2 with ``error:`` and ``fix:`` on
stderr. A traceback (any other exception), a hang, or a JSON document that strict parsers reject is a bug.
"""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

import pytest

from seatplan.cli import main


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def refused(self) -> bool:
        """Exit 2 with a worded error that says how to fix it."""
        return self.exit_code == 2 and "error:" in self.stderr and "fix:" in self.stderr

    def json(self):
        return strict_json(self.stdout)


def strict_json(text: str):
    """Parse as a strict parser would: NaN, Infinity and -Infinity are not JSON."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def seatplan(*args: str, monkeypatch: pytest.MonkeyPatch | None = None) -> Outcome:
    """``seatplan ARGS`` through the real entry point; an uncaught exception propagates (a test failure)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = ["seatplan", *args]
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved
    return Outcome(code, out.getvalue(), err.getvalue())
