"""Numeric command-line options, read and checked by one parser that answers with ``error:``/``fix:``.

Typer's own ``int``/``float`` types and ranges (click's) answer a bad value with a usage box (no ``fix:``), let ``nan``
and ``inf`` through every range (a comparison with NaN is never true) and take ``10**400`` as an integer; so
every numeric option of every command is declared with ``parser=count_option(...)`` or ``parser=number_option(...)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from seatplan.errors import SeatplanError
from seatplan.output import clipped, printable
from seatplan.units import human_bytes, parse_bytes, parse_tokens

# The largest count any option takes: beyond it a value is a typo (and would overflow what it feeds).
MAX_COUNT = 2**31 - 1
# The largest memory one device can give an engine. The largest GPUs of 2026 hold 288 GB (NVIDIA B300, AMD MI355X)
# and a two-socket server's DRAM, a CPU engine's KV space, tops out near 6 TiB (2 × 12 channels × 2 × 128 GiB
# DIMMs); 8 TiB is above both, so a size past it is a slip of the unit (TiB for GiB), not a device. An estimate of
# the hardware, not a vLLM limit.
MAX_DEVICE_MEMORY_BYTES = 8 << 40
# The longest context a token option takes. The longest any model publishes is Llama 4 Scout's 10,485,760
# (its config.json max_position_embeddings); 2**30 is a hundred times that, so a count past it is a typo.
MAX_CONTEXT_TOKENS = 1 << 30
_SHOWN_CHARS = 40
_FRACTION_OF_A_BYTE = re.compile(r"\d*\.\d*\s*[Bb]?")


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
            self._refuse(value, self._wanted())
        return number

    def _read(self, value: Any) -> int | float:
        if isinstance(value, bool):
            self._refuse(value, "a number")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: int | float = value
        else:
            number = self._parse(str(value).strip(), value)
        if isinstance(number, float) and not math.isfinite(number):
            self._refuse(value, "a finite number")
        return self.kind(number)

    def _parse(self, text: str, value: Any) -> int | float:
        try:
            return int(text, 10) if self.kind is int else float(text)
        except ValueError:
            self._refuse(value, self._wanted())

    def _wanted(self) -> str:
        return "a whole number" if self.kind is int else "a number"

    def _shown(self, bound: float) -> str:
        return _figure(bound)

    def _refuse(self, value: Any, wanted: str) -> NoReturn:
        shown = _shown_text(str(value), _SHOWN_CHARS)
        raise SeatplanError(f"takes {wanted} from {self._shown(self.minimum)} to {self._shown(self.maximum)}, not '{shown}'",
                            where=self.flag, fix=f"pass {self.flag} {self.example}")


class TextNumberType(NumberType):
    """A whole number written as vLLM writes it (a byte size ``22GiB`` or a token count ``32K``), read by the one
    reader ``units`` has for it, then held to ``minimum``..``maximum`` like any other number."""

    def __init__(self, flag: str, reader: Callable[..., int], wanted: str, minimum: int, maximum: int, example: str, name: str) -> None:
        super().__init__(flag, int, minimum, maximum, example)
        self.reader, self.wanted = reader, wanted
        self.__name__ = name  # as NumberType names itself; --help shows metavar="<size>"/"<tokens>", given beside the parser

    def _wanted(self) -> str:
        return self.wanted

    def _parse(self, text: str, value: Any) -> int | float:
        if _FRACTION_OF_A_BYTE.fullmatch(text) and self.reader is parse_bytes:
            self._refuse(value, self.wanted)  # a count of bytes is whole; 5.5G is a size, 12.5 is a slip
        try:
            return self.reader(text, field=self.flag)
        except SeatplanError as problem:  # the reader says what it could not read (an unknown unit, a decimal count)
            reason = _shown_text(problem.message.removeprefix(f"{self.flag}: "), 2 * _SHOWN_CHARS)
            raise SeatplanError(f"{reason}; it takes {self.wanted} from {self._shown(self.minimum)} to {self._shown(self.maximum)}",
                                where=self.flag, fix=f"pass {self.flag} {self.example}") from None
        except (ValueError, OverflowError):  # ValueError: more digits than int() reads; OverflowError: 1e400 bytes
            self._refuse(value, self.wanted)

    def _shown(self, bound: float) -> str:
        if self.reader is not parse_bytes:
            return _figure(bound)
        return f"{int(bound) >> 40} TiB" if bound and int(bound) % (1 << 40) == 0 else human_bytes(int(bound))


def _shown_text(text: str, limit: int) -> str:
    return printable(clipped(text, limit))


def _figure(bound: float) -> str:
    return f"{int(bound):,}" if float(bound).is_integer() else f"{bound:g}"


def count_option(flag: str, *, minimum: int = 1, maximum: int = MAX_COUNT, example: str | None = None) -> NumberType:
    """A whole number from ``minimum`` to ``maximum`` for ``flag``."""
    return NumberType(flag, int, minimum, maximum, example or str(max(minimum, 1)))


def number_option(flag: str, *, minimum: float, maximum: float, example: str) -> NumberType:
    """A finite decimal number from ``minimum`` to ``maximum`` for ``flag``."""
    return NumberType(flag, float, minimum, maximum, example)


def size_option(flag: str, *, minimum: int = 1, example: str) -> TextNumberType:
    """A byte size for ``flag`` (``22GiB``, ``5.5G``, ``20g``, bytes; ``units.parse_bytes``), from ``minimum``
    (1 where no memory means nothing, 0 where none is a real answer) to ``MAX_DEVICE_MEMORY_BYTES``."""
    return TextNumberType(flag, parse_bytes, "a size", minimum, MAX_DEVICE_MEMORY_BYTES, example, "size")


def tokens_option(flag: str, *, example: str) -> TextNumberType:
    """A token count for ``flag`` as vLLM reads one (``32768``, ``32K``, ``32k``; ``units.parse_tokens``), from 1
    to ``MAX_CONTEXT_TOKENS``: no option counts zero tokens meaningfully."""
    return TextNumberType(flag, parse_tokens, "a token count", 1, MAX_CONTEXT_TOKENS, example, "tokens")
