"""Readers: Beszel's hub database, nvidia-smi CSV logs, Prometheus (HTTP API, exposition text), vLLM /metrics.

Every reader returns MiB as nvidia-smi counts them and turns unreadable input into a
:class:`~seatplan.errors.SeatplanError` naming the file (and line) and what to do.
"""

from __future__ import annotations

import csv
import json
import math
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from seatplan.documents.observed import EngineStats, ProcessSample
from seatplan.errors import SeatplanError
from seatplan.observe.detect import GpuSeries

# Beszel's NVIDIA collectors store nvidia-smi MiB divided by 1.024 (agent/gpu.go mebibytesInAMegabyte).
BESZEL_MIB_FACTOR = 1.024
# Finest first: a coarser record type only fills the time before the finer ones begin.
BESZEL_RECORD_TYPES = ("1m", "10m", "20m", "120m", "480m")
# Each record averages the shorter ones created in (created − window, created] (internal/records/records.go).
BESZEL_WINDOW_S = {"1m": 60, "10m": 600, "20m": 1200, "120m": 7200, "480m": 28800}


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

def read_beszel(path: str | Path, *, system: str | None = None) -> list[GpuSeries]:
    """GPU used-memory series from a Beszel hub database (``beszel_data/data.db``)."""
    db_path = Path(path)
    if not db_path.is_file():
        raise SeatplanError("no such file", where=str(db_path), fix="pass the hub's data.db (Docker volume /beszel_data/data.db)")
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        systems = dict(connection.execute("SELECT id, name FROM systems").fetchall())
        rows = connection.execute(
            "SELECT system, type, created, json_extract(stats, '$.g') FROM system_stats WHERE json_extract(stats, '$.g') IS NOT NULL"
        ).fetchall()
    except sqlite3.DatabaseError as problem:
        raise SeatplanError(f"not a Beszel hub database ({problem})", where=str(db_path),
                            fix="pass Beszel's beszel_data/data.db (tables systems and system_stats)") from None
    finally:
        connection.close()
    if system is not None:
        wanted = {key for key, name in systems.items() if system in (key, name)}
        if not wanted:
            raise SeatplanError(f"no system named {system!r}", where=str(db_path), fix=f"use one of: {', '.join(sorted(systems.values()))}")
        rows = [row for row in rows if row[0] in wanted]
    by_type: dict[tuple[str, str], list[tuple[float, dict]]] = defaultdict(list)
    for system_id, record_type, created, gpus in rows:
        if record_type in BESZEL_RECORD_TYPES:
            by_type[(system_id, record_type)].append((_pocketbase_time(created), json.loads(gpus)))
    series: list[GpuSeries] = []
    for system_id in sorted({key[0] for key in by_type}):
        records_by_type = [by_type.get((system_id, t), []) for t in BESZEL_RECORD_TYPES]
        series.extend(_beszel_system(systems.get(system_id, system_id), _effective_ends(records_by_type), str(db_path)))
    return series


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


def _beszel_system(host: str, records_by_type: list[list[tuple[float, dict]]], source: str) -> list[GpuSeries]:
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
            for gpu_id, data in gpus.items():
                if not str(gpu_id).isdigit() or not isinstance(data, dict):
                    continue
                # mu is omitted when it is 0 (Go omitempty): a GPU present without mu used nothing.
                points[int(gpu_id)].append((created, float(data.get("mu", 0)) * BESZEL_MIB_FACTOR, window_s, record_type))
                if data.get("mt"):
                    totals[int(gpu_id)] = float(data["mt"]) * BESZEL_MIB_FACTOR
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


def _smi_times(cells: list[str], lines: list[int], source: str, utc_offset_s: int = 0) -> np.ndarray:
    """nvidia-smi timestamps (``YYYY/MM/DD HH:MM:SS.mmm``, host time) → UTC epoch seconds, vectorised."""
    fixed = [cell.strip().translate(_SMI_TIME_FIX) for cell in cells]
    try:
        stamps = np.array(fixed, dtype="datetime64[ms]")
    except ValueError:
        for cell, line in zip(fixed, lines):
            try:
                np.datetime64(cell, "ms")
            except ValueError:
                raise SeatplanError(f"cannot read timestamp {cell!r}", where=f"{source}:{line}",
                                    fix="log with --query-gpu=timestamp,... --format=csv (YYYY/MM/DD HH:MM:SS.mmm)") from None
        raise
    return stamps.astype(np.int64) / 1000.0 - utc_offset_s


@dataclass
class _SmiColumns:
    """The cells of one nvidia-smi CSV, column by column (converted in bulk at the end)."""

    times: list[str]
    lines: list[int]
    index: list[str]
    used: list[str]
    total: dict[str, str]  # GPU index as logged → latest cell
    reserved: dict[str, str]


