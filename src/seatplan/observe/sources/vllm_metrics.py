"""vLLM's own gauges on its ``/metrics`` (running and waiting requests, KV-cache usage, preemptions).

Defined in vLLM's ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger.__init__``) and served by the API server
through ``prometheus_client`` as Prometheus exposition text, labelled by ``model_name`` (``--served-model-name``).
``vllm:kv_cache_usage_perc`` (0.9.2 on) is a fraction 0..1 despite its name; up to 0.10 it was
``vllm:gpu_cache_usage_perc`` (hidden in 0.11, removed in 0.12): both are read. ``vllm:num_preemptions`` is the
counter's registered name, which Prometheus text writes with ``_total``: both are read too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

import httpx2

from seatplan.bounded_http import BoundedClient
from seatplan.documents.observed import EngineStats
from seatplan.errors import SeatplanError
from seatplan.exposition import Sample, parse_exposition, plausible_time
from seatplan.secrets import redact_dsn, url_secrets

# vLLM's metric → the EngineStats field it fills.
VLLM_GAUGES = {
    "vllm:num_requests_running": "running_requests",
    "vllm:num_requests_waiting": "waiting_requests",
    "vllm:kv_cache_usage_perc": "kv_cache_usage_pct",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage_pct",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:num_preemptions": "preemptions_total",
}
TIMEOUT_S = 10.0  # one scrape, connect to last byte (diagnose --timeout)


def is_vllm_gauge(name: str) -> bool:
    return name in VLLM_GAUGES


def vllm_stats(samples: Iterable[Sample], *, source: str, default_time: float | None = None) -> list[EngineStats]:
    """vLLM's own gauges per scrape time and served model (0..1 usage becomes a percentage)."""
    grouped: dict[tuple[str, float | None], dict[str, float]] = defaultdict(dict)
    for sample in samples:
        field_name = VLLM_GAUGES.get(sample.name)
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


def read_vllm_metrics_url(url: str, *, timeout_s: float = TIMEOUT_S) -> list[EngineStats]:
    """One live scrape of a vLLM server's ``/metrics``, through the bounded client (one deadline for the whole
    answer, a size cap, no redirect followed)."""
    with BoundedClient("", timeout_s, secrets=url_secrets(url)) as client:
        try:
            response = client.fetch("GET", url).raise_for_status()
        except (httpx2.HTTPError, httpx2.InvalidURL) as problem:
            raise SeatplanError(f"cannot read vLLM metrics ({client.problem(problem)})", where=redact_dsn(url),
                                fix="pass http://HOST:PORT/metrics of a running vLLM") from None
    now = datetime.now(UTC).timestamp()
    return vllm_stats(parse_exposition(response.text.splitlines(), is_reading=is_vllm_gauge), source=url, default_time=now)
