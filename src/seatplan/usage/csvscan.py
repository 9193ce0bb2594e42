"""The fast reader of a plain CSV export, for files PostgreSQL's ``COPY ... CSV HEADER`` wrote.

DuckDB reads every file the report takes, and its reading is what a file means (``sources.py``). Its
CSV reader, though, spends most of a big export's time copying out and unescaping the text columns
(``metadata`` above all), when the report needs only a hash of them per row. ``_csvscan.c`` reads the
well-formed subset of exports, and nothing else, to the same figures: per line the two times, the two
token counts, the line's offset, and one 64-bit hash of the raw bytes of every text the report groups
by, in parallel parts of the file. The first line outside that subset (a field too many, a stray quote,
a time or token count PostgreSQL would not write, metadata that is not a plain JSON object, text that is
not UTF-8) ends the attempt with its reason, and the caller reads the file with DuckDB instead.

What each hash means is read by DuckDB from one of its lines (``sources.py``), so a name printed is
DuckDB's reading of a real line. The extension is optional: without a C compiler at install time it is
missing, and every CSV is read by DuckDB.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import mmap
import os
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from seatplan.usage.queries import METADATA_KEYS, OPTIONAL_COLUMNS, REQUIRED_COLUMNS

# The slots of _csvscan.c: what it does with each field, by the field's column name.
SLOT_OF_COLUMN = {"startTime": 0, "endTime": 1, "prompt_tokens": 2, "completion_tokens": 3, "metadata": 4, "request_id": 5}
FIRST_HASHED_SLOT = 6
# Every other column the report reads is text, hashed as it is written; request_id is only checked, since
# ids are read per line when a report names a row.
HASHED_COLUMNS = tuple(name for name in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if name not in SLOT_OF_COLUMN)
STOPS = ("", "", "a line whose fields do not match the header", "a stray or unclosed quote",
         "a token count not written as a plain integer", "a time not written as PostgreSQL writes one",
         "metadata that is not a plain JSON object", "text that is not UTF-8")
SCAN_DONE, SCAN_FULL = 0, 1

WINDOW_BYTES = 64 << 20  # scanned, then released from this process's memory (the page cache keeps it)
SAMPLE_BYTES = 1 << 20  # the start of the file, for the rows to expect per byte
MAX_PARTS = 8


# What this binding was written for; _csvscan.c answers the same from seatplan_csvscan_abi/_signature.
ABI_VERSION = 2
SIGNATURE = ("abi=2 int seatplan_scan_lines(u8*,i64,i64,i64,i32*,i32,u8**,i32*,i32,i64*,i64*,i64*,i64*,u64*,i64*,i64,"
             "i64*,i64*,i64*) slots=64 keys=16 statuses=8 missing=INT64_MIN")


class StaleLibrary(Exception):
    """The compiled library on disk is not the one this binding was written for (a stale build)."""


def check_identity(library: Any, path: Path) -> None:
    """Refuse a library that does not say, through its own functions, that it is the one this binding calls."""
    try:
        abi, signature = library.seatplan_csvscan_abi, library.seatplan_csvscan_signature
    except AttributeError:
        raise StaleLibrary(f"{path} has no seatplan_csvscan_abi (built before the ABI check)") from None
    abi.restype, abi.argtypes = ctypes.c_int32, []
    signature.restype, signature.argtypes = ctypes.c_char_p, []
    found_abi, found_signature = abi(), (signature() or b"").decode("ascii", "replace")
    if found_abi != ABI_VERSION or found_signature != SIGNATURE:
        raise StaleLibrary(f"{path} is ABI {found_abi} ({found_signature!r}); this seatplan calls ABI {ABI_VERSION}")


@cache
def _load() -> tuple[Any | None, str | None]:
    """(library, None), or (None, why not): not built, not loadable, or stale."""
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_csvscan{suffix}"
        if path.exists():
            try:
                library = ctypes.CDLL(str(path))
                check_identity(library, path)
            except (OSError, StaleLibrary) as problem:
                return None, f"refused: {problem}; reinstall seatplan (pip install -e .) to rebuild it"
            pointer, int64, int32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
            library.seatplan_scan_lines.restype = ctypes.c_int
            library.seatplan_scan_lines.argtypes = [pointer, int64, int64, int64, pointer, int32, pointer, pointer, int32,
                                                    *[pointer] * 6, int64, pointer, pointer, pointer]
            return library, None
    return None, "not installed: it needs a C compiler when pip installs seatplan"


def _library() -> Any | None:
    return _load()[0]


def unavailable_reason() -> str | None:
    """Why the compiled reader is not used (None when it is)."""
    return _load()[1]


def available() -> bool:
    return _library() is not None


@dataclass
class ScannedRows:
    """Every line's numbers, in file order; times in microseconds since 1970 UTC, rows.MISSING where empty."""

    start_us: np.ndarray
    end_us: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    key: np.ndarray  # the hash of the line's text fields
    line_offset: np.ndarray


