"""Every command's ``--help`` reads whole at 80 columns, with examples under it, and every command has a docs
entry (a heading in docs/*.md naming it): the sqlite-utils habit of testing the help and the docs together."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer.main

from kits.cli import run_cli
from kits.paths import REPO_ROOT
from seatplan.cli import app
from seatplan.clihelp import EXAMPLES, SUMMARIES

COMMANDS = sorted(typer.main.get_command(app).commands.items())  # type: ignore[attr-defined]
HEADINGS = [line for page in sorted((REPO_ROOT / "docs").glob("*.md")) for line in page.read_text().splitlines() if line.startswith("#")]


def test_every_command_has_examples():
    assert sorted(EXAMPLES) == sorted(name for name, _ in COMMANDS)


@pytest.mark.parametrize("name,command", COMMANDS, ids=[name for name, _ in COMMANDS])
def test_help_shows_whole_option_names_no_flag_metavar_and_examples(name: str, command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    done = run_cli(capsys, monkeypatch, name, "--help")
    assert done.exit_code == 0
    text = done.stdout
    assert "…" not in text and "<bool>" not in text
    for line in text.splitlines():  # a longer line is an example, or one word that must stay whole to be copied
        assert len(line) <= 80 or "$ seatplan" in line or len(line.split()) == 1, f"{name} --help: {line!r}"
    for parameter in command.params:
        for option in parameter.opts + parameter.secondary_opts:
            if option.startswith("-"):
                assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text), f"{name} --help cuts {option}:\n{text}"
        if getattr(parameter, "is_flag", False) and parameter.opts:
            line = next(line for line in text.splitlines() if parameter.opts[-1] in line)
            assert "<" not in line.split(parameter.opts[-1], 1)[1].split("  ")[0], f"{name}: flag {parameter.opts} shows a metavar: {line}"
    assert "Examples:" in text
    for example in EXAMPLES[name]:
        assert f"$ {example}" in text and example.startswith(f"seatplan {name} ")


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_every_command_has_a_docs_entry(name: str):
    assert any(f"seatplan {name}" in heading or f"`{name}`" in heading for heading in HEADINGS), f"no docs/*.md heading names {name}"


def test_docs_cite_only_files_in_the_repo():
    """A page that README.md or docs/*.md links to or cites by section (``VLLM.md §2.1``, ``OVERHEAD.md §5``) is a
    file of this repository, and no page points outside it (a /work/... path)."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text()
        assert "/work/" not in text, page.name
        cited = re.findall(r"\]\(([^)#:]+\.md)", text) + re.findall(r"(?<![\w/.-])([A-Za-z_-]+\.md),? (?:§|part )", text)
        for name in set(cited):
            assert (REPO_ROOT / "docs" / name).is_file() or (REPO_ROOT / name).is_file(), f"{page.name} cites {name}, which is not in the repo"


def test_the_command_list_reads_whole_at_80_columns(capsys, monkeypatch):
    """`seatplan --help` lists each command with its summary whole: Click cuts a longer first sentence with "..."."""
    monkeypatch.setenv("COLUMNS", "80")
    done = run_cli(capsys, monkeypatch, "--help")
    assert done.exit_code == 0 and "..." not in done.stdout.split("Commands:", 1)[1]
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    listed = {line.split()[0]: " ".join(line.split()[1:]) for line in done.stdout.split("Commands:\n", 1)[1].splitlines() if line.strip()}
    assert listed == SUMMARIES


@pytest.mark.parametrize("name", [name for name, _ in COMMANDS])
def test_help_breaks_no_word_that_fits_at_a_hyphen(name: str, capsys, monkeypatch):
    """Python's textwrap breaks after any hyphen ("--key-" / "file"); a word that fits the help's column stays whole.
    The narrowest column at 80 is 46 characters (a 30-character option column, its gap and Click's margin)."""
    monkeypatch.setenv("COLUMNS", "80")
    lines = run_cli(capsys, monkeypatch, name, "--help").stdout.splitlines()
    for line, after in zip(lines, lines[1:]):
        if re.search(r"\w-$", line) and after.split():
            word = line.split()[-1] + after.split()[0]
            assert len(word) > 46, f"{name} --help breaks {word!r} at a hyphen:\n{line}\n{after}"


@pytest.mark.parametrize("name,command", COMMANDS, ids=[name for name, _ in COMMANDS])
@pytest.mark.parametrize("columns", [60, 80, 100])
def test_help_keeps_every_word_whole_and_says_placeholders_in_words(name: str, command, columns: int, capsys, monkeypatch):
    """issue 32: `adopt --help` showed `<list[str]>` and broke nvidia-smi's query mid-token, so it could not be
    copied. Every word of every option's help is printed whole, at any width; no placeholder is a Python type."""
    monkeypatch.setenv("COLUMNS", str(columns))
    text = run_cli(capsys, monkeypatch, name, "--help").stdout
    printed = set(text.split())
    assert not re.search(r"<(list|dict|tuple|set|Optional|Path)\b|\[(str|int|float|Path)\]", text), f"{name} --help:\n{text}"
    for parameter in command.params:
        for word in (getattr(parameter, "help", None) or "").split():
            assert word in printed or any(word in line_word for line_word in printed), f"{name} --help cuts {word!r}:\n{text}"


def test_python_dash_m_seatplan_is_the_command():
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "seatplan", "plan", str(REPO_ROOT / "absent.yaml")], capture_output=True, text=True,
                          env=environment, timeout=120)
    assert done.returncode == 2 and "absent.yaml: cannot read the fleet file" in done.stderr