def read_nvidia_smi(path: str | Path, *, utc_offset_s: int = 0) -> tuple[list[GpuSeries], list[ProcessSample]]:
    """An ``nvidia-smi --query-gpu=... --format=csv`` log, or a ``--query-compute-apps`` one (host time + offset → UTC)."""
    file_path = Path(path)
    try:
        text = file_path.read_text(errors="replace")
    except OSError as problem:
        raise SeatplanError(f"cannot read ({problem.strerror})", where=str(file_path), fix="pass a readable nvidia-smi CSV log") from None
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
            continue  # a line cut by a crash or a log rotation
        if "pid" in header:
            processes.extend(_process(dict(zip(header, row)), where, utc_offset_s))
            continue
        if not {"memory.used", "index", "timestamp"} <= set(header):
            raise SeatplanError("the CSV lacks timestamp, index or memory.used", where=where,
                                fix="log with --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 60")
        at, gpu, used = header.index("timestamp"), header.index("index"), header.index("memory.used")
        columns.times.append(row[at])
        columns.lines.append(number)
        columns.index.append(row[gpu])
        columns.used.append(row[used])
        for name, latest in (("memory.total", columns.total), ("memory.reserved", columns.reserved)):
            if name in header:
                latest[row[gpu]] = row[header.index(name)]
    return _smi_series(columns, str(file_path), utc_offset_s), processes


def _process(cells: dict[str, str], where: str, utc_offset_s: int) -> list[ProcessSample]:
    used = _mib(cells.get("used_gpu_memory", cells.get("used_memory", "")))
    if math.isnan(used) or not cells["pid"].strip().isdigit():
        return []
    at = None
    if "timestamp" in cells:
        at = datetime.fromtimestamp(float(_smi_times([cells["timestamp"]], [0], where, utc_offset_s)[0]), tz=UTC)
    return [ProcessSample(at=at, pid=int(cells["pid"]), process_name=cells.get("process_name", "").strip(), used_mib=used,
                          gpu_uuid=cells.get("gpu_uuid", "").strip() or None,
                          gpu_index=int(cells["index"]) if cells.get("index", "").strip().isdigit() else None)]


def _smi_series(columns: _SmiColumns, source: str, utc_offset_s: int) -> list[GpuSeries]:
    if not columns.times:
        return []
    times = _smi_times(columns.times, columns.lines, source, utc_offset_s)
    index = np.array([int(cell) for cell in columns.index])
    used = np.array([_mib(cell) for cell in columns.used])
    series = []
    totals = {int(key): _mib(cell) for key, cell in columns.total.items()}
    reserved_by_gpu = {int(key): _mib(cell) for key, cell in columns.reserved.items()}
    for gpu in np.unique(index):
        mine = index == gpu
        total = totals.get(int(gpu), math.nan)
        reserved = reserved_by_gpu.get(int(gpu), math.nan)
        series.append(GpuSeries(index=int(gpu), times_s=times[mine].astype(np.int64), used_mib=used[mine],
                                total_mib=None if math.isnan(total) else total,
                                reserved_mib=None if math.isnan(reserved) else reserved, source=source))
    return series


# --------------------------------------------------------------------------------------------- Prometheus

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+(?:\.\d+)?))?\s*$")
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    at: float | None


def parse_exposition(lines: Iterable[str]) -> list[Sample]:
    """Prometheus / OpenMetrics text: one or many scrapes, with or without timestamps (ms; OpenMetrics: s)."""
    samples: list[Sample] = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = _SAMPLE.match(text)
        if not match:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        stamp = float(match["ts"]) if match["ts"] else None
        if stamp is not None and stamp > 1e11:
            stamp /= 1000.0  # Prometheus text carries milliseconds, OpenMetrics seconds
        samples.append(Sample(match["name"], dict(_LABEL.findall(match["labels"] or "")), value, stamp))
    return samples


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
        if gpu is None or not gpu.isdigit() or not name.startswith("DCGM_FI_DEV_FB_"):
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


def read_prometheus_text(path: str | Path, *, default_time: float | None = None) -> tuple[list[GpuSeries], list[EngineStats]]:
    """DCGM and vLLM samples from exposition text (saved scrapes, or a backfill file)."""
    file_path = Path(path)
    try:
        lines = file_path.read_text(errors="replace").splitlines()
    except OSError as problem:
        raise SeatplanError(f"cannot read ({problem.strerror})", where=str(file_path), fix="pass a Prometheus text file") from None
    when = default_time if default_time is not None else file_path.stat().st_mtime
    samples = parse_exposition(lines)
    gpu = _dcgm_series(((s.name, s.labels, s.at if s.at is not None else when, s.value) for s in samples
                        if s.name.startswith("DCGM_FI_DEV_FB_")), str(file_path))
    stats = vllm_stats(samples, source=str(file_path), default_time=when)
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
        if field_name is None:
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
    if document.get("status") != "success" or document.get("data", {}).get("resultType") != "matrix":
        raise SeatplanError(f"Prometheus answered {document.get('status')!r}: {document.get('error', 'not a matrix')}",
                            where=source, fix="check the URL and that the DCGM exporter is scraped")
    out = []
    for result in document["data"]["result"]:
        labels = dict(result.get("metric", {}))
        name = labels.pop("__name__", "")
        out.append((name, labels, [(float(t), float(v)) for t, v in result.get("values", [])]))
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
    return vllm_stats(parse_exposition(response.text.splitlines()), source=url, default_time=now)
