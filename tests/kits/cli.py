"""``seatplan ARGS`` run in-process through the real entry point, its exit code and output captured."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> CliResult:
    """``seatplan ARGS`` through the real entry point (``seatplan.cli.main``), captured in-process."""
    from seatplan.cli import main  # at call time: the seatplan under test, as the test set it up

    monkeypatch.setattr(sys, "argv", ["seatplan", *args])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)
