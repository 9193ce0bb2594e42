"""The terminal as a new user meets it at 80 and 100 columns: names, model names and byte figures appear
whole (tables wrap between words and drop less important columns instead of cutting), output follows
COLUMNS when piped, NO_COLOR is honoured, slow steps show a progress bar on stderr only, errors carry a fix."""

from __future__ import annotations

import ast
import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from kits.cli import CliResult
from kits.night import FLEET, NIGHT, NightDocuments, vllm_log_options
from kits.paths import REPO_ROOT
from seatplan.output import fit_table, progress
from seatplan.units import GiB

BOX_LINE = re.compile(r"^[┏┃┡│└┗╇━┳┻┣┫┠─]")


def piped(cli: Callable[..., CliResult], *args: str, columns: int, **env: str) -> tuple[str, str, int]:
    """Output as a pipe gets it: COLUMNS set, no terminal, no colour asked for unless ``env`` asks."""
    done = cli(*args, env={"FORCE_COLOR": None, "NO_COLOR": None, "TERM": None, "COLUMNS": str(columns), **env})
    return done.stdout, done.stderr, done.exit_code


def assert_whole(text: str, *figures: str) -> None:
    """Each figure appears as a whole token (not cut, not folded across lines)."""
    for figure in figures:
        assert re.search(rf"(?<![\w.,/-]){re.escape(figure)}(?![\w.,/-])", text), f"{figure!r} is not whole in:\n{text}"


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if BOX_LINE.match(line)]


@pytest.mark.parametrize("columns", [80, 100])
def test_plan_tables_keep_every_name_and_figure_whole(cli, night: NightDocuments, columns: int):
    out, _, code = piped(cli, "plan", str(FLEET), "--usage", str(night.usage), columns=columns)
    assert code == 0
    plan = json.loads(night.plan.read_text())
    assert_whole(out, *(seat["name"] for seat in plan["seats"]))
    assert_whole(out, *(f"{seat['kv_cache_memory_bytes']:,}" for seat in plan["seats"] if seat.get("kv_cache_memory_bytes")))
    assert_whole(out, *(f"{seat['footprint_bytes'] / GiB:.2f}" for seat in plan["seats"]))
    assert_whole(out, *(f"{gpu['spare_bytes'] / GiB:.2f}" for gpu in plan["gpus"]))
    assert_whole(out, *(f"{gpu['host']}:{gpu['index']}" for gpu in plan["gpus"]))
    lines = table_lines(out)
    assert lines and max(len(line) for line in lines) <= columns
    if columns == 100:  # piped output follows COLUMNS: it uses the width it is given, not 80, not 160
        assert max(len(line) for line in lines) > 80


@pytest.mark.parametrize("columns", [80, 100])
def test_usage_and_diagnose_tables_keep_names_whole(cli, night: NightDocuments, columns: int):
    out, _, code = piped(cli, "usage", "--from", str(NIGHT / "spend-logs.csv"), "--fleet", str(FLEET), columns=columns)
    assert code == 0
    usage = json.loads(night.usage.read_text())
    assert_whole(out, *usage["models"])  # model names as LiteLLM and vLLM serve them
    assert_whole(out, *(model["seat"] for model in usage["models"].values() if model["seat"]))
    assert_whole(out, *(f"{model['peak_inflight_tokens']:,}" for model in usage["models"].values()))
    assert_whole(out, *(group["key_alias"] for group in usage["runaways_by_key"]))
    assert max(len(line) for line in table_lines(out)) <= columns
    out, _, code = piped(cli, "diagnose", *vllm_log_options(), "--nvidia-smi", str(NIGHT / "nvidia-smi.csv"), columns=columns)
    assert code == 0
    assert_whole(out, "qwen3-32b", "qwen3-4b", "qwen3-30b-a3b", "llama-3.2-3b", "20.4", "26.7", "29.0")
    assert max(len(line) for line in table_lines(out)) <= columns


@pytest.mark.parametrize("columns", [80, 100])
def test_explain_keeps_byte_figures_whole(cli, night: NightDocuments, columns: int):
    out, _, code = piped(cli, "explain", str(night.plan), "qwen3-32b", columns=columns)
    assert code == 0
    seat = next(seat for seat in json.loads(night.plan.read_text())["seats"] if seat["name"] == "qwen3-32b")
    assert_whole(out, *(f"{part['bytes']:,}" for part in seat["footprint_parts"]))
    assert max(len(line) for line in table_lines(out)) <= columns


