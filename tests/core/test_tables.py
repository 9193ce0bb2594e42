"""Every table seatplan draws, at 80 and 100 columns: a column is only ever left out with a note under the table
that names it and says how to see it (``--wide`` or ``--json``), no identifier is cut, and a table whose columns
add up to a shown total keeps them all (it stacks instead)."""

from __future__ import annotations

import io
import json
import random
import re
import string

import pytest
from rich.console import Console
from rich.table import Table

import seatplan.facts.show
import seatplan.observe.show
import seatplan.plan.show
import seatplan.usage.show
import seatplan.verify.show
from kits.cli import run_cli
from kits.night import FLEET, NIGHT, NightDocuments, vllm_log_options
from seatplan import output
from seatplan.units import GiB

MODELS = FLEET.parent / "models"
NOTE = re.compile(r"hidden to fit (\d+) columns: (.+?) \(--wide or --json shows them\)")


def render(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, emoji=False)  # as output.console
    console.print(renderable)
    return console.file.getvalue()


def random_table(draw: random.Random) -> tuple[Table, list[str], list[list[str]]]:
    """Headers of one to four words, cells of one to six words of 1 to 14 characters (names, figures, prose)."""
    alphabet = string.ascii_lowercase + string.digits + "_-.,:/"
    word = lambda: "".join(draw.choice(alphabet) for _ in range(draw.randint(1, 14)))  # noqa: E731
    headers = list(dict.fromkeys(" ".join(word()[:8] for _ in range(draw.randint(1, 3))) for _ in range(draw.randint(1, 12))))
    table = Table(title=" ".join(word() for _ in range(draw.randint(0, 8))) or None)
    for header in headers:
        table.add_column(header, justify=draw.choice(("left", "right")))
    rows = [[" ".join(word() for _ in range(draw.randint(1, 6))) for _ in headers] for _ in range(draw.randint(1, 9))]
    for row in rows:
        table.add_row(*row)
    return table, headers, rows


@pytest.mark.parametrize("seed", range(60))
def test_fit_table_hides_only_what_it_names_and_stacking_keeps_every_word(seed: int):
    draw = random.Random(seed)
    table, headers, rows = random_table(draw)
    width = draw.randint(40, 200)
    drop = tuple(draw.sample(headers, draw.randint(0, len(headers))))
    stack = draw.random() < 0.5
    fitted = output.fit_table(table, width, drop, stack=stack)
    text = render(fitted, width)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    shown = [column.header for column in fitted.columns] if isinstance(fitted, Table) else headers
    hidden = [header for header in headers if header not in shown]
    assert set(hidden) <= set(drop)
    notes = NOTE.findall(" ".join(text.split()))  # the note wraps with the table
    if hidden:
        assert len(notes) == 1 and int(notes[0][0]) == width
        assert notes[0][1] == " ".join(", ".join(header for header in drop if header in hidden).split())  # in the order dropped
    else:
        assert notes == []
    if stack:  # stacked or side by side, a table that may stack shows every word of every shown column whole
        tokens = set(text.split())
        for row in rows:
            for header, cell in zip(headers, row):
                if header in shown:
                    assert set(cell.split()) <= tokens, (cell, text)


def tables_of(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], object]]:
    """Record each fit_table call of the screen modules: the headers it got and what it returned."""
    seen: list[tuple[list[str], object]] = []
    real = output.fit_table

    def recording(table, width, drop=(), **options):
        headers = [str(column.header) for column in table.columns]
        fitted = real(table, width, drop, **options)
        seen.append((headers, fitted))
        return fitted

    for module in (seatplan.facts.show, seatplan.plan.show, seatplan.usage.show, seatplan.verify.show, seatplan.observe.show, output):
        monkeypatch.setattr(module, "fit_table", recording)
    return seen


def commands(night: NightDocuments) -> list[tuple[str, ...]]:
    return [
        ("plan", str(FLEET), "--usage", str(night.usage)),
        ("explain", str(night.plan), "qwen3-30b-a3b"),
        ("fit", str(MODELS / "Qwen--Qwen3-8B"), "--gpu-memory", "24GiB"),
        ("model", str(MODELS / "Qwen--Qwen3-Next-80B-A3B-Thinking"), "--kv-cache-memory-bytes", "20GiB"),
        ("usage", "--from", str(NIGHT / "spend-logs.csv"), "--fleet", str(FLEET)),
        ("diagnose", *vllm_log_options(), "--nvidia-smi", str(NIGHT / "nvidia-smi.csv"), "--plan", str(night.plan)),
        ("upgrade-check", str(night.plan), "--to", "0.20"),
    ]


