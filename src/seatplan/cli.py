"""The ``seatplan`` command: a thin shell over the pipeline stages.

Each stage package owns its commands in ``<stage>/cli.py`` and exposes ``register(app)``.
Those modules import only Typer at load time and their stage's logic inside the command body,
so ``seatplan model --json`` starts fast.
"""

from __future__ import annotations

import importlib
import sys

import typer

from seatplan.errors import SeatplanError

STAGES = ("facts", "usage", "observe", "plan", "render", "verify", "report")

app = typer.Typer(
    name="seatplan",
    help="Plan, pin and verify vLLM engines ('seats') sharing a few GPUs behind a LiteLLM gateway.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """seatplan: exact KV sizing, placement and verified rollout for vLLM seats."""


def _register_stages() -> None:
    for stage in STAGES:
        importlib.import_module(f"seatplan.{stage}.cli").register(app)


_register_stages()


def main() -> None:
    try:
        app(prog_name="seatplan")
    except SeatplanError as problem:
        from seatplan.output import error_console

        error_console().print(f"[bold red]error:[/] {problem}", markup=True, soft_wrap=True)
        sys.exit(problem.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
