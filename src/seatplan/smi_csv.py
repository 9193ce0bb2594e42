"""nvidia-smi's CSV output (``--query-gpu=… --format=csv[,nounits]`` and ``--query-compute-apps``), as every reader of it
takes it: ``observe`` (logs of readings over time) and ``adopt`` (one reading of the GPUs and their processes).

No source of nvidia-smi is public; the format is its man page and observed output: a header naming the columns
with their units (``memory.used [MiB]``; ``nounits`` drops them, a looping script repeats the header), rows of
cells after ``, ``, and ``[N/A]`` / ``[Not Supported]`` where nvidia-smi does not know a value.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

__all__ = ["header_fields", "not_known", "rows"]


def rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """Each non-blank row with its line number, cells stripped."""
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), start=1):
        cells = [cell.strip() for cell in row]
        if "".join(cells):
            yield number, cells


def header_fields(row: list[str]) -> list[str]:
    """The column names of a header row, units dropped (``memory.used [MiB]`` → ``memory.used``)."""
    return [cell.strip().split(" [")[0].strip() for cell in row]


def not_known(cell: str) -> bool:
    """``[N/A]``, ``[Not Supported]``: nvidia-smi does not know the value (never 0)."""
    return "N/A" in cell or "Not Supported" in cell
