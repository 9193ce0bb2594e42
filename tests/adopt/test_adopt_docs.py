"""docs/adopt.md's example runs as shown: the commands on examples/adopt/, their output and the fleet file they write."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from kits.paths import REPO_ROOT

DOC = REPO_ROOT / "docs" / "adopt.md"
SHOWN_DIR = "/srv/llm"  # the page shows the commands run in /srv/llm; started_by names the compose file by its absolute path


def written(path: Path, directory: Path) -> str:
    return path.read_text().replace(str(directory), SHOWN_DIR)


def block_after(marker: str, text: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```\n", text, re.S)
    assert found, marker
    return found[1]


def run_console(block: str, cwd: Path) -> list[tuple[str, str, str]]:
    """Each ``$ seatplan ...`` line of the block: (command, output shown on the page, output it gives)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(REPO_ROOT / "src")}
    runs = []
    for chunk in block.split("$ ")[1:]:
        command, _, shown = chunk.partition("\n")
        words = command.split()
        assert words[0] == "seatplan"
        done = subprocess.run([sys.executable, "-c", "from seatplan.cli import main; main()", *words[1:]], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        shown_lines = [line for line in shown.splitlines() if not line.startswith("(exit status ")]
        if len(shown_lines) != len(shown.splitlines()):
            assert f"(exit status {done.returncode})" in shown, command
        runs.append((command, "\n".join(shown_lines), done.stderr + done.stdout))
    return runs


def test_the_adopt_example_gives_what_the_page_shows(tmp_path):
    text = DOC.read_text()
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    for command, shown, given in run_console(block_after("adopt-example", text), tmp_path):
        assert sorted(given.splitlines()) == sorted(shown.splitlines()), command  # stderr and stdout interleave as they will
    assert written(tmp_path / "fleet.yaml", tmp_path) == block_after("adopt-fleet", text)
    assert not (tmp_path / "plan.json").exists()  # the TODO stopped plan before it wrote anything


def test_the_fixed_seat_example_writes_what_the_page_shows(tmp_path):
    """The adopt line of the fixed-seat example (the page's console test runs the whole block, plan included)."""
    text = DOC.read_text()
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    block = block_after("adopt-fixed-example", text)
    adopt_block = block.split("$ sed ")[0]
    for command, shown, given in run_console(adopt_block, tmp_path):
        assert sorted(given.splitlines()) == sorted(shown.splitlines()), command
    assert written(tmp_path / "speech.yaml", tmp_path) == block_after("adopt-fixed-fleet", text)


def test_the_unit_the_page_shows_is_the_one_the_example_adopts():
    """The ```ini block of "systemd units" is examples/adopt/env/coder.service's [Service] (the example above reads it)."""
    shown = re.search(r"```ini\n(.*?)```\n", DOC.read_text(), re.S)
    assert shown
    unit = (REPO_ROOT / "examples" / "adopt" / "env" / "coder.service").read_text().splitlines()
    assert all(line in unit for line in shown[1].splitlines())
