"""docs/walkthrough.md is true: its commands, run in a fresh virtualenv installed from a clean checkout (a
``git clone`` of this repository, then ``pip install``), succeed and print every line the doc shows."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kits.console_blocks import printed, steps
from kits.parts import require
from kits.paths import REPO_ROOT

pytestmark = pytest.mark.slow

WALKTHROUGH = REPO_ROOT / "docs" / "walkthrough.md"


def test_walkthrough_tells_the_night_in_order():
    found = steps(WALKTHROUGH.read_text())
    commands = [step.command.split()[1] for step in found if step.command.startswith("seatplan ")]
    first_use = sorted(set(commands), key=commands.index)
    assert first_use == ["usage", "diagnose", "plan", "explain", "render", "report"]


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    require(shutil.which("git") is not None, "git")
    root = tmp_path_factory.mktemp("walkthrough")
    clone = root / "seatplan"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True, timeout=300)
    # The walkthrough needs the product, not its tests (whose made-up secrets the artefact scan would flag).
    shutil.rmtree(clone / "tests")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(clone)], capture_output=True, text=True,
                             timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("FORCE_COLOR", "NO_COLOR", "VIRTUAL_ENV", "PYTHONPATH")}
    environment.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", COLUMNS="100")
    return clone, environment


def test_walkthrough_commands_print_what_the_doc_shows(fresh_install: tuple[Path, dict[str, str]]):
    clone, environment = fresh_install
    for step in steps((clone / "docs" / "walkthrough.md").read_text()):
        done = subprocess.run(["bash", "-c", step.command], cwd=clone, env=environment, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == step.exit_status, f"{step.command}\n{done.stderr}"
        actual = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
        missing = [line for line in step.expected if not printed(line, actual)]
        assert not missing, f"{step.command} did not print:\n" + "\n".join(missing) + "\n--- it printed:\n" + "\n".join(actual)
    assert (clone / "report.html").stat().st_size > 1_000_000
