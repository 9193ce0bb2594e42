"""Numeric command-line options, read and checked by one parser that answers with ``error:``/``fix:``.

Typer's own ``int``/``float`` types and ranges (click's) answer a bad value with a usage box (no ``fix:``), let ``nan``
and ``inf`` through every range (a comparison with NaN is never true) and take ``10**400`` as an integer; so
every numeric option of every command is declared with ``parser=count_option(...)`` or ``parser=number_option(...)``.
"""

from __future__ import annotations

import math
from typing import Any

from seatplan.errors import SeatplanError

# The largest count any option takes: beyond it a value is a typo (and would overflow what it feeds).
MAX_COUNT = 2**31 - 1
_SHOWN_CHARS = 40


class NumberType:
    """A finite number (``kind`` int or float) from ``minimum`` to ``maximum``; anything else is a SeatplanError.

    Given to Typer as ``parser=``: click calls it on the text (and on the default), and a SeatplanError, being no
    click error, travels past click's usage box to ``seatplan.cli.main``, which prints ``error:``/``fix:``."""

    def __init__(self, flag: str, kind: type, minimum: float, maximum: float, example: str) -> None:
        self.flag, self.kind, self.minimum, self.maximum, self.example = flag, kind, minimum, maximum, example
        self.__name__ = "integer" if kind is int else "number"  # click's metavar (INTEGER, NUMBER) in --help

    def __call__(self, value: Any) -> Any:
        number = self._read(value)
        if not self.minimum <= number <= self.maximum:
            self._refuse(value, "a whole number" if self.kind is int else "a number")
        return number

    def _read(self, value: Any) -> int | float:
        if isinstance(value, bool):
            self._refuse(value, "a number")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: int | float = value
        else:
            text = str(value).strip()
            try:
                number = int(text, 10) if self.kind is int else float(text)
            except ValueError:
                self._refuse(value, "a whole number" if self.kind is int else "a number")
        if isinstance(number, float) and not math.isfinite(number):
            self._refuse(value, "a finite number")
        return self.kind(number)

    def _refuse(self, value: Any, wanted: str) -> None:
        from seatplan.output import clipped, printable

        shown = printable(clipped(str(value), _SHOWN_CHARS))
        raise SeatplanError(f"takes {wanted} from {_figure(self.minimum)} to {_figure(self.maximum)}, not '{shown}'",
                            where=self.flag, fix=f"pass {self.flag} {self.example}")


def _figure(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def count_option(flag: str, *, minimum: int = 1, maximum: int = MAX_COUNT, example: str | None = None) -> NumberType:
    """A whole number from ``minimum`` to ``maximum`` for ``flag``."""
    return NumberType(flag, int, minimum, maximum, example or str(max(minimum, 1)))


def number_option(flag: str, *, minimum: float, maximum: float, example: str) -> NumberType:
    """A finite decimal number from ``minimum`` to ``maximum`` for ``flag``."""
    return NumberType(flag, float, minimum, maximum, example)
