"""JSON in and out under limits: bounded depth on read, strict (no NaN/Infinity) on write.

Python's ``json`` reads ``NaN``, ``Infinity`` and numbers like ``1e400`` (as ``inf``) and writes them back as
``NaN``/``Infinity``, which strict parsers (``jq``, JavaScript, Go) reject; and it recurses once per nesting
level, so a document nested 50,000 deep ends in ``RecursionError``. Every reader of an untrusted JSON
document goes through :func:`loads_bounded`, every writer through :func:`dumps_strict`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

MAX_JSON_DEPTH = 64  # seatplan's own documents nest about 6 deep; configs and headers fewer than 10


class JsonTooDeep(ValueError):
    """The document nests deeper than the reader allows."""


def _reject_constant(constant: str) -> float:
    raise ValueError(f"{constant} is not a JSON number")


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` refusing NaN/Infinity spellings and documents nested deeper than ``max_depth``.

    Raises :class:`JsonTooDeep`, ``json.JSONDecodeError`` or ``ValueError`` (for a non-finite number), never
    ``RecursionError``. Numbers too large for a float (``1e400``) are refused the same way.
    """
    try:
        document = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise JsonTooDeep(f"nests deeper than {max_depth} levels") from None
    _check_depth(document, max_depth)
    return document


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a double's range")
    return value


def _check_depth(document: Any, max_depth: int) -> None:
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise JsonTooDeep(f"nests deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def finite_or_none(document: Any) -> Any:
    """A copy of ``document`` (dicts, lists, tuples, scalars) with every NaN or infinity replaced by None."""
    if isinstance(document, float):
        return document if math.isfinite(document) else None
    if isinstance(document, dict):
        return {key: finite_or_none(value) for key, value in document.items()}
    if isinstance(document, (list, tuple)):
        return [finite_or_none(value) for value in document]
    return document


def dumps_strict(document: Any, **options: Any) -> str:
    """JSON text every parser reads: non-finite numbers become null (and ``allow_nan=False`` guards the rest)."""
    return json.dumps(finite_or_none(document), allow_nan=False, **options)