def test_fit_table_drops_columns_before_cutting_a_word():
    table = Table()
    for header in ("seat", "bytes", "note"):
        table.add_column(header)
    table.add_row("a-seat-with-a-long-name", "23,622,320,128", "less important words here")
    fitted = fit_table(table, 44, drop=("note",))
    assert [column.header for column in fitted.columns] == ["seat", "bytes"]
    text = render(fitted, 44)
    assert "a-seat-with-a-long-name" in text and "23,622,320,128" in text
    # Nothing left to drop: the word folds onto the next line, every character kept, never an ellipsis.
    narrow = Table()
    narrow.add_column("seat")
    narrow.add_row("a-seat-with-a-long-name")
    text = render(fit_table(narrow, 12), 12)
    assert "…" not in text
    assert "".join(line.strip("│ ") for line in text.splitlines()[3:-1]) == "a-seat-with-a-long-name"


def render(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_no_color_is_honoured(cli, night: NightDocuments):
    coloured, _, _ = piped(cli, "plan", str(FLEET), columns=100, FORCE_COLOR="1")
    plain, _, _ = piped(cli, "plan", str(FLEET), columns=100, FORCE_COLOR="1", NO_COLOR="1")
    colour_code = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38;|9[0-7])[0-9;]*m")
    assert colour_code.search(coloured)
    assert not colour_code.search(plain)


def test_progress_shows_on_a_terminal_only():
    terminal = Console(file=io.StringIO(), force_terminal=True, width=80)
    with progress("reading the spend logs", on=terminal):
        pass
    assert "reading the spend logs" in terminal.file.getvalue()
    for console, enabled in ((Console(file=io.StringIO(), force_terminal=True), False), (Console(file=io.StringIO()), True)):
        with progress("reading", enabled=enabled, on=console):
            pass
        assert console.file.getvalue() == ""


def test_json_runs_print_one_document_and_no_progress(cli, night: NightDocuments):
    out, err, code = piped(cli, "plan", str(FLEET), "--json", columns=80)
    assert code == 0 and json.loads(out)["seats"] and err == ""


def test_a_bad_unit_in_the_fleet_file_says_how_to_fix_it(cli, tmp_path: Path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.read_text().replace("total_bytes: 95.59GiB}", "total_bytes: 95.59GiX}", 1))
    (tmp_path / "models").symlink_to(FLEET.parent / "models")
    _, err, code = piped(cli, "plan", str(fleet), columns=80)
    assert code == 2
    assert "unknown unit 'GiX'" in err and "\nfix: use B, KiB, MiB, GiB" in err


def test_every_error_seatplan_raises_names_its_fix():
    """Each ``SeatplanError(...)`` in the source passes ``fix=``: the CLI prints it as the ``fix:`` line."""
    missing = []
    for path in sorted((REPO_ROOT / "src" / "seatplan").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "SeatplanError":
                if not any(keyword.arg in ("fix", None) for keyword in node.keywords):
                    missing.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert missing == []


@pytest.mark.parametrize("columns", [80, 100])
def test_no_command_cuts_a_cell(cli, night: NightDocuments, columns: int):
    """Rich marks a cut cell with an ellipsis; none of the main commands may print one."""
    models = FLEET.parent / "models"
    runs = [
        ("plan", str(FLEET), "--usage", str(night.usage)),
        ("explain", str(night.plan), "qwen3-30b-a3b"),
        ("usage", "--from", str(NIGHT / "spend-logs.csv"), "--fleet", str(FLEET)),
        ("diagnose", *vllm_log_options(), "--nvidia-smi", str(NIGHT / "nvidia-smi.csv"), "--plan", str(night.plan)),
        ("model", str(models / "Qwen--Qwen3-Next-80B-A3B-Thinking"), "--kv-cache-memory-bytes", "20GiB"),
        ("fit", str(models / "Qwen--Qwen3-8B"), "--gpu-memory", "24GiB"),
        ("upgrade-check", str(night.plan), "--to", "0.20"),
    ]
    for args in runs:
        out, err, code = piped(cli, *args, columns=columns)
        assert code == (1 if args[0] == "diagnose" else 0), err  # last week's GPU 2 fails the plateau check
        assert "…" not in out, f"seatplan {args[0]} cut a cell at {columns} columns:\n{out}"
        if args[0] == "upgrade-check":  # prose folds first; the seat names stay whole
            assert_whole(out, *(name for name in ("gpt-oss-20b", "mistral-7b") if name in out))
