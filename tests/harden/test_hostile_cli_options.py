"""Every numeric option of every command, and ``report -o``, under bad values: ``error:``/``fix:`` and exit 2,
never Typer's usage box, a traceback or a half-written file.

The options are found by walking the real command tree, so an option added later with click's own ``int`` or
``float`` type (which shows a usage box and lets ``nan`` through its ranges) fails
``test_every_numeric_option_uses_seatplans_parser``.
"""

from __future__ import annotations

import os
import random
import shlex
from pathlib import Path

import pytest
import typer

from kits.cli import run_cli
from kits.paths import MODEL_FIXTURES, REPO_ROOT
from kits.plan import one_host, write_fleet
from seatplan.cli import app
from seatplan.numeric_options import MAX_CONTEXT_TOKENS, MAX_DEVICE_MEMORY_BYTES, NumberType, TextNumberType
from seatplan.units import parse_bytes, parse_tokens


def commands() -> dict:
    return typer.main.get_command(app).commands  # type: ignore[attr-defined]


def is_option(param) -> bool:
    return isinstance(param.type_descriptor.parameter_info, typer.models.OptionInfo)


def numeric_options() -> list[tuple[str, list[str], str, NumberType]]:
    """(command, placeholder arguments, flag, its parser) for every option that takes a number."""
    found = []
    for name, command in sorted(commands().items()):
        arguments = ["x" for param in command.params if not is_option(param)]
        for param in command.params:
            parser = param.type_descriptor.parameter_info.parser
            if is_option(param) and isinstance(parser, NumberType):
                found.append((name, arguments, param.opts[0], parser))
    return found


OPTIONS = numeric_options()
IDS = [f"{name}{flag}" for name, _, flag, _ in OPTIONS]


def test_every_numeric_option_uses_seatplans_parser():
    """An int or float option without ``parser=count_option/number_option`` gets Typer's usage box and lets nan in."""
    plain = [f"{name} {param.opts[0]}" for name, command in commands().items() for param in command.params
             if param.type_descriptor.annotation in (int, float) and not isinstance(param.type_descriptor.parameter_info.parser, NumberType)]
    assert plain == []
    assert len(OPTIONS) >= 16  # verify --timeout, plan --time-limit/--max-moves, fit (4), model (3), diagnose (4), usage (2)


def bad_values(number: NumberType) -> list[str]:
    below = number.minimum - random.choice([1, 0.5, 10**6]) if number.kind is float else int(number.minimum) - random.randint(1, 10**6)
    above = number.maximum * random.uniform(1.01, 10) if number.kind is float else int(number.maximum) + random.randint(1, 10**6)
    values = ["nan", "inf", "-inf", "1e400", "abc", "", "\x1b[31m", str(below), str(above), "9" * random.randint(400, 5000)]
    if number.kind is int:
        values += [f"{random.randint(1, 99)}.5", "1e3", "true"]
    return values


@pytest.mark.parametrize("command, arguments, flag, number", OPTIONS, ids=IDS)
def test_a_bad_number_is_an_error_with_a_fix(command, arguments, flag, number, capsys, monkeypatch):
    for value in bad_values(number):
        result = run_cli(capsys, monkeypatch, command, *arguments, flag, value)
        assert result.exit_code == 2, (value, result.stderr)
        assert f"error: {flag}:" in result.stderr and f"fix: pass {flag} " in result.stderr, (value, result.stderr)
        assert "Usage:" not in result.stderr and "Traceback" not in result.stderr and "\x1b" not in result.stderr


@pytest.mark.parametrize("command, arguments, flag, number", OPTIONS, ids=IDS)
def test_a_number_in_range_passes_the_option(command, arguments, flag, number):
    value = random.uniform(number.minimum, number.maximum) if number.kind is float else random.randint(int(number.minimum), int(number.maximum))
    assert number(str(value)) == value and number(value) == value
    example = number.reader(number.example) if isinstance(number, TextNumberType) else number.kind(number.example)
    assert number(f" {number.example} ") == example


