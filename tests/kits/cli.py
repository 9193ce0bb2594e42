"""``seatplan ARGS`` through the real entry point, its exit code and output captured: in-process (``run_cli``, the
``cli`` fixture) wherever the process boundary is not what a test is about, in a child process (``run_process``)
where it is."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str,
            env: Mapping[str, str | None] | None = None) -> CliResult:
    """``seatplan ARGS`` through the real entry point (``seatplan.cli.main``), captured in-process. ``env`` sets
    (or, with None, removes) variables for this run only."""
    from seatplan.cli import main  # noqa: PLC0415 (at call time: the seatplan under test, as the test set it up)

    with monkeypatch.context() as scoped:
        for name, value in (env or {}).items():
            if value is None:
                scoped.delenv(name, raising=False)
            else:
                scoped.setenv(name, value)
        scoped.setattr(sys, "argv", ["seatplan", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


def child_environment(env: Mapping[str, str | None] | None) -> dict[str, str]:
    """This process's environment with ``env`` applied: a value sets a variable, None removes it."""
    environment = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return environment


def run_process(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None,
                timeout_s: float = 300.0) -> CliResult:
    """``python -m seatplan.cli ARGS`` in a child process, for what only a process shows: a hang that the
    timeout cuts off, settings a library reads once at import (huggingface_hub's HF_ENDPOINT), the exit of the
    real interpreter. ``env`` changes the inherited environment as in :func:`run_cli`."""
    environment = child_environment(env)
    done = subprocess.run([sys.executable, "-m", "seatplan.cli", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=cwd, env=environment)
    return CliResult(done.returncode, done.stdout, done.stderr)