@pytest.mark.parametrize("columns", [80, 100])
def test_every_table_names_what_it_hides(night: NightDocuments, columns: int, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    for args in commands(night):
        seen = tables_of(monkeypatch)
        done = run_cli(capsys, monkeypatch, *args)
        assert done.exit_code == (1 if args[0] == "diagnose" else 0), done.stderr  # last week's GPU 2 fails the plateau check
        assert seen, f"seatplan {args[0]} drew no table"
        assert "…" not in done.stdout
        flat = " ".join(done.stdout.split())
        for headers, fitted in seen:
            if not isinstance(fitted, Table):
                continue
            hidden = [header for header in headers if header not in [str(column.header) for column in fitted.columns]]
            if hidden:
                notes = [set(listed.split(", ")) for width, listed in NOTE.findall(flat) if int(width) == columns]
                assert set(hidden) in notes, f"seatplan {args[0]} hid {hidden} without saying so:\n{done.stdout}"
        wide = run_cli(capsys, monkeypatch, *args, "--wide")
        assert "hidden to fit" not in wide.stdout and "…" not in wide.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_footprint_parts_stay_beside_their_total(night: NightDocuments, columns: int, capsys, monkeypatch):
    """Every part of every seat's footprint is printed, so a row still adds up to its total."""
    monkeypatch.setenv("COLUMNS", str(columns))
    done = run_cli(capsys, monkeypatch, "plan", str(FLEET), "--usage", str(night.usage))
    assert done.exit_code == 0
    section = done.stdout[done.stdout.index("Footprint per GPU"):done.stdout.index("Seats")]
    for seat in json.loads(night.plan.read_text())["seats"]:
        block = section[section.index(seat["name"]):]
        block = block[:min((block.find(other["name"], len(seat["name"])) for other in json.loads(night.plan.read_text())["seats"]
                            if block.find(other["name"], len(seat["name"])) > 0), default=len(block))]
        figures = [float(figure) for figure in re.findall(r"(?<![\w.])(\d+\.\d\d)~?(?![\w.])", block)]
        parts = [part["bytes"] / GiB for part in seat["footprint_parts"] if part["name"] != "declared_cap"]
        total = seat["footprint_bytes"] / GiB
        assert f"{total:.2f}" in block
        for part in parts:
            assert f"{part:.2f}" in block
        assert abs(sum(round(part, 2) for part in parts) - total) < 0.01 * max(len(parts), 1) + 0.006 or not parts
        assert figures


@pytest.mark.parametrize("columns", [80, 100])
def test_upgrade_check_keeps_identifiers_whole(night: NightDocuments, columns: int, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    document = json.loads(run_cli(capsys, monkeypatch, "upgrade-check", str(night.plan), "--to", "0.20", "--json").stdout)
    done = run_cli(capsys, monkeypatch, "upgrade-check", str(night.plan), "--to", "0.20")
    tokens = set(re.split(r"[\s│┃]+", done.stdout))
    for change in document["changes"]:
        assert change["what"] in tokens, f"{change['what']} is cut at {columns} columns:\n{done.stdout}"
        assert change["seat"] in tokens
    assert max(len(line) for line in done.stdout.splitlines()) <= columns


def test_a_stacked_row_leaves_out_its_empty_cells():
    """A change without a note is two lines, not three with a bare "note" header under them."""
    table = Table()
    for header in ("seat", "what", "before", "after", "note"):
        table.add_column(header)
    table.add_row("qwen3-8b", "flag", "accepted", "--kv-cache-memory-bytes needs vLLM 0.10.2 or later, not 0.10.1", "")
    table.add_row("qwen3-4b", "max_concurrency", "1.33", "1.41", "full-length requests")
    lines = [line.rstrip() for line in render(output.stacked(table, 60), 60).splitlines()]
    first = lines[lines.index("seat qwen3-8b") + 1:lines.index("seat qwen3-4b")]
    assert not any(line.split()[-1] == "note" for line in first if line.split())
    assert any("note" in line and "full-length requests" in line for line in lines[lines.index("seat qwen3-4b"):])
