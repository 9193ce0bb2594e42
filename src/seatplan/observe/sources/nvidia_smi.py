"""nvidia-smi CSV logs: ``--query-gpu=timestamp,index,memory.used,memory.total`` and ``--query-compute-apps``.

No source of nvidia-smi is public; the format is nvidia-smi's man page and observed output: a header
(``timestamp, index, memory.used [MiB], memory.total [MiB]``; ``nounits`` drops the units, a looping script
repeats it), then rows such as ``2026/11/27 10:05:45.268, 0, 0 MiB, 81559 MiB`` in the host's local time with no
zone; ``[N/A]`` / ``[Not Supported]`` where nvidia-smi does not know. ``--query-compute-apps`` names its memory
column ``used_gpu_memory`` in the header and has no GPU column unless ``gpu_uuid`` is asked for.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from seatplan.documents.observed import ProcessSample
from seatplan.errors import SeatplanError
from seatplan.exposition import LATEST_EPOCH_S
from seatplan.fileio import check_input_file
from seatplan.observe.detect import GpuSeries
from seatplan.observe.sources.shared import Rejections, number_of_lines, rejected_note
from seatplan.smi_csv import app_memory_cell, header_fields, mib_reading, not_known
from seatplan.units import MAX_GPU_INDEX, MAX_PID, whole_number

_SMI_TIME_FIX = str.maketrans({"/": "-", " ": "T"})
SMI_FIX = "log with --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 60"


def _smi_times(cells: list[str], utc_offset_s: int = 0) -> np.ndarray:
    """nvidia-smi timestamps (``YYYY/MM/DD HH:MM:SS.mmm``, host time) → UTC epoch seconds, NaN where unreadable."""
    fixed = [cell.strip().translate(_SMI_TIME_FIX) for cell in cells]
    try:
        stamps = np.array(fixed, dtype="datetime64[ms]")
    except ValueError:  # one bad cell: read them one by one (rare), so the others still count
        stamps = np.array([_one_time(cell) for cell in fixed], dtype="datetime64[ms]")
    seconds = stamps.astype(np.int64) / 1000.0 - utc_offset_s
    seconds[np.isnat(stamps)] = math.nan
    seconds[(seconds < 0) | (seconds > LATEST_EPOCH_S)] = math.nan
    return seconds


def _one_time(cell: str) -> np.datetime64:
    try:
        return np.datetime64(cell, "ms")
    except ValueError:
        return np.datetime64("NaT")


@dataclass
class _SmiColumns:
    """The cells of one nvidia-smi CSV, column by column (converted in bulk at the end)."""

    times: list[str]
    lines: list[int]
    index: list[str]
    used: list[str]
    total: dict[str, str]  # GPU index as logged → latest cell
    reserved: dict[str, str]


def read_nvidia_smi(path: str | Path, *, utc_offset_s: int = 0,
                    rejected: Rejections | None = None) -> tuple[list[GpuSeries], list[ProcessSample]]:
    """An ``nvidia-smi --query-gpu=... --format=csv`` log, or a ``--query-compute-apps`` one (host time + offset → UTC).

    A line cut short, or with a timestamp, GPU index or memory reading that cannot be read, is left out and
    counted in ``rejected``; a file with no readable line at all is an error.
    """
    file_path = Path(path)
    source = str(file_path)
    rejected = rejected if rejected is not None else Rejections()
    check_input_file(file_path, "nvidia-smi CSV")
    try:
        text = file_path.read_text(errors="replace")
    except OSError as problem:
        raise SeatplanError(f"cannot read ({problem.strerror})", where=source, fix="pass a readable nvidia-smi CSV log") from None
    header: list[str] | None = None
    columns = _SmiColumns([], [], [], [], {}, {})
    processes: list[ProcessSample] = []
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), start=1):
        if not row or not row[0].strip():
            continue
        if row[0][:1] not in "0123456789" and not row[0].startswith("GPU-"):
            header = header_fields(row)  # a repeated header (a looping script) just restarts the columns
            continue
        where = f"{file_path}:{number}"
        if header is None:
            raise SeatplanError("no CSV header", where=where,
                                fix="log with --format=csv (not noheader) so the columns are named, e.g. --query-gpu=timestamp,index,memory.used,memory.total")
        if len(row) != len(header):
            rejected.add(source, "a line whose fields do not match the header (cut by a crash or a log rotation?)", where)
            continue
        if "pid" in header:
            processes.extend(_process(dict(zip(header, row)), where, utc_offset_s, source, rejected))
            continue
        if not {"memory.used", "index", "timestamp"} <= set(header):
            raise SeatplanError("the CSV lacks timestamp, index or memory.used", where=where, fix=SMI_FIX)
        at, gpu, used = header.index("timestamp"), header.index("index"), header.index("memory.used")
        columns.times.append(row[at])
        columns.lines.append(number)
        columns.index.append(row[gpu])
        columns.used.append(row[used])
        for name, latest in (("memory.total", columns.total), ("memory.reserved", columns.reserved)):
            if name in header:
                latest[row[gpu]] = row[header.index(name)]
    series = _smi_series(columns, source, utc_offset_s, rejected)
    if not series and not processes:
        raise SeatplanError(f"no nvidia-smi readings in {number_of_lines(text)} lines"
                            + rejected_note(rejected, source), where=source,
                            fix=f"expected nvidia-smi CSV: a header, then readings; {SMI_FIX}")
    return series, processes


def _process(cells: dict[str, str], where: str, utc_offset_s: int, source: str, rejected: Rejections) -> list[ProcessSample]:
    used = mib_reading(app_memory_cell(cells))
    pid = whole_number(cells["pid"], maximum=MAX_PID)
    if math.isnan(used) or pid is None:
        return []  # [N/A] or [Not Supported]: nvidia-smi says it does not know
    at = None
    if "timestamp" in cells:
        seconds = float(_smi_times([cells["timestamp"]], utc_offset_s)[0])
        if math.isnan(seconds):
            rejected.add(source, "a timestamp nvidia-smi does not write (YYYY/MM/DD HH:MM:SS.mmm)", where)
            return []
        at = datetime.fromtimestamp(seconds, tz=UTC)
    if not math.isfinite(used) or used < 0:
        rejected.add(source, "a memory reading that is not a finite MiB count", where)
        return []
    return [ProcessSample(at=at, pid=pid, process_name=cells.get("process_name", "").strip(), used_mib=used,
                          gpu_uuid=cells.get("gpu_uuid", "").strip() or None,
                          gpu_index=whole_number(cells.get("index", ""), maximum=MAX_GPU_INDEX))]


def _gpu_index(text: str) -> int:
    """A GPU index column, -1 when it is no plain ASCII number up to MAX_GPU_INDEX (the row is then rejected)."""
    index = whole_number(text, maximum=MAX_GPU_INDEX)
    return -1 if index is None else index


def _smi_series(columns: _SmiColumns, source: str, utc_offset_s: int, rejected: Rejections) -> list[GpuSeries]:
    if not columns.times:
        return []
    times = _smi_times(columns.times, utc_offset_s)
    index = np.array([_gpu_index(cell) for cell in columns.index])
    used = np.array([mib_reading(cell) for cell in columns.used])
    # [N/A] / [Not Supported] stay as NaN (nvidia-smi did not know; detect skips them); NaN or inf written as a number,
    # or a negative reading, is damage.
    unknown = np.array([not_known(cell) for cell in columns.used])
    readable = ~np.isnan(times) & (index >= 0) & ((np.isfinite(used) & (used >= 0)) | unknown)
    for position in np.flatnonzero(~readable).tolist():
        where = f"{source}:{columns.lines[position]}"
        if math.isnan(times[position]):
            rejected.add(source, "a timestamp nvidia-smi does not write (YYYY/MM/DD HH:MM:SS.mmm)", where)
        elif index[position] < 0:
            rejected.add(source, "a GPU index that is not a number", where)
        else:
            rejected.add(source, "a memory.used reading that is not a finite MiB count", where)
    series = []
    totals = {_gpu_index(key): mib_reading(cell) for key, cell in columns.total.items()}
    reserved_by_gpu = {_gpu_index(key): mib_reading(cell) for key, cell in columns.reserved.items()}
    for gpu in np.unique(index[readable]):
        mine = readable & (index == gpu)
        total = totals.get(int(gpu), math.nan)
        reserved = reserved_by_gpu.get(int(gpu), math.nan)
        series.append(GpuSeries(index=int(gpu), times_s=times[mine].astype(np.int64), used_mib=used[mine],
                                total_mib=total if math.isfinite(total) else None,
                                reserved_mib=reserved if math.isfinite(reserved) else None, source=source))
    return series