TEXT_OPTIONS = [option for option in OPTIONS if isinstance(option[3], TextNumberType)]
UNITS = {parse_bytes: [("", 1), ("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40), ("G", 2**30), ("g", 10**9),
                       ("GB", 10**9), ("TB", 10**12), ("m", 10**6)],
         parse_tokens: [("", 1), ("k", 10**3), ("K", 2**10), ("m", 10**6), ("M", 2**20)]}


def test_sizes_and_token_counts_given_as_text_are_bounded():
    """#23: a byte size or token count written as text is held to one pair of bounds (numeric_options): 0 only where
    no memory is a real answer (--headroom, --free-tolerance), never beyond any device or context."""
    found = {f"{name} {flag}": (number.reader, number.minimum, number.maximum) for name, _, flag, number in TEXT_OPTIONS}
    assert found == {"fit --gpu-memory": (parse_bytes, 1, MAX_DEVICE_MEMORY_BYTES), "fit --headroom": (parse_bytes, 0, MAX_DEVICE_MEMORY_BYTES),
                     "fit --max-num-batched-tokens": (parse_tokens, 1, MAX_CONTEXT_TOKENS),
                     "model --kv-cache-memory-bytes": (parse_bytes, 1, MAX_DEVICE_MEMORY_BYTES),
                     "model --max-model-len": (parse_tokens, 1, MAX_CONTEXT_TOKENS),
                     "model --max-num-batched-tokens": (parse_tokens, 1, MAX_CONTEXT_TOKENS),
                     "render --free-tolerance": (parse_bytes, 0, MAX_DEVICE_MEMORY_BYTES),
                     "usage --runaway-tokens": (parse_tokens, 1, MAX_CONTEXT_TOKENS)}


def written(draw: random.Random, reader, low: int, high: int) -> tuple[str, int]:
    """A value in [low, high] written with a unit drawn at random that states it exactly."""
    units = [(unit, factor) for unit, factor in UNITS[reader] if high // factor >= max(-(-low // factor), 1)]
    unit, factor = draw.choice(units)
    count = draw.randint(-(-low // factor), high // factor)
    return f"{count}{unit}", count * factor


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("command, arguments, flag, number", TEXT_OPTIONS, ids=[f"{name}{flag}" for name, _, flag, _ in TEXT_OPTIONS])
def test_a_size_or_token_count_is_read_in_range_and_refused_at_zero_or_beyond(command, arguments, flag, number, seed, capsys, monkeypatch):
    draw = random.Random(f"{seed}{flag}")
    for _ in range(20):  # across the whole range, in every unit that states the value exactly
        text, value = written(draw, number.reader, int(number.minimum), int(number.maximum))
        assert number(text) == value, text
    refused = [written(draw, number.reader, int(number.maximum) + 1, int(number.maximum) * 10**6)[0],
               f"{draw.randint(9, 10**6)}{'TiB' if number.reader is parse_bytes else 'G'}"]
    if number.minimum >= 1:
        refused += ["0", f"0{draw.choice(UNITS[number.reader])[0]}"]
    for text in refused:
        result = run_cli(capsys, monkeypatch, command, *arguments, flag, text)
        assert result.exit_code == 2, (text, result.stderr)
        assert f"error: {flag}: takes {number.wanted} from " in result.stderr and f"not '{text}'" in result.stderr, (text, result.stderr)
        assert f"fix: pass {flag} {number.example}" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture
def plan_file(tmp_path, capsys, monkeypatch) -> Path:
    fleet = write_fleet(tmp_path, one_host(gpus=1) + f"seats:\n  - {{name: qwen, model: {MODEL_FIXTURES / 'Qwen--Qwen3-8B'}, port: 8000, max_model_len: 8192}}\n")
    path = tmp_path / "plan.json"
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(path), "--json").exit_code == 0
    return path


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this user cannot write to: mode 0555, or, for root (whom modes do not stop), sysfs."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("case", ["folder", "under-a-file", "read-only", "deep-under-a-file"])
def test_report_output_that_cannot_be_a_file_is_an_error_with_a_fix(plan_file, tmp_path, case, capsys, monkeypatch):
    (tmp_path / "a-file").write_text("keep me\n")
    output = {"folder": tmp_path, "under-a-file": tmp_path / "a-file" / "report.html",
              "read-only": read_only_folder(tmp_path) / "report.html",
              "deep-under-a-file": tmp_path / "a-file" / "x" / "y" / "report.html"}[case]
    before = tree(tmp_path)
    result = run_cli(capsys, monkeypatch, "report", str(plan_file), "-o", str(output))
    assert result.exit_code == 2 and "error: -o " in result.stderr and "fix:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert tree(tmp_path) == before  # nothing written, no staging file left behind


def refusal_examples() -> list[tuple[str, str, list[str]]]:
    """Every ``$ seatplan ...`` example in docs/verify.md and docs/reliability.md whose output is an ``error:``."""
    found = []
    for page in ("verify.md", "reliability.md"):
        lines = (REPO_ROOT / "docs" / page).read_text().splitlines()
        for index, line in enumerate(lines[:-1]):
            if line.startswith("$ seatplan ") and lines[index + 1].startswith("error:"):
                found.append((page, line[2:], lines[index + 1:index + 3]))
    return found


@pytest.mark.parametrize("page, command, expected", refusal_examples(), ids=[example[1] for example in refusal_examples()])
def test_the_refusals_shown_in_the_docs_are_what_seatplan_prints(page, command, expected, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, *shlex.split(command)[1:])
    assert result.exit_code == 2 and result.stderr.splitlines() == expected, result.stderr
