"""nvidia-smi's CSV output (``--query-gpu=… --format=csv[,nounits]`` and ``--query-compute-apps``), as every reader of it
takes it: ``observe`` (logs of readings over time) and ``adopt`` (one reading of the GPUs and their processes).

No source of nvidia-smi is public; the format is its man page and observed output: a header naming the columns
with their units (``memory.used [MiB]``; ``nounits`` drops them, a looping script repeats the header), rows of
cells after ``, ``, and ``[N/A]`` / ``[Not Supported]`` where nvidia-smi does not know a value.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Mapping

__all__ = ["APP_MEMORY_COLUMNS", "app_memory_cell", "header_fields", "mib_reading", "mib_text", "not_known", "rows"]

# --query-compute-apps=used_memory is printed under the header ``used_gpu_memory [MiB]``; either name may head the column
APP_MEMORY_COLUMNS = ("used_gpu_memory", "used_memory")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


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


def app_memory_cell(values: Mapping[str, str]) -> str:
    """The memory cell of one ``--query-compute-apps`` row, under whichever name its header gives it ("" when none)."""
    return next((values[name] for name in APP_MEMORY_COLUMNS if name in values), "")


def mib_text(cell: str) -> str:
    """``77999 MiB`` or ``77999`` (``nounits``) → ``77999``, for a reader that wants the number exactly as written."""
    return cell.strip().removesuffix("MiB").strip()


def mib_reading(cell: str) -> float:
    """``77999 MiB``, ``77999`` (``nounits``) as a number; NaN for ``[N/A]`` / ``[Not Supported]`` or no number at all.

    Lenient, for logs read over days: a reader that must refuse a damaged cell checks the result (or uses
    :func:`mib_text` and its own strict parse).
    """
    try:
        return float(cell.split(None, 1)[0])
    except (ValueError, IndexError):
        match = _NUMBER.search(cell)
        return float(match.group(0)) if match and not not_known(cell) else math.nan
