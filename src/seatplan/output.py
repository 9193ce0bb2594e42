"""How commands print: Rich for people, one JSON document on stdout for ``--json``."""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel
from rich.cells import cell_len
from rich.console import Console, Group
from rich.padding import Padding
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from seatplan.jsontext import dumps_strict
from seatplan.secrets import without_credentials

# Characters a terminal acts on rather than shows: C0 and C1 controls (ESC starts a colour, a title change or
# a cursor move; U+009B is a one-character CSI), DEL, the Unicode line and paragraph separators, and the
# format characters (bidirectional overrides reorder what follows, zero-width ones hide text).
_SHOWN_AS_IS = frozenset("\n")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` as a terminal may show it: every control, separator or format character written as an escape
    (``\\x1b``, ``\\u202e``), so that nothing from a server, a fleet file or a message moves the cursor,
    recolours, retitles or reorders the screen. Newlines stay only with ``keep_newlines``."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escaped(character, keep_newlines) for character in text)


def _escaped(character: str, keep_newlines: bool) -> str:
    if keep_newlines and character in _SHOWN_AS_IS:
        return character
    if unicodedata.category(character) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
        code = ord(character)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return character


def clipped(text: str, max_chars: int, *, cut_before_chars: int = 0) -> str:
    """``text`` cut to its first ``max_chars`` characters, saying how many were left out (a 7 MB version string
    would take minutes to lay out in a table); ``cut_before_chars`` were already cut from its end."""
    if len(text) <= max_chars and not cut_before_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - min(len(text), max_chars) + cut_before_chars:,} more characters)"


def to_jsonable(document: Any) -> Any:
    if isinstance(document, BaseModel):
        return document.model_dump(mode="json")
    return document


_emitted: list[bool] = []  # a document went to stdout in this process: an error after it must not add a second


def emit_json(document: Any) -> None:
    """Print exactly one strict JSON document on stdout (non-finite numbers as null), nothing else; no URL in it
    carries credentials (a server's or a library's message may quote one)."""
    sys.stdout.write(without_credentials(dumps_strict(to_jsonable(document), indent=2)) + "\n")
    sys.stdout.flush()
    _emitted.append(True)


def forget_emitted() -> None:
    """A new command starts with nothing on stdout (one process may run several: tests call ``cli.main`` again)."""
    _emitted.clear()


def emit_error_json(message: str, *, where: str | None, fix: str | None) -> None:
    """Under ``--json``, an error is the one JSON document on stdout (``{"error", "fix", "where"}``), so a script
    reading stdout sees why there is no result; the text goes to stderr as always. Nothing is added after a
    document already printed (stdout stays one document)."""
    if not _emitted:
        emit_json({"error": printable(message), "fix": printable(fix) if fix else None, "where": printable(where) if where else None})


WIDE_COLUMNS = 10_000  # --wide: tables take their natural width, as ``kubectl get -o wide`` or ``less -S`` readers expect


class EscapingConsole(Console):
    """Rich's Console, with every string it turns into text (``print`` arguments, table cells, titles) passed
    through :func:`printable` first: Rich itself drops only BEL, BS, VT, FF and CR, and lets ESC through, so a
    host name or a server's answer could recolour, retitle or clear the terminal. Rich's own styles are added
    after, so colour still works. No URL is printed with its credentials (``secrets.without_credentials``)."""

    def render_str(self, text: str, **options: Any) -> Any:
        return super().render_str(printable(without_credentials(text), keep_newlines=True), **options)


def console(wide: bool = False) -> EscapingConsole:
    """A Rich console on stdout that shows the control characters of every string it prints escaped
    (:func:`printable`). ``wide`` lifts the terminal's width, so that ``fit_table`` keeps every column and lines
    run as long as the widest table needs."""
    # emoji off: a key alias or tag such as "team:ok:a" is printed as written, not with an emoji in it
    if wide:
        return EscapingConsole(highlight=False, emoji=False, width=WIDE_COLUMNS)
    return EscapingConsole(highlight=False, emoji=False)


def error_console() -> EscapingConsole:
    return EscapingConsole(stderr=True, highlight=False, emoji=False)


@contextmanager
def progress(description: str, *, enabled: bool = True, on: Any = None) -> Iterator[None]:
    """A pulsing bar with the elapsed time on stderr while a step that may take seconds runs (reading a big
    spend-log table, a year of GPU series, placing a fleet). Shown only on a terminal, never with --json
    (stdout stays one document), and gone when the step ends; ``on`` is the console (stderr by default)."""
    out = on if on is not None else error_console()
    if not enabled or not out.is_terminal:
        yield
        return

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=out, transient=True) as bar:
        bar.add_task(description, total=None)
        yield


def _words(cell: Any) -> list[str]:
    if isinstance(cell, str):
        plain = Text.from_markup(cell).plain
    elif isinstance(cell, Text):
        plain = cell.plain
    else:
        return []
    return plain.split()


def _cell_width(cell: Any) -> int:
    lines = [" ".join(_words(line)) for line in (cell.splitlines() if isinstance(cell, str) else [cell])]
    return max((cell_len(line) for line in lines), default=0)


MIN_FOLDED_WIDTH = 8  # a column folded to fit is never narrower than this


def hidden_note(headers: list[str], width: int) -> str:
    """The line under a table that lost columns: which ones, and how to see them."""
    return f"hidden to fit {width} columns: {', '.join(headers)} (--wide or --json shows them)"


def fit_table(table: Any, width: int, drop: tuple[str, ...] = (), *, stack: bool = False) -> Any:
    """Fit a Rich table into ``width`` columns without cutting a word: no name, model, byte figure or token
    count is truncated or split while dropping columns can avoid it. Columns in ``drop`` (least important first) are left out while the
    narrowest layout (each column as wide as its longest word, header words included) does not fit; the rest
    wrap between words, and the caption names what was left out. A table whose columns all matter (parts that
    add up to a shown total) passes ``stack``: when even its words do not fit side by side, each row is printed
    as a block of ``header  value`` lines, as ``kubectl describe`` does. Only when nothing is left to drop (and
    nothing may stack) may a header fold: the cells carry the figures."""

    def needs(column) -> tuple[int, int, int]:
        """(longest word of the cells, the same with the header's words, the widest line). A ``no_wrap`` column
        holds lines that read only whole (one time and figure a line): its widest line counts as its word."""
        cells = list(column._cells)
        if column.no_wrap:
            longest_word = max((cell_len(line) for cell in cells for line in str(cell).splitlines()), default=1)
        else:
            longest_word = max((cell_len(word) for cell in cells for word in _words(cell)), default=1)
        with_header = max([longest_word] + [cell_len(word) for word in _words(str(column.header))])
        widest = max([_cell_width(cell) for cell in cells] + [cell_len(str(column.header))])
        return longest_word, with_header, max(widest, with_header)

    def room(count: int) -> int:
        edges = 2 if table.show_edge and table.box else 0
        separators = max(count - 1, 0) if table.box else 0
        return width - count * (table.padding[1] + table.padding[3]) - separators - edges

    droppable = [header for header in drop if any(column.header == header for column in table.columns)]
    measured = [needs(column) for column in table.columns]
    every_column = list(table.columns)
    hidden: list[str] = []
    while sum(headed for _, headed, _ in measured) > room(len(table.columns)) and droppable:
        header = droppable.pop(0)
        hidden.append(header)
        table.columns[:] = [column for column in table.columns if column.header != header]
        for index, column in enumerate(table.columns):
            column._index = index
        measured = [needs(column) for column in table.columns]
    space = room(len(table.columns))
    if stack and sum(headed for _, headed, _ in measured) > space:
        table.columns[:] = every_column  # a stacked row has room for every column: nothing is hidden
        return stacked(table, width)
    if hidden:
        table.caption, table.caption_justify = hidden_note(hidden, width), "left"
    if sum(widest for _, _, widest in measured) <= space:
        return table
    headed_fits = sum(headed for _, headed, _ in measured) <= space
    base = [headed if headed_fits else low for low, headed, _ in measured]
    for column in table.columns:
        # Where even one word per line cannot fit (nothing left to drop), a word folds onto the next line: its
        # characters all stay, never an ellipsis.
        column.overflow = "fold"
    excess = sum(base) - space
    while excess > 0:
        # Fold the column with the longest word first (prose, a long identifier), so that short names and
        # figures in the other columns stay whole; the first column names the row and folds last.
        foldable = [index for index in range(1, len(base)) if base[index] > MIN_FOLDED_WIDTH] or [0]
        widest = max(foldable, key=base.__getitem__)
        cut = min(excess, base[widest] - MIN_FOLDED_WIDTH)
        if cut <= 0:
            break
        base[widest] -= cut
        excess -= cut
    # Every column gets its base; what is left goes to the columns in proportion to what they lack.
    spare = max(space - sum(base), 0)
    lacking = [widest - low for low, (_, _, widest) in zip(base, measured)]
    total_lacking = max(sum(lacking), 1)
    for column, low, lack in zip(table.columns, base, lacking):
        column.width = low + spare * lack // total_lacking
    return table


def stacked(table: Any, width: int) -> Any:
    """The rows of ``table`` one below the other, as ``kubectl describe`` prints a record: the first cell heads
    the row, then ``header value`` pairs, as many a line as ``width`` holds, so that every cell of a wide
    table shows whole (and a row's parts still sit beside its total) on a narrow terminal."""

    columns = list(table.columns)
    header_width = max(cell_len(str(column.header)) for column in columns[1:])
    value_width = max(_cell_width(cell) for column in columns[1:] for cell in column._cells)
    per_line = max(1, (width - 2) // (header_width + value_width + 4))
    blocks: list[Any] = [Text(str(table.title), style="italic")] if table.title else []
    for row in range(table.row_count):
        blocks.append(Text.assemble((f"{columns[0].header} ", "dim"), Text.from_markup(str(columns[0]._cells[row]), style="bold")))
        grid = Table.grid(padding=(0, 2, 0, 0))
        for _ in range(per_line):
            grid.add_column(style="dim", no_wrap=True)
            grid.add_column(overflow="fold")
        # An empty cell says nothing in a block of its own (a change without a note): its header is left out too.
        fields = [item for column in columns[1:] if str(column._cells[row]).strip() for item in (str(column.header), column._cells[row])]
        for first in range(0, len(fields), 2 * per_line):
            grid.add_row(*fields[first:first + 2 * per_line])
        blocks.append(Padding(grid, (0, 0, 0, 2)))
    if table.caption:
        blocks.append(Text(str(table.caption), style="dim"))
    return Group(*blocks)