class Stopped(Exception):
    """The file is not one the fast reader takes; ``reason`` and the byte offset of the line say why."""

    def __init__(self, reason: str, line_offset: int) -> None:
        super().__init__(f"{reason} (the line at byte {line_offset})")
        self.reason = reason
        self.line_offset = line_offset


class _Output:
    """Arrays one scan call writes into, and where it starts writing."""

    NAMES = ("start_us", "end_us", "prompt_tokens", "completion_tokens", "key", "line_offset")

    def __init__(self, capacity: int) -> None:
        self.arrays = {name: np.empty(capacity, dtype=np.uint64 if name == "key" else np.int64) for name in self.NAMES}
        self.used = 0

    def pointers(self) -> list[int]:
        return [array.ctypes.data + self.used * 8 for array in self.arrays.values()]

    def room(self) -> int:
        return len(self.arrays["key"]) - self.used

    def filled(self) -> dict[str, np.ndarray]:
        return {name: array[: self.used] for name, array in self.arrays.items()}


@dataclass
class _Part:
    start: int
    stop: int
    pieces: list[dict[str, np.ndarray]]
    next: int = -1
    stopped: Stopped | None = None


def slots_of(columns: list[str]) -> list[int]:
    """What _csvscan.c does with each field of a line with these columns (its slot_of_field argument)."""
    slots = [SLOT_OF_COLUMN.get(name, -1) for name in columns]
    for offset, name in enumerate(HASHED_COLUMNS):
        if name in columns:
            slots[columns.index(name)] = FIRST_HASHED_SLOT + offset
    return slots


