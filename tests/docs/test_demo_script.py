"""scripts/demo.sh says what it does while it installs (issue 21: "85 silent seconds"), then plans the demo fleet.

The script runs for real on a copy of the checkout. What it would download cannot be here (no network on the test
machines), so the virtualenv it creates and the pip inside it are a stand-in, said so in the stand-in itself: a
``python`` that answers ``-m venv`` and ``-m pip`` with pip's own kind of lines and hands everything else to this
interpreter. The test installs nothing; what it checks is the script's side: each step named on stderr before it
starts, pip's lines passed through (and its download noise not), then the plan on stdout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kits.paths import REPO_ROOT

PIP_LINES = ["Collecting ortools>=9.10", "  Downloading ortools-9.14.6206-cp311-cp311-manylinux_2_27_x86_64.whl (27.9 MB)",
             "Installing collected packages: ortools, seatplan", "Successfully installed ortools-9.14.6206 seatplan-0.1.0"]

STAND_IN = """#!/bin/sh
# A stand-in for the python of a fresh .venv: nothing may be downloaded here. `-m venv DIR` makes DIR a .venv whose
# python is this file; `-m pip install` prints pip's kind of lines, marks seatplan installed (keeping its arguments) and puts
# the ansible-playbook of the `apply` extra in .venv/bin; the rest runs the
# test's interpreter on this checkout's src.
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && printf '#!/bin/sh\\nexec "%s" -m seatplan.cli "$@"\\n' "$REAL_PYTHON" > "$3/bin/seatplan"
  chmod +x "$3/bin/python" "$3/bin/seatplan"; exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  printf '%s\\n' {pip_lines}; printf '%s\\n' "$*" > "$INSTALLED_MARK"; printf '#!/bin/sh\\n' > .venv/bin/ansible-playbook; chmod +x .venv/bin/ansible-playbook; exit 0
fi
if [ "$1" = "-c" ] && [ ! -e "$INSTALLED_MARK" ]; then exit 1; fi  # `import seatplan` before the install
exec "$REAL_PYTHON" "$@"
"""


def checkout(root: Path) -> Path:
    """The script and the demo's data, as a fresh clone holds them."""
    (root / "scripts").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "scripts" / "demo.sh", root / "scripts" / "demo.sh")
    (root / "examples").symlink_to(REPO_ROOT / "examples")
    stand_in = root / "stand-in-python"
    stand_in.write_text(STAND_IN.replace("{pip_lines}", " ".join(f"'{line}'" for line in PIP_LINES)))
    stand_in.chmod(0o755)
    return stand_in


NEXT_STEPS = ['==> put seatplan on your PATH for this shell: export PATH="{root}/.venv/bin:$PATH"',
              "==> next, why one seat got its numbers: seatplan explain plan.json qwen3-30b-a3b",
              "==> then the files to roll it out: seatplan render plan.json -o rollout   (the whole night: docs/walkthrough.md)"]


@pytest.mark.parametrize("state", ["fresh clone", "installed"])
def test_demo_script_names_each_step_while_it_installs_then_plans(tmp_path: Path, state: str):
    stand_in = checkout(tmp_path)
    environment = {**os.environ, "PYTHON": str(stand_in), "REAL_PYTHON": sys.executable, "INSTALLED_MARK": str(tmp_path / "installed"),
                   "COLUMNS": "100", "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    if state == "installed":
        subprocess.run([str(stand_in), "-m", "venv", str(tmp_path / ".venv")], check=True, env=environment, timeout=60)
        (tmp_path / "installed").touch()
        (tmp_path / ".venv" / "bin" / "ansible-playbook").write_text("#!/bin/sh\n")  # the `apply` extra installed too
        (tmp_path / ".venv" / "bin" / "ansible-playbook").chmod(0o755)
    done = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--json"], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    steps = [line for line in done.stderr.splitlines() if line.startswith("==> ")]
    if state == "fresh clone":
        assert steps == ["==> creating the virtualenv .venv",
                         "==> installing seatplan and its dependencies into .venv (OR-Tools, DuckDB, plotly, Ansible for apply, ...; a minute or two)",
                         "==> seatplan plan examples/demo/fleet.yaml -o plan.json --json"] + [step.replace("{root}", str(tmp_path)) for step in NEXT_STEPS]
        lines = done.stderr.splitlines()
        shown = [line for line in PIP_LINES if line in lines]
        assert shown == [line for line in PIP_LINES if not line.startswith(" ")]  # what pip collects, not its download bars
        assert lines.index(steps[1]) < lines.index(shown[0]) < lines.index(steps[2])
        # issue 50: the install takes the `apply` extra, so the first `seatplan apply` finds ansible-playbook
        assert (tmp_path / "installed").read_text().split()[-2:] == ["-e", ".[apply]"]
        extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        assert any(requirement.startswith("ansible-core") for requirement in extras["apply"])
    else:
        assert steps == ["==> seatplan plan examples/demo/fleet.yaml -o plan.json --json"] + [step.replace("{root}", str(tmp_path)) for step in NEXT_STEPS]
    assert '"worst_case_spare_bytes"' in done.stdout and done.stdout.lstrip().startswith("{")
    # issue 32: the plan is saved where the next steps say, and they can be run as printed
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved == json.loads(done.stdout)
    explain = steps[-2].split(": ", 1)[1].split()
    assert explain[:3] == ["seatplan", "explain", "plan.json"]
    shown = subprocess.run([str(tmp_path / ".venv" / "bin" / explain[0]), *explain[1:]], cwd=tmp_path, env=environment,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and f"{explain[3]}: why these numbers" in shown.stdout, shown.stderr
