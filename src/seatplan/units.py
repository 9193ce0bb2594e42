"""Byte sizes as people and vLLM write them.

vLLM's own parser (``--kv-cache-memory-bytes 20G``) reads upper-case suffixes as powers of 2
and lower-case ones as powers of 10; seatplan follows it so a value pasted from a vLLM command
line means the same bytes here. Explicit ``GiB``/``GB`` spellings are unambiguous.
"""

from __future__ import annotations

import math
import re

from seatplan.errors import SeatplanError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
# No size seatplan reads can be larger: a pebibyte is more memory than any set of GPUs it plans for holds, so a
# model, tensor or budget claimed beyond it is a damaged file, not a fact.
MAX_PLAUSIBLE_BYTES = 1 << 50

_SIZE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[A-Za-z]*)\s*$", re.ASCII)

_BINARY = {"k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
# A token count's suffix is decimal in lower case and binary in upper case (vLLM's human_readable_int).
_TOKEN_BINARY = {suffix.upper(): factor for suffix, factor in _BINARY.items()}

# The most digits a whole number from foreign text may have: 20 hold 2**64; a longer run is a flood, not a figure.
MAX_WHOLE_NUMBER_DIGITS = 20
# Bounds on whole numbers read from foreign text: a GPU index past 4095, a PID past Linux's largest pid_max (2**22)
# or a tensor-parallel size past 4096 GPUs is damage, not a machine.
MAX_GPU_INDEX = 4095
MAX_PID = 1 << 22
MAX_PARALLEL_SIZE = 4096
_WHOLE_NUMBER = re.compile(rf"\s*(-?)([0-9]{{1,{MAX_WHOLE_NUMBER_DIGITS}}})(\.0+)?\s*", re.ASCII)

SIZE_FIX = "write a number of bytes or a size with a unit: 22GiB, 5.5G (2**30), 20g or 20GB (10**9), 512MiB"


def parse_bytes(text: str | int | float, *, field: str = "size") -> int:
    """Parse ``22GiB``, ``5.5G``, ``20g``, ``512MiB``, ``1.5 GB`` or a plain integer into bytes.

    ``G``/``GiB`` are 2**30; ``g``/``GB`` are 10**9 (vLLM's convention for single letters).
    """
    if isinstance(text, bool):
        raise SeatplanError(f"{field}: expected a size such as 22GiB, got {text!r}", fix=SIZE_FIX)
    if isinstance(text, int):
        value = text
    elif isinstance(text, float):
        if not math.isfinite(text) or text != int(text):
            raise SeatplanError(f"{field}: {text!r} is not a whole number of bytes", fix="write it as e.g. 22GiB")
        value = int(text)
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise SeatplanError(f"{field}: cannot read {text!r} as a size", fix=SIZE_FIX)
        value = _scale(float(match["num"]), match["unit"], text, field)
    if value < 0:
        raise SeatplanError(f"{field}: size {text!r} is negative", fix="sizes are 0 or more")
    return value


def _scale(number: float, unit: str, text: object, field: str) -> int:
    if unit in ("", "B", "b"):
        factor = 1
    else:
        lower = unit.lower()
        letter = lower[0]
        if letter not in _BINARY or lower not in {letter, letter + "b", letter + "ib"}:
            raise SeatplanError(f"{field}: unknown unit {unit!r} in {text!r}", fix="use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB")
        if lower.endswith("ib"):
            factor = _BINARY[letter]
        elif lower.endswith("b"):
            factor = _DECIMAL[letter]
        else:
            factor = _BINARY[letter] if unit[0].isupper() else _DECIMAL[letter]
    return int(round(number * factor))


def parse_tokens(text: str | int, *, field: str = "tokens") -> int:
    """Parse a token count the way vLLM's ``--max-model-len`` does (vLLM 0.32 ``vllm/utils/argparse_utils.py:29``,
    ``human_readable_int``): ``32k`` = 32,000, ``32K`` = 32,768, ``25.6k`` = 25,600; a decimal only with a
    lower-case (decimal) suffix, so ``12.5`` and ``1.5K`` are refused as vLLM refuses them."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    fix = "write e.g. 131072, 128K (=131,072) or 128k (=128,000)"
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)", str(text).strip())
    if not match:
        raise SeatplanError(f"{field}: cannot read {text!r} as a token count", fix=fix)
    number, suffix = match[1], match[2]
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise SeatplanError(f"{field}: {text!r} is not a whole number of tokens (vLLM takes a decimal only with k, m, g or t)", fix=fix)
    return int(number) * _TOKEN_BINARY.get(suffix, 1)


def round_up(value: int, step: int) -> int:
    """Round ``value`` up to a multiple of ``step``."""
    return -(-value // step) * step


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def format_gib(num_bytes: float) -> str:
    """vLLM's ``format_gib``: ``str(round(b / 2**30, 2))``, so log figures compare as printed."""
    return str(round(num_bytes / GiB, 2))


def human_bytes(num_bytes: float) -> str:
    """A short readable size for tables: ``22.00 GiB``, ``512.0 MiB`` (any int, however large; NaN as ``nan B``)."""
    if isinstance(num_bytes, float) and not math.isfinite(num_bytes):
        return f"{num_bytes} B"
    sign = "-" if num_bytes < 0 else ""
    size = abs(num_bytes)
    if size >= GiB:
        # integer division first: an int beyond a float's range (10**400) must not overflow
        return f"{sign}{size // GiB:,} GiB" if size >= 1 << 1000 else f"{sign}{size / GiB:.2f} GiB"
    if size >= MiB:
        return f"{sign}{size / MiB:.1f} MiB"
    if size >= KiB:
        return f"{sign}{size / KiB:.1f} KiB"
    return f"{sign}{int(size)} B"


def whole_number(text: object, *, maximum: int, minimum: int = 0, point_zero: bool = False) -> int | None:
    """A whole number written in text seatplan does not control (a file, a log line, a server's header or label),
    or None. The one reader of such numbers: ASCII digits ``0-9`` only (``str.isdigit()``, ``int()`` and ``\\d`` also
    take ``²``, ``٨٠٠٦`` and other Unicode digits, read as numbers nobody wrote), at most
    ``MAX_WHOLE_NUMBER_DIGITS`` of them, a ``-`` only when ``minimum`` is below 0, ``.0`` after it only with
    ``point_zero`` (vLLM's labels before 0.9 wrote ``1234.0``), surrounding spaces ignored, from ``minimum`` to
    ``maximum``. :func:`strict_whole_number` says what is wrong instead of answering None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        number = text
    else:
        match = _WHOLE_NUMBER.fullmatch(text) if isinstance(text, str) else None
        if match is None or (match[1] and minimum >= 0) or (match[3] and not point_zero):
            return None
        number = -int(match[2]) if match[1] else int(match[2])
    return number if minimum <= number <= maximum else None


def strict_whole_number(text: object, *, field: str, where: str, maximum: int, minimum: int = 0, point_zero: bool = False,
                        fix: str | None = None) -> int:
    """:func:`whole_number`, or a :class:`SeatplanError` naming ``where`` and ``field`` (the value quoted, cut short)."""
    number = whole_number(text, maximum=maximum, minimum=minimum, point_zero=point_zero)
    if number is not None:
        return number
    shown = repr(text if not isinstance(text, str) else text[:40] + ("…" if len(text) > 40 else ""))
    in_range = whole_number(text, maximum=10**MAX_WHOLE_NUMBER_DIGITS, minimum=-(10**MAX_WHOLE_NUMBER_DIGITS), point_zero=point_zero)
    what = (f"{field} is {shown}, outside {minimum:,}..{maximum:,}" if in_range is not None
            else f"{field} is {shown}, not a whole number in ASCII digits (at most {MAX_WHOLE_NUMBER_DIGITS})")
    raise SeatplanError(what, where=where, fix=fix or f"{field} takes a whole number from {minimum:,} to {maximum:,}")
