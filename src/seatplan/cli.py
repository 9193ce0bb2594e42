"""The ``seatplan`` command: a thin shell over the pipeline stages.

Each stage package owns its commands in ``<stage>/cli.py`` and exposes ``register(app)``.
Those modules import only Typer at load time and their stage's logic inside the command body,
so ``seatplan model --json`` starts fast.
"""

from __future__ import annotations

import importlib
import sys
from functools import cache

import typer
from typer._click import Command
from typer._click import exceptions as click_exceptions  # Typer carries its own copy of Click (clihelp.py)
from typer._click import utils as click_utils

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


@cache
def _command() -> Command:
    """The Click command tree of ``app``, built once per process. Typer builds it on every call of ``app()`` by reading
    every command's signature and evaluating its annotations (20-40 ms); a process that runs :func:`main` again (the
    tests do, 1,700 times) paid that each time."""
    return typer.main.get_command(app)


def wants_json(args: list[str]) -> bool:
    """``--json`` among the command's options (not after ``--``, where it would be a file's name)."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def main() -> None:
    # Click's standalone mode would print its own usage errors and exit inside app(); here they come back, so that
    # under --json every error is also one JSON object on stdout (issue 32).
    as_json = wants_json(sys.argv[1:])
    if "seatplan.output" in sys.modules:  # loaded by an earlier command in this process; a fresh one loads it clean
        sys.modules["seatplan.output"].forget_emitted()
    try:
        code = _command()(prog_name="seatplan", standalone_mode=False)
    except SeatplanError as problem:
        from rich.markup import escape

        from seatplan.output import emit_error_json, error_console, printable

        if as_json:
            emit_error_json(problem.message, where=problem.where, fix=problem.fix)
        # The message may quote a fleet string or a server's answer: its brackets are no markup, its controls no
        # terminal commands.
        error_console().print(f"[bold red]error:[/] {escape(printable(str(problem), keep_newlines=True))}", markup=True, soft_wrap=True)
        sys.exit(problem.exit_code)
    except click_exceptions.ClickException as problem:
        if as_json and not isinstance(problem, click_exceptions.NoArgsIsHelpError):
            from seatplan.output import emit_error_json

            emit_error_json(problem.format_message(), where=None, fix="see the command's --help")
        problem.show()
        sys.exit(problem.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except BrokenPipeError:
        # the reader of stdout went away (`seatplan ... | head`): nothing more can be said there
        sys.stdout = click_utils.PacifyFlushWrapper(sys.stdout)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
