"""What every command's ``--help`` shares: the ``--wide`` option and the examples printed under the options.

One home, so that each stage's ``cli.py`` states its examples and the help reads the same everywhere (as
``gh`` and ``uv`` do: whole option names, then a few commands to copy). Only Typer is imported here.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

WIDE = typer.Option(False, "--wide", help="keep every table column, however wide the lines get (for `less -S` or a file)")


# The examples under each command's --help, run from a checkout (examples/ is shipped data); tests/docs/test_docs.py
# checks that every command has some and that docs/*.md describes every command.
EXAMPLES: dict[str, tuple[str, ...]] = {
    'adopt': (
        'seatplan adopt --compose gpu-box=examples/adopt/compose.yaml --env-dir gpu-box=examples/adopt/env --nvidia-smi gpu-box=examples/adopt/nvidia-smi.csv -o fleet.yaml',
        'seatplan adopt --litellm-config /etc/litellm/config.yaml --env-dir /etc/vllm --gpus-from-host -o fleet.yaml',
    ),
    'model': (
        'seatplan model examples/demo/models/Qwen--Qwen3-8B --kv-cache-memory-bytes 20GiB',
        'seatplan model examples/demo/models/Qwen--Qwen3-Next-80B-A3B-Thinking --max-model-len 32K --json',
    ),
    'usage': (
        'seatplan usage --from examples/night/spend-logs.csv --fleet examples/demo/fleet.yaml -o usage.json',
        'seatplan usage --from postgresql://litellm@db/litellm --days 7 --fleet fleet.yaml --json',
        'seatplan usage --from https://gateway.example/ --key-file ~/.config/litellm-key --days 7 -o usage.json',
    ),
    'diagnose': (
        'seatplan diagnose --vllm-log qwen3-32b=examples/night/vllm/qwen3-32b.log --nvidia-smi examples/night/nvidia-smi.csv -o diagnose.json',
        'seatplan diagnose --beszel examples/night/beszel_data.db --plan plan.json',
    ),
    'plan': (
        'seatplan plan examples/demo/fleet.yaml -o plan.json',
        'seatplan plan examples/demo/fleet.yaml --usage usage.json --max-moves 1 --wide',
        'seatplan plan examples/demo/fleet.yaml --current rollout -o plan2.json',
    ),
    'explain': (
        'seatplan explain plan.json qwen3-8b',
        'seatplan explain plan.json --rollout',
    ),
    'fit': (
        'seatplan fit examples/demo/models/Qwen--Qwen3-8B --gpu-memory 24GiB',
        'seatplan fit examples/demo/models/Qwen--Qwen3-8B --gpu-memory 24GiB --kv-cache-dtype fp8 --json',
    ),
    'schema': (
        'seatplan schema > fleet.schema.json',
    ),
    'render': (
        'seatplan render plan.json -o rollout',
        'seatplan render plan.json -o rollout --restart systemd',
    ),
    'diff': (
        'seatplan diff plan2.json --against rollout',
    ),
    'apply': (
        'seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --check',
        'seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --tag night2',
    ),
    'rollback': (
        'seatplan rollback rollout --to night1',
    ),
    'verify': (
        'seatplan verify plan.json --gateway http://127.0.0.1:14000 --key-env LITELLM_MASTER_KEY',
    ),
    'upgrade-check': (
        'seatplan upgrade-check plan.json --to 0.20',
    ),
    'report': (
        'seatplan report plan.json --usage usage.json --diagnose diagnose.json -o report.html',
    ),
}


# The line each command has in `seatplan --help`: Click cuts a longer first sentence with "..." to fit 80 columns
# (tests/docs/test_help.py reads the list whole at 80).
SUMMARIES: dict[str, str] = {
    'model': "KV layout, capacity, weights and contexts of one model",
    'usage': "Per-seat figures from LiteLLM's spend logs",
    'diagnose': "Boots, co-boot races, creep, plateaus from logs and GPUs",
    'plan': "Size and place every seat; print the vLLM command lines",
    'explain': "Every rule behind one seat's numbers in a plan",
    'fit': "The longest context a model fits in a GPU's memory",
    'schema': "The fleet file's JSON Schema, for your editor",
    'render': "Env files, compose, Ansible, LiteLLM and alert rules",
    'diff': "What rendering a plan would change, seat by seat",
    'apply': "Render a plan and roll it out with ansible-playbook",
    'rollback': "Put the env files backed up under a tag back",
    'verify': "Check the running engines and gateway against a plan",
    'upgrade-check': "What moving to another vLLM changes for a plan",
    'report': "The plan, usage and GPU history on one HTML page",
    'adopt': "Write a fleet file from the deployment that runs now",
}

# Python's textwrap breaks a line after any hyphen inside a word, so an option named in a help text came out as
# "--key-" / "file". The hyphens of every word that fits the column are held as U+2011 (non-breaking hyphen, one
# column like "-") while Click wraps, and given back before anything is printed; a word longer than the column
# keeps its hyphens as the places it may break.
_HELD_HYPHEN = "\u2011"


def _hold_hyphens(text: str, width: int) -> str:
    return re.sub(r"\S+", lambda word: word.group().replace("-", _HELD_HYPHEN) if len(word.group()) <= width else word.group(), text)


def _whole_words(text: str, width: int) -> list[str]:
    """``text`` wrapped at ``width`` between words only (never inside one, hyphens included), paragraphs kept."""
    wrapper = textwrap.TextWrapper(width, break_long_words=False, break_on_hyphens=False, replace_whitespace=False)
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        lines += ([""] if lines else []) + (wrapper.wrap(" ".join(paragraph.splitlines())) or [""])
    return lines


# Click's context and formatter as Typer's commands use them (Typer carries its own copy of Click).
_CLICK_CONTEXT: type[Any] = TyperCommand.context_class
_CLICK_FORMATTER: type[Any] = _CLICK_CONTEXT.formatter_class


class WholeWordFormatter(_CLICK_FORMATTER):
    """Click's help formatter, wrapping help texts between words where a word fits."""

    def write_text(self, text: str) -> None:
        super().write_text(_hold_hyphens(text, self.width - self.current_indent))

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        """Click's definition list (options, commands), each text wrapped between words only: a word longer than
        the column (an nvidia-smi query, a URL) stays whole on a line of its own, so it can be copied (issue 32)."""
        rows = list(rows)
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        text_width = max(self.width - first_col - 2, 10)
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = _whole_words(second, text_width) or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n")

    def getvalue(self) -> str:
        return str(super().getvalue()).replace(_HELD_HYPHEN, "-")


class WholeWordContext(_CLICK_CONTEXT):
    formatter_class = WholeWordFormatter


class SeatplanCommand(TyperCommand):
    context_class = WholeWordContext


class SeatplanGroup(TyperGroup):
    context_class = WholeWordContext


def leftover_words(context: typer.Context) -> str | None:
    """The words a command was given beyond its options (its context allows extra args for this alone), quoted
    as a shell would take them back; None when there are none. A command that reads files only through named
    options says where such a word goes, where Click would refuse "unexpected extra argument" and name none."""

    return " ".join(shlex.quote(word) for word in context.args) if context.args else None


def add_command(app: typer.Typer, name: str, function: Callable[..., None], context_settings: dict[str, Any] | None = None) -> None:
    """Register ``function`` as ``seatplan NAME`` with its summary, and its examples under the options."""
    app.command(name, cls=SeatplanCommand, short_help=SUMMARIES[name], epilog=examples(*EXAMPLES[name]),
                context_settings=context_settings)(function)


def examples(*commands: str) -> str:
    """An epilog for ``app.command(epilog=...)``: the commands as written, one a line (Click's ``\\b`` keeps it
    from rewrapping them)."""
    return "\b\nExamples:\n" + "\n".join(f"  $ {command}" for command in commands)
