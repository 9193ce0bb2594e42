"""Readers: Beszel's hub database, nvidia-smi CSV logs, Prometheus (HTTP API, exposition text), vLLM /metrics.

Every reader returns MiB as nvidia-smi counts them and turns unreadable input into a
:class:`~seatplan.errors.SeatplanError` naming the file (and line) and what to do.
"""

from __future__ import annotations

import csv
import math
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from seatplan.documents.observed import EngineStats, ProcessSample, RejectedInput
from seatplan.errors import SeatplanError
from seatplan.exposition import LATEST_EPOCH_S, Sample, parse_exposition, plausible_time
from seatplan.jsontext import loads_bounded
from seatplan.observe.detect import GpuSeries

# Beszel's NVIDIA collectors store nvidia-smi MiB divided by 1.024 (agent/gpu.go mebibytesInAMegabyte).
BESZEL_MIB_FACTOR = 1.024
# Finest first: a coarser record type only fills the time before the finer ones begin.
BESZEL_RECORD_TYPES = ("1m", "10m", "20m", "120m", "480m")
# Each record averages the shorter ones created in (created − window, created] (internal/records/records.go).
BESZEL_WINDOW_S = {"1m": 60, "10m": 600, "20m": 1200, "120m": 7200, "480m": 28800}



class Rejections:
    """Lines or rows a reader left out, counted per source and reason, with where the first one was."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list] = {}

    def add(self, source: str, reason: str, where: str) -> None:
        entry = self._seen.setdefault((source, reason), [where, 0])
        entry[1] += 1

    def count(self, source: str) -> int:
        return sum(count for (seen_source, _), (_, count) in self._seen.items() if seen_source == source)

    def as_list(self) -> list[RejectedInput]:
        return [RejectedInput(where=where, reason=reason, count=count) for (_, reason), (where, count) in self._seen.items()]


def _series(index: int, host: str | None, points: list[tuple[float, float]], total: float | None,
            reserved: float | None, source: str) -> GpuSeries:
    points.sort()
    times = np.fromiter((p[0] for p in points), dtype=np.int64, count=len(points))
    used = np.fromiter((p[1] for p in points), dtype=np.float64, count=len(points))
    return GpuSeries(index=index, host=host, times_s=times, used_mib=used, total_mib=total, reserved_mib=reserved,
                     source=source)


def _pocketbase_time(text: str) -> float:
    return datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp() + (
        float("0" + text[19:].rstrip("Z")) if len(text) > 19 else 0.0)


# --------------------------------------------------------------------------------------------- Beszel

def read_beszel(path: str | Path, *, system: str | None = None, rejected: Rejections | None = None) -> list[GpuSeries]:
    """GPU used-memory series from a Beszel hub database (``beszel_data/data.db``).

    A row whose stats are not JSON, whose time is not PocketBase's, or whose GPU readings are not finite numbers
    is left out and counted in ``rejected``; the other rows still count.
    """
    db_path = Path(path)
    rejected = rejected if rejected is not None else Rejections()
    if not db_path.is_file():
        raise SeatplanError("no such file", where=str(db_path), fix="pass the hub's data.db (Docker volume /beszel_data/data.db)")
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
        if not str(gpu_id).isdigit() or not isinstance(data, dict):
            continue
        # mu is omitted when it is 0 (Go omitempty): a GPU present without mu used nothing.
        used, total = data.get("mu", 0), data.get("mt")
        if not _finite_number(used) or (total is not None and not _finite_number(total)):
            return None
        readings[int(gpu_id)] = (float(used) * BESZEL_MIB_FACTOR, float(total) * BESZEL_MIB_FACTOR if total else None)
    return at, readings


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


_CRON_S = 600  # the hub's */10 cron makes every longer record


def _phase(records: list[tuple[float, dict]], period_runs: int) -> int:
    """Which cron run (mod ``period_runs``) this type's records are made on (they keep their phase)."""
    runs = [round(created / _CRON_S) % period_runs for created, _ in records]
    return max(set(runs), key=runs.count) if runs else 0


def _shift_to(run: int, phase: int, period_runs: int) -> int:
    """Cron runs back from ``run`` to the latest run on ``phase``."""
    return (run - phase) % period_runs


