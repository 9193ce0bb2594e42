"""Gather ``seatplan diagnose``'s inputs from the paths and URLs on its command line."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path

from seatplan.documents.fleet import KvPin, Policy, SeatSpec
from seatplan.documents.fleet_file import load_fleet, resolve_model
from seatplan.documents.observed import Boot, EngineStats, ProcessSample
from seatplan.documents.plan import Plan
from seatplan.engine.settings import EngineHost, engine_settings
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.fileio import check_input_file
from seatplan.observe.detect import GpuSeries
from seatplan.observe.logparse import parse_log
from seatplan.observe.seatmap import SeatMap
from seatplan.observe.sources.beszel import read_beszel
from seatplan.observe.sources.nvidia_smi import read_nvidia_smi
from seatplan.observe.sources.prometheus import TIMEOUT_S as PROMETHEUS_TIMEOUT_S
from seatplan.observe.sources.prometheus import read_exposition_file, read_prometheus, read_prometheus_text
from seatplan.observe.sources.shared import Rejections, number_of_lines
from seatplan.observe.sources.vllm_metrics import TIMEOUT_S as METRICS_TIMEOUT_S
from seatplan.observe.sources.vllm_metrics import read_vllm_metrics_url, vllm_stats

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text: str, *, field: str = "--since") -> float:
    match = _DURATION.match(text)
    if not match:
        raise SeatplanError(f"cannot read {text!r} as a duration", where=field, fix="write e.g. 90m, 36h, 14d, 2w")
    return float(match[1]) * _SECONDS[match[2]]


_OFFSET = re.compile(r"^\s*(?:UTC)?\s*([+-])(\d{1,2})(?::?(\d{2}))?\s*$")


def utc_offset_seconds(text: str | None) -> int:
    """``+01:00``, ``-0500``, ``UTC+2`` → seconds east of UTC."""
    if not text:
        return 0
    match = _OFFSET.match(text)
    if not match or int(match[2]) > 14 or int(match[3] or 0) > 59:
        raise SeatplanError(f"cannot read {text!r} as a UTC offset", where="--utc-offset", fix="write e.g. +01:00, -05:00 or +0530")
    seconds = int(match[2]) * 3600 + int(match[3] or 0) * 60
    return seconds if match[1] == "+" else -seconds


def read_vllm_logs(specs: list[str], *, year: int | None, utc_offset_s: int = 0) -> tuple[list[Boot], list[EngineStats]]:
    boots: list[Boot] = []
    stats: list[EngineStats] = []
    for spec in specs:
        seat, _, path_text = spec.partition("=") if "=" in spec and not Path(spec).exists() else ("", "", spec)
        path = Path(path_text)
        check_input_file(path, "vLLM log")
        try:
            text = path.read_text(errors="replace")
        except OSError as problem:
            raise SeatplanError(f"cannot read the vLLM log ({problem.strerror})", where=str(path),
                                fix="pass a log file (docker logs NAME > file; journalctl -u UNIT > file)") from None
        file_year = year or datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).year
        parsed = parse_log(text.splitlines(), source=str(path), year=file_year, utc_offset_s=utc_offset_s, seat=seat or None)
        if not parsed.boots and not parsed.stats:
            raise SeatplanError(f"no vLLM startup or stats line in {number_of_lines(text)} lines", where=str(path),
                                fix="expected a vLLM server's log (vLLM's own lines: 'Using max model len', 'Available KV cache "
                                    "memory', 'Running: N reqs'; plain, docker logs or journalctl text/json)")
        boots.extend(parsed.boots)
        stats.extend(parsed.stats)
    return boots, stats


def host_names(specs: list[str], fleet: Path | None) -> dict[str, str]:
    """Monitor name → plan host: the fleet's hosts[].monitor_names, then --host-name MONITOR=HOST (which wins)."""
    names: dict[str, str] = {}
    if fleet is not None:
        for host in load_fleet(fleet).fleet.hosts:
            names.update({monitor: host.name for monitor in host.monitor_names})
    for spec in specs:
        monitor, sep, host_name = spec.partition("=")
        if not sep or not monitor.strip() or not host_name.strip():
            raise SeatplanError(f"cannot read {spec!r}", where="--host-name", fix="write MONITOR=HOST, e.g. --host-name gpu-node-01=gpu-box")
        names[monitor.strip()] = host_name.strip()
    return names


def name_hosts(series: list[GpuSeries], names: dict[str, str]) -> None:
    for one in series:
        if one.host in names:
            one.host = names[one.host]


