"""DCGM exporter series from Prometheus: saved exposition text (scrapes, a backfill file) or the HTTP API.

dcgm-exporter (``pkg/cmd/app.go``, default ``:9400/metrics``) writes gauges in MiB; its default counters
(``etc/default-counters.csv``) are ``DCGM_FI_DEV_FB_USED``, ``DCGM_FI_DEV_FB_FREE`` and ``DCGM_FI_DEV_FB_RESERVED``,
with no ``FB_TOTAL``, labelled ``gpu`` and ``hostname`` (``Hostname`` before dcgm-exporter PR #655: labels are
matched without case). The text format is Prometheus' exposition format (``seatplan.exposition``); the HTTP API is
``/api/v1/query_range``, whose answer is a ``matrix`` of ``[time, "value"]`` pairs
(https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries). vLLM's gauges in the same text or
the same Prometheus are read by ``vllm_metrics``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import httpx2
import numpy as np

from seatplan.bounded_http import BoundedClient
from seatplan.documents.observed import EngineStats
from seatplan.errors import SeatplanError
from seatplan.exposition import Sample, parse_exposition
from seatplan.fileio import check_input_file
from seatplan.jsontext import loads_bounded
from seatplan.observe.detect import GpuSeries
from seatplan.observe.sources.shared import Rejections, number_of_lines, rejected_note, series_of_points
from seatplan.observe.sources.vllm_metrics import VLLM_GAUGES, is_vllm_gauge, vllm_stats
from seatplan.secrets import redact_dsn, url_secrets
from seatplan.units import MAX_GPU_INDEX, whole_number


def is_reading(name: str) -> bool:
    """The metric families seatplan reads: DCGM's framebuffer and vLLM's gauges."""
    return name.startswith("DCGM_FI_DEV_FB_") or is_vllm_gauge(name)


EXPOSITION_FIX = ("expected Prometheus exposition text (NAME{LABELS} VALUE [TIMESTAMP] per line), e.g. a saved "
                  "curl http://HOST:PORT/metrics of a vLLM server or a DCGM exporter")


def read_exposition_file(path: Path, rejected: Rejections, wanted: str) -> tuple[list[Sample], float]:
    """The samples of a saved exposition-text file, and its modification time (the scrape time of untimed samples).

    A file with no sample line at all, or none of the ``wanted`` metric families, is an error saying what was expected.
    """
    check_input_file(path, "exposition text")
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
                            + rejected_note(rejected, str(path)),
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
        gpu = whole_number(_label(labels, "gpu"), maximum=MAX_GPU_INDEX)
        if gpu is None or not name.startswith("DCGM_FI_DEV_FB_") or not math.isfinite(value):
            continue
        key = (_label(labels, "hostname", "instance"), gpu)
        by_gpu[key][name.removeprefix("DCGM_FI_DEV_FB_")][at] = value
    series = []
    for (host, index), fields in sorted(by_gpu.items(), key=lambda item: (item[0][0] or "", item[0][1])):
        if not fields.get("USED"):
            continue
        reserved = float(np.median(list(fields["RESERVED"].values()))) if fields.get("RESERVED") else None
        # The default counters have no FB_TOTAL: total = used + free + reserved at the same instant.
        both = [fields["USED"][t] + free for t, free in fields.get("FREE", {}).items() if t in fields["USED"]]
        total = float(np.median(both)) + (reserved or 0.0) if both else None
        series.append(series_of_points(index, host, list(fields["USED"].items()), total, reserved, source))
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
# One query_range answer: 10,000 points × every GPU's or engine's series (~40 bytes a point, 64 series).
MAX_ANSWER_BYTES = 64 << 20
TIMEOUT_S = 30.0  # one query_range request, connect to last byte (diagnose --timeout)


def read_prometheus(url: str, *, start: float, end: float, step_seconds: int = 60,
                    timeout_s: float = TIMEOUT_S) -> tuple[list[GpuSeries], list[EngineStats]]:
    """DCGM framebuffer series and vLLM gauges through the HTTP API (``/api/v1/query_range``)."""
    base = url.rstrip("/")
    points: list[tuple[str, dict[str, str], float, float]] = []
    stats_samples: list[Sample] = []
    queries = ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", *VLLM_GAUGES]
    with BoundedClient(base, timeout_s, secrets=url_secrets(base), cap_bytes=MAX_ANSWER_BYTES) as client:
        for query in queries:
            chunk_start = start
            while chunk_start <= end:
                chunk_end = min(end, chunk_start + step_seconds * (_MAX_POINTS - 1))
                try:
                    # Prometheus answers errors (400 bad_data, 422, 503) as JSON too: the body says why
                    response = client.fetch("GET", "/api/v1/query_range",
                                            params={"query": query, "start": chunk_start, "end": chunk_end, "step": step_seconds})
                    if response.is_redirect:
                        response.raise_for_status()
                    document = loads_bounded(response.content)
                except (httpx2.HTTPError, ValueError) as problem:
                    raise SeatplanError(f"cannot query Prometheus ({client.problem(problem)})", where=redact_dsn(base),
                                        fix="check --prometheus URL (e.g. http://prometheus:9090) and that it answers /api/v1/query_range") from None
                for name, labels, values in series_from_query_range(document, source=base):
                    if name.startswith("DCGM_"):
                        points.extend((name, labels, t, v) for t, v in values)
                    else:
                        stats_samples.extend(Sample(name, labels, v, t) for t, v in values)
                chunk_start = chunk_end + step_seconds
    return _dcgm_series(points, base), vllm_stats(stats_samples, source=base)
