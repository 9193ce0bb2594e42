"""Every ```console block of README.md and docs/*.md runs, on the shipped data (examples/), and prints the lines
the page shows: one working directory per page, its blocks in order (a later block reads what an earlier one
wrote), as docs/walkthrough.md is run by test_walkthrough.py from a fresh install (so it is left out here).

A block that needs what this machine cannot give (a GPU host reached by ansible, a gateway in front of live
engines) is marked on the line before it with ``<!-- not run: why -->``; the test checks that such a block says
why, and that every other block runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kits.console_blocks import printed, shim, steps
from kits.paths import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").glob("*.md")])
NOT_RUN = re.compile(r"^<!-- not run: (?P<why>[^>]*\S[^>]*) -->\n```console\n.*?```", re.S | re.M)


def runnable(text: str) -> str:
    """The page with its not-run blocks taken out."""
    return NOT_RUN.sub("", text)


def test_not_run_blocks_say_why():
    for page in PAGES:
        text = page.read_text()
        for marker in re.findall(r"^<!-- not run[^>]*-->", text, flags=re.M):  # a marker opens its line
            assert NOT_RUN.search(text[text.index(marker):]), f"{page.name}: {marker} names no reason or is not before a console block"


@pytest.mark.parametrize("page", [page for page in PAGES if page.name != "walkthrough.md" and "```console" in runnable(page.read_text())],
                         ids=lambda page: page.name)
def test_page_examples_print_what_the_page_shows(page: Path, tmp_path: Path):
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    environment = shim(tmp_path)
    for step in steps(runnable(page.read_text())):
        done = subprocess.run(["bash", "-c", step.command], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
        assert done.returncode == step.exit_status, f"{page.name}: {step.command}\n{done.stderr}"
        actual = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
        missing = [line for line in step.expected if not printed(line, actual)]
        assert not missing, (f"{page.name}: {step.command} did not print:\n" + "\n".join(missing) + "\n--- it printed:\n" + "\n".join(actual))
