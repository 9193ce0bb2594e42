"""A machine without ansible-playbook (issue 50: the README's first command installed seatplan but not Ansible, and the
first apply ended in "ansible-playbook is not installed" with no next step): the error names the command that installs
it where seatplan looks for it, beside the Python that runs seatplan, from seatplan's own declared extra."""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

from kits.cli import run_cli
from kits.paths import REPO_ROOT


def test_apply_without_ansible_playbook_names_the_install_command(demo_plan_path: Path, tmp_path: Path, capsys, monkeypatch):
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("all:\n  hosts:\n    gpu-box: {}\n")
    bare = tmp_path / "venv" / "bin"
    bare.mkdir(parents=True)
    # seatplan looks on PATH and beside the Python that runs it: here neither holds ansible-playbook
    monkeypatch.setattr(sys, "executable", str(bare / "python3"))
    result = run_cli(capsys, monkeypatch, "apply", str(demo_plan_path), "--inventory", str(inventory), "-o", str(tmp_path / "rendered"),
                     env={"PATH": str(bare)})
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "error: ansible-playbook is not installed" in said, said
    assert not (tmp_path / "rendered").exists()
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (requirement,) = [each for each in extras["apply"] if each.startswith("ansible-core")]
    fix = said.split("fix: install it beside seatplan: ", 1)[1]
    assert shlex.split(fix.split(" (", 1)[0]) == [str(bare / "python3"), "-m", "pip", "install", requirement]
