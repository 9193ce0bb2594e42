"""How commands print: Rich for people, one JSON document on stdout for ``--json``."""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel

from seatplan.jsontext import dumps_strict


def to_jsonable(document: Any) -> Any:
    if isinstance(document, BaseModel):
        return document.model_dump(mode="json")
    return document


def emit_json(document: Any) -> None:
    """Print exactly one strict JSON document on stdout (non-finite numbers as null), nothing else."""
    sys.stdout.write(dumps_strict(to_jsonable(document), indent=2) + "\n")
    sys.stdout.flush()


def console():
    """A Rich console on stdout (imported lazily: ``--json`` runs never pay for Rich's import)."""
    from rich.console import Console

    return Console(highlight=False)


def error_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)