def _effective_ends(records_by_type: list[list[tuple[float, dict]]]) -> list[list[tuple[float, dict]]]:
    """Each record's time moved to the end of what it really averages.

    A 120m record averages the 20m records made in its last 2 h; when those are made on other cron runs
    than the 120m one (their phases differ), the averaged minutes end at the latest 20m record, up to
    10 minutes before the 120m record's own time; a 480m record likewise ends where its latest 120m record's
    minutes end. The phases are read from the records of each type the hub still keeps.
    """
    one, ten, twenty, long, longest = records_by_type
    phase20, phase120 = _phase(twenty, 2), _phase(long, 12)

    def shift120(created: float) -> int:
        return _shift_to(round(created / _CRON_S), phase20, 2) * _CRON_S

    def shift480(created: float) -> int:
        back = _shift_to(round(created / _CRON_S), phase120, 12) * _CRON_S
        return back + shift120(created - back)

    return [one, ten, twenty, [(c - shift120(c), g) for c, g in long], [(c - shift480(c), g) for c, g in longest]]


def _beszel_system(host: str, records_by_type: list[list[tuple[float, dict[int, tuple[float, float | None]]]]],
                   source: str) -> list[GpuSeries]:
    """Per GPU, each stretch of time from the finest record type that covers it, every record kept as the
    mean over its own window (never re-read as points of one series: see observe/averaged.py)."""
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
        one = _series(index, host, [(p[0], p[1]) for p in pts], totals.get(index), None, source)
        one.window_s = np.array([p[2] for p in pts], dtype=np.int64)
        one.record_types = np.array([p[3] for p in pts])
        series.append(one)
    return series


# --------------------------------------------------------------------------------------------- nvidia-smi

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _header_fields(row: list[str]) -> list[str]:
    return [cell.strip().split(" [")[0].strip() for cell in row]


def _mib(cell: str) -> float:
    """``77999 MiB``, ``77999`` (nounits) or ``[N/A]`` / ``[Not Supported]`` (NaN)."""
    try:
        return float(cell.split(None, 1)[0])
    except (ValueError, IndexError):
        match = _NUMBER.search(cell)
        return float(match.group(0)) if match and "N/A" not in cell and "Not Supported" not in cell else math.nan


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
        if not row[0][:1].isdigit() and not row[0].startswith("GPU-"):
            header = _header_fields(row)  # a repeated header (a looping script) just restarts the columns
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
                            + (f" ({rejected.count(source)} rejected)" if rejected.count(source) else ""), where=source,
                            fix=f"expected nvidia-smi CSV: a header, then readings; {SMI_FIX}")
    return series, processes


def number_of_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _process(cells: dict[str, str], where: str, utc_offset_s: int, source: str, rejected: Rejections) -> list[ProcessSample]:
    used = _mib(cells.get("used_gpu_memory", cells.get("used_memory", "")))
    if math.isnan(used) or not cells["pid"].strip().isdigit():
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
    return [ProcessSample(at=at, pid=int(cells["pid"]), process_name=cells.get("process_name", "").strip(), used_mib=used,
                          gpu_uuid=cells.get("gpu_uuid", "").strip() or None,
                          gpu_index=int(cells["index"].strip()) if cells.get("index", "").strip().isdecimal() else None)]


def _smi_series(columns: _SmiColumns, source: str, utc_offset_s: int, rejected: Rejections) -> list[GpuSeries]:
    if not columns.times:
        return []
    times = _smi_times(columns.times, utc_offset_s)
    index = np.array([int(cell.strip()) if cell.strip().isdecimal() else -1 for cell in columns.index])
    used = np.array([_mib(cell) for cell in columns.used])
    # [N/A] / [Not Supported] stay as NaN (nvidia-smi did not know; detect skips them); NaN or inf written as a number,
    # or a negative reading, is damage.
    unknown = np.array(["N/A" in cell or "Not Supported" in cell for cell in columns.used])
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
    totals = {int(key.strip()): _mib(cell) for key, cell in columns.total.items() if key.strip().isdecimal()}
    reserved_by_gpu = {int(key.strip()): _mib(cell) for key, cell in columns.reserved.items() if key.strip().isdecimal()}
    for gpu in np.unique(index[readable]):
        mine = readable & (index == gpu)
        total = totals.get(int(gpu), math.nan)
        reserved = reserved_by_gpu.get(int(gpu), math.nan)
        series.append(GpuSeries(index=int(gpu), times_s=times[mine].astype(np.int64), used_mib=used[mine],
                                total_mib=total if math.isfinite(total) else None,
                                reserved_mib=reserved if math.isfinite(reserved) else None, source=source))
    return series


# --------------------------------------------------------------------------------------------- Prometheus

def is_reading(name: str) -> bool:
    """The metric families seatplan reads: DCGM's framebuffer and vLLM's gauges."""
    return name.startswith("DCGM_FI_DEV_FB_") or name in _VLLM_GAUGES


