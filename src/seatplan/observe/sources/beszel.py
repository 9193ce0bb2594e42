"""Beszel's hub database: GPU used memory from ``system_stats`` rows of every record type.

The hub is a PocketBase app keeping one SQLite file, ``beszel_data/data.db`` (Beszel ``internal/hub/update.go``).
``system_stats`` rows carry ``created`` (PocketBase's ``YYYY-MM-DD HH:MM:SS.mmmZ``, UTC), ``system`` (→ ``systems.id``),
``type`` (``1m``, ``10m``, ``20m``, ``120m``, ``480m``) and ``stats``, compact JSON whose ``g`` holds each GPU's
``mu``/``mt`` (``internal/entities/system/system.go GPUData``). The ``*/10`` cron averages shorter records into
longer ones (``internal/records/records.go CreateLongerRecords``, ``AverageSystemStatsSlice``) and an hourly one
deletes old rows (``records_deletion.go``), so a long history is held only as averages: each is kept as the mean
over its own window (``observe/averaged/``), never as a point.
"""

from __future__ import annotations

import math
import sqlite3
from bisect import bisect_right
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from seatplan.errors import SeatplanError
from seatplan.exposition import plausible_time
from seatplan.fileio import check_input_file
from seatplan.jsontext import loads_bounded
from seatplan.observe.detect import GpuSeries
from seatplan.observe.sources.shared import Rejections, series_of_points
from seatplan.units import MAX_GPU_INDEX, MAX_PLAUSIBLE_BYTES, MiB, whole_number

# Beszel's NVIDIA collectors store nvidia-smi MiB divided by 1.024 (agent/gpu.go mebibytesInAMegabyte).
BESZEL_MIB_FACTOR = 1.024
# Finest first: a coarser record type only fills the time before the finer ones begin.
BESZEL_RECORD_TYPES = ("1m", "10m", "20m", "120m", "480m")
# Each record averages the shorter ones created in (created − window, created] (internal/records/records.go).
BESZEL_WINDOW_S = {"1m": 60, "10m": 600, "20m": 1200, "120m": 7200, "480m": 28800}


def _pocketbase_time(text: str) -> float:
    return datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() + (
        float("0" + text[19:].rstrip("Z")) if len(text) > 19 else 0.0)


def read_beszel(path: str | Path, *, system: str | None = None, rejected: Rejections | None = None) -> list[GpuSeries]:
    """GPU used-memory series from a Beszel hub database (``beszel_data/data.db``).

    A row whose stats are not JSON, whose time is not PocketBase's, or whose GPU readings are not MiB counts a GPU can hold
    is left out and counted in ``rejected``; the other rows still count.
    """
    db_path = Path(path)
    rejected = rejected if rejected is not None else Rejections()
    check_input_file(db_path, "Beszel hub database")
    if not db_path.is_file():
        said = "is a folder, not the hub's database" if db_path.is_dir() else "no such file"
        raise SeatplanError(said, where=str(db_path), fix="pass the hub's data.db (Docker volume /beszel_data/data.db)")
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        systems = dict(connection.execute("SELECT id, name FROM systems").fetchall())
        # json_valid first: json_extract on one malformed row would fail the whole query.
        rows = connection.execute(
            "SELECT rowid, system, type, created, CASE WHEN json_valid(stats) THEN json_extract(stats, '$.g') ELSE NULL END, "
            "json_valid(stats) FROM system_stats"
        ).fetchall()
    except sqlite3.DatabaseError as problem:
        raise SeatplanError(f"not a Beszel hub database ({problem})", where=str(db_path),
                            fix="pass Beszel's beszel_data/data.db (tables systems and system_stats)") from None
    finally:
        connection.close()
    if system is not None:
        wanted = {key for key, name in systems.items() if system in (key, name)}
        if not wanted:
            raise SeatplanError(f"no system named {system!r}", where=str(db_path), fix=f"use one of: {', '.join(sorted(map(str, systems.values())))}")
        rows = [row for row in rows if row[1] in wanted]
    by_type: dict[tuple[str, str], list[tuple[float, dict]]] = defaultdict(list)
    for rowid, system_id, record_type, created, gpus, valid in rows:
        if not valid:
            rejected.add(str(db_path), "system_stats.stats is not JSON", f"{db_path}: system_stats rowid {rowid}")
        elif gpus is not None and record_type in BESZEL_RECORD_TYPES:
            record = _beszel_record(created, gpus)
            if record is None:
                rejected.add(str(db_path), "a GPU record that is not finite MiB readings at a PocketBase time",
                             f"{db_path}: system_stats rowid {rowid}")
            else:
                by_type[(system_id, record_type)].append(record)
    series: list[GpuSeries] = []
    for system_id in sorted({key[0] for key in by_type}):
        records_by_type = [by_type.get((system_id, t), []) for t in BESZEL_RECORD_TYPES]
        series.extend(_beszel_system(systems.get(system_id, system_id), _effective_ends(records_by_type), str(db_path)))
    if not series:
        left_out = f", {rejected.count(str(db_path))} rejected" if rejected.count(str(db_path)) else ""
        raise SeatplanError(f"the Beszel database holds no GPU readings ({len(rows)} system_stats rows{left_out})",
                            where=str(db_path), fix="expected a hub whose agents report NVIDIA GPUs (system_stats.stats.g); "
                            "check the system name and that the agents run with GPU monitoring")
    return series


