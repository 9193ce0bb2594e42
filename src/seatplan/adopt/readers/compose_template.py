"""Compose's interpolation, as compose-go (the reference implementation, ``template/template.go``) does it.

``$$`` is a ``$``; ``$NAME`` and ``${NAME}`` the variable's value (empty, with a warning, when unset); ``${NAME:-word}``
/ ``${NAME-word}`` the word when unset or empty / unset; ``${NAME:+word}`` / ``${NAME+word}`` the word when set and
not empty / set; ``${NAME:?message}`` / ``${NAME?message}`` an error carrying the message when unset or empty / unset.
The word is itself interpolated (``${MODEL:-${DEFAULT_MODEL}}``, ``${NAME:-${BASE}/q06}``): a ``${`` opens a brace
that its own ``}`` closes. A ``$`` before anything else (``a $ b``, ``$}``) stays as it is; ``${``, ``${}``, ``${ x}``,
``${x }`` and ``${x!}`` are invalid templates, which compose refuses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")  # the two-character ones first: ':' alone is none


class TemplateError(ValueError):
    """An invalid template, or a required variable without a value (``message`` says which, as compose does)."""


def substitute(template: str, mapping: Mapping[str, str], unset: Callable[[str], None] | None = None) -> str:
    """``template`` with every variable filled in from ``mapping``; ``unset(name)`` is told of each variable read
    as empty because it is not set (compose warns "The NAME variable is not set. Defaulting to a blank string.")."""
    out: list[str] = []
    position = 0
    while position < len(template):
        dollar = template.find("$", position)
        if dollar < 0:
            out.append(template[position:])
            break
        out.append(template[position:dollar])
        following = template[dollar + 1 : dollar + 2]
        if following == "$":
            out.append("$")
            position = dollar + 2
        elif following == "{":
            end = _closing_brace(template, dollar)
            if end < 0:
                raise TemplateError(f"Invalid template: {template!r} (a ${{ without its }})")
            out.append(_braced(template[dollar + 2 : end], template, mapping, unset))
            position = end + 1
        else:
            named = _NAME.match(template, dollar + 1)
            if named is None:
                out.append("$")
                position = dollar + 1
            else:
                out.append(_value(named[0], mapping, unset))
                position = named.end()
    return "".join(out)


def _closing_brace(template: str, dollar: int) -> int:
    """The index of the ``}`` that closes the ``${`` at ``dollar`` (compose-go's getFirstBraceClosingIndex)."""
    depth = 0
    position = dollar
    while position < len(template):
        if template.startswith("${", position):
            depth += 1
            position += 2
            continue
        if template[position] == "}":
            depth -= 1
            if depth == 0:
                return position
        position += 1
    return -1


def _braced(inside: str, template: str, mapping: Mapping[str, str], unset: Callable[[str], None] | None) -> str:
    named = _NAME.match(inside)
    if named is None:
        raise TemplateError(f"Invalid template: {template!r}")
    name, rest = named[0], inside[named.end() :]
    if not rest:
        return _value(name, mapping, unset)
    operator = next((operator for operator in _OPERATORS if rest.startswith(operator)), None)
    if operator is None:
        raise TemplateError(f"Invalid template: {template!r}")
    value = mapping.get(name)
    empty_counts = operator.startswith(":")
    missing = value is None or (empty_counts and value == "")
    word = rest[len(operator) :]
    if operator in (":-", "-"):
        return substitute(word, mapping, unset) if missing else str(value)
    if operator in (":+", "+"):
        return "" if missing else substitute(word, mapping, unset)
    if missing:
        reason = substitute(word, mapping, unset)
        raise TemplateError(f"required variable {name} is missing a value" + (f": {reason}" if reason else ""))
    return str(value)


def _value(name: str, mapping: Mapping[str, str], unset: Callable[[str], None] | None) -> str:
    value = mapping.get(name)
    if value is None:
        if unset is not None:
            unset(name)
        return ""
    return value
