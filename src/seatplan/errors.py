"""One error type for every problem the user can fix.

The CLI turns a :class:`SeatplanError` into three lines on stderr (what, where, how to fix)
and a non-zero exit; nothing else ever reaches the user as a traceback.
"""

from __future__ import annotations


class SeatplanError(Exception):
    """A problem with the user's input or environment, worded for the user.

    ``where`` names the file (and line or field) at fault; ``fix`` says what to do about it.
    """

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        parts = [f"{self.where}: {self.message}" if self.where else self.message]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return "\n".join(parts)


class FieldValueError(ValueError):
    """A ValueError raised inside a pydantic validator that knows its fix; readers that turn validation
    errors into :class:`SeatplanError` find it as ``ctx["error"]`` and keep the fix."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix
