"""The ```console blocks of a docs page read as steps: each `$ command`, the lines it prints, its exit status.

``...`` on a line of its own marks lines left out; ``[…]`` inside a line stands for any text (a duration, a
size); ``(exit status N)`` as a block's last line says its last command ends with N.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kits.paths import REPO_ROOT

ELIDED = "..."
ANYTHING = "[…]"


EXIT_STATUS = re.compile(r"\(exit status (\d+)\)")


@dataclass(frozen=True)
class Step:
    command: str
    expected: list[str]
    exit_status: int = 0


def steps(text: str) -> list[Step]:
    """Each ```console block: `$ command` lines, each followed by the lines it prints (`...` marks lines left
    out), and a last line `(exit status N)` where the block's last command is meant to end with N."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        lines = block.rstrip("\n").split("\n")
        assert lines[0].startswith("$ "), lines[0]
        status = EXIT_STATUS.fullmatch(lines[-1])
        if status:
            lines = lines[:-1]
        starts = [index for index, line in enumerate(lines) if line.startswith("$ ")] + [len(lines)]
        for number, (start, end) in enumerate(zip(starts, starts[1:])):
            last = number == len(starts) - 2
            found.append(Step(lines[start][2:], [line.rstrip() for line in lines[start + 1:end] if line.strip() != ELIDED],
                              int(status.group(1)) if status and last else 0))
    return found


def printed(expected: str, actual_lines: list[str]) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split(ANYTHING))
    return any(re.fullmatch(pattern, line) for line in actual_lines)


def shim(directory: Path) -> dict[str, str]:
    """``seatplan`` on PATH as this checkout's CLI, COLUMNS as the pages were written at."""
    bin_dir = directory / ".bin"
    bin_dir.mkdir()
    script = bin_dir / "seatplan"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m seatplan.cli \"$@\"\n")
    script.chmod(0o755)
    environment = {key: value for key, value in os.environ.items() if key not in ("FORCE_COLOR", "NO_COLOR")}
    environment.update(PATH=f"{bin_dir}{os.pathsep}{environment.get('PATH', '')}", COLUMNS="100",
                       PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), environment.get("PYTHONPATH", "")]))
    return environment