def read_gpu_sources(*, beszel: Path | None, beszel_system: str | None, nvidia_smi: list[str], prometheus: str | None,
                     since: str, step_seconds: int, utc_offset_s: int = 0,
                     rejected: Rejections | None = None, timeout_s: float = PROMETHEUS_TIMEOUT_S) -> tuple[list[GpuSeries], list[ProcessSample], list[EngineStats]]:
    series: list[GpuSeries] = []
    processes: list[ProcessSample] = []
    stats: list[EngineStats] = []
    if beszel is not None:
        series.extend(read_beszel(beszel, system=beszel_system, rejected=rejected))
    for spec in nvidia_smi:
        host, _, path_text = spec.partition("=") if "=" in spec and not Path(spec).exists() else ("", "", spec)
        gpu, apps = read_nvidia_smi(Path(path_text), utc_offset_s=utc_offset_s, rejected=rejected)
        for one in gpu:
            one.host = host or one.host
        series.extend(gpu)
        processes.extend(apps)
    if prometheus:
        if prometheus.startswith(("http://", "https://")):
            end = time.time()
            gpu, engine = read_prometheus(prometheus, start=end - duration_seconds(since), end=end, step_seconds=step_seconds,
                                          timeout_s=timeout_s)
        else:
            gpu, engine = read_prometheus_text(prometheus, rejected=rejected)
        series.extend(gpu)
        stats.extend(engine)
    return series, processes, stats


def read_vllm_metrics(specs: list[str], rejected: Rejections | None = None, timeout_s: float = METRICS_TIMEOUT_S) -> list[EngineStats]:
    stats: list[EngineStats] = []
    for spec in specs:
        if spec.startswith(("http://", "https://")):
            stats.extend(read_vllm_metrics_url(spec, timeout_s=timeout_s))
            continue
        path = Path(spec)
        samples, modified = read_exposition_file(path, rejected if rejected is not None else Rejections(), "vllm:* gauges")
        found = vllm_stats(samples, source=str(path), default_time=modified)
        if not found:
            raise SeatplanError("no vllm:* gauges in the file", where=str(path),
                                fix="expected a saved scrape of a vLLM server's /metrics (vllm:num_requests_running, ...)")
        stats.extend(found)
    return stats


def kv_rule_pins(boots: list[Boot], fleet: Path | None) -> dict[str, tuple[int, str]]:
    """Per seat, the KV bytes the planner's rule gives it (facts API + plan sizing), where its model config is here.

    The seat's fleet entry (model, parallelism, dtypes, policy) when ``--fleet`` names it; else the model
    directory and tensor parallelism its own log gave. Seats whose config cannot be read are left out.
    """
    specs: dict[str, SeatSpec] = {}
    hosts: dict[str, EngineHost] = {}
    policy, base_dir = Policy(), Path.cwd()
    if fleet is not None:
        loaded = load_fleet(fleet)
        policy, base_dir = loaded.fleet.policy, loaded.base_dir
        for spec in loaded.fleet.seats:
            specs[spec.name] = specs[spec.served_model_name or spec.name] = spec
            hosts[spec.name] = EngineHost.for_seat(loaded.fleet, spec)
    pins: dict[str, tuple[int, str]] = {}
    for boot in sorted(boots, key=lambda b: b.started_at.timestamp() if b.started_at else 0.0):
        if boot.max_model_len is None or (boot.model is None and boot.seat not in specs):
            continue
        spec = specs.get(boot.seat) or SeatSpec(name=re.sub(r"[^A-Za-z0-9._-]", "-", boot.seat), model=boot.model,
                                                  tensor_parallel_size=boot.tensor_parallel_size or 1)
        if spec.model is None:
            continue
        try:
            settings = engine_settings(spec, hosts.get(spec.name, EngineHost()), policy.vllm_version)
            facts = load_model_facts(resolve_model(spec.model, base_dir), settings)
            pin = policy.kv_pin(spec, facts.request_kv_bytes(boot.max_model_len), facts.min_kv_cache_bytes(boot.max_model_len))
        except SeatplanError:
            continue  # no config here for this model: the log alone decides
        if not pin.holds_one_request:
            continue  # an operator's pin vLLM refuses (plan refuses the fleet): no pin to offer; the log decides
        name = spec.name if boot.seat in specs else boot.seat
        pins[name] = (pin.kv_cache_memory_bytes, pin_words(pin, f"{boot.max_model_len:,} tokens of {spec.model}"))
    return pins


def pin_words(pin: KvPin, what: str) -> str:
    """Where a pin comes from: the operator's (named as theirs, with the rule's figure), or the rule's arithmetic."""
    if pin.source == "operator":
        return (f"the operator's pin in the fleet (kv_cache_memory_bytes {pin.kv_cache_memory_bytes:,} B); "
                f"the plan's rule would give {pin.rule_bytes:,} B")
    return f"the plan's rule for {what}: {pin.arithmetic()}"


def seat_map(plan: Plan | None, fleet: Path | None) -> SeatMap | None:
    """Which seat runs where: the plan's GPUs when there is a plan, else the fleet file's layout, else nothing known."""
    if plan is not None:
        return SeatMap.of_plan(plan)
    return SeatMap.of_fleet(load_fleet(fleet).fleet) if fleet is not None else None