class CsvScanner:
    """One mapped CSV file, read in parts by the C scanner; keep it open while its lines are looked up."""

    def __init__(self, path: Path, columns: list[str], mapped: mmap.mmap, header_end: int) -> None:
        library = _library()
        assert library is not None
        self.library = library
        self.path = path
        self.mapped = mapped
        self.size = len(mapped)
        self.header_end = header_end
        self._view = np.frombuffer(mapped, dtype=np.uint8)
        self.base = self._view.ctypes.data
        self.slots = np.array(slots_of(columns), dtype=np.int32)
        self.field_count = len(columns)
        self._keys = [name.encode() for name in METADATA_KEYS]
        self._key_pointers = (ctypes.c_char_p * len(self._keys))(*self._keys)
        self._key_lengths = np.array([len(key) for key in self._keys], dtype=np.int32)
        sample = mapped[header_end: header_end + SAMPLE_BYTES]
        self.rows_per_byte = max(sample.count(b"\n"), 1) / max(len(sample), 1)

    def close(self) -> None:
        del self._view  # numpy's view must go before the map can close
        self.mapped.close()

    # -- the whole file

    def scan(self, parts: int | None = None) -> ScannedRows:
        """Every line after the header; raises Stopped at the first line the fast reader does not take."""
        parts = parts or max(1, min(MAX_PARTS, len(os.sched_getaffinity(0))))
        bounds = [self.header_end] + [self._line_start_after(self.size * index // parts) for index in range(1, parts)] + [self.size]
        work = [_Part(start, stop, []) for start, stop in zip(bounds, bounds[1:])]
        threads = [threading.Thread(target=self._scan_part, args=(part,)) for part in work[1:]]
        for thread in threads:
            thread.start()
        self._scan_part(work[0])
        for thread in threads:
            thread.join()
        # A part began at a guess: the first newline after its share of the bytes. The part before it
        # ends where that guess should be; where it does not (the newline was inside a quoted field),
        # the part is read again from there.
        position = self.header_end
        for index, part in enumerate(work):
            if part.start != position:
                part = work[index] = _Part(position, part.stop, [])
                self._scan_part(part)
            if part.stopped:
                raise part.stopped
            position = part.next
        pieces = [piece for part in work for piece in part.pieces]
        return ScannedRows(**{name: _joined([piece[name] for piece in pieces]) for name in _Output.NAMES})

    def _line_start_after(self, offset: int) -> int:
        newline = self.mapped.find(b"\n", max(offset, self.header_end))
        return self.size if newline < 0 else newline + 1

    def _scan_part(self, part: _Part) -> None:
        """Lines starting in [part.start, part.stop), window by window, releasing each window's pages."""
        share = max(part.stop - part.start, 0)
        output = _Output(int(share * self.rows_per_byte * 1.05) + 1024)
        position = part.start
        while position < part.stop:
            window_start, stop = position, min(position + WINDOW_BYTES, part.stop)
            status, rows, position, problem_at = self._call(position, stop, output)
            output.used += rows
            if status == SCAN_FULL:
                part.pieces.append(output.filled())
                output = _Output(max(1024, output.used // 2))
            elif status != SCAN_DONE:
                part.stopped = Stopped(STOPS[status], problem_at)
                break
            self._release(window_start, position)
        part.pieces.append(output.filled())
        part.next = position

    def _call(self, position: int, stop: int, output: _Output) -> tuple[int, int, int, int]:
        rows, next_position, problem_at = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64(-1)
        status = self.library.seatplan_scan_lines(
            self.base, self.size, position, stop, self.slots.ctypes.data, self.field_count,
            ctypes.cast(self._key_pointers, ctypes.c_void_p), self._key_lengths.ctypes.data, len(self._keys),
            *output.pointers(), output.room(), ctypes.byref(rows), ctypes.byref(next_position), ctypes.byref(problem_at))
        return status, rows.value, next_position.value, problem_at.value

    def _release(self, begin: int, end: int) -> None:
        """Drops [begin, end) from this process's resident memory (the page cache keeps the file)."""
        page = mmap.PAGESIZE
        first, last = max(0, begin) // page * page, end // page * page
        if last > first and hasattr(mmap, "MADV_DONTNEED"):
            self.mapped.madvise(mmap.MADV_DONTNEED, first, last - first)

    # -- single lines

    def lines(self, offsets: np.ndarray) -> list[bytes]:
        """The raw lines at these offsets (each as the scan found it, newline included)."""
        found = []
        output = _Output(1)
        for offset in offsets.tolist():
            output.used = 0
            status, _, end, _ = self._call(offset, offset + 1, output)
            if status != SCAN_DONE:
                raise Stopped(STOPS[status], offset)
            line = self.mapped[offset:end]
            found.append(line if line.endswith(b"\n") else line + b"\n")
        return found

    def header(self) -> bytes:
        return self.mapped[: self.header_end]


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def open_scanner(path: Path, columns: list[str]) -> CsvScanner | None:
    """A scanner for a plain (not compressed) CSV whose header is one unquoted line; None otherwise."""
    if not available() or path.name.lower().endswith(".gz") or path.stat().st_size == 0:
        return None
    with path.open("rb") as stream:
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    newline = mapped.find(b"\n", 0, SAMPLE_BYTES)
    if newline < 0 or b'"' in mapped[:newline] or b"\r" in mapped[:newline]:
        mapped.close()
        return None
    if hasattr(mmap, "MADV_SEQUENTIAL"):
        mapped.madvise(mmap.MADV_SEQUENTIAL)
    return CsvScanner(path, columns, mapped, newline + 1)