EXPOSITION_FIX = ("expected Prometheus exposition text (NAME{LABELS} VALUE [TIMESTAMP] per line), e.g. a saved "
                  "curl http://HOST:PORT/metrics of a vLLM server or a DCGM exporter")


def read_exposition_file(path: Path, rejected: Rejections, wanted: str) -> tuple[list[Sample], float]:
    """The samples of a saved exposition-text file, and its modification time (the scrape time of untimed samples).

    A file with no sample line at all, or none of the ``wanted`` metric families, is an error saying what was expected.
    """
    try:
        text = path.read_text(errors="replace")
        modified = path.stat().st_mtime
    except OSError as problem:
        raise SeatplanError(f"cannot read ({problem.strerror})", where=str(path), fix="pass a Prometheus text file") from None
    samples = parse_exposition(text.splitlines(), source=str(path), rejected=rejected, is_reading=is_reading)
    ours = [sample for sample in samples if is_reading(sample.name)]
    if not ours:
        found = f"{len(samples)} samples, none of them {wanted}" if samples else "no sample line"
        raise SeatplanError(f"{found} in {number_of_lines(text)} lines"
                            + (f" ({rejected.count(str(path))} rejected)" if rejected.count(str(path)) else ""),
                            where=str(path), fix=EXPOSITION_FIX + f" with {wanted}")
    return samples, modified


def _label(labels: dict[str, str], *names: str) -> str | None:
    lowered = {key.lower(): value for key, value in labels.items()}
    for name in names:
        if name.lower() in lowered:
            return lowered[name.lower()]
    return None