def _beszel_record(created: object, gpus_json: object) -> tuple[float, dict[int, tuple[float, float | None]]] | None:
    """(time, {gpu: (used MiB, total MiB or None)}) of one row, or None when any part of it is unreadable."""
    try:
        at = _pocketbase_time(str(created))
        gpus = loads_bounded(str(gpus_json))
    except ValueError:
        return None
    if not plausible_time(at) or not isinstance(gpus, dict):
        return None
    readings: dict[int, tuple[float, float | None]] = {}
    for gpu_id, data in gpus.items():
        index = whole_number(str(gpu_id), maximum=MAX_GPU_INDEX)
        if index is None or not isinstance(data, dict):
            continue
        # mu is omitted when it is 0 (Go omitempty): a GPU present without mu used nothing.
        used, total = data.get("mu", 0), data.get("mt")
        if not _finite_number(used) or (total is not None and not _finite_number(total)):
            return None
        readings[index] = (float(used) * BESZEL_MIB_FACTOR, float(total) * BESZEL_MIB_FACTOR if total else None)
    return at, readings


# A reading beyond what any GPU holds is a damaged row (and near float's top, the MiB factor would make it infinite).
_MAX_READING_MIB = MAX_PLAUSIBLE_BYTES // MiB


def _finite_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= _MAX_READING_MIB)




def _effective_ends(records_by_type: list[list[tuple[float, dict]]]) -> list[list[tuple[float, dict]]]:
    """Each record's time moved to the end of what it really averages.

    A 120m record averages the 20m records made in its last 2 h; when those are made on other cron runs
    than the 120m one, the averaged minutes end at the latest of them, up to 10 minutes before the 120m
    record's own time; a 480m record likewise ends where its latest 120m record's minutes end (up to 2 hours
    before). Where the hub still keeps that shorter record the end is exact; where the clean-up took it (the
    120m records older than the 20m ones' day, the 480m ones older than the 120m ones' 7 days) it is read
    from the records of its cadence whose shorter ones are kept (see ``_ends_from``).
    """
    one, ten, twenty, long, longest = (sorted(records, key=lambda record: record[0]) for records in records_by_type)
    # A 20m record's 10m records are made on its own run, and a 10m record's 1-minute ones up to it.
    ends20 = [(created, created) for created, _ in twenty]
    ends120 = _ends_from(long, ends20, BESZEL_WINDOW_S["120m"])
    ends480 = _ends_from(longest, ends120, BESZEL_WINDOW_S["480m"])
    return [one, ten, twenty, [(end, gpus) for (end, _), (_, gpus) in zip(ends120, long)],
            [(end, gpus) for (end, _), (_, gpus) in zip(ends480, longest)]]


def _ends_from(records: list[tuple[float, dict]], shorter: list[tuple[float, float]], window_s: int) -> list[tuple[float, float]]:
    """(effective end, created) per record, from the shorter records it averaged: ``shorter`` holds (created,
    effective end) of each one kept, in order; it averaged those made in (created − window, created].

    Where those are gone, a record keeps the shift of the records of its own stretch whose shorter records are kept
    (a stretch: records exactly one window apart, the cadence the hub keeps until a polling gap breaks it); a stretch
    with none keeps its own times: after a gap the hub makes the first longer record on the run that makes the
    shorter record completing its count, so their runs coincide.
    """
    made = [created for created, _ in shorter]
    exact: list[float | None] = []
    for created, _ in records:
        latest = bisect_right(made, created + 0.5) - 1
        exact.append(created - shorter[latest][1] if latest >= 0 and made[latest] > created - window_s else None)
    stretch = [0]
    for (before, _), (after, _) in zip(records, records[1:]):
        stretch.append(stretch[-1] + (abs(after - before - window_s) > 2))
    known: dict[int, float] = {}
    for number, shift in zip(stretch, exact):
        if shift is not None:
            known.setdefault(number, shift)
    return [(created - (shift if shift is not None else known.get(number, 0.0)), created)
            for (created, _), shift, number in zip(records, exact, stretch)]


def _beszel_system(host: str, records_by_type: list[list[tuple[float, dict[int, tuple[float, float | None]]]]],
                   source: str) -> list[GpuSeries]:
    """Per GPU, each stretch of time from the finest record type that covers it, every record kept as the
    mean over its own window (never re-read as points of one series: see observe/averaged/)."""
    points: dict[int, list[tuple[float, float, float, str]]] = defaultdict(list)
    totals: dict[int, float] = {}
    covered_from = math.inf
    for record_type, records in zip(BESZEL_RECORD_TYPES, records_by_type):
        earliest = covered_from
        window_s = BESZEL_WINDOW_S[record_type]
        for created, gpus in records:
            # A coarser record fills only the time before the finer ones begin (its whole window included).
            if created > covered_from + BESZEL_WINDOW_S["1m"] / 2:
                continue
            earliest = min(earliest, created - window_s)
            for gpu, (used, total) in gpus.items():
                points[gpu].append((created, used, window_s, record_type))
                if total:
                    totals[gpu] = total
        covered_from = earliest
    series = []
    for index, pts in sorted(points.items()):
        pts.sort()
        one = series_of_points(index, host, [(p[0], p[1]) for p in pts], totals.get(index), None, source)
        one.window_s = np.array([p[2] for p in pts], dtype=np.int64)
        one.record_types = np.array([p[3] for p in pts])
        series.append(one)
    return series
