"""The ``seatplan`` command: a thin shell over the pipeline stages.

Each stage package owns its commands in ``<stage>/cli.py`` and exposes ``register(app)``.
Those modules import only Typer at load time and their stage's logic inside the command body,
so ``seatplan model --json`` starts fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

from seatplan.clihelp import SeatplanGroup
from seatplan.errors import SeatplanError

STAGES = ("facts", "usage", "observe", "plan", "render", "verify", "report", "adopt")

app = typer.Typer(
    name="seatplan",
    help="Plan, pin and verify vLLM engines ('seats') sharing a few GPUs behind a LiteLLM gateway.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=SeatplanGroup,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from seatplan import __version__

        typer.echo(f"seatplan {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print seatplan's version and exit."),
) -> None:
    """seatplan: exact KV sizing, placement and verified rollout for vLLM seats."""


def _register_stages() -> None:
    for stage in STAGES:
        importlib.import_module(f"seatplan.{stage}.cli").register(app)


_register_stages()


def main() -> None:
    try:
        app(prog_name="seatplan")
    except SeatplanError as problem:
        from rich.markup import escape

        from seatplan.output import error_console, printable

        # The message may quote a fleet string or a server's answer: its brackets are no markup, its controls no
        # terminal commands.
        error_console().print(f"[bold red]error:[/] {escape(printable(str(problem), keep_newlines=True))}", markup=True, soft_wrap=True)
        sys.exit(problem.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