def _dcgm_series(points: Iterable[tuple[str, dict[str, str], float, float]], source: str) -> list[GpuSeries]:
    """Series from DCGM exporter samples (name, labels, time, value): FB_USED, FB_FREE and FB_RESERVED, MiB."""
    by_gpu: dict[tuple[str | None, int], dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for name, labels, at, value in points:
        gpu = _label(labels, "gpu")
        if gpu is None or not gpu.isdigit() or not name.startswith("DCGM_FI_DEV_FB_") or not math.isfinite(value):
            continue
        key = (_label(labels, "hostname", "instance"), int(gpu))
        by_gpu[key][name.removeprefix("DCGM_FI_DEV_FB_")][at] = value
    series = []
    for (host, index), fields in sorted(by_gpu.items(), key=lambda item: (item[0][0] or "", item[0][1])):
        if not fields.get("USED"):
            continue
        reserved = float(np.median(list(fields["RESERVED"].values()))) if fields.get("RESERVED") else None
        # The default counters have no FB_TOTAL: total = used + free + reserved at the same instant.
        both = [fields["USED"][t] + free for t, free in fields.get("FREE", {}).items() if t in fields["USED"]]
        total = float(np.median(both)) + (reserved or 0.0) if both else None
        series.append(_series(index, host, list(fields["USED"].items()), total, reserved, source))
    return series


def read_prometheus_text(path: str | Path, *, default_time: float | None = None,
                         rejected: Rejections | None = None) -> tuple[list[GpuSeries], list[EngineStats]]:
    """DCGM and vLLM samples from exposition text (saved scrapes, or a backfill file)."""
    file_path = Path(path)
    samples, modified = read_exposition_file(file_path, rejected if rejected is not None else Rejections(),
                                             "DCGM_FI_DEV_FB_* or vllm:* gauges")
    when = default_time if default_time is not None else modified
    gpu = _dcgm_series(((s.name, s.labels, s.at if s.at is not None else when, s.value) for s in samples
                        if s.name.startswith("DCGM_FI_DEV_FB_")), str(file_path))
    stats = vllm_stats(samples, source=str(file_path), default_time=when)
    if not gpu and not stats:
        raise SeatplanError("no GPU memory series (DCGM_FI_DEV_FB_USED) and no vllm:* gauge in the file", where=str(file_path),
                            fix=EXPOSITION_FIX + " with DCGM_FI_DEV_FB_USED or vllm:* gauges")
    return gpu, stats


_VLLM_GAUGES = {
    "vllm:num_requests_running": "running_requests",
    "vllm:num_requests_waiting": "waiting_requests",
    "vllm:kv_cache_usage_perc": "kv_cache_usage_pct",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_pct",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:num_preemptions": "preemptions_total",
}


def vllm_stats(samples: Iterable[Sample], *, source: str, default_time: float | None = None) -> list[EngineStats]:
    """vLLM's own gauges per scrape time and served model (0..1 usage becomes a percentage)."""
    grouped: dict[tuple[str, float | None], dict[str, float]] = defaultdict(dict)
    for sample in samples:
        field_name = _VLLM_GAUGES.get(sample.name)
        if field_name is None or not math.isfinite(sample.value) or (sample.at is not None and not plausible_time(sample.at)):
            continue
        seat = sample.labels.get("model_name", "vllm")
        at = sample.at if sample.at is not None else default_time
        values = grouped[(seat, at)]
        value = sample.value * 100 if field_name == "kv_cache_usage_pct" else sample.value
        values[field_name] = values.get(field_name, 0) + value if field_name != "kv_cache_usage_pct" else max(values.get(field_name, 0), value)
    records = []
    for (seat, at), values in sorted(grouped.items(), key=lambda item: (item[0][0], item[0][1] or 0)):
        records.append(EngineStats(
            seat=seat,
            at=datetime.fromtimestamp(at, tz=UTC) if at is not None else None,
            where=source,
            running_requests=int(values["running_requests"]) if "running_requests" in values else None,
            waiting_requests=int(values["waiting_requests"]) if "waiting_requests" in values else None,
            kv_cache_usage_pct=round(values["kv_cache_usage_pct"], 3) if "kv_cache_usage_pct" in values else None,
            preemptions_total=int(values["preemptions_total"]) if "preemptions_total" in values else None,
        ))
    return records


def series_from_query_range(document: dict, *, source: str) -> list[tuple[str, dict[str, str], list[tuple[float, float]]]]:
    """(metric name, labels, [(time, value)]) from a ``/api/v1/query_range`` matrix response."""
    if (not isinstance(document, dict) or document.get("status") != "success" or not isinstance(document.get("data"), dict)
            or document["data"].get("resultType") != "matrix"):
        said = document if not isinstance(document, dict) else f"{document.get('status')!r}: {document.get('error', 'not a matrix')}"
        raise SeatplanError(f"Prometheus answered {str(said)[:200]}", where=source,
                            fix="check the URL and that the DCGM exporter is scraped")
    out = []
    try:
        for result in document["data"]["result"]:
            labels = {str(key): str(value) for key, value in dict(result.get("metric", {})).items()}
            name = labels.pop("__name__", "")
            out.append((name, labels, [(float(t), float(v)) for t, v in result.get("values", [])]))
    except (AttributeError, TypeError, ValueError, KeyError) as problem:
        raise SeatplanError(f"Prometheus answered a matrix seatplan cannot read ({type(problem).__name__}: {problem})",
                            where=source, fix="check the URL points at Prometheus' HTTP API") from None
    return out


# Prometheus refuses ranges of more than 11,000 points per series.
_MAX_POINTS = 10_000


def read_prometheus(url: str, *, start: float, end: float, step_seconds: int = 60,
                    timeout_s: float = 30.0) -> tuple[list[GpuSeries], list[EngineStats]]:
    """DCGM framebuffer series and vLLM gauges through the HTTP API (``/api/v1/query_range``)."""
    import httpx

    base = url.rstrip("/")
    points: list[tuple[str, dict[str, str], float, float]] = []
    stats_samples: list[Sample] = []
    queries = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", *_VLLM_GAUGES]
    with httpx.Client(timeout=timeout_s) as client:
        for query in queries:
            chunk_start = start
            while chunk_start <= end:
                chunk_end = min(end, chunk_start + step_seconds * (_MAX_POINTS - 1))
                try:
                    response = client.get(f"{base}/api/v1/query_range",
                                          params={"query": query, "start": chunk_start, "end": chunk_end, "step": step_seconds})
                    document = response.json()
                except (httpx.HTTPError, ValueError) as problem:
                    raise SeatplanError(f"cannot query Prometheus ({problem})", where=base,
                                        fix="check --prometheus URL (e.g. http://prometheus:9090) and that it answers /api/v1/query_range") from None
                for name, labels, values in series_from_query_range(document, source=base):
                    if name.startswith("DCGM_"):
                        points.extend((name, labels, t, v) for t, v in values)
                    else:
                        stats_samples.extend(Sample(name, labels, v, t) for t, v in values)
                chunk_start = chunk_end + step_seconds
    return _dcgm_series(points, base), vllm_stats(stats_samples, source=base)


def read_vllm_metrics_url(url: str, *, timeout_s: float = 10.0) -> list[EngineStats]:
    """One live scrape of a vLLM server's ``/metrics``."""
    import httpx

    try:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
    except httpx.HTTPError as problem:
        raise SeatplanError(f"cannot read vLLM metrics ({problem})", where=url, fix="pass http://HOST:PORT/metrics of a running vLLM") from None
    now = datetime.now(UTC).timestamp()
    return vllm_stats(parse_exposition(response.text.splitlines(), is_reading=is_reading), source=url, default_time=now)
